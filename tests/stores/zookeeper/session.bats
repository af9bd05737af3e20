#!/usr/bin/env bats
# A ZooKeeper whose maxSessionTimeout (4 s here) is below dlock's default --ttl (30 s): without
# --ttl, dlock takes the longest session the server grants as the lease (-v says so); a --ttl
# the server cannot honour is still refused (64). The lease is then the granted session: the
# command is stopped before it could expire on the server when the server cannot be reached.

load ../../lib/helpers
load ../../lib/zookeeper_helpers

setup_file() {
  export ZK_MAX_SESSION=4000
  store_start
}
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() {
  [ -z "${ZK_PID:-}" ] || kill -CONT "$ZK_PID" 2>/dev/null || true
  dlock_teardown
}

@test "zookeeper: maxSessionTimeout 4s: no --ttl takes the 4 s session (-v says it, DLOCK_TTL_MS is it); --ttl 30s is 64" {
  run -0 --separate-stderr "$DLOCK" -v run -k low -- sh -c 'echo "$DLOCK_TTL_MS"'
  echo "$stderr"
  [ "$output" = 4000 ]
  [[ $stderr == *"grants sessions of 4s at most (maxSessionTimeout), not the default --ttl 30s: the lease is 4s"* ]]
  # without -v, nothing is said
  run -0 --separate-stderr "$DLOCK" run -k low -- true
  [ -z "$stderr" ]
  run -64 --separate-stderr "$DLOCK" run -k low -t 30s -- touch "$T/ran"
  echo "$stderr"
  [ "${#stderr_lines[@]}" -eq 1 ]
  [[ $stderr == *maxSessionTimeout* && $stderr == *"--ttl 4s or less"* ]]
  [ ! -e "$T/ran" ]
  run -0 "$DLOCK" run -k low -t 3s -- true
  # a waiter and a holder both on the default: they exclude each other as ever
  start_bg hold "$DLOCK" run -k low -- sh -c 'touch "$0.in"; sleep 1' "$T/hold"
  started hold "[ -e '$T/hold.in' ]"
  run -75 "$DLOCK" run -k low -n -- true
  run -0 "$DLOCK" run -k low -w 10s -- true
}

@test "zookeeper: maxSessionTimeout 4s, no --ttl: the server frozen under a holder stops the command before the 4 s session could expire" {
  start_bg holder "$DLOCK" run -k frozen -- sh -c 'touch "$0.in"; trap "date +%s%3N >\"$0.termed\"; exit 143" TERM; while :; do sleep 0.05; done' "$T/holder"
  local dlock_pid=$BG_PID
  started holder "[ -e '$T/holder.in' ]"
  sleep 1
  local stopped
  stopped=$(now_ms)
  kill -STOP "$ZK_PID"
  local st=0
  wait "$dlock_pid" || st=$?
  kill -CONT "$ZK_PID"
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  local took=$(($(cat "$T/holder.termed") - stopped))
  echo "SIGTERM came $took ms after the server froze (session 4000 ms)"
  [ "$took" -lt 4000 ]
}
