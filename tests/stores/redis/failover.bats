#!/usr/bin/env bats
# Faults: a failover to a replica that missed the lock. Redis replicates asynchronously, so a
# master that dies right after granting a lock can take it along, and the promoted replica
# grants it again: two holders. --wait-replicas 1 makes dlock count a lock only once a replica
# has it. The failover is done by hand (SIGKILL of the master, REPLICAOF NO ONE on the replica),
# as Sentinel would do it; the replica misses the lock because it is frozen (SIGSTOP). No root.

load ../../lib/helpers

# A master of each test's own, since tests kill it.
setup_file() { :; }
setup() {
  start_redis
  dlock_setup
  start_replica
}
teardown() {
  kill -CONT "$SERVER_PID" 2>/dev/null || true
  dlock_teardown
  stop_redis
}

# cut_replica: the replica stops hearing from the master: frozen, and its link closed by the
# master, so that no write reaches even its socket buffer (a frozen process still receives).
cut_replica() {
  kill -STOP "$SERVER_PID"
  rcli client kill type replica >/dev/null
}

# fail_over: the master dies with whatever the replica missed; the replica becomes the master.
fail_over() {
  kill -9 "$REDIS_PID"
  kill -CONT "$SERVER_PID"
  redis-cli -s "$SERVER_SOCK" replicaof no one >/dev/null
  wait_for "redis-cli -s '$SERVER_SOCK' role | head -n 1 | grep -qx master"
}

@test "without --wait-replicas, a failover to a replica that missed the lock makes two holders" {
  cut_replica
  start_bg first "$DLOCK" run -k x -t 10s -- sh -c 'echo $$ >"$0"; exec sleep 30' "$T/first.pid"
  wait_for "[ -s '$T/first.pid' ]"
  fail_over
  # The promoted replica never saw the lock: a second holder gets it while the first runs.
  run -0 "$DLOCK" -u "unix://$SERVER_SOCK" run -n -k x -- true
  alive "$(cat "$T/first.pid")" || fail "the first holder's command had already stopped"
}

@test "with --wait-replicas 1, the first holder never starts its command, so one holder only" {
  cut_replica
  run -69 "$DLOCK" run -k x -t 10s --wait-replicas 1 --wait-replicas-timeout 500ms -- touch "$T/first-ran"
  assert_output --partial "reached 0 of 1 replicas"
  [ ! -e "$T/first-ran" ] || fail "the first holder ran its command without the replica's copy"
  fail_over
  run -0 "$DLOCK" -u "unix://$SERVER_SOCK" run -n -k x --wait-replicas 0 -- true
}

@test "with --wait-replicas 1 and the replica in sync, the lock survives the failover" {
  start_bg first "$DLOCK" run -k x -t 10s --wait-replicas 1 -- sh -c 'echo $$ >"$0"; exec sleep 30' "$T/first.pid"
  wait_for "[ -s '$T/first.pid' ]"
  fail_over
  # The promoted replica has the lock: nobody else gets it.
  run -75 "$DLOCK" -u "unix://$SERVER_SOCK" run -n -k x -- true
  alive "$(cat "$T/first.pid")"
}
