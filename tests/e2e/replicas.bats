#!/usr/bin/env bats
# --wait-replicas N: the lock, and each renewal of its lease, counts only once N replicas have
# it (Redis WAIT). Each test starts a replica of the file's server; SIGSTOP on the replica
# makes it miss writes. The failover that this guards against is in
# tests/stores/redis/failover.bats.

load ../lib/helpers

@test "with a replica in sync, run and acquire take the lock once the replica has it" {
  start_replica
  run -0 "$DLOCK" run -k r --wait-replicas 1 -- sh -c 'echo "$DLOCK_KEY"'
  assert_output r
  run -0 "$DLOCK" acquire -k a -t 10s --wait-replicas 1
  local token=$output
  # the replica has the lock with its token: a failover now would keep it
  run -0 redis-cli -s "$SERVER_SOCK" get 'dlock:{a}'
  assert_output "$token"
}

@test "a replica that does not acknowledge: 69, the command never runs, the lock is given back" {
  start_replica
  kill -STOP "$SERVER_PID"
  local start
  start=$(now_ms)
  run -69 "$DLOCK" run -k r --wait-replicas 1 --wait-replicas-timeout 300ms -- touch "$T/ran"
  assert_output --partial "lock 'r' reached 0 of 1 replicas within 300ms (--wait-replicas); released it"
  [ ! -e "$T/ran" ] || fail "the command ran without the replica's acknowledgement"
  [ $(($(now_ms) - start)) -lt 3000 ]
  refute key_exists r
  run -69 "$DLOCK" acquire -k a -t 10s --wait-replicas 1 --wait-replicas-timeout 200ms
  refute key_exists a
  kill -CONT "$SERVER_PID"
}

@test "more replicas asked for than there are: 69 after the timeout" {
  start_replica
  run -69 "$DLOCK" run -k r --wait-replicas 2 --wait-replicas-timeout 200ms -- true
  assert_output --partial "reached 1 of 2 replicas"
}

@test "a renewal the replica does not acknowledge does not extend the lease: stopped with 76" {
  start_replica
  # ttl 3s: renewals every 1s, WAIT up to 300ms; the command is stopped before 3s are up
  start_bg run "$DLOCK" run -k r -t 3s --wait-replicas 1 -- sh -c 'echo $$ >"$0"; exec sleep 30' "$T/cmd.pid"
  local dlock=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" || fail "the command did not start: $(cat "$T/run.err")"
  just_renewed r 2500
  local frozen_at
  frozen_at=$(now_ms)
  kill -STOP "$SERVER_PID"
  local st=0
  wait "$dlock" || st=$?
  [ "$st" = 76 ] || fail "dlock exited $st: $(cat "$T/run.err")"
  # stopped before the lease confirmed last (at most READ_AT + PTTL) could end
  [ "$(now_ms)" -lt $((READ_AT + PTTL)) ] || fail "stopped only $(($(now_ms) - frozen_at)) ms after the freeze"
  grep -q "did not reach 1 replica(s) within 300ms (--wait-replicas)" "$T/run.err" \
    || fail "stderr: $(cat "$T/run.err")"
  [ "$(grep -c 'did not reach' "$T/run.err")" = 1 ] || fail "the warning is repeated: $(cat "$T/run.err")"
  kill -CONT "$SERVER_PID"
}

@test "--wait-replicas: bad values are usage errors" {
  run -64 "$DLOCK" run -k r --wait-replicas -1 -- true
  run -64 "$DLOCK" run -k r --wait-replicas x -- true
  run -64 "$DLOCK" run -k r --wait-replicas-timeout 1s -- true
  assert_output --partial "--wait-replicas-timeout needs --wait-replicas N"
  run -64 "$DLOCK" run -k r --wait-replicas 1 --wait-replicas-timeout 0 -- true
  run -64 "$DLOCK" acquire -k r -t 5s --wait-replicas 1 --wait-replicas-timeout ''
  refute key_exists r
}

@test "renew --wait-replicas: 0 once the replica has the renewal, 69 when it does not answer" {
  start_replica
  run -0 "$DLOCK" acquire -k a -t 10s --wait-replicas 1
  local token=$output
  run -0 "$DLOCK" renew -k a --token "$token" -t 20s --wait-replicas 1
  # the replica has the new lease
  [ "$(redis-cli -s "$SERVER_SOCK" pttl 'dlock:{a}')" -gt 10000 ]
  kill -STOP "$SERVER_PID"
  run -69 "$DLOCK" renew -k a --token "$token" --wait-replicas 1 --wait-replicas-timeout 200ms
  assert_output --partial "the renewal of lock 'a' reached 0 of 1 replicas within 200ms"
  kill -CONT "$SERVER_PID"
  # a token that does not hold the lock is still 76, replicas or not
  run -76 "$DLOCK" renew -k a --token nottheholder --wait-replicas 1
}
