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

load ../../lib/helpers
load ../../lib/postgres_helpers
load ../../lib/netns_helpers

setup_file() {
  netns_start sqlpart
  [ -z "${STORE_SKIP:-}" ] || return 0
  PG_LISTEN="127.0.0.1,$SERVER_IP" PG_HBA_EXTRA="host all all $CLIENT_IP/32 scram-sha-256" \
    start_postgres -c tcp_keepalives_idle=3 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2
  [ -z "${STORE_SKIP:-}" ] || return 0
  export NS_URL="postgres://dlock@$SERVER_IP:$PG_PORT/dlock"
  # the namespace reaches the server (a stray firewall would make every test below meaningless)
  in_ns "$DLOCK" -u "$NS_URL" run -k reach -t 4s -n -- true
}

teardown_file() {
  stop_postgres
  netns_stop
}

# waiting_sessions: how many sessions wait for an advisory lock.
waiting_sessions() {
  psql_admin -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
}

@test "partition: the holder's command is stopped (76) before the server frees the lock; a waiter gets it after" {
  ns_holder part 4s
  # the waiter, over loopback: not partitioned
  outside_waiter part 4s
  wait_for '[ "$(waiting_sessions)" = 1 ]' 10
  cut_holder
  # not minutes: the lease (4 s), the kill-after grace and a bounded release attempt
  [ "$EXITED" -lt 10000 ]
  # the server ends the session (keepalives: about 5 s) and the waiter gets the lock
  waiter_took
  [ $((TAKEN - CUT)) -lt 15000 ]
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

@test "partition of the leader: its command stops (76) before the standby's starts, once the server ended the cut session" {
  elect_witness
  in_ns "$DLOCK" -u "$NS_URL" elect -k pe -t 4s --value old -- sh "$T/witness.sh" old \
    2>"$T/old.err" 3>&- &
  local old=$!
  echo "$old" >>"$T/bg.pid"
  wait_for "grep -qs '^start old' '$T/witness'" 10
  # the standby, in the root namespace (over loopback: not cut)
  start_bg standby "$DLOCK" elect -k pe -t 4s --value new -- sh "$T/witness.sh" new
  local standby=$BG_PID
  wait_for '[ "$(waiting_sessions)" = 1 ]' 10
  partition
  local st=0
  wait "$old" || st=$?
  cat "$T/old.err"
  echo "the old leader's dlock exited $st"
  [ "$st" -eq 76 ]
  # the server ends the cut session (keepalives: about 5 s), and the standby leads then
  wait_for "grep -qs '^start new' '$T/witness'" 30
  run -0 "$DLOCK" leader pe
  [[ $output == "new ("* ]]
  touch "$T/new.go"
  wait "$standby"
  cat "$T/witness"
  # in the order of the events: old starts, old stops, new starts, new stops
  [ "$(witness_order)" = "start old,stop old,start new,stop new," ]
}
