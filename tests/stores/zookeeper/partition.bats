#!/usr/bin/env bats
# A network partition between dlock and ZooKeeper (needs root): the server listens on one end
# of a veth pair (SERVER_IP) whose other end is in a network namespace of this file's own;
# dlock runs in the namespace, and iptables rules inside it drop all traffic to and from the
# server (a silent partition: no RST, no ICMP). The waiter, in the root namespace, reaches the
# server directly. The session timeout (--ttl) is the lease: the holder must have stopped its
# command before the server expires its session and hands the lock to the waiter.

load ../../lib/helpers
load ../../lib/zookeeper_helpers
load ../../lib/netns_helpers

setup_file() {
  netns_start zk
  [ -z "${STORE_SKIP:-}" ] || return 0
  export ZK_ADDRESS=$SERVER_IP
  store_start
  [ -z "${STORE_SKIP:-}" ] || return 0
  # the namespace reaches the server (a stray firewall would make the test meaningless)
  in_ns "$DLOCK" run -k reach -t 3s -n -- true
}

teardown_file() {
  store_stop
  netns_stop
}

setup() {
  skip_if_file_skipped
  dlock_setup
  heal
}

teardown() {
  [ -n "${STORE_SKIP:-}" ] || heal
  dlock_teardown
}

@test "zookeeper partition: the holder's command is stopped (76) before the session expires; the waiter gets the lock after" {
  in_ns "$DLOCK" run -k part -t 3s -- sh -c 'echo $$ >"$T/cmd.pid"
      while :; do date +%s%3N >"$T/beat.tmp"; mv "$T/beat.tmp" "$T/beat"; sleep 0.01; done' \
    2>"$T/holder.err" 3>&- &
  local holder=$!
  echo "$holder" >>"$T/bg.pid"
  wait_for "[ -s '$T/cmd.pid' ] && [ -s '$T/beat' ]" 10
  start_bg waiter "$DLOCK" run -k part -t 3s -w 30s -- sh -c 'date +%s%3N >"$T/taken"'
  local waiter=$BG_PID
  sleep 1 # the waiter queued behind the holder
  local cut
  cut=$(now_ms)
  partition
  wait_for "gone $(cat "$T/cmd.pid")" 10
  local last st=0
  last=$(cat "$T/beat")
  wait "$holder" || st=$?
  cat "$T/holder.err"
  echo "command's last heartbeat at +$((last - cut)) ms, dlock exited $st"
  [ "$st" -eq 76 ]
  st=0
  wait "$waiter" || st=$?
  cat "$T/waiter.err"
  [ "$st" -eq 0 ]
  local taken
  taken=$(cat "$T/taken")
  echo "the waiter took the lock at +$((taken - cut)) ms (the session expired)"
  [ "$taken" -gt "$last" ]
  # stopped before the 3 s session could expire
  [ $((last - cut)) -lt 3000 ]
}
