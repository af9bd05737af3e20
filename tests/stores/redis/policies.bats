#!/usr/bin/env bats
# The cron and CI policies on one Redis server (--note, --min-hold, --lock-delay, --replace,
# --supersede): the store side, as the scripts keep it (called here with EVAL, as dlock sends
# them), and what dlock answers when another tenant of the server writes dlock's sibling keys.
# The shared end-to-end scenarios are in tests/stores/store.bats.

load ../../lib/helpers

SCRIPTS=$BATS_TEST_DIRNAME/../../../src/stores/redis/scripts

# lua NAME NUMKEYS KEYS... ARGS...: runs scripts/NAME.lua as dlock does (after prelude.lua),
# printing its answer as JSON.
lua() {
  local name=$1
  shift
  rcli --json eval "$(cat "$SCRIPTS/prelude.lua" "$SCRIPTS/$name.lua")" "$@"
}

# try KEY TOKEN TTL_MS WAITER MODE [MIN_HOLD_MS LOCK_DELAY_MS REPLACE SUPERSEDE REGISTERED NOTE]:
# one acquire.lua attempt of an exclusive lock by host "h-TOKEN".
try() {
  local b="dlock:{$1}"
  lua acquire 16 "$b" "$b:fence" "$b:holder" "$b:waiters" "$b:queue" "$b:queue-expiry" \
    "$b:holders" "$b:slots" "$b:kind" "$b:writers" "$b:wake" "$b:watchers" "$b:freed" \
    "$b:newest" "$b:leader:watchers" "$b:leader:wake" "$2" "$3" "h-$2" 42 u cmd "$4" "$5" 1000 exclusive "${11:-}" "${6:-0}" \
    "${7:-0}" "${8:-0}" "${9:-0}" "${10:-0}"
}

# renew KEY TOKEN / release KEY TOKEN ('' : --force) / inspect KEY
renew() { lua renew 2 "dlock:{$1}" "dlock:{$1}:holder" "$2" '' 0; }
release() {
  local b="dlock:{$1}"
  lua release 13 "$b" "$b:holder" "$b:waiters" "$b:queue" "$b:queue-expiry" "$b:wake" \
    "$b:holders" "$b:slots" "$b:kind" "$b:watchers" "$b:watch" "$b:leader:watchers" \
    "$b:leader:wake" "$2"
}
inspect() {
  local b="dlock:{$1}"
  lua inspect 8 "$b" "$b:holder" "$b:fence" "$b:waiters" "$b:queue-expiry" "$b:holders" \
    "$b:slots" "$b:kind"
}

# field JSON PATH: jq's raw answer.
field() { jq -r "$2" <<<"$1"; }

@test "--note is recorded with the holder and read back (a conflict shows it)" {
  local note='deploy #42: ünïcode, "quotes" & <tags>'
  "$DLOCK" acquire -k n --ttl 30s --note "$note" >"$T/token"
  [ "$(rcli hget 'dlock:{n}:holder' note)" = "$note" ]
  [ "$(rcli pttl 'dlock:{n}:holder')" -gt 0 ]
  # Read back wherever the holder is (the conflict message; status prints what it is given).
  run -75 "$DLOCK" -v run -n -k n -- true
  assert_output --partial "$note"
  run -0 "$DLOCK" status n
  # Too long for dlock to have written it: cut to lock::max_note_bytes by the script.
  "$DLOCK" release -k n --token "$(cat "$T/token")" 2>/dev/null || "$DLOCK" release --force -k n
  run -0 try long t1 30000 w1 once 0 0 0 0 0 "$(head -c 3000 /dev/zero | tr '\0' y)"
  [ "$(rcli hstrlen 'dlock:{long}:holder' note)" = 1024 ]
}

@test "a note another tenant wrote larger than dlock writes: not a dlock holder, never a crash" {
  "$DLOCK" acquire -k big --ttl 30s >/dev/null
  rcli hset 'dlock:{big}:holder' note "$(head -c 5000 /dev/zero | tr '\0' x)" >/dev/null
  run -0 "$DLOCK" status big
  assert_output --partial 'not a dlock holder'
  run -75 "$DLOCK" run -n -k big -- true
  run -0 "$DLOCK" release --force -k big
}

@test "--min-hold: a release by the token keeps the lock, marked ended, until hold_until" {
  run -0 try mh t1 1000 w1 once 3000
  [ "$(field "$output" '.[0]')" = 1 ]
  # The lock lives until hold_until, however short its lease.
  [ "$(rcli pttl 'dlock:{mh}')" -gt 2000 ]
  run -0 renew mh t1
  assert_output 1
  [ "$(rcli pttl 'dlock:{mh}')" -gt 2000 ] || fail "a renewal shortened it below hold_until"
  run -0 release mh t1
  local left
  left=$(field "$output" '.[0]')
  [ "$left" -gt 2000 ] && [ "$left" -le 3000 ] || fail "kept for $output"
  # Still taken, its holder's command ended; the token no longer renews it.
  run -0 renew mh t1
  assert_output 0
  run -0 inspect mh
  [ "$(field "$output" '.[0]')" = 1 ] && [ "$(field "$output" '.[8]')" = 1 ] || fail "$output"
  [ "$(field "$output" '.[2] | index("h-t1")')" != null ] || fail "holder lost: $output"
  # Another attempt: min_hold (state 1), the time left, blocking no longer than that.
  run -0 try mh t2 1000 w2 wait
  [ "$(field "$output" '.[0]')" = 0 ] && [ "$(field "$output" '.[5]')" = 1 ] || fail "$output"
  [ "$(field "$output" '.[3]')" -le "$(field "$output" '.[1]')" ] || fail "blocks past: $output"
  run -75 "$DLOCK" run -n -k mh -- true
  # No lock-delay after it, and release --force frees it at once.
  run -0 "$DLOCK" release --force -k mh
  [ "$(rcli exists 'dlock:{mh}' 'dlock:{mh}:holder')" = 0 ]
  run -0 "$DLOCK" run -n -k mh -- true
}

@test "--min-hold: a holder that vanishes (no release, no renewal) keeps it closed until hold_until" {
  run -0 try gone t1 200 w1 once 2000
  sleep 0.5 # past its lease
  run -75 "$DLOCK" run -n -k gone -- true
  run -0 try gone t2 1000 w2 once
  [ "$(field "$output" '.[0]')" = 0 ] && [ "$(field "$output" '.[5]')" = 0 ] || fail "$output"
  [ "$(field "$output" '.[1]')" -gt 1000 ] || fail "$output"
  sleep 1.7 # past hold_until
  run -0 "$DLOCK" run -n -k gone -- true
}

@test "--lock-delay: after a lease that expired, the key is not taken for the delay" {
  run -0 try ld t1 300 w1 once 0 1500
  [ "$(rcli pttl 'dlock:{ld}:holder')" -gt 1500 ]
  run -0 renew ld t1
  [ "$(rcli pttl 'dlock:{ld}:holder')" -gt 1500 ] || fail "the renewal did not keep the delay"
  sleep 0.5 # the lease ends without a release (as after kill -9)
  run -0 try ld t2 1000 w2 wait
  [ "$(field "$output" '.[0]')" = 0 ] && [ "$(field "$output" '.[5]')" = 2 ] || fail "$output"
  local left
  left=$(field "$output" '.[1]')
  [ "$left" -gt 0 ] && [ "$left" -le 1500 ] || fail "$output"
  [ "$(field "$output" '.[3]')" -le "$left" ] || fail "blocks past the delay: $output"
  [ "$(field "$output" '.[2] | index("h-t1")')" != null ] || fail "vanished holder: $output"
  run -0 inspect ld
  [ "$(field "$output" '.[0]')" = 0 ] && [ "$(field "$output" '.[9]')" -gt 0 ] || fail "$output"
  run -75 "$DLOCK" run -n -k ld -- true
  run -1 "$DLOCK" status ld
  sleep 1.2
  run -0 "$DLOCK" run -n -k ld -- true
}

@test "--lock-delay: after release --force the delay runs; a clean release leaves none" {
  run -0 try fd t1 30000 w1 once 0 1500
  run -0 "$DLOCK" release --force -k fd
  [ "$(rcli exists 'dlock:{fd}')" = 0 ]
  local left
  left=$(rcli pttl 'dlock:{fd}:holder')
  [ "$left" -gt 0 ] && [ "$left" -le 1500 ] || fail "delay $left"
  run -75 "$DLOCK" run -n -k fd -- true
  # A clean release: taken again at once.
  run -0 try clean t1 30000 w1 once 0 5000
  run -0 release clean t1
  assert_output 1
  [ "$(rcli exists 'dlock:{clean}' 'dlock:{clean}:holder')" = 0 ]
  run -0 "$DLOCK" run -n -k clean -- true
  # A clean release after --min-hold: none either.
  run -0 try both t1 200 w1 once 600 5000
  run -0 release both t1
  sleep 0.8
  run -0 "$DLOCK" run -n -k both -- true
}

@test "--replace: the holder's next renewal is refused with the replacer; its release frees at once" {
  run -0 try rp t1 30000 w1 once 60000 60000
  run -0 try rp t2 30000 w2 wait 0 0 1 0 0 'take over'
  [ "$(field "$output" '.[0]')" = 0 ] && [ "$(field "$output" '.[6]')" = 1 ] || fail "$output"
  local pttl
  pttl=$(rcli pttl 'dlock:{rp}')
  run -0 renew rp t1
  [ "$(field "$output" '.[0]')" = 2 ] || fail "$output"
  [ "$(field "$output" '.[1] | index("take over")')" != null ] || fail "$output"
  [ "$(rcli pttl 'dlock:{rp}')" -le "$pttl" ] || fail "the renewal extended the lease"
  # The release by that token: no --min-hold kept, no --lock-delay.
  run -0 release rp t1
  assert_output 1
  [ "$(rcli exists 'dlock:{rp}' 'dlock:{rp}:holder')" = 0 ]
  run -0 try rp t2 30000 w2 wait
  [ "$(field "$output" '.[0]')" = 1 ] || fail "$output"
}

@test "--replace: nothing to ask of a lock kept for --min-hold, a lock-delay, or not dlock's" {
  run -0 try rk t1 30000 w1 once 60000
  run -0 release rk t1
  run -0 try rk t2 30000 w2 wait 0 0 1
  [ "$(field "$output" '.[6]')" = 0 ] || fail "$output"
  rcli set 'dlock:{foreign}' theirs >/dev/null
  run -0 try foreign t2 30000 w2 wait 0 0 1
  [ "$(field "$output" '.[6]')" = 0 ] || fail "$output"
  [ "$(rcli exists 'dlock:{foreign}:holder')" = 0 ]
}

@test "--supersede: the newest waiter wins; an older one withdraws and says who" {
  run -0 try sp holder 30000 h wait
  run -0 try sp t1 30000 w1 wait 0 0 0 1 0 first
  [ "$(rcli hget 'dlock:{sp}:newest' id)" = w1 ]
  [ "$(rcli pttl 'dlock:{sp}:newest')" -gt 0 ]
  run -0 try sp t2 30000 w2 wait 0 0 0 1 0 second
  [ "$(rcli hget 'dlock:{sp}:newest' id)" = w2 ]
  # w1 was woken to see it (a wake-up for each older waiter).
  [ "$(rcli llen 'dlock:{sp}:wake')" -ge 1 ]
  run -0 try sp t1 30000 w1 wait 0 0 0 1 1
  [ "$(field "$output" '.[7]')" = 1 ] || fail "$output"
  [ "$(field "$output" '.[8] | index("second")')" != null ] || fail "$output"
  [ "$(rcli zscore 'dlock:{sp}:waiters' w1)" = "" ] || fail "w1 still registered"
  [ "$(rcli zscore 'dlock:{sp}:writers' w1)" = "" ] || fail "w1 still a writer"
  # The newest waits on, and takes the lock once free.
  run -0 try sp t2 30000 w2 wait 0 0 0 1 1
  [ "$(field "$output" '.[0]')" = 0 ] && [ "$(field "$output" '.[7]')" = 0 ] || fail "$output"
  run -0 release sp holder
  run -0 try sp t2 30000 w2 wait 0 0 0 1 1
  [ "$(field "$output" '.[0]')" = 1 ] || fail "$output"
  [ "$(rcli exists 'dlock:{sp}:newest')" = 0 ]
}

@test "another tenant's sibling records: a bogus replace record, a huge delay, a far hold_until" {
  # A replace record that is no dlock record: ignored, the holder renews.
  run -0 try bogus t1 30000 w1 once
  rcli hset 'dlock:{bogus}:holder' replaced_by '{not json' >/dev/null
  run -0 renew bogus t1
  assert_output 1
  rcli hset 'dlock:{bogus}:holder' replaced_by "[$(head -c 6000 /dev/zero | tr '\0' 1)]" >/dev/null
  run -0 renew bogus t1
  assert_output 1
  # A huge delay on a free key: status and acquire answer at once; release --force clears it.
  rcli hset 'dlock:{huge}:holder' host h pid 1 user u command c delay_ms 999999999999 >/dev/null
  rcli pexpire 'dlock:{huge}:holder' 99999999999 >/dev/null
  run -1 timeout 5 "$DLOCK" status huge
  run -75 timeout 5 "$DLOCK" run -n -k huge -- true
  run -0 "$DLOCK" release --force -k huge
  run -0 "$DLOCK" run -n -k huge -- true
  # A delay record without expiry, or longer-lived than the delay it names: not dlock's.
  rcli hset 'dlock:{forever}:holder' delay_ms 1000 >/dev/null
  run -0 timeout 5 "$DLOCK" run -n -k forever -- true
  rcli hset 'dlock:{forever}:holder' delay_ms 1000 >/dev/null
  rcli pexpire 'dlock:{forever}:holder' 50000 >/dev/null
  run -0 timeout 5 "$DLOCK" run -n -k forever -- true
  # Malformed policy fields: ignored.
  run -0 try mal t1 30000 w1 once
  rcli hset 'dlock:{mal}:holder' hold_until -5 delay_ms 1e9 >/dev/null
  run -0 renew mal t1
  assert_output 1
  run -0 release mal t1
  assert_output 1
  # A far-future hold_until: status answers, release --force frees it.
  run -0 try far t1 30000 w1 once
  rcli hset 'dlock:{far}:holder' hold_until 9999999999999 >/dev/null
  run -0 release far t1
  run -0 timeout 5 "$DLOCK" status far
  run -75 timeout 5 "$DLOCK" run -n -k far -- true
  run -0 "$DLOCK" release --force -k far
  run -0 "$DLOCK" run -n -k far -- true
  # A newest-waiter record of another type: the waiter waits on.
  rcli set 'dlock:{odd}:newest' junk >/dev/null
  run -0 try odd holder 30000 h wait
  run -0 try odd t1 30000 w1 wait 0 0 0 1 1
  [ "$(field "$output" '.[7]')" = 0 ] || fail "$output"
}

# every_key_expires KEY: each of the lock's keys on the server has a time to live.
every_key_expires() {
  local key
  for key in $(rcli --scan --pattern "dlock:{$1}*"); do
    [ "$(rcli pttl "$key")" -gt 0 ] || fail "$key does not expire"
  done
}

@test "kill -9 of a holder with every policy: closed until hold_until, then the lock-delay; every key expires" {
  start_bg holder "$DLOCK" run -k k9 -t 2s --min-hold 3s --lock-delay 2s --note 'killed' \
    -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  start_bg newest "$DLOCK" run -k k9 --supersede -w 30s -- touch "$T/newest"
  wait_for "[ \"\$(rcli exists 'dlock:{k9}:newest')\" = 1 ]" 10
  { kill -KILL "$holder" && wait "$holder"; } 2>/dev/null || true
  local killed
  killed=$(now_ms)
  every_key_expires k9
  run -75 "$DLOCK" run -n -k k9 -- true
  wait "$BG_PID"
  local took=$(($(now_ms) - killed))
  echo "the waiter ran $took ms after the kill"
  [ -e "$T/newest" ]
  [ "$took" -ge 4000 ] # hold_until (3 s from the start) + the 2 s delay, less the start-up
  every_key_expires k9
}

@test "release --force of a holder with a short lease: it stops (76), the lock-delay runs from the release" {
  start_bg holder "$DLOCK" run -k rf -t 3s --lock-delay 4s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID st=0
  wait_for "[ -s '$T/cmd.pid' ]" 10
  run -0 "$DLOCK" release --force -k rf
  local forced
  forced=$(now_ms)
  wait "$holder" || st=$?
  [ "$st" -eq 76 ]
  run -75 "$DLOCK" -v run -n -k rf -- true
  assert_output --partial 'lock-delay'
  run -1 --separate-stderr "$DLOCK" status rf --json
  json_ok 'assert d["held"] is False and 0 < d["delay_ms"] <= 4000, d'
  run -0 "$DLOCK" run -k rf -w 10s -- true
  [ $(($(now_ms) - forced)) -ge 3500 ]
  # A clean release of the next holder leaves no delay.
  run -0 "$DLOCK" run -k rf --lock-delay 30s -- true
  run -0 "$DLOCK" run -n -k rf -- true
}
