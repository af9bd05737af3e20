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
  export NS_URL=$DLOCK_URL
  # the namespace reaches the server (a stray firewall would make the test meaningless)
  in_ns "$DLOCK" -u "$NS_URL" run -k reach -t 3s -n -- true
}

teardown_file() {
  store_stop
  netns_stop
}

@test "zookeeper partition: the holder's command is stopped (76) before the session expires; the waiter gets the lock after" {
  ns_holder part 3s
  outside_waiter part 3s
  sleep 1 # the waiter queued behind the holder
  cut_holder
  # the waiter gets the lock once the session expired
  waiter_took
  # stopped before the 3 s session could expire
  [ $((LAST - CUT)) -lt 3000 ]
}
