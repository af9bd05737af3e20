#!/usr/bin/env bats
# Faults that need root: a network partition between dlock and Redis, made with a network
# namespace of the test's own (loopback only inside it) and iptables rules that drop the
# Redis port's traffic. The server also listens on a unix socket, which the partition does
# not cut, so the test can watch the lease from Redis's side meanwhile.

load ../../lib/helpers

setup_file() {
  if [ "$(id -u)" -ne 0 ]; then
    skip "needs root (network namespace and iptables); run as root to test a network partition"
  fi
  command -v iptables >/dev/null || skip "needs iptables (packaging/install-deps.sh test installs it)"
  export NS=dlock-fault-$$
  if ! ip netns add "$NS" 2>"$BATS_FILE_TMPDIR/netns.err"; then
    NS=
    skip "cannot create a network namespace here: $(cat "$BATS_FILE_TMPDIR/netns.err")"
  fi
  ip netns exec "$NS" ip link set lo up
  local dir=$BATS_FILE_TMPDIR/redis
  mkdir -p "$dir"
  # a fixed port: the namespace has ports of its own
  export REDIS_PORT=6390 REDIS_SOCK=$dir/redis.sock
  server_args "$dir" "$REDIS_PORT" --daemonize yes --pidfile "$dir/redis.pid"
  ip netns exec "$NS" "${REDIS_SERVER:-redis-server}" "${SERVER_ARGS[@]}"
  wait_for "redis-cli -s '$REDIS_SOCK' ping 2>/dev/null | grep -q PONG" 5
  export REDIS_PID
  REDIS_PID=$(cat "$dir/redis.pid")
  export TCP_URL=redis://127.0.0.1:$REDIS_PORT
}

teardown_file() {
  [ -n "${NS:-}" ] || return 0
  stop_redis
  ip netns del "$NS" 2>/dev/null || true
}

setup() {
  dlock_setup
  heal
}

teardown() {
  heal
  dlock_teardown
}

in_ns() { ip netns exec "$NS" "$@"; }

# partition: drops every TCP packet to or from the Redis port inside the namespace.
partition() {
  in_ns iptables -I INPUT -p tcp --dport "$REDIS_PORT" -j DROP
  in_ns iptables -I INPUT -p tcp --sport "$REDIS_PORT" -j DROP
}
heal() { in_ns iptables -F INPUT 2>/dev/null || true; }

@test "partition while the command runs: it is dead before the lease can expire, dlock exits 76" {
  in_ns "$DLOCK" -u "$TCP_URL" run -k part -t 2s -- sh -c 'echo $$ >"$T/cmd.pid"
      while :; do date +%s%3N >"$T/beat.tmp"; mv "$T/beat.tmp" "$T/beat"; sleep 0.01; done' \
    2>"$T/dlock.err" 3>&- &
  local dlock_pid=$!
  echo "$dlock_pid" >>"$T/bg.pid"
  wait_for "[ -s '$T/cmd.pid' ] && [ -s '$T/beat' ]"
  # Cut right after a renewal, so that no renewal is in flight and the lease (as Redis keeps
  # it) ends at read time + PTTL at the latest.
  just_renewed part 1900
  local read_at=$READ_AT pttl=$PTTL
  partition
  local expires_at=$((read_at + pttl))
  wait_for "! alive $(cat "$T/cmd.pid")" 5
  local last
  last=$(cat "$T/beat")
  echo "lease ends at +$((expires_at - read_at)) ms, last heartbeat at +$((last - read_at)) ms"
  [ "$last" -lt "$expires_at" ]
  local st=0
  wait "$dlock_pid" || st=$?
  [ "$st" -eq 76 ]
  grep -q "could not confirm the lease on lock 'part'" "$T/dlock.err"
  # the lease runs out on the server: the next holder can take the lock
  wait_for "[ \"\$(rcli exists 'dlock:{part}')\" = 0 ]" 3
}

@test "a short partition that heals in time: the command keeps the lock and finishes" {
  in_ns "$DLOCK" -u "$TCP_URL" --connect-timeout 500ms run -k short -t 3s -- sh -c 'echo "$DLOCK_TOKEN" >"$T/token"; sleep 3; echo done' \
    >"$T/out" 2>"$T/err" 3>&- &
  local dlock_pid=$!
  echo "$dlock_pid" >>"$T/bg.pid"
  wait_for "[ -s '$T/token' ]"
  sleep 0.3
  partition
  sleep 0.6
  heal
  local st=0
  wait "$dlock_pid" || st=$?
  cat "$T/err"
  [ "$st" -eq 0 ]
  grep -qx done "$T/out"
}

@test "partition before the acquisition: 69 after --connect-timeout, and no lock is taken" {
  partition
  local start st=0
  start=$(now_ms)
  in_ns "$DLOCK" -u "$TCP_URL" --connect-timeout 500ms run -k never -- touch "$T/ran" 2>"$T/err" || st=$?
  local took=$(($(now_ms) - start))
  cat "$T/err"
  [ "$st" -eq 69 ]
  [ "$took" -lt 3000 ]
  [ ! -e "$T/ran" ]
  heal
  run -0 rcli exists 'dlock:{never}'
  assert_output 0
}
