#!/usr/bin/env bats
# Faults that need root: a network partition between dlock and Redis. The server listens on
# loopback and on one end of a veth pair whose other end is in a network namespace of this
# file's own (netns_helpers.bash); dlock runs in the namespace, and iptables rules inside it
# drop all traffic to and from the server (a silent partition: no RST, no ICMP). The tests
# watch the lease from Redis's side meanwhile over its unix socket, which is not cut.

load ../../lib/helpers
load ../../lib/redis_helpers
load ../../lib/netns_helpers

setup_file() {
  netns_start redis
  [ -z "${STORE_SKIP:-}" ] || return 0
  # protected mode would refuse the namespace's client: it comes from an address not loopback
  store_start --bind 127.0.0.1 "$SERVER_IP" --protected-mode no
  export NS_URL=redis://$SERVER_IP:$REDIS_PORT
  # the namespace reaches the server (a stray firewall would make every test below meaningless)
  in_ns "$DLOCK" -u "$NS_URL" run -k reach -n -- true
}

teardown_file() {
  store_stop
  netns_stop
}

@test "partition while the command runs: it is dead before the lease can expire, dlock exits 76" {
  ns_holder part 2s
  # Cut right after a renewal, so that no renewal is in flight and the lease (as Redis keeps
  # it) ends at read time + PTTL at the latest.
  just_renewed part 1900
  local expires_at=$((READ_AT + PTTL))
  cut_holder
  echo "lease ends at +$((expires_at - CUT)) ms"
  [ "$LAST" -lt "$expires_at" ]
  grep -q "could not confirm the lease on lock 'part'" "$T/holder.err"
  # the lease runs out on the server: the next holder can take the lock
  wait_for "[ \"\$(rcli exists 'dlock:{part}')\" = 0 ]" 3
}

@test "a short partition that heals in time: the command keeps the lock and finishes" {
  in_ns "$DLOCK" -u "$NS_URL" --connect-timeout 500ms run -k short -t 3s -- sh -c 'echo "$DLOCK_TOKEN" >"$T/token"; sleep 3; echo done' \
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
  in_ns "$DLOCK" -u "$NS_URL" --connect-timeout 500ms run -k never -- touch "$T/ran" 2>"$T/err" || st=$?
  local took=$(($(now_ms) - start))
  cat "$T/err"
  [ "$st" -eq 69 ]
  [ "$took" -lt 3000 ]
  [ ! -e "$T/ran" ]
  heal
  run -0 rcli exists 'dlock:{never}'
  assert_output 0
}

@test "elect: a partition of the leader stops its command before the standby's starts, and it exits 76" {
  elect_witness
  in_ns "$DLOCK" -u "$NS_URL" elect -k lead -t 2s --value ns -- sh "$T/witness.sh" ns \
    2>"$T/ns.err" 3>&- &
  local leader=$!
  echo "$leader" >>"$T/bg.pid"
  wait_for "grep -qs '^start ns ' '$T/witness'" 10
  # A standby in the root namespace (loopback: not cut), and a watcher of the leadership.
  start_bg standby "$DLOCK" elect -k lead -t 2s --value root -- sh "$T/witness.sh" root
  local standby=$BG_PID
  start_bg watcher "$DLOCK" leader lead --watch
  local watcher=$BG_PID
  started watcher "grep -q '^ns (' '$T/watcher.out'"
  wait_for "[ \"\$(waiters lead)\" = 1 ]" 10 # the standby campaigns
  partition
  local st=0
  wait "$leader" || st=$?
  cat "$T/ns.err"
  echo "the leader's dlock exited $st"
  [ "$st" -eq 76 ]
  started standby "grep -q '^start root ' '$T/witness'" "$standby" 15
  cat "$T/witness"
  # The old leader's command stopped before the new one started.
  local stopped started_at
  stopped=$(witness_at stop ns)
  started_at=$(witness_at start root)
  [ -n "$stopped" ] && [ "$stopped" -lt "$started_at" ]
  echo "the standby started $(((started_at - stopped) / 1000000)) ms after the leader stopped"
  assert_equal "$(witness_order)" 'start ns,stop ns,start root,'
  # The watcher saw the leadership pass to the standby (woken at the end of the lease).
  started watcher "grep -q '^root (' '$T/watcher.out'" "$watcher" 10
  cat "$T/watcher.out"
  heal
}
