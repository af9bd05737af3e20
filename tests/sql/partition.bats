#!/usr/bin/env bats
# A network partition between dlock and PostgreSQL (needs root): the server listens on
# loopback and on one end of a veth pair whose other end is in a network namespace of this
# file's own; dlock runs in the namespace, and iptables rules inside it drop all traffic to
# and from the server (a silent partition: no RST, no ICMP). Clients in the root namespace
# (the waiter, psql) reach the server over loopback and are not cut.
#
# The server ends an unreachable session after tcp_keepalives_idle 3 s + interval 1 s x
# count 2 = 5 s without an answer, and frees its locks then; dlock accepts a --ttl up to
# those 5 s over TCP (so every run here says -t 4s) and must have stopped its command by then.

load ../e2e/helpers
load postgres_helpers

setup_file() {
  if [ "$(id -u)" -ne 0 ]; then
    skip_file "needs root (network namespace, veth pair and iptables); run as root to test a partition from PostgreSQL"
    return 0
  fi
  if ! command -v iptables >/dev/null; then
    skip_file "needs iptables (packaging/install-deps.sh test installs it)"
    return 0
  fi
  if ! command -v ip >/dev/null; then
    skip_file "needs ip (iproute2)"
    return 0
  fi
  export NS=dlock-sqlpart-$$
  if ! ip netns add "$NS" 2>"$BATS_FILE_TMPDIR/netns.err"; then
    NS=
    skip_file "cannot create a network namespace here: $(cat "$BATS_FILE_TMPDIR/netns.err")"
    return 0
  fi
  # a /30 of its own, from the pid, so that parallel runs do not share addresses
  local net=10.213.$(($$ % 250 + 1))
  export VETH=dlsq$$ SERVER_IP=$net.1 CLIENT_IP=$net.2
  if ! ip link add "$VETH" type veth peer name "${VETH}n" netns "$NS" 2>"$BATS_FILE_TMPDIR/veth.err"; then
    skip_file "cannot create a veth pair here: $(cat "$BATS_FILE_TMPDIR/veth.err")"
    VETH=
    return 0
  fi
  ip addr add "$SERVER_IP/30" dev "$VETH"
  ip link set "$VETH" up
  in_ns ip link set lo up
  in_ns ip addr add "$CLIENT_IP/30" dev "${VETH}n"
  in_ns ip link set "${VETH}n" up
  PG_LISTEN="127.0.0.1,$SERVER_IP" PG_HBA_EXTRA="host all all $CLIENT_IP/32 scram-sha-256" \
    start_postgres -c tcp_keepalives_idle=3 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2
  [ -z "${SQL_SKIP:-}" ] || return 0
  export NS_URL="postgres://dlock@$SERVER_IP:$PG_PORT/dlock"
  # the namespace reaches the server (a stray firewall would make every test below meaningless)
  in_ns "$DLOCK" -u "$NS_URL" run -k reach -t 4s -n -- true
}

teardown_file() {
  stop_postgres
  [ -z "${VETH:-}" ] || ip link del "$VETH" 2>/dev/null || true
  [ -z "${NS:-}" ] || ip netns del "$NS" 2>/dev/null || true
}

setup() {
  skip_if_file_skipped
  dlock_setup
  heal
}

teardown() {
  [ -n "${SQL_SKIP:-}" ] || heal
  dlock_teardown
}

in_ns() { ip netns exec "$NS" "$@"; }

# partition: inside the namespace, drops every packet to or from the server.
partition() {
  in_ns iptables -I INPUT -s "$SERVER_IP" -j DROP
  in_ns iptables -I OUTPUT -d "$SERVER_IP" -j DROP
}
heal() { in_ns iptables -F INPUT 2>/dev/null; in_ns iptables -F OUTPUT 2>/dev/null; true; }

# waiting_sessions: how many sessions wait for an advisory lock.
waiting_sessions() {
  psql_admin -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
}

@test "partition: the holder's command is stopped (76) before the server frees the lock; a waiter gets it after" {
  in_ns "$DLOCK" -u "$NS_URL" run -k part -t 4s -- sh -c 'echo $$ >"$T/cmd.pid"
      while :; do date +%s%3N >"$T/beat.tmp"; mv "$T/beat.tmp" "$T/beat"; sleep 0.01; done' \
    2>"$T/holder.err" 3>&- &
  local holder=$!
  echo "$holder" >>"$T/bg.pid"
  wait_for "[ -s '$T/cmd.pid' ] && [ -s '$T/beat' ]" 10
  # the waiter, over loopback: not partitioned
  start_bg waiter "$DLOCK" run -k part -t 4s -w 30s -- sh -c 'date +%s%3N >"$T/taken"'
  local waiter=$BG_PID
  wait_for '[ "$(waiting_sessions)" = 1 ]' 10
  local cut
  cut=$(now_ms)
  partition
  wait_for "gone $(cat "$T/cmd.pid")" 10
  local last
  last=$(cat "$T/beat")
  local st=0
  wait "$holder" || st=$?
  local exited=$(($(now_ms) - cut))
  cat "$T/holder.err"
  echo "command's last heartbeat at +$((last - cut)) ms, dlock exited $st at +$exited ms"
  [ "$st" -eq 76 ]
  # not minutes: the lease (4 s), the kill-after grace and a bounded release attempt
  [ "$exited" -lt 10000 ]
  # the server ends the session (keepalives: about 5 s) and the waiter gets the lock
  st=0
  wait "$waiter" || st=$?
  cat "$T/waiter.err"
  [ "$st" -eq 0 ]
  local taken
  taken=$(cat "$T/taken")
  echo "the waiter took the lock at +$((taken - cut)) ms"
  [ "$taken" -gt "$last" ]
  [ $((taken - cut)) -lt 15000 ]
}

@test "partition while waiting: -w runs out on time, dlock does not hang on the cancel request" {
  start_bg holder "$DLOCK" run -k pw -t 4s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 30'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  local start
  start=$(now_ms)
  in_ns "$DLOCK" -u "$NS_URL" run -k pw -t 4s -w 3s -- touch "$T/ran" 2>"$T/waiter.err" 3>&- &
  local waiter=$!
  echo "$waiter" >>"$T/bg.pid"
  wait_for '[ "$(waiting_sessions)" = 1 ]' 10
  partition
  local st=0
  wait "$waiter" || st=$?
  local took=$(($(now_ms) - start))
  cat "$T/waiter.err"
  echo "the waiter exited $st after $took ms"
  # 75 (-w ran out) or 69 (the store was lost while waiting: man dlock, WAITING)
  [ "$st" -eq 75 ] || [ "$st" -eq 69 ]
  # -w 3s, the cancel request (500 ms at most), one --connect-timeout (2 s), 1.5 s of slack
  [ "$took" -lt 7000 ]
  [ ! -e "$T/ran" ]
  # the holder is untouched
  alive "$holder"
  run -0 "$DLOCK" status pw
}

@test "over TCP, a --ttl past the server's keepalives (5 s) is refused with 64; a unix socket is not limited by them" {
  run -64 --separate-stderr "$DLOCK" run -k ka -t 10s -- touch "$T/ran"
  echo "$stderr"
  [ ! -e "$T/ran" ]
  [[ $stderr == *tcp_keepalives* ]]
  run -0 "$DLOCK" run -k ka -t 5s -- true
  run -0 --separate-stderr "$DLOCK" -u "postgres://dlock@/dlock?host=$PG_SOCK_DIR&port=$PG_PORT" \
    run -k ka -t 10s -- touch "$T/ran"
  [ -e "$T/ran" ]
}
