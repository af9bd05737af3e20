#!/usr/bin/env bats
# Coordination without holding anything: `dlock wait` (until a lock is free), `dlock barrier`
# (N parties, reusable generations) and `dlock latch` (a count-down latch). Each party records
# its exit status and the moment it returned (µs, EPOCHREALTIME) itself, so the timing checks
# measure dlock and not the test's polling. Redis keys read with rcli: dlock:{K}:watchers,
# :barrier:arrivals, :latch (see keys.hpp).

load ../lib/helpers

# party NAME SUBCOMMAND ARGS...: a background `dlock SUBCOMMAND ARGS...` that writes
# "STATUS MICROSECONDS" to $T/NAME.end when it returns (start_bg NAME: BG_PID).
party() {
  local name=$1
  shift
  start_bg "$name" bash -c '"$@"; rc=$?; echo "$rc ${EPOCHREALTIME/[.,]/}" >"$T/'"$name"'.end"' \
    _ "$DLOCK" "$@"
}

# ended NAME: whether the party NAME has returned.
ended() { [ -s "$T/$1.end" ]; }
# status_of NAME / ended_at NAME: its exit status / when it returned (µs since the epoch).
status_of() { cut -d' ' -f1 "$T/$1.end"; }
ended_at() { cut -d' ' -f2 "$T/$1.end"; }
now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

# client_calls: the scripts and BLPOPs clients sent since `config resetstat` (a BLPOP counts
# when it is sent).
client_calls() {
  rcli info commandstats | tr -d '\r' | grep -E '^cmdstat_(evalsha|eval|blpop):' \
    | sed 's/^[^:]*:calls=\([0-9]*\).*/\1/' | paste -sd+ | bc
}

# ---------------------------------------------------------------------------------------------
# dlock wait

@test "wait on a free lock returns 0 at once and takes nothing" {
  run -0 "$DLOCK" wait -k free
  [ "$(rcli exists 'dlock:{free}')" = 0 ]
  run -1 "$DLOCK" status free
}

@test "wait returns within a few ms of the release, with a bounded number of commands" {
  run -0 "$DLOCK" acquire -k rel -t 30s
  local token=$output
  party w wait -k rel -w 20s
  wait_for '[ "$(rcli zcard "dlock:{rel}:watchers")" = 1 ]'
  rcli config resetstat >/dev/null
  sleep 3
  ended w && { echo "wait returned while the lock was held"; return 1; }
  local before after
  before=$(now_us)
  run -0 "$DLOCK" release -k rel --token "$token"
  after=$(now_us)
  wait_for 'ended w'
  [ "$(status_of w)" = 0 ]
  local woke=$(( $(ended_at w) - before ))
  echo "release took $(( (after - before) / 1000 )) ms; wait returned $(( woke / 1000 )) ms after it began"
  # counted from the release's return, not its start: starting a process (an ASan build on a
  # slow VM: 0.7 s) is not the wake-up's latency
  [ $(( $(ended_at w) - after )) -lt 100000 ]
  # the waiter: one check after the wake-up; the release: one script (EVALSHA, and EVAL
  # after the NOSCRIPT the setup's SCRIPT FLUSH causes), and its history event (one more).
  local calls
  calls=$(client_calls)
  echo "commands while waiting 3 s and waking: $calls"
  [ "$calls" -le 6 ]
  [ "$(rcli zcard "dlock:{rel}:watchers")" = 0 ]
}

@test "waiters are not serialized: one release lets every waiter go at once" {
  hold_until many "$T/go"
  local i
  for i in 1 2 3 4; do party "w$i" wait -k many -w 20s; done
  wait_for '[ "$(rcli zcard "dlock:{many}:watchers")" = 4 ]'
  local before
  before=$(now_us)
  touch "$T/go"
  wait_for 'ended w1 && ended w2 && ended w3 && ended w4'
  for i in 1 2 3 4; do
    [ "$(status_of "w$i")" = 0 ]
    echo "w$i returned $(( ($(ended_at "w$i") - before) / 1000 )) ms after the holder was let go"
    [ $(( $(ended_at "w$i") - before )) -lt 1000000 ]
  done
}

@test "wait counts a release even when a lock waiter takes the lock at once" {
  hold_until handover "$T/go"
  # a lock waiter, which takes the key the moment it is released, and keeps it for 4 s
  start_bg next "$DLOCK" run -k handover -w 20s -- sleep 4
  wait_for '[ "$(waiters handover)" = 1 ]'
  party w wait -k handover -w 20s
  wait_for '[ "$(rcli zcard "dlock:{handover}:watchers")" = 1 ]'
  local before
  before=$(now_us)
  touch "$T/go"
  wait_for 'ended w' 3
  [ "$(status_of w)" = 0 ]
  echo "wait returned $(( ($(ended_at w) - before) / 1000 )) ms after the first holder was let go"
  # the second holder still has it: the wait did not wait for it
  run -0 "$DLOCK" status handover
}

@test "a holder that dies without releasing: wait returns when its lease ends" {
  start_bg hold "$DLOCK" run -k dead -t 2s -- sleep 30
  local holder=$BG_PID
  wait_for "key_exists dead"
  party w wait -k dead -w 20s
  wait_for '[ "$(rcli zcard "dlock:{dead}:watchers")" = 1 ]'
  local killed_at
  killed_at=$(now_us)
  kill -KILL "$holder"
  wait_for 'ended w' 5
  [ "$(status_of w)" = 0 ]
  local after=$(( ($(ended_at w) - killed_at) / 1000 ))
  echo "wait returned ${after} ms after the holder was killed (ttl 2s)"
  [ "$after" -le 2500 ]
}

@test "wait for a --shared lock returns once the last reader is gone" {
  start_bg r1 "$DLOCK" run -k rd -s -- sleep 1
  start_bg r2 "$DLOCK" run -k rd -s -- sleep 2
  wait_for '[ "$(rcli zcard "dlock:{rd}:holders")" = 2 ]'
  local start
  start=$(now_us)
  run -0 "$DLOCK" wait -k rd -w 10s
  local took=$(( ($(now_us) - start) / 1000 ))
  echo "wait took ${took} ms (readers of 1 s and 2 s)"
  [ "$took" -ge 1500 ]
  [ "$(rcli zcard "dlock:{rd}:holders")" = 0 ]
}

@test "wait --wait runs out: 75, or -E; the waiter is forgotten" {
  hold busy 10
  run -75 "$DLOCK" wait -k busy -w 300ms
  run -3 "$DLOCK" wait -k busy -w 200ms -E 3
  run -75 --separate-stderr "$DLOCK" -v wait -k busy -w 200ms
  [[ $stderr == *"gave up waiting for lock 'busy' to be free after 200ms"* ]]
  [ "$(rcli zcard "dlock:{busy}:watchers")" = 0 ]
}

@test "a signal ends wait with 128+N" {
  hold sig 10
  party w wait -k sig
  wait_for '[ "$(rcli zcard "dlock:{sig}:watchers")" = 1 ]'
  kill -TERM "$(pgrep -P "$BG_PID")"
  wait_for 'ended w'
  [ "$(status_of w)" = 143 ]
}

# ---------------------------------------------------------------------------------------------
# dlock barrier

# barrier_round KEY ROUND: 5 parties started 0.5 s apart (over 2 s); all must return 0 within
# 50 ms of each other (200 ms for an ASan build, whose exit runs a leak check), none before
# the last one started.
barrier_round() {
  local key=$1 round=$2 i last_start first=0 last=0 at
  for i in 1 2 3 4 5; do
    [ "$i" = 5 ] && last_start=$(now_us)
    party "b$round-$i" barrier -k "$key" --parties 5 -w 20s
    [ "$i" = 5 ] || sleep 0.5
  done
  wait_for "ended b$round-1 && ended b$round-2 && ended b$round-3 && ended b$round-4 && ended b$round-5" 10
  for i in 1 2 3 4 5; do
    [ "$(status_of "b$round-$i")" = 0 ]
    at=$(ended_at "b$round-$i")
    [ "$at" -ge "$last_start" ]
    if [ "$first" = 0 ] || [ "$at" -lt "$first" ]; then first=$at; fi
    if [ "$at" -gt "$last" ]; then last=$at; fi
  done
  echo "round $round: all 5 returned within $(( (last - first) / 1000 )) ms of each other," \
    "$(( (last - last_start) / 1000 )) ms after the last party started"
  local spread=50000
  [ -z "${ASAN_OPTIONS:-}" ] || spread=200000
  [ $(( last - first )) -le "$spread" ]
}

@test "a barrier of 5 parties started over 2 s: all return together, twice in a row" {
  barrier_round gen 1
  barrier_round gen 2
  [ "$(rcli zcard "dlock:{gen}:barrier:arrivals")" = 0 ]
}

@test "arrivals beyond N wait for the next generation" {
  local i
  for i in 1 2 3 4 5; do party "p$i" barrier -k over --parties 3 -w 20s; done
  # three of them trip the first generation; the other two wait for a third
  wait_for '[ "$(ls "$T"/p*.end 2>/dev/null | wc -l)" = 3 ]'
  sleep 0.3
  [ "$(ls "$T"/p*.end | wc -l)" = 3 ]
  [ "$(rcli zcard "dlock:{over}:barrier:arrivals")" = 2 ]
  run -0 "$DLOCK" barrier -k over --parties 3 -w 5s
  wait_for 'ended p1 && ended p2 && ended p3 && ended p4 && ended p5'
  for i in 1 2 3 4 5; do [ "$(status_of "p$i")" = 0 ]; done
}

@test "a barrier waiter that times out withdraws its arrival and does not count" {
  run -75 "$DLOCK" barrier -k late --parties 3 -w 500ms
  [ "$(rcli zcard "dlock:{late}:barrier:arrivals")" = 0 ]
  # had the first counted, these two would make three
  party b1 barrier -k late --parties 3 -w 1s
  party b2 barrier -k late --parties 3 -w 1s
  wait_for 'ended b1 && ended b2'
  [ "$(status_of b1)" = 75 ]
  [ "$(status_of b2)" = 75 ]
  run -9 "$DLOCK" barrier -k late --parties 2 -w 300ms -E 9
}

@test "a barrier party ended by a signal withdraws its arrival" {
  party b barrier -k sig --parties 2
  wait_for '[ "$(rcli zcard "dlock:{sig}:barrier:arrivals")" = 1 ]'
  kill -TERM "$(pgrep -P "$BG_PID")"
  wait_for 'ended b'
  [ "$(status_of b)" = 143 ]
  [ "$(rcli zcard "dlock:{sig}:barrier:arrivals")" = 0 ]
}

@test "a party with another --parties while a barrier is in progress: 64, nothing registered" {
  party b barrier -k mix --parties 3 -w 10s
  wait_for '[ "$(rcli zcard "dlock:{mix}:barrier:arrivals")" = 1 ]'
  run -64 "$DLOCK" barrier -k mix --parties 2 -w 1s
  assert_output --partial "barrier 'mix' is in progress with --parties 3"
  [ "$(rcli zcard "dlock:{mix}:barrier:arrivals")" = 1 ]
}

# ---------------------------------------------------------------------------------------------
# dlock latch

@test "a latch of 12 counted down by 12 processes releases 3 waiters" {
  run -0 "$DLOCK" latch -k fan --count 12 --json
  json_ok 'assert d == {"version": 1, "key": "fan", "count": 12}, d'
  local i
  for i in 1 2 3; do party "w$i" latch -k fan --wait 30s; done
  wait_for '[ "$(rcli zcard "dlock:{fan}:latch:waiters")" = 3 ]'
  local downs=()
  for i in $(seq 11); do
    "$DLOCK" latch -k fan --down --json >"$T/down$i.json" &
    downs+=($!)
  done
  wait "${downs[@]}"
  sleep 0.3
  local w
  for w in w1 w2 w3; do
    if ended "$w"; then
      echo "$w returned ($(cat "$T/$w.end"), $(cat "$T/$w.err")) before the count reached zero"
      return 1
    fi
  done
  [ "$(rcli get 'dlock:{fan}:latch')" = 1 ]
  local before
  before=$(now_us)
  "$DLOCK" latch -k fan --down --json >"$T/down12.json"
  wait_for 'ended w1 && ended w2 && ended w3'
  for i in 1 2 3; do
    [ "$(status_of "w$i")" = 0 ]
    echo "w$i returned $(( ($(ended_at "w$i") - before) / 1000 )) ms after the last count-down began"
    [ $(( $(ended_at "w$i") - before )) -lt 1000000 ]
  done
  # every count-down saw its own count: 11 down to 0
  run -0 bash -c "cat '$T'/down*.json | sed 's/.*\"count\":\([0-9-]*\).*/\1/' | sort -n | paste -sd' '"
  assert_output "0 1 2 3 4 5 6 7 8 9 10 11"
  # at zero it stays there; a late waiter passes at once
  run -0 "$DLOCK" latch -k fan --down
  [ "$(rcli get 'dlock:{fan}:latch')" = 0 ]
  run -0 "$DLOCK" latch -k fan --wait 1s
}

@test "a latch expires (default 24h, --expire D); counting down an unset latch is 1" {
  run -0 "$DLOCK" latch -k day --count 2
  local pttl
  pttl=$(rcli pttl 'dlock:{day}:latch')
  [ "$pttl" -gt $(( 24 * 3600 * 1000 - 60000 )) ]
  [ "$pttl" -le $(( 24 * 3600 * 1000 )) ]
  run -0 "$DLOCK" latch -k short --count 2 --expire 300ms
  sleep 0.5
  run -1 "$DLOCK" latch -k short --down
  assert_output --partial "latch 'short' is not set"
  run -1 "$DLOCK" latch -k never --down
}

@test "latch --wait: runs out (75, -E), waits for a latch set later, --count 0 releases at once" {
  run -0 "$DLOCK" latch -k t --count 1
  run -75 "$DLOCK" latch -k t --wait 300ms
  run -5 "$DLOCK" latch -k t -w 200ms -E 5
  [ "$(rcli zcard "dlock:{t}:latch:waiters")" = 0 ]
  # not set yet: the waiter waits for it to be set and to reach zero
  party w latch -k later --wait 20s
  wait_for '[ "$(rcli zcard "dlock:{later}:latch:waiters")" = 1 ]'
  run -0 "$DLOCK" latch -k later --count 1
  sleep 0.3
  ended w && { echo "returned before the count reached zero"; return 1; }
  local before
  before=$(now_us)
  run -0 "$DLOCK" latch -k later --count 0
  wait_for 'ended w'
  [ "$(status_of w)" = 0 ]
  echo "returned $(( ($(ended_at w) - before) / 1000 )) ms after --count 0"
}

@test "latch usage errors: 64 with one line" {
  run -64 "$DLOCK" latch -k u
  assert_output --partial "exactly one of --count N, --down, --wait"
  run -64 "$DLOCK" latch -k u --count 1 --down
  run -64 "$DLOCK" latch -k u --down --expire 1h
  assert_output --partial "--expire needs --count"
  run -64 "$DLOCK" latch -k u --wait --json
  run -64 "$DLOCK" latch -k u --count -1
  run -64 "$DLOCK" latch -k u --count 1 --expire 0
  run -64 "$DLOCK" latch -k u -k v --down
  assert_output --partial "latch takes one --key"
  run -64 "$DLOCK" latch --down
  run -64 "$DLOCK" barrier -k u
  assert_output --partial "--parties is required"
  run -64 "$DLOCK" barrier -k u --parties 0
  run -64 "$DLOCK" wait -k u -w ''
  run -64 "$DLOCK" wait -k u -k v
  # nothing written for these keys (another test's straggler may write its own: listed, not counted)
  local keys
  keys=$(rcli --scan | sort)
  [ -z "$keys" ] || echo "keys on the server: $keys"
  ! grep -qF -e '{u}' -e '{v}' <<<"$keys"
}
