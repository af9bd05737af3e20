#!/usr/bin/env bats
# dlock elect and dlock leader on one Redis server, the store's side: the candidate's value in
# the holder record, the leader watchers' registrations and wake-ups (leader.lua, acquire.lua,
# release.lua), and what leader answers when another tenant of the server writes the holder
# record. The shared scenarios (three candidates, kill -9, --watch's lines) are in
# tests/stores/store.bats.

load ../../lib/helpers

# A leader watcher asks again on its own after 30 s (leader's block cap): a line printed well
# within that was woken by the store.
WOKEN_WITHIN=15

# watch_leader NAME KEY [leader options...]: a background `dlock leader KEY --watch`
# (start_bg NAME); returns once it printed its first line.
watch_leader() {
  local name=$1 key=$2
  shift 2
  start_bg "$name" "$DLOCK" leader "$key" --watch "$@"
  started "$name" "[ -s '$T/$name.out' ]"
}

# lines NAME: how many lines the background NAME printed.
lines() { wc -l <"$T/$1.out"; }

# registered ZSET: how many ids the lock e's zset ZSET holds.
registered() { rcli zcard "dlock:{e}:$1"; }

@test "--value is kept in the holder record and shown by leader and status; a plain run writes none" {
  start_bg cand "$DLOCK" elect -k e --value 'http://10.0.0.7:8080 v1.2 ü' -- sleep 30
  started cand "key_exists e"
  [ "$(rcli hget 'dlock:{e}:holder' value)" = 'http://10.0.0.7:8080 v1.2 ü' ]
  run -0 "$DLOCK" leader e
  assert_output --regexp '^http://10\.0\.0\.7:8080 v1\.2 ü \(.* pid [0-9]+, since .*, term [0-9]+\)$'
  run -0 "$DLOCK" leader --json e
  json_ok 'assert d["leader"] and d["value"] == "http://10.0.0.7:8080 v1.2 ü", d'
  run -0 "$DLOCK" status --json e
  json_ok 'assert d["holder"]["value"] == "http://10.0.0.7:8080 v1.2 ü", d'
  # The term is the holder's fencing token.
  [ "$(field_of "$("$DLOCK" leader --json e)" term)" = "$(rcli hget 'dlock:{e}:holder' fence)" ]
  kill "$BG_PID"
  wait_for "! key_exists e" 10
  run -1 "$DLOCK" leader e
  assert_output 'no leader'
  # Not a candidate: no value field, and its acquisition pushes no leader wake-up.
  "$DLOCK" run -k e -- sh -c "redis-cli -s '$REDIS_SOCK' hexists 'dlock:{e}:holder' value >'$T/has'"
  [ "$(cat "$T/has")" = 0 ]
}

# field_of JSON NAME: a top-level field of a JSON document.
field_of() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

@test "another tenant's value larger than dlock writes: not dlock's, leader exits 0 with one sane line, no crash" {
  "$DLOCK" acquire -k e --ttl 30s >/dev/null
  rcli hset 'dlock:{e}:holder' value "$(head -c 300 /dev/zero | tr '\0' x)" >/dev/null
  run -0 "$DLOCK" leader e
  assert_output '- (not dlock)'
  refute_output --partial xxxx
  [ "${#lines[@]}" -eq 1 ]
  run -0 "$DLOCK" leader --json e
  json_ok 'assert d["leader"] and "x" * 10 not in d["value"], d'
  run -0 "$DLOCK" status e
  assert_output --partial 'not a dlock holder'
  # --watch prints it once and keeps watching (its term: 1, the record names a fence still).
  watch_leader w e
  sleep 0.5
  alive "$BG_PID"
  [ "$(lines w)" = 1 ]
  grep -qxF -- '- (not dlock)' "$T/w.out"
  # A fence that is no number: still a holder, not dlock's, no term shown.
  rcli hset 'dlock:{e}:holder' fence 12ab value short >/dev/null
  run -0 "$DLOCK" leader e
  assert_output '- (not dlock)'
  refute_output --partial 'term'
  run -0 "$DLOCK" release --force -k e
  started w "[ \"\$(tail -n 1 '$T/w.out')\" = 'no leader' ]"
}

@test "a malformed holder record (another type, oversized, or without a lock key): no crash, 0 or 1" {
  rcli set 'dlock:{e}' foreign >/dev/null
  rcli set 'dlock:{e}:holder' 'not a hash' >/dev/null
  run -0 "$DLOCK" leader e
  assert_output '- (not dlock)'
  run -0 "$DLOCK" leader --json e
  json_ok 'assert d["leader"] and d["term"] is None, d'
  watch_leader w e
  grep -qxF -- '- (not dlock)' "$T/w.out"
  # A record larger than dlock writes, in the fields it reads.
  rcli del 'dlock:{e}:holder' >/dev/null
  rcli hset 'dlock:{e}:holder' command "$(head -c 5000 /dev/zero | tr '\0' y)" >/dev/null
  run -0 "$DLOCK" leader e
  assert_output '- (not dlock)'
  # A holder record and no lock key: nobody leads.
  rcli del 'dlock:{e}' >/dev/null
  run -1 "$DLOCK" leader e
  assert_output 'no leader'
  # The watcher was not woken (nothing dlock announces), but its term ended with the key:
  # it sees so at its next look, and is still there.
  alive "$BG_PID"
}

@test "leader --watch: a candidate's acquisition and the release wake every watcher, registered among the leader watchers only" {
  watch_leader w1 e
  watch_leader w2 e
  assert_equal "$(cat "$T/w1.out")" 'no leader'
  # Free: both among the leader watchers, none among dlock wait's.
  wait_for "[ \"\$(registered leader:watchers)\" = 2 ]"
  [ "$(registered watchers)" = 0 ]
  local start
  start=$(now_ms)
  start_bg cand "$DLOCK" elect -k e --value first -- sh -c "until [ -e '$T/stop' ]; do sleep 0.02; done"
  local cand=$BG_PID
  wait_for "grep -q '^first ' '$T/w1.out' && grep -q '^first ' '$T/w2.out'" "$WOKEN_WITHIN"
  echo "both printed the new leader after $(($(now_ms) - start)) ms"
  # Held: still among the leader watchers (not dlock wait's), woken by the release.
  wait_for "[ \"\$(registered leader:watchers)\" = 2 ]"
  [ "$(registered watchers)" = 0 ]
  start=$(now_ms)
  touch "$T/stop"
  wait "$cand"
  wait_for "[ \"\$(tail -n 1 '$T/w1.out')\" = 'no leader' ] && [ \"\$(tail -n 1 '$T/w2.out')\" = 'no leader' ]" "$WOKEN_WITHIN"
  echo "both printed no leader after $(($(now_ms) - start)) ms"
  # Each change once.
  [ "$(lines w1)" = 3 ] && [ "$(lines w2)" = 3 ]
  # A plain run leads too: its acquisition and release wake them; no wake-up is left over.
  wait_for "[ \"\$(registered leader:watchers)\" = 2 ]"
  "$DLOCK" run -k e -- true
  wait_for "[ \"\$(rcli llen 'dlock:{e}:leader:wake')\" = 0 ]" 5
}

@test "a forced release wakes the watchers; a leader watcher's registration is bounded by its block" {
  "$DLOCK" acquire -k e --ttl 60s >/dev/null
  watch_leader w e
  wait_for "[ \"\$(registered leader:watchers)\" = 1 ]"
  # Registered until 2 s after its block (the lease left, at most leader's 30 s cap).
  local score now
  score=$(rcli zrange 'dlock:{e}:leader:watchers' 0 0 withscores | tail -n 1)
  now=$(now_ms)
  [ "$score" -gt "$now" ] && [ "$score" -le $((now + 33000)) ] || fail "registered until $score (now $now)"
  [ "$(rcli pttl 'dlock:{e}:leader:watchers')" -le 33000 ]
  run -0 "$DLOCK" release --force -k e
  started w "[ \"\$(tail -n 1 '$T/w.out')\" = 'no leader' ]" "$BG_PID" "$WOKEN_WITHIN"
  # kill -9: nothing withdraws it (a leader watcher never does); it lapses with its block.
  wait_for "[ \"\$(registered leader:watchers)\" = 1 ]"
  kill -9 "$BG_PID"
  score=$(rcli zrange 'dlock:{e}:leader:watchers' 0 0 withscores | tail -n 1)
  [ "$score" -le $(($(now_ms) + 33000)) ]
  [ "$(rcli pttl 'dlock:{e}:leader:watchers')" -gt 0 ]
}

@test "a lease that ends unannounced: the watcher's block ends with it" {
  # The holder's lease ends on the server without a release (as after kill -9 of its dlock).
  "$DLOCK" acquire -k e --ttl 2s >/dev/null
  watch_leader w e
  [ "$(lines w)" = 1 ]
  started w "[ \"\$(tail -n 1 '$T/w.out')\" = 'no leader' ]" "$BG_PID" "$WOKEN_WITHIN"
}

@test "one release wakes dlock wait's watchers and the leader watchers alike, one wake-up each" {
  start_bg cand "$DLOCK" elect -k e -t 60s --value only -- sh -c "until [ -e '$T/stop' ]; do sleep 0.02; done"
  local cand=$BG_PID
  started cand "key_exists e"
  watch_leader w1 e
  local w1=$BG_PID
  watch_leader w2 e
  local w2=$BG_PID
  start_bg waiter "$DLOCK" wait -k e -w 50s
  local waiter=$BG_PID
  # The waiter among the watchers of the held key, the two leader watchers among their own
  # (the lease, 60 s, bounds none of them here).
  wait_for "[ \"\$(registered watchers)\" = 1 ] && [ \"\$(registered leader:watchers)\" = 2 ]" 10
  local start
  start=$(now_ms)
  touch "$T/stop"
  wait "$cand"
  wait "$waiter"
  started w1 "[ \"\$(tail -n 1 '$T/w1.out')\" = 'no leader' ]" "$w1" "$WOKEN_WITHIN"
  started w2 "[ \"\$(tail -n 1 '$T/w2.out')\" = 'no leader' ]" "$w2" "$WOKEN_WITHIN"
  local took=$(($(now_ms) - start))
  echo "all three woken within $took ms"
  [ "$took" -lt $((WOKEN_WITHIN * 1000)) ]
  # No wake-up left over for anyone.
  wait_for "[ \"\$(rcli llen 'dlock:{e}:watch')\" = 0 ] && [ \"\$(rcli llen 'dlock:{e}:leader:wake')\" = 0 ]" 5
}

@test "a leader watcher that goes through a hand-over never takes a dlock wait watcher's wake-up" {
  start_bg a "$DLOCK" elect -k e --value a -- sh -c "until [ -e '$T/a.go' ]; do sleep 0.02; done"
  started a "key_exists e"
  watch_leader w e
  local w=$BG_PID
  # A dlock wait watcher registered but not blocked yet (one on a slow link, say): its wake-up
  # waits on the watch list until it asks.
  rcli zadd 'dlock:{e}:watchers' 99999999999999 slow-waiter >/dev/null
  start_bg b "$DLOCK" elect -k e --value b -- sh -c "until [ -e '$T/b.go' ]; do sleep 0.02; done"
  wait_for "[ \"\$(rcli zcard 'dlock:{e}:queue')\" = 1 ]" 10
  touch "$T/a.go"
  # a's release wakes the leader watcher and the slow waiter; b takes over; the watcher reads
  # and registers again while b holds (it used to register on the watch list then, and took
  # the slow waiter's wake-up at once)
  started w "grep -q '^b ' '$T/w.out'" "$w" "$WOKEN_WITHIN"
  sleep 0.5
  cat "$T/w.out"
  [ "$(rcli llen 'dlock:{e}:watch')" = 1 ]
  touch "$T/b.go"
}

@test "a --limit lock's leading slot holder leaves while another stays: the release wakes the leader watcher" {
  start_bg s1 "$DLOCK" run -k e --limit 2 -t 60s -- sh -c "until [ -e '$T/s1.go' ]; do sleep 0.02; done"
  wait_for "[ \"\$(rcli zcard 'dlock:{e}:holders')\" = 1 ]" 10
  start_bg s2 "$DLOCK" run -k e --limit 2 -t 60s -- sh -c "until [ -e '$T/s2.go' ]; do sleep 0.02; done"
  wait_for "[ \"\$(rcli zcard 'dlock:{e}:holders')\" = 2 ]" 10
  watch_leader w e
  local w=$BG_PID first
  first=$(sed -n 's/.*term \([0-9]*\))$/\1/p' "$T/w.out")
  touch "$T/s1.go"
  # the block of a watcher of slot holders runs to the soonest lease end (here 30 s, the cap)
  started w "[ \"\$(lines w)\" -ge 2 ]" "$w" "$WOKEN_WITHIN"
  cat "$T/w.out"
  [ "$(tail -n 1 "$T/w.out" | sed -n 's/.*term \([0-9]*\))$/\1/p')" -gt "$first" ]
  touch "$T/s2.go"
}
