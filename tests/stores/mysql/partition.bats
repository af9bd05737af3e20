#!/usr/bin/env bats
# A network partition between dlock and MariaDB (needs root): the server listens on loopback
# and on one end of a veth pair whose other end is in a network namespace of this file's own;
# dlock runs in the namespace, and iptables rules inside it drop all traffic to and from the
# server (a silent partition: no RST, no ICMP). Clients in the root namespace (the waiter, the
# standby, the mariadb client) reach the server over loopback and are not cut.
#
# The server ends an unreachable session after tcp_keepalive_time 3 s + interval 1 s x probes
# 2 = 5 s without an answer, and frees its GET_LOCK names then; dlock accepts a --ttl up to
# those 5 s over TCP (so every run here says -t 4s) and must have stopped its command by then.
# Keepalives do not run while the server still retransmits an answer the cut swallowed (a
# renewal's): wait_timeout 8 s ends that session too, once the server waits for its next query.

load ../../lib/helpers
load ../../lib/mysql_helpers
load ../../lib/netns_helpers

setup_file() {
  netns_start mypart
  [ -z "${STORE_SKIP:-}" ] || return 0
  MY_LISTEN="127.0.0.1,$SERVER_IP" MY_CLIENT_HOSTS="$CLIENT_IP" store_start_with \
    --tcp-keepalive-time=3 --tcp-keepalive-interval=1 --tcp-keepalive-probes=2 --wait-timeout=8
  [ -z "${STORE_SKIP:-}" ] || return 0
  export NS_URL="mysql://dlock@$SERVER_IP:$MY_PORT/dlock"
  # the namespace reaches the server (a stray firewall would make every test below meaningless)
  in_ns "$DLOCK" -u "$NS_URL" run -k reach -t 4s -n -- true
}

# store_start_with ARGS...: store_start (mysql_helpers.bash) with mariadbd arguments.
store_start_with() {
  if ! "$DLOCK" --version 2>&1 | grep -qi 'mariadb\|mysql'; then
    skip_file "mysql:// store not built (dlock --version does not mention libmariadb or libmysqlclient)"
    return 0
  fi
  start_mariadb "$@"
}

teardown_file() {
  stop_mariadb
  netns_stop
}

# waiting_sessions: how many sessions wait in GET_LOCK (a dlock waiter blocks there).
waiting_sessions() {
  mysql_admin -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT GET_LOCK(%' AND INFO NOT LIKE '%, 0)'"
}

@test "partition: the holder's command is stopped (76) before the server frees the lock; a waiter gets it after" {
  ns_holder part 4s
  outside_waiter part 4s
  wait_for '[ "$(waiting_sessions)" = 1 ]' 10
  cut_holder
  # not minutes: the lease (4 s), the kill-after grace and a bounded release attempt
  [ "$EXITED" -lt 10000 ]
  # the server ends the session (keepalives: about 5 s) and the waiter gets the lock
  waiter_took
}

@test "partition of the leader: its command stops (76) before the standby's starts, once the server ended its session" {
  elect_witness
  in_ns "$DLOCK" -u "$NS_URL" elect -k lead -t 4s --value in-ns -- sh "$T/witness.sh" leader \
    2>"$T/leader.err" 3>&- &
  local leader=$!
  echo "$leader" >>"$T/bg.pid"
  wait_for '[ -n "$(witness_at start leader)" ]' 10
  run -0 "$DLOCK" leader lead
  [[ $output == *in-ns* ]]
  start_bg standby "$DLOCK" elect -k lead -t 4s --value outside -- sh "$T/witness.sh" standby
  wait_for '[ "$(waiting_sessions)" = 1 ]' 10
  local cut
  cut=$(date +%s%N)
  partition
  local st=0
  wait "$leader" || st=$?
  cat "$T/leader.err"
  echo "the old leader's dlock exited $st at +$((($(date +%s%N) - cut) / 1000000)) ms"
  [ "$st" -eq 76 ]
  # the server ends the cut session (keepalives: about 5 s), then the standby leads
  wait_for '[ -n "$(witness_at start standby)" ]' 30
  cat "$T/witness"
  local stopped started
  stopped=$(witness_at stop leader)
  started=$(witness_at start standby)
  [ -n "$stopped" ]
  echo "leader stopped at +$(((stopped - cut) / 1000000)) ms, standby started at +$(((started - cut) / 1000000)) ms"
  [ "$stopped" -lt "$started" ]
  run -0 "$DLOCK" leader lead
  [[ $output == *outside* ]]
  [[ $output != *in-ns* ]]
}
