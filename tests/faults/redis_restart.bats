#!/usr/bin/env bats
# Faults: redis-server restarted without persistence (stopped, then started again on the same
# unix socket with an empty dataset). Fencing tokens must not go backwards, and a running
# `dlock run` must notice at its next renewal that its lock is gone. No root needed.

load ../e2e/helpers

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

# restart_redis: stops this test's server and starts an empty one on the same socket.
restart_redis() {
  stop_redis
  start_redis
  [ "$(rcli dbsize)" = 0 ] || fail "the restarted server kept its data"
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
  ! alive "$cmd"
  grep -q "lost lock 'r'" "$T/err" || fail "stderr: $(cat "$T/err")"
  # and nothing was taken back in the restarted server
  run -0 rcli -n 1 exists 'dlock:{r}'
  assert_output 0
}
