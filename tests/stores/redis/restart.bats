#!/usr/bin/env bats
# Faults: redis-server restarted without persistence (stopped, then started again on the same
# unix socket with an empty dataset). Fencing tokens must not go backwards, and a running
# `dlock run` must notice at its next renewal that its lock is gone. No root needed.

load ../../lib/helpers

# A server of each test's own, since tests restart it.
setup_file() { :; }
setup() {
  start_redis
  dlock_setup
}
teardown() {
  dlock_teardown
  stop_redis
}

# restart_redis: stops this test's server and starts an empty one on the same socket. A marker
# key tells whether the data went (not DBSIZE: a waiter retrying meanwhile may write at once).
restart_redis() {
  rcli set restart-marker 1 >/dev/null
  stop_redis
  start_redis
  [ "$(rcli exists restart-marker)" = 0 ] || fail "the restarted server kept its data"
}

@test "after a restart without persistence, the next fencing token is greater" {
  local before after
  "$DLOCK" run -k r -- true
  before=$("$DLOCK" run -k r -- sh -c 'echo "$DLOCK_FENCING_TOKEN"')
  restart_redis
  after=$("$DLOCK" run -k r -- sh -c 'echo "$DLOCK_FENCING_TOKEN"')
  [ "$after" -gt "$before" ] || fail "token went back from $before to $after"
  run -0 "$DLOCK" run -k r -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  assert_output $((after + 1))
}

@test "a running dlock run notices at its next renewal that the restart lost its lock: 76" {
  # A database other than 0, so the reconnection has a handshake (SELECT) too. The TTL leaves
  # room for the restart (redis-server can take 2 s to exit): the lease must still be
  # confirmable when the server is back, so that the renewal finds the lock gone.
  "$DLOCK" -v -u "unix://$REDIS_SOCK?db=1" run -k r -t 10s -- \
    sh -c 'echo $$ >"$1"; exec sleep 60' sh "$T/cmd.pid" 2>"$T/err" 3>&- &
  local dlock=$!
  echo "$dlock" >>"$T/bg.pid"
  wait_for '[ -s "$T/cmd.pid" ] && [ "$(rcli -n 1 exists "dlock:{r}")" = 1 ]'
  local cmd
  cmd=$(cat "$T/cmd.pid")
  restart_redis
  local start st=0
  start=$(now_ms)
  wait "$dlock" || st=$?
  [ "$st" -eq 76 ] || fail "dlock exited $st: $(cat "$T/err")"
  # a failed renewal is retried every second: the loss is seen soon, well before the TTL
  [ $(( $(now_ms) - start )) -lt 3000 ]
  refute alive "$cmd"
  grep -q "lost lock 'r'" "$T/err" || fail "stderr: $(cat "$T/err")"
  # and nothing was taken back in the restarted server
  run -0 rcli -n 1 exists 'dlock:{r}'
  assert_output 0
}

@test "a waiter rides out a restart: it warns once, keeps waiting and takes the lock afterwards" {
  start_bg holder "$DLOCK" run -k w -t 10s -- sleep 60
  wait_for 'key_exists w'
  "$DLOCK" run -k w -w 30s -- sh -c 'echo got it' >"$T/out" 2>"$T/err" 3>&- &
  local waiter=$!
  echo "$waiter" >>"$T/bg.pid"
  wait_for '[ "$(rcli zcard "dlock:{w}:waiters")" = 1 ]'
  # the restart loses the holder's lock; the waiter, cut off meanwhile, tries again
  restart_redis
  local st=0
  wait "$waiter" || st=$?
  [ "$st" -eq 0 ] || fail "the waiter exited $st: $(cat "$T/err")"
  assert_equal "$(cat "$T/out")" "got it"
  run -0 grep -c "lost the lock store while waiting for lock 'w'" "$T/err"
  assert_output 1
  grep -q "reached the lock store again" "$T/err" || fail "stderr: $(cat "$T/err")"
}

@test "a waiter whose store does not come back gives up with 69 when --wait runs out" {
  start_bg holder "$DLOCK" run -k w -t 10s -- sleep 60
  wait_for 'key_exists w'
  local start
  start=$(now_ms)
  "$DLOCK" run -k w -w 3s -- touch "$T/ran" 2>"$T/err" 3>&- &
  local waiter=$!
  echo "$waiter" >>"$T/bg.pid"
  wait_for '[ "$(rcli zcard "dlock:{w}:waiters")" = 1 ]'
  stop_redis
  local st=0
  wait "$waiter" || st=$?
  [ "$st" -eq 69 ] || fail "the waiter exited $st: $(cat "$T/err")"
  [ ! -e "$T/ran" ] || fail "the command ran"
  local took=$(($(now_ms) - start))
  [ "$took" -ge 2900 ] || fail "gave up after $took ms, before --wait ran out"
  [ "$took" -lt 6000 ] || fail "gave up after $took ms"
}
