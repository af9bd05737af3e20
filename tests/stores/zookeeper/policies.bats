#!/usr/bin/env bats
# The cron and CI policies as only the ZooKeeper store keeps them: side nodes beside Curator's
# contenders under the lock's node (dlock.policy: --min-hold and --lock-delay; dlock.replace: a
# --replace's request; dlock.supersede: the newest --supersede waiter, ephemeral), each cleaned
# when over; another tenant writing them (oversized, malformed, far in the future) never stops
# status or an acquisition, and release --force clears them. The shared scenarios (kill -9 under
# --min-hold, lock-delay after kill -9 and release --force, none after a clean release) are in
# store.bats. A private server per file (zookeeper_helpers.bash).

load ../../lib/helpers
load ../../lib/zookeeper_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

DIR=/dlock-test/dlock:

# side_nodes KEY: the children of the lock's node that are not contenders, sorted.
side_nodes() {
  zk_cli ls "$DIR$1" | grep '^\[' | tr -d '[],' | tr ' ' '\n' | grep -v '^_c_' | grep . | sort || true
}

# policy_record KEY FIELD...: writes a dlock.policy node as another tenant would, the holder's
# fields first, then FIELD... (key=value), one per line.
policy_record() {
  local key=$1
  shift
  local data
  data=$(printf 'dlock=1\nuser=mallory\nhost=elsewhere\npid=1\ntoken=0123456789abcdef\ncommand=cron\n')
  for field in "$@"; do data+=$'\n'"$field"; done
  zk_cli create "$DIR$key/dlock.policy" "$data"
}

@test "zookeeper policies: the side nodes carry no name Curator's recipes sort on, and go when over" {
  # --min-hold: the policy node stays after the holder's release, until the period ends
  run -0 "$DLOCK" run -k side --min-hold 2s --lock-delay 5s --note 'the nightly report' -- true
  run -0 side_nodes side
  assert_output dlock.policy
  run -0 zk_cli get "${DIR}side/dlock.policy"
  echo "$output"
  assert_line 'min_hold_ms=2000'
  assert_line 'lock_delay_ms=5000'
  assert_line 'released=1'
  assert_line 'note=the nightly report'
  # the next holder after the period: the node is over and goes; a clean release leaves nothing
  run -0 "$DLOCK" run -k side -w 10s -- true
  run -0 side_nodes side
  assert_output ''
  # --lock-delay alone: a clean release removes it
  run -0 "$DLOCK" run -k side --lock-delay 30s -- true
  run -0 side_nodes side
  assert_output ''
  # no name with Curator's markers, and none a contender's
  for name in dlock.policy dlock.replace dlock.supersede dlock.now-; do
    [[ $name != *lock-* && $name != *__READ__* && $name != *__WRIT__* ]]
  done
}

@test "zookeeper policies: --replace's request and the newest --supersede waiter's record are gone once over" {
  start_bg holder "$DLOCK" run -k rs -- sleep 600
  wait_for "[ \$(zk_contenders | grep 'dlock:rs/' | grep -c -- -lock-) -eq 1 ]" 10
  run -0 "$DLOCK" run -k rs --replace --supersede -w 20s -- sh -c 'exit 0'
  run -0 side_nodes rs
  assert_output ''
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
}

@test "zookeeper policies: another tenant's oversized or malformed side nodes: status and acquisitions answer; release --force clears them" {
  run -0 "$DLOCK" run -k hostile -- true # makes the lock's node
  local big
  big=$(printf 'dlock=1\ntoken=0123456789abcdef\nmin_hold_ms=600000\ncommand=%s\n' "$(head -c 100000 /dev/zero | tr '\0' x)")
  run -0 zk_cli create "${DIR}hostile/dlock.policy" "$big"
  run -0 zk_cli create "${DIR}hostile/dlock.replace" 'not a request'
  run -0 zk_cli create "${DIR}hostile/dlock.supersede" $'dlock=1\nwaiter=\x01\x02'
  run -1 --separate-stderr "$DLOCK" status hostile # 1: not held
  echo "$output"
  [ "${#output}" -lt 2000 ]
  assert_line --regexp '^state: +free'
  run -0 "$DLOCK" list
  [ "${#output}" -lt 2000 ]
  # a holder ignores them and removes those in its way (the policy node, a stale request)
  run -0 timeout 10 "$DLOCK" run -n -k hostile -- true
  run -0 side_nodes hostile
  assert_output dlock.supersede
  # a --supersede waiter does not take another tenant's record for a newer waiter
  start_bg holder "$DLOCK" run -k hostile -- sleep 600
  wait_for "[ \$(zk_contenders | grep 'dlock:hostile/' | grep -c -- -lock-) -eq 1 ]" 10
  run -75 --separate-stderr timeout 10 "$DLOCK" -v run -k hostile --supersede -w 2s -- true
  echo "$stderr"
  [[ $stderr != *superseded* ]]
  kill -TERM "$BG_PID"
  wait "$BG_PID" || true
  # release --force clears every one
  run -0 zk_cli create "${DIR}hostile/dlock.policy" 'garbage'
  run -0 zk_cli create "${DIR}hostile/dlock.replace" 'garbage'
  run -0 zk_cli create "${DIR}hostile/dlock.supersede" 'garbage'
  run -0 "$DLOCK" release --force -k hostile
  run -0 side_nodes hostile
  assert_output ''
}

@test "zookeeper policies: another tenant's policy node that cannot be removed (it has a child): the lock is still taken, without a policy of its own" {
  run -0 "$DLOCK" run -k stuck -- true
  run -0 zk_cli create "${DIR}stuck/dlock.policy" 'garbage'
  run -0 zk_cli create "${DIR}stuck/dlock.policy/child" 'x'
  run -0 --separate-stderr timeout 10 "$DLOCK" run -n -k stuck --min-hold 1m -- touch "$T/ran"
  echo "$stderr"
  [ -e "$T/ran" ]
  [[ $stderr == *"not dlock's"* ]]
  run -0 timeout 10 "$DLOCK" run -n -k stuck -- true
  run -0 zk_cli deleteall "${DIR}stuck/dlock.policy"
}

@test "zookeeper policies: a policy record far in the future closes the lock, never hangs; one past a year is ignored; release --force frees it" {
  run -0 "$DLOCK" run -k future -- true
  run -0 policy_record future 'node=_c_00000000-0000-4000-8000-000000000000-lock-0000000001' 'min_hold_ms=31536000000'
  run -0 "$DLOCK" status future
  echo "$output"
  assert_line --regexp '^state: +held'
  assert_output --partial 'command ended'
  assert_output --partial 'mallory@elsewhere'
  run -75 timeout 10 "$DLOCK" run -n -k future -- touch "$T/ran"
  run -75 timeout 10 "$DLOCK" run -k future -w 1s -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  run -0 "$DLOCK" release --force -k future
  run -0 timeout 10 "$DLOCK" run -n -k future -- touch "$T/ran"
  [ -e "$T/ran" ]
  run -0 side_nodes future
  assert_output ''
  # beyond the longest period dlock writes: not dlock's, ignored (and removed by the holder)
  run -0 policy_record future 'min_hold_ms=99999999999999'
  run -0 timeout 10 "$DLOCK" run -n -k future -- true
  run -0 side_nodes future
  assert_output ''
  # a lock-delay another tenant armed for a holder that never was: D from the first look, then free
  run -0 policy_record future 'lock_delay_ms=1500'
  run -75 timeout 10 "$DLOCK" run -n -k future -- true
  run -0 timeout 10 "$DLOCK" run -k future -w 5s -- true
}

@test "zookeeper policies: a waiter closed out by --min-hold wakes at release --force (a watch), not at the period's end" {
  run -0 "$DLOCK" run -k wake --min-hold 60s -- true
  start_bg waiter "$DLOCK" run -k wake -w 30s -- touch "$T/ran"
  sleep 1
  [ ! -e "$T/ran" ]
  local start=$(now_ms)
  run -0 "$DLOCK" release --force -k wake
  wait_for "[ -e '$T/ran' ]" 5
  local took=$(($(now_ms) - start))
  echo "ran $took ms after release --force"
  [ "$took" -lt 1500 ]
  wait "$BG_PID"
}

@test "zookeeper policies: --min-hold kept after kill -9: the policy node says the holder never released; its waiter's watch on the holder's node wakes it once the session ends" {
  start_bg holder "$DLOCK" run -k crash -t 2s --min-hold 4s -- sleep 600
  wait_for "[ \$(zk_contenders | grep 'dlock:crash/' | grep -c -- -lock-) -eq 1 ]" 10
  local start=$(now_ms)
  kill -KILL "$BG_PID"
  run -0 zk_cli get "${DIR}crash/dlock.policy"
  refute_line 'released=1'
  run -0 "$DLOCK" run -k crash -t 2s -w 20s -- true
  local took=$(($(now_ms) - start))
  echo "taken $took ms after kill -9 (--min-hold 4s from the acquisition)"
  [ "$took" -ge 2500 ]
  [ "$took" -lt 7000 ]
}

@test "zookeeper policies: --supersede waiters closed out by --min-hold still announce themselves: only the newest runs" {
  run -0 "$DLOCK" run -k period --min-hold 5s -- true
  local w pids=()
  for w in 1 2 3; do
    "$DLOCK" -v run -k period --supersede -w 30s -- sh -c "echo $w >>'$T/ran'" 2>>"$T/waiters.err" 3>&- &
    pids+=($!)
    echo "$!" >>"$T/bg.pid"
    sleep 0.5
  done
  local st codes=()
  for w in "${pids[@]}"; do
    st=0
    wait "$w" || st=$?
    codes+=("$st")
  done
  cat "$T/waiters.err"
  [ "${codes[*]}" = "75 75 0" ]
  run -0 cat "$T/ran"
  assert_output 3
  run -0 grep -c superseded "$T/waiters.err"
  [ "$output" -ge 2 ]
}
