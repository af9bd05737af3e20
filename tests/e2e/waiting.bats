#!/usr/bin/env bats
# Waiting without polling: wake on release, crashed holders, --fair order, command counts.

load ../lib/helpers

@test "a waiter starts within 200 ms of the holder's end" {
  "$DLOCK" run -k ho -- sh -c 'sleep 1; date +%s%3N > "$BATS_TEST_TMPDIR/end"' &
  wait_for "[ \"\$(rcli exists 'dlock:{ho}')\" = 1 ]"
  "$DLOCK" run -k ho -- sh -c 'date +%s%3N > "$BATS_TEST_TMPDIR/start"'
  wait
  local gap=$(( $(cat "$BATS_TEST_TMPDIR/start") - $(cat "$BATS_TEST_TMPDIR/end") ))
  echo "hand-over took ${gap} ms"
  [ "$gap" -ge 0 ] && [ "$gap" -lt 200 ]
}

@test "a waiter sends at most 3 scripts or BLPOPs while waiting 5 s (no polling)" {
  hold_until idle "$T/release"
  rcli config resetstat >/dev/null
  run -75 "$DLOCK" run -k idle -w 5s -- true
  # Scripts and BLPOP only: commandstats also counts the commands inside scripts, so the
  # withdrawal's ZREM cannot be told apart. Expected: an attempt, a BLPOP, the last attempt,
  # and the skip's history event.
  local calls
  calls=$(rcli info commandstats | tr -d '\r' | grep -E '^cmdstat_(evalsha|eval|blpop):' \
    | sed 's/^[^:]*:calls=\([0-9]*\).*/\1/' | paste -sd+ | bc)
  echo "scripts and BLPOPs while waiting: $calls"
  [ "$calls" -le 4 ]
}

@test "waiters are counted in status while they wait, and forgotten when they give up" {
  hold_until cnt "$T/release"
  start_bg w1 "$DLOCK" run -k cnt -w 3s -- true
  local w1=$BG_PID
  start_bg w2 "$DLOCK" run -k cnt -w 3s -- true
  local w2=$BG_PID
  wait_for '[ "$(waiters cnt)" = 2 ]'
  local st1=0 st2=0
  wait "$w1" || st1=$?
  wait "$w2" || st2=$?
  [ "$st1" -eq 75 ]
  [ "$st2" -eq 75 ]
  [ "$(waiters cnt)" = 0 ]
}

@test "--wait ends close to its deadline while the holder keeps renewing" {
  hold dl 6 -t 1s
  # what a dlock run that does not wait costs on this machine now (a loaded one, a sanitizer
  # build), the one allowance beyond 300 ms
  local start=$(now_ms)
  run -75 "$DLOCK" run -k dl -n -- true
  local overhead=$(( $(now_ms) - start ))
  start=$(now_ms)
  run -75 "$DLOCK" run -k dl -w 1500ms -- true
  local took=$(( $(now_ms) - start ))
  echo "took ${took} ms, ${overhead} ms of it start-up"
  [ "$took" -ge 1500 ] && [ "$took" -lt $((1800 + overhead)) ]
}

@test "a crashed holder (dlock and command SIGKILLed) is taken over when its lease ends" {
  "$DLOCK" run -k crash -t 2s -- sleep 60 &
  local holder=$!
  wait_for "[ \"\$(rcli exists 'dlock:{crash}')\" = 1 ]"
  "$DLOCK" run -k crash -w 10s -- sh -c 'date +%s%3N > "$BATS_TEST_TMPDIR/took-over"' &
  local waiter=$!
  wait_for '[ "$(waiters crash)" = 1 ]'
  # right after a renewal, so that none is in flight: the lease ends at READ_AT + PTTL
  just_renewed crash 1900
  kill -9 "$holder"
  local rc=0
  wait "$waiter" || rc=$?
  [ "$rc" -eq 0 ]
  local late=$(( $(cat "$BATS_TEST_TMPDIR/took-over") - READ_AT - PTTL ))
  echo "taken over ${late} ms after the lease ended"
  [ "$late" -gt -100 ] && [ "$late" -lt 600 ]
}

@test "--fair hands the lock over in arrival order (5 staggered waiters)" {
  hold_until fair "$T/release"
  local i
  for i in 1 2 3 4 5; do
    "$DLOCK" run -k fair --fair -w 20s -- sh -c "echo $i >> '$BATS_TEST_TMPDIR/order'" &
    wait_for "[ \"\$(waiters fair)\" = $i ]"
  done
  touch "$T/release"
  wait
  run cat "$BATS_TEST_TMPDIR/order"
  assert_output "$(printf '1\n2\n3\n4\n5')"
}

@test "an unfair newcomer does not jump a non-empty --fair queue" {
  hold_until mix "$T/release"
  "$DLOCK" run -k mix --fair -w 20s -- sh -c "echo fair >> '$BATS_TEST_TMPDIR/order'; sleep 0.3" &
  wait_for '[ "$(waiters mix)" = 1 ]'
  "$DLOCK" run -k mix -w 20s -- sh -c "echo unfair >> '$BATS_TEST_TMPDIR/order'" &
  wait_for '[ "$(waiters mix)" = 2 ]'
  touch "$T/release"
  wait
  run cat "$BATS_TEST_TMPDIR/order"
  assert_output "$(printf 'fair\nunfair')"
}

@test "a killed --fair waiter stalls the queue no longer than the documented bound (4 s)" {
  hold_until kf "$T/release"
  local holder=$BG_PID
  "$DLOCK" run -k kf --fair -- true &
  local doomed=$!
  wait_for '[ "$(waiters kf)" = 1 ]'
  "$DLOCK" run -k kf --fair -w 20s -- sh -c 'date +%s%3N > "$BATS_TEST_TMPDIR/got"' &
  local next=$!
  wait_for '[ "$(waiters kf)" = 2 ]'
  kill -9 "$doomed"
  touch "$T/release"
  wait "$holder"
  local released=$(now_ms)
  local rc=0
  wait "$next" || rc=$?
  [ "$rc" -eq 0 ]
  local stall=$(( $(cat "$BATS_TEST_TMPDIR/got") - released ))
  echo "queue stalled ${stall} ms"
  [ "$stall" -lt 4000 ]
}

@test "only one waiter is woken per release (no thundering herd)" {
  hold_until herd "$T/release"
  local i
  for i in 1 2 3 4 5 6; do
    "$DLOCK" run -k herd -w 30s -- sleep 0.3 &
  done
  wait_for '[ "$(waiters herd)" = 6 ]'
  rcli config resetstat >/dev/null
  touch "$T/release"
  wait
  # 6 hand-overs: each waiter is woken once, tries once more and wins; failed extra
  # attempts would show up as more EVALSHA calls.
  local evalsha blpop
  evalsha=$(rcli info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p')
  blpop=$(rcli info commandstats | sed -n 's/^cmdstat_blpop:calls=\([0-9]*\).*/\1/p')
  echo "evalsha=$evalsha blpop=${blpop:-0}"
  # per waiter: acquire, release and two history events (+ renew none at 30s ttl); the
  # holder's release and its event; allow a few re-waits
  [ "$evalsha" -le $(( 6 * 4 + 2 + 6 )) ]
}

@test "a signal while waiting ends dlock with 128+N and the command never runs" {
  hold sig 5
  "$DLOCK" run -k sig -- sh -c "touch '$BATS_TEST_TMPDIR/ran'" &
  local waiter=$!
  wait_for '[ "$(waiters sig)" = 1 ]'
  kill -TERM "$waiter"
  local rc=0
  wait "$waiter" || rc=$?
  [ "$rc" -eq 143 ]
  [ ! -e "$BATS_TEST_TMPDIR/ran" ]
}

@test "-v in cron reports the wait once; plain cron prints nothing" {
  hold quiet 2
  run -0 --separate-stderr "$DLOCK" run -k quiet -w 10s -- true
  [ -z "$stderr" ]
  wait
  hold quiet 2
  run -0 --separate-stderr "$DLOCK" -v run -k quiet -w 10s -- true
  [[ $stderr == *"waiting for lock 'quiet'"*"(sleep)"* ]]
  wait
}
