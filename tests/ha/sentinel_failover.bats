#!/usr/bin/env bats
# Redis Sentinel failovers under a running `dlock run --wait-replicas 1` (so that the replicas
# have the lock, and each renewal, before a switch): a failover ordered with SENTINEL FAILOVER,
# and the master killed with SIGKILL, which the Sentinels detect and repair by themselves.
# Either way the command must never run past its lease: it goes on with the lease renewed on
# the new master, or it is stopped (76). A new dlock run after a failover reaches the new master.
#
# Each test starts its own group (sentinel_helpers.bash), with two replicas: the one that is not
# promoted is moved to the new master at once, so that WAIT 1 is answered there again within
# a second (the old master, if alive, is only moved about 10 s later).

load ../lib/sentinel_helpers

setup_file() { :; }
teardown_file() { :; }
setup() {
  dlock_setup
  unset DLOCK_URL DLOCK_PASSWORD DLOCK_SENTINEL_PASSWORD
  start_sentinel_group --replicas 2
}

# The holder's command: writes its pid to $T/cmd.pid and its DLOCK_TOKEN to $T/token, then
# waits until $T/stop exists.
HOLD_CMD='echo $$ >"$0/cmd.pid"; echo "$DLOCK_TOKEN" >"$0/token.tmp"; mv "$0/token.tmp" "$0/token"
until [ -e "$0/stop" ]; do sleep 0.05; done'

# hold_through_sentinel NAME TTL: a background dlock run -k NAME -t TTL --wait-replicas 1 through
# the Sentinels (start_bg hold: HOLDER, the dlock pid; CMD_PID, its command's; TOKEN) once the
# master and at least one replica have the lock.
hold_through_sentinel() {
  start_bg hold "$DLOCK" -u "$SENTINEL_URL" run -k "$1" -t "$2" --wait-replicas 1 -- sh -c "$HOLD_CMD" "$T"
  HOLDER=$BG_PID
  wait_for "[ -s '$T/token' ] && [ -s '$T/cmd.pid' ]" 10 ||
    fail "the command did not start: $(cat "$T/hold.err")"
  CMD_PID=$(cat "$T/cmd.pid") TOKEN=$(cat "$T/token")
  run -0 mcli get "dlock:{$1}"
  assert_output "$TOKEN"
}

# holder_report: whether the holder still runs, and what it said, for failure messages.
holder_report() {
  local state=running
  gone "$HOLDER" && state=exited
  echo "dlock $state; its stderr: $(cat "$T/hold.err")"
}

@test "SENTINEL FAILOVER under a running lock: the command goes on, the lease renewed on the new master" {
  # A 6 s lease: the other replica's resync to the new master can hold up the renewals'
  # replica acknowledgement (--wait-replicas 1) for seconds on a loaded machine.
  hold_through_sentinel fo 6s
  # A waiter, registered on the old master, rides out the switch and gets the lock in the end.
  start_bg waiter "$DLOCK" -u "$SENTINEL_URL" run -k fo -w 60s -- echo waited
  local waiter=$BG_PID
  wait_for "[ \"\$(mcli zcard 'dlock:{fo}:waiters')\" = 1 ]" 10
  local s1=${SENTINEL_PORTS%% *}
  run -0 scli "$s1" sentinel failover "$SENTINEL_MASTER"
  assert_output OK
  local start
  start=$(now_ms)
  wait_for_new_master "$MASTER_PORT"
  local new=$NEW_MASTER_PORT switched
  switched=$(now_ms)

  # The new master has the lock (it was replicated before the switch) ...
  run -0 ncli "$new" get 'dlock:{fo}'
  [ "$output" = "$TOKEN" ] || fail "the new master has '$output'; $(holder_report)"
  # ... and dlock renews it there: its end moves on by a renewal's worth (ttl/3).
  local first_end end=''
  first_end=$(lease_end_on "$new" fo) || fail "the lock is gone from the new master; $(holder_report)"
  wait_for "end=\$(lease_end_on $new fo) && [ \$end -gt $((first_end + 500)) ]" 8 ||
    fail "no renewal on the new master (end ${end:-gone}, was $first_end); $(holder_report)"
  echo "# failover ordered; Sentinels agreed after $((switched - start)) ms; renewed on the new master $(($(now_ms) - switched)) ms later" >&3
  alive "$CMD_PID" || fail "the command stopped; $(holder_report)"
  # A second renewal, and a competitor going through the Sentinels finds the lock held.
  wait_for "[ \$(lease_end_on $new fo) -gt $((end + 500)) ]" 8 ||
    fail "no second renewal on the new master; $(holder_report)"
  run -75 "$DLOCK" -u "$SENTINEL_URL" run -k fo -n -- touch "$T/second-ran"
  [ ! -e "$T/second-ran" ]
  alive "$CMD_PID" || fail "the command stopped; $(holder_report)"

  # The command ends: the release reaches the new master.
  touch "$T/stop"
  local st=0
  wait "$HOLDER" || st=$?
  [ "$st" = 0 ] || fail "dlock exited $st: $(cat "$T/hold.err")"
  # The waiter takes the lock on the new master and releases it.
  st=0
  wait "$waiter" || st=$?
  [ "$st" = 0 ] || fail "the waiter exited $st: $(cat "$T/waiter.err")"
  assert_equal "$(cat "$T/waiter.out")" waited
  [ "$(ncli "$new" exists 'dlock:{fo}')" = 0 ] || fail "the lock is still on the new master"
}

@test "kill -9 of the master under a running lock: renewed on the promoted replica, or stopped (76) in time" {
  hold_through_sentinel k9 4s
  # Right after a renewal (pttl >= 3.5 s of 4 s), so that none is in flight: the lease the
  # replicas have ends at $end at the latest.
  local end
  wait_for "end=\$(lease_end_on $MASTER_PORT k9) && [ \$((end - \$(now_ms))) -ge 3500 ]" 5 ||
    fail "no renewal seen on the master; $(holder_report)"
  local killed_at promoted_at='' renewed_at='' now cmd_alive port e first_end=$end
  ms_into killed_at
  kill -9 "$MASTER_PID"

  # Until the holder exits, or has renewed on the new master for 2 s: whenever the command is
  # alive, some lease must be, on the node that is or becomes master (end: the latest end seen
  # on a replica, read after the liveness check, so that every renewal before it counts).
  local deadline=$((killed_at + 20000))
  while :; do
    ms_into now
    cmd_alive=0
    alive "$CMD_PID" && cmd_alive=1
    for port in $REPLICA_PORTS; do
      if e=$(lease_end_on "$port" k9) && [ "$e" -gt "$end" ]; then end=$e; fi
      if [ -z "$promoted_at" ] && [ "$(ncli "$port" role 2>/dev/null | head -n 1)" = master ]; then
        ms_into promoted_at
      fi
    done
    if [ "$cmd_alive" = 1 ] && [ "$now" -gt "$end" ]; then
      fail "the command still ran $((now - end)) ms after its lease ended ($((now - killed_at)) ms after the kill); $(holder_report)"
    fi
    if [ -n "$promoted_at" ] && [ -z "$renewed_at" ] && [ "$end" -gt $((first_end + 500)) ]; then
      ms_into renewed_at
    fi
    gone "$HOLDER" && break
    [ -n "$renewed_at" ] && [ "$now" -gt $((renewed_at + 2000)) ] && break
    [ "$now" -lt "$deadline" ] || fail "neither renewed on a new master nor stopped; $(holder_report)"
    sleep 0.02
  done

  local outcome
  if gone "$HOLDER"; then
    local st=0
    wait "$HOLDER" || st=$?
    [ "$st" = 76 ] || fail "dlock exited $st: $(cat "$T/hold.err")"
    gone "$CMD_PID" || fail "dlock exited 76 but its command still runs"
    outcome="stopped with 76 ($(($(now_ms) - killed_at)) ms after the kill)"
  elif alive "$CMD_PID"; then
    outcome="still running, renewed on the new master"
  else
    # dlock stopped the command after the loop last looked (a renewal the replicas did not
    # confirm in time): it must then exit 76 at once.
    wait_for "gone $HOLDER" 5 || fail "the command stopped while dlock runs; $(holder_report)"
    local st=0
    wait "$HOLDER" || st=$?
    [ "$st" = 76 ] || fail "dlock exited $st: $(cat "$T/hold.err")"
    outcome="stopped with 76 after renewing on the new master ($(($(now_ms) - killed_at)) ms after the kill)"
  fi
  echo "# kill -9: promoted after $((${promoted_at:-$now} - killed_at)) ms$([ -z "$promoted_at" ] && echo ' (not seen)');" \
    "first renewal on the new master $([ -n "$renewed_at" ] && echo "$((renewed_at - ${promoted_at:-$killed_at})) ms after the promotion" || echo "not seen");" \
    "$outcome" >&3

  # The Sentinels agree on the promoted replica; a new run takes its lock there.
  wait_for_new_master "$MASTER_PORT"
  run -0 "$DLOCK" -u "$SENTINEL_URL" run -k k9-after -- sh -c '
    [ "$(redis-cli -p "$1" get "dlock:{k9-after}")" = "$DLOCK_TOKEN" ] && echo on-new-master' sh "$NEW_MASTER_PORT"
  assert_output on-new-master
  if alive "$HOLDER"; then
    touch "$T/stop"
    local st=0
    wait "$HOLDER" || st=$?
    [ "$st" = 0 ] || fail "dlock exited $st: $(cat "$T/hold.err")"
    [ "$(ncli "$NEW_MASTER_PORT" exists 'dlock:{k9}')" = 0 ] || fail "the lock is still on the new master"
  fi
}

@test "a dlock run started after a failover takes the lock on the new master, not the old one" {
  local s1=${SENTINEL_PORTS%% *}
  run -0 scli "$s1" sentinel failover "$SENTINEL_MASTER"
  assert_output OK
  wait_for_new_master "$MASTER_PORT"
  # The old master still calls itself master, and takes writes, for about 10 s yet (it is not
  # checked once it was moved: it would have the new master's copy).
  local old_role
  old_role=$(ncli "$MASTER_PORT" role | head -n 1)
  echo "# the old master's role right after the switch: $old_role" >&3
  run -0 "$DLOCK" -u "$SENTINEL_URL" run -k after -- sh -c '
    [ "$(redis-cli -p "$1" get "dlock:{after}")" = "$DLOCK_TOKEN" ] &&
      { [ "$3" != master ] || [ "$(redis-cli -p "$2" exists "dlock:{after}")" = 0 ]; } && echo on-new-master' \
    sh "$NEW_MASTER_PORT" "$MASTER_PORT" "$old_role"
  assert_output on-new-master
  run -0 "$DLOCK" -u "$SENTINEL_URL" acquire -k after -t 10s
  local tok=$output
  run -0 ncli "$NEW_MASTER_PORT" get 'dlock:{after}'
  assert_output "$tok"
  [ "$old_role" != master ] || [ "$(ncli "$MASTER_PORT" exists 'dlock:{after}')" = 0 ]
  run -0 "$DLOCK" -u "$SENTINEL_URL" status after
  run -0 "$DLOCK" -u "$SENTINEL_URL" release -k after --token "$tok"
  [ "$(ncli "$NEW_MASTER_PORT" exists 'dlock:{after}')" = 0 ]
}
