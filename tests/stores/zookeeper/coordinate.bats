#!/usr/bin/env bats
# wait, barrier and latch on ZooKeeper (zk://), seen with zkCli: wait woken by the watch on the
# holder's node; barrier parties in DistributedDoubleBarrier's layout (ephemeral children of the
# lock's node, "ready" made by the last of N), a party killed with SIGKILL gone with its
# session, a Curator party (a bare UUID) counted and a Curator "ready" honoured; the latch in
# CHROOT/PREFIXNAME/dlock.latch, another tenant's junk there, an expired latch cleaned.

load ../../lib/helpers
load ../../lib/zookeeper_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# party NAME SUBCOMMAND ARGS...: a background dlock SUBCOMMAND that writes its exit status to
# $T/NAME.end when it returns (start_bg NAME: BG_PID).
party() {
  local name=$1
  shift
  start_bg "$name" bash -c '"$@"; echo $? >"$T/'"$name"'.end"' _ "$DLOCK" "$@"
}
ended() { [ -s "$T/$1.end" ]; }
status_of() { cat "$T/$1.end"; }
# parties KEY: dlock's barrier party nodes under the key's node.
parties() { zk_cli ls "/dlock-test/dlock:$1" | tr -d '[],' | tr ' ' '\n' | grep -c -- '-party-' || true; }

@test "zookeeper: wait is woken by the release (a watch on the holder's node), even when a lock waiter takes it at once" {
  run -0 "$DLOCK" wait -k free -w 1s
  start_bg hold "$DLOCK" run -k w -- sh -c 'touch "$0.in"; until [ -e "$0.go" ]; do sleep 0.02; done' "$T/hold"
  started hold "[ -e '$T/hold.in' ]"
  start_bg next "$DLOCK" run -k w -w 20s -- sleep 3
  party watcher wait -k w -w 20s
  sleep 1
  ! ended watcher
  run -0 zk_4lw wchp
  echo "$output"
  touch "$T/hold.go"
  wait_for 'ended watcher' 3
  [ "$(status_of watcher)" = 0 ]
  run -0 "$DLOCK" status w # the lock waiter has it: the wait did not wait for it
  run -75 "$DLOCK" wait -k w -w 300ms
}

@test "zookeeper: wait on a holder killed with SIGKILL returns once its session ends" {
  start_bg hold "$DLOCK" run -k dead -t 2s -- sh -c 'touch "$0.in"; exec sleep 60' "$T/hold"
  local holder=$BG_PID
  started hold "[ -e '$T/hold.in' ]"
  party watcher wait -k dead -w 20s
  sleep 0.5
  kill -KILL "$holder"
  wait_for 'ended watcher' 6
  [ "$(status_of watcher)" = 0 ]
}

@test "zookeeper: barrier parties are ephemeral children of the lock's node; the last of 3 lets all through and deletes them; beyond N waits for the next generation" {
  party p1 barrier -k b --parties 3 -w 20s
  party p2 barrier -k b --parties 3 -w 20s
  wait_for '[ "$(parties b)" = 2 ]'
  local node
  node=$(zk_cli ls -R /dlock-test/dlock:b | grep -- '-party-' | head -1)
  run -0 zk_cli get "$node"
  assert_line "parties=3"
  run -0 zk_cli stat "$node"
  refute_line "ephemeralOwner = 0x0"
  # another --parties while it is in progress: 64, nothing registered
  run -64 "$DLOCK" barrier -k b --parties 2 -w 1s
  [ "$(parties b)" = 2 ]
  ! ended p1
  party p3 barrier -k b --parties 3 -w 20s
  party p4 barrier -k b --parties 3 -w 20s
  wait_for 'ended p1 && ended p2' 5
  sleep 0.5
  # three went through (one of p3, p4 was the third), the other waits for a next generation
  local done=0 p
  for p in p1 p2 p3 p4; do ended "$p" && done=$((done + 1)); done
  [ "$done" = 3 ]
  [ "$(parties b)" = 1 ]
  run -0 "$DLOCK" barrier -k b --parties 3 -w 10s &
  run -0 "$DLOCK" barrier -k b --parties 3 -w 10s
  wait
  for p in p1 p2 p3 p4; do wait_for "ended $p" 5; [ "$(status_of "$p")" = 0 ]; done
  [ "$(parties b)" = 0 ]
}

@test "zookeeper: a barrier party killed with SIGKILL is gone with its session; one that times out withdraws its node" {
  start_bg doomed "$DLOCK" barrier -k k --parties 2
  local doomed=$BG_PID
  wait_for '[ "$(parties k)" = 1 ]'
  kill -KILL "$doomed"
  wait_for '[ "$(parties k)" = 0 ]' 15 # the session timeout of a dlock that takes no lock
  run -75 "$DLOCK" barrier -k k --parties 2 -w 500ms
  [ "$(parties k)" = 0 ]
}

@test "zookeeper: a Curator party (a bare UUID child) counts; a Curator 'ready' made after a dlock party arrived lets it through" {
  run -0 "$DLOCK" latch -k cur --count 1 # makes CHROOT/dlock:cur
  run -0 zk_cli create /dlock-test/dlock:cur/0f8fad5b-d9cb-469f-a165-70867728950e "10.0.0.1"
  run -0 "$DLOCK" barrier -k cur --parties 2 -w 5s
  run -0 zk_cli ls /dlock-test/dlock:cur
  echo "$output"
  run -0 zk_cli delete /dlock-test/dlock:cur/0f8fad5b-d9cb-469f-a165-70867728950e
  party d barrier -k cur --parties 3 -w 20s
  wait_for '[ "$(parties cur)" = 1 ]'
  zk_cli delete /dlock-test/dlock:cur/ready >/dev/null 2>&1 || true
  run -0 zk_cli create /dlock-test/dlock:cur/ready ""
  wait_for 'ended d' 5
  [ "$(status_of d)" = 0 ]
  [ "$(parties cur)" = 0 ]
}

@test "zookeeper: the latch is CHROOT/PREFIXNAME/dlock.latch (count, expires_at), counted down with versioned writes; junk there is not a latch; an expired one is cleaned" {
  run -0 "$DLOCK" latch -k l --count 3
  run -0 zk_cli get /dlock-test/dlock:l/dlock.latch
  echo "$output"
  assert_line "count=3"
  assert_line --regexp '^expires_at=[0-9]{13}$'
  party w latch -k l --wait 20s
  local i pids=()
  for i in 1 2; do
    "$DLOCK" latch -k l --down >/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"
  sleep 0.5
  ! ended w
  run -0 zk_cli get /dlock-test/dlock:l/dlock.latch
  assert_line "count=1"
  run -0 "$DLOCK" latch -k l --down
  wait_for 'ended w' 3
  [ "$(status_of w)" = 0 ]
  # another tenant's data in its place: not a latch (1), and --count makes it dlock's again
  run -0 zk_cli set /dlock-test/dlock:l/dlock.latch "$(head -c 3000 /dev/zero | tr '\0' x)"
  run -1 "$DLOCK" latch -k l --down
  run -75 "$DLOCK" latch -k l --wait 300ms
  run -0 "$DLOCK" latch -k l --count 0
  run -0 "$DLOCK" latch -k l --wait 1s
  # expired: the next dlock deletes it
  run -0 "$DLOCK" latch -k short --count 2 --expire 300ms
  sleep 0.5
  run -1 "$DLOCK" latch -k short --down
  run -0 zk_cli ls /dlock-test/dlock:short
  refute_output --partial dlock.latch
}
