#!/usr/bin/env bats
# wait, barrier and latch on etcd:// (Feature::coordinate), as etcd keeps them: wait watches the
# oldest holder's key of the name's queue (etcdctl lock's too); a barrier is dlock:NAME#barrier
# (generation, parties; on a 24 h lease) and one dlock:NAME#party:<generation>:<lease hex> per
# party on its own lease, deleted by the last arrival; a latch is dlock:NAME#latch holding the
# count on a lease of its expiry. None of them lies under any lock's queue (dlock:NAME/).

load ../../lib/helpers
load ../../lib/etcd_helpers

setup_file() { start_etcd; }
teardown_file() { stop_etcd; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

@test "wait: woken by etcdctl lock's release (a watch of its key), takes nothing" {
  ectl lock dlock:ew -- sh -c 'echo $$ >"$0"; until [ -e "$1" ]; do sleep 0.02; done; date +%s%3N >"$2"' \
    "$T/ectl.pid" "$T/ectl.release" "$T/ectl.done" >/dev/null 2>&1 3>&- &
  local ectl_pid=$!
  echo "$ectl_pid" >>"$T/bg.pid"
  wait_for "[ -s '$T/ectl.pid' ]" 10
  run -75 "$DLOCK" wait -k ew -w 1s
  start_bg waiter sh -c '"$0" wait -k ew -w 30s && date +%s%3N >"$1"' "$DLOCK" "$T/waited"
  local waiter=$BG_PID
  sleep 1
  [ ! -e "$T/waited" ]
  # it took nothing: no key of its own under the lock's prefix
  [ "$(ectl get --prefix dlock:ew/ --keys-only | grep -c .)" = 1 ]
  touch "$T/ectl.release"
  wait "$ectl_pid"
  wait "$waiter"
  local gap=$(($(cat "$T/waited") - $(cat "$T/ectl.done")))
  echo "wait returned $gap ms after etcdctl's command ended"
  [ "$gap" -ge 0 ] && [ "$gap" -lt 5000 ]
}

@test "wait on --shared holders returns once the last reader is gone" {
  start_bg r1 "$DLOCK" run -k ws --shared -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/r1"
  local r1=$BG_PID
  start_bg r2 "$DLOCK" run -k ws --shared -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/r2"
  local r2=$BG_PID
  wait_for '[ "$(ectl get --prefix dlock:ws/ --keys-only | grep -c .)" = 2 ]' 10
  start_bg waiter sh -c '"$0" wait -k ws -w 30s && touch "$1"' "$DLOCK" "$T/waited"
  local waiter=$BG_PID
  touch "$T/r1"
  wait "$r1"
  sleep 1
  [ ! -e "$T/waited" ]
  touch "$T/r2"
  wait "$r2"
  wait "$waiter"
  [ -e "$T/waited" ]
}

@test "barrier: etcdctl's view of the state and the parties; the last arrival deletes them; a kill -9 party's arrival lapses with its lease" {
  start_bg p1 "$DLOCK" barrier -k eb --parties 3 -w 30s
  local p1=$BG_PID
  wait_for '[ "$(ectl get --prefix "dlock:eb#party:" --keys-only | grep -c .)" = 1 ]' 10
  run -0 ectl get --prefix "dlock:eb#" --keys-only
  echo "$output"
  [[ $output == *"dlock:eb#barrier"* ]]
  [[ $output =~ dlock:eb#party:[0-9]+:[0-9a-f]+ ]]
  [ -z "$(ectl get --prefix dlock:eb/ --keys-only)" ] # nothing in the lock's queue
  # a party killed with SIGKILL: its arrival goes with its lease (15 s), not counted after
  start_bg p2 "$DLOCK" barrier -k eb --parties 3 -w 60s
  local p2=$BG_PID
  wait_for '[ "$(ectl get --prefix "dlock:eb#party:" --keys-only | grep -c .)" = 2 ]' 10
  kill -KILL "$p2"
  wait_for '[ "$(ectl get --prefix "dlock:eb#party:" --keys-only | grep -c .)" = 1 ]' 25
  start_bg p3 "$DLOCK" barrier -k eb --parties 3 -w 30s
  local p3=$BG_PID
  sleep 1
  alive "$p1" && alive "$p3" # 2 of 3
  run -0 "$DLOCK" barrier -k eb --parties 3 -w 30s
  wait "$p1"
  wait "$p3"
  [ -z "$(ectl get --prefix "dlock:eb#party:" --keys-only)" ]
}

@test "latch: the count is dlock:NAME#latch on a lease of --expire; another tenant's value there is 'not set'" {
  run -0 "$DLOCK" latch -k el --count 3 --expire 60s
  run -0 ectl get dlock:el#latch --print-value-only
  assert_output 3
  run -0 ectl get dlock:el#latch -w json
  [[ $output == *'"lease":'* ]]
  start_bg waiter "$DLOCK" latch -k el --wait 30s
  local waiter=$BG_PID
  run -0 "$DLOCK" latch -k el --down
  run -0 "$DLOCK" latch -k el --down
  sleep 0.5
  alive "$waiter"
  run -0 "$DLOCK" latch -k el --down
  wait "$waiter"
  # junk: no lease, or not a count
  ectl put dlock:ej#latch 'many' >/dev/null
  run -1 "$DLOCK" latch -k ej --down
  run -75 "$DLOCK" latch -k ej --wait 1s
  ectl put dlock:ej#latch 0 >/dev/null # a count, but on no lease: not dlock's
  run -75 "$DLOCK" latch -k ej --wait 1s
  run -0 "$DLOCK" latch -k ej --count 0
  run -0 "$DLOCK" latch -k ej --wait 1s
}

@test "barrier: another tenant's junk state and party keys are passed over" {
  ectl put 'dlock:ej2#barrier' 'not json' >/dev/null
  ectl put 'dlock:ej2#party:1:zz' 'x' >/dev/null
  start_bg p1 "$DLOCK" barrier -k ej2 --parties 2 -w 30s
  local p1=$BG_PID
  run -0 "$DLOCK" barrier -k ej2 --parties 2 -w 30s
  wait "$p1"
}
