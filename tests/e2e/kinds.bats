#!/usr/bin/env bats
# Kinds of lock: -s/--shared (a read/write lock whose waiting writers keep new readers out),
# --limit N (a semaphore), several -k at once (all or none, canonical order), a nested run on
# a key its caller holds, and mixing kinds on one key (refused, 64). Overlaps are caught by
# witnesses the commands keep themselves (a counter in Redis, marker files, mkdir); the store's
# own keys are read with rcli: dlock:{K}:holders (token -> lease end, server ms), :slots, :kind.

load ../lib/helpers

# slot_holders KEY: how many --shared or --limit holders the key has in Redis.
slot_holders() { rcli zcard "dlock:{$1}:holders"; }

# slot_token KEY PID: the token of the --shared or --limit holder of KEY that is dlock PID.
slot_token() {
  rcli hgetall "dlock:{$1}:slots" | paste - - | awk -F '\t' -v pid="\"pid\",\"$2\"" 'index($2, pid) { print $1 }'
}

# lease_left KEY TOKEN: the ms left of a slot's lease, on the server's clock.
lease_left() {
  rcli eval "local t = redis.call('TIME')
    local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
    if not ends then return -1 end
    return tonumber(ends) - (t[1] * 1000 + math.floor(t[2] / 1000))" 1 "dlock:{$1}:holders" "$2"
}

# ---------------------------------------------------------------------------------------------
# --shared

@test "flock's shared/exclusive scenario: a shared holder; exclusive -n 75, shared -n 0, exclusive -w 5 waits it out" {
  local start
  start=$(now_ms)
  start_bg reader "$DLOCK" run -k K -s -- sleep 3
  local reader=$BG_PID
  wait_for '[ "$(slot_holders K)" = 1 ]'
  run -0 rcli get 'dlock:{K}:kind'
  assert_output shared

  run -75 "$DLOCK" run -k K -n -- touch "$T/exclusive-ran"
  [ ! -e "$T/exclusive-ran" ]
  run -0 "$DLOCK" run -k K -s -n -- echo second reader
  assert_output 'second reader'

  run -0 "$DLOCK" run -k K -w 5 -- sh -c 'date +%s%3N >"$0"' "$T/got"
  local took=$(( $(cat "$T/got") - start ))
  echo "the exclusive run got the lock ${took} ms after the shared holder started"
  [ "$took" -ge 2500 ]
  [ "$took" -lt 5000 ]
  local rc=0
  wait "$reader" || rc=$?
  [ "$rc" -eq 0 ]
}

@test "a writer is not starved by an overlapping stream of readers, and no reader runs while it holds" {
  mkdir "$T/in"
  # 14 readers of 0.6 s, one every 0.3 s: the key is never free of readers for 4 s.
  stream() {
    local i pid failed=0 pids=()
    for i in $(seq 14); do
      date +%s%3N >>"$T/reader-starts"
      "$DLOCK" run -k rw -s -- sh -c '
        mkdir "$0/in/$$"
        [ ! -e "$0/writer" ] || echo "reader $$ got in while the writer held the lock" >>"$0/overlap"
        sleep 0.6
        [ ! -e "$0/writer" ] || echo "reader $$ was inside while the writer held the lock" >>"$0/overlap"
        rmdir "$0/in/$$"' "$T" 3>&- &
      echo $! >>"$T/readers.pid"
      pids+=($!)
      sleep 0.3
    done
    for pid in "${pids[@]}"; do
      wait "$pid" || failed=$((failed + 1))
    done
    echo "$failed" >"$T/readers-failed"
  }
  : >"$T/reader-starts"
  start_bg stream stream
  local stream_pid=$BG_PID
  # In the middle of the stream, with readers overlapping.
  wait_for '[ "$(wc -l <"$T/reader-starts")" -ge 4 ] && [ "$(slot_holders rw)" -ge 1 ]'
  local start
  start=$(now_ms)
  run -0 "$DLOCK" run -k rw -w 10s -- sh -c '
    date +%s%3N >"$0/writer-got"
    touch "$0/writer"
    [ -z "$(ls "$0/in")" ] || echo "the writer got in with readers inside: $(ls "$0/in")" >>"$0/overlap"
    sleep 0.5
    [ -z "$(ls "$0/in")" ] || echo "readers got in while the writer held the lock: $(ls "$0/in")" >>"$0/overlap"
    rm "$0/writer"' "$T"
  local got
  got=$(cat "$T/writer-got")
  echo "the writer waited $((got - start)) ms"
  [ $((got - start)) -lt 2000 ]

  wait_for "gone $stream_pid" 20
  cat "$T/overlap" 2>/dev/null || true
  [ ! -e "$T/overlap" ]
  run -0 cat "$T/readers-failed"
  assert_output 0
  # The stream went on well after the writer got the lock: it did not just run dry.
  local last
  last=$(tail -n 1 "$T/reader-starts")
  echo "the last reader started $((last - got)) ms after the writer got the lock"
  [ $((last - got)) -ge 1000 ]
}

# ---------------------------------------------------------------------------------------------
# --limit N

@test "--limit 3: six workers, never more than 3 inside at once, and 3 at once reached" {
  local i pid pids=()
  for i in 1 2 3 4 5 6; do
    start_bg "worker$i" "$DLOCK" run -k sem --limit 3 -w 20s -- sh -c '
      n=$(redis-cli -s "$REDIS_SOCK" incr inside)
      echo "$n" >>"$0"
      sleep 0.5
      redis-cli -s "$REDIS_SOCK" decr inside >/dev/null' "$T/seen"
    pids+=("$BG_PID")
  done
  local statuses="" rc
  for pid in "${pids[@]}"; do
    rc=0
    wait "$pid" || rc=$?
    statuses+="$rc "
  done
  assert_equal "$statuses" "0 0 0 0 0 0 "
  run -0 cat "$T/seen"
  [ "${#lines[@]}" -eq 6 ]
  local most
  most=$(sort -n "$T/seen" | tail -n 1)
  echo "at most $most inside at once"
  [ "$most" -le 3 ]
  [ "$most" -eq 3 ]
  run -0 rcli get inside
  assert_output 0
}

@test "--limit 2: a SIGKILLed holder's slot is free once its lease ends, not before" {
  start_bg doomed "$DLOCK" run -k crash --limit 2 -t 2s -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/doomed-command.pid"
  local doomed=$BG_PID
  wait_for '[ "$(slot_holders crash)" = 1 ]'
  start_bg other "$DLOCK" run -k crash --limit 2 -t 2s -- sleep 60
  wait_for '[ "$(slot_holders crash)" = 2 ]'
  start_bg sampler sh -c 'while :; do redis-cli -s "$REDIS_SOCK" zcard "dlock:{crash}:holders"; sleep 0.02; done'
  local sampler=$BG_PID
  start_bg third "$DLOCK" run -k crash --limit 2 -t 2s -w 10s -- sh -c 'date +%s%3N >"$0"' "$T/got"
  local third=$BG_PID
  wait_for '[ "$(waiters crash)" = 1 ]'
  local token
  token=$(slot_token crash "$doomed")
  [ -n "$token" ]
  # Right after a renewal, so that none is in flight when it dies.
  wait_for "[ \"\$(lease_left crash $token)\" -ge 1900 ]"
  kill -9 "$doomed"
  local killed
  killed=$(now_ms)
  local lease_end
  lease_end=$(rcli zscore 'dlock:{crash}:holders' "$token")
  # The guard ends the command when dlock dies.
  wait_for "gone $(cat "$T/doomed-command.pid")"

  local rc=0
  wait "$third" || rc=$?
  [ "$rc" -eq 0 ]
  local got
  got=$(cat "$T/got")
  echo "the third got in $((got - killed)) ms after the kill, $((got - lease_end)) ms after the lease ended"
  [ $((got - lease_end)) -ge -100 ]
  [ $((got - lease_end)) -lt 1000 ]
  [ $((got - killed)) -ge 1500 ]
  [ $((got - killed)) -lt 4000 ]
  # The dead holder's slot is gone; the other holder keeps its own.
  run -0 rcli zscore 'dlock:{crash}:holders' "$token"
  assert_output ''
  run -0 slot_holders crash
  assert_output 1

  kill "$sampler"
  wait "$sampler" || true
  run -0 sort -n "$T/sampler.out"
  echo "holders seen: $(uniq -c <<<"$output" | tr -s ' \n' ' ')"
  [ "${#lines[@]}" -ge 10 ]
  [ "${lines[-1]}" -le 2 ]
}

# ---------------------------------------------------------------------------------------------
# nested runs

@test "a nested run on a key its caller holds runs at once under the caller's lease" {
  # Inner output and exit status pass through; without the nesting rule it would wait forever.
  local start
  start=$(now_ms)
  run -0 timeout 10 "$DLOCK" run -k n -- sh -c '
    echo "outer $DLOCK_TOKEN"
    "$DLOCK" run -k n -- sh -c "echo \"inner \$DLOCK_TOKEN\"; exit 7"
    echo "inner exit $?"'
  echo "took $(( $(now_ms) - start )) ms"
  [ $(( $(now_ms) - start )) -lt 3000 ]
  [ "${#lines[@]}" -eq 3 ]
  [[ ${lines[0]} =~ ^outer\ [0-9a-f]{32}$ ]]
  [ "${lines[1]}" = "inner ${lines[0]#outer }" ]
  [ "${lines[2]}" = 'inner exit 7' ]
  run -7 timeout 10 "$DLOCK" run -k n -- "$DLOCK" run -k n -- sh -c 'exit 7'

  # The same for a semaphore slot and a shared lock, asked for as the caller holds them.
  run -0 timeout 10 "$DLOCK" run -k nl --limit 2 -- "$DLOCK" run -k nl --limit 2 -- echo in a slot
  assert_output 'in a slot'
  run -0 timeout 10 "$DLOCK" run -k ns -s -- "$DLOCK" run -k ns -s -- echo shared
  assert_output 'shared'
  # Several keys, all held by the caller.
  run -0 timeout 10 "$DLOCK" run -k a -k b -- "$DLOCK" run -k b -k a -- echo both
  assert_output both
  # Other keys than the caller's are taken as usual.
  run -0 timeout 10 "$DLOCK" run -k n -- "$DLOCK" run -k other -- sh -c 'echo "$DLOCK_KEYS"'
  assert_output other
}

@test "a nested run: exclusive inside a shared caller, or partly the caller's keys, is refused (64)" {
  run -0 --separate-stderr timeout 10 "$DLOCK" run -k n -s -- sh -c '"$DLOCK" run -k n -- touch "$T/ran"; echo "nested exit $?"'
  assert_output 'nested exit 64'
  [[ $stderr == *"holds lock 'n' shared"* ]]
  [ ! -e "$T/ran" ]
  run -0 --separate-stderr timeout 10 "$DLOCK" run -k nl --limit 2 -- sh -c '"$DLOCK" run -k nl -- touch "$T/ran"; echo "nested exit $?"'
  assert_output 'nested exit 64'
  [ ! -e "$T/ran" ]
  run -0 --separate-stderr timeout 10 "$DLOCK" run -k a -- sh -c '"$DLOCK" run -k a -k c -- touch "$T/ran"; echo "nested exit $?"'
  assert_output 'nested exit 64'
  [[ $stderr == *"holds lock 'a' but not 'c'"* ]]
  [ ! -e "$T/ran" ]
  # Nothing was left behind on c.
  run -0 rcli exists 'dlock:{c}'
  assert_output 0
}

@test "a forged DLOCK_TOKEN is ignored: the lock is taken as usual" {
  hold n 30
  local holder_token
  holder_token=$(rcli get 'dlock:{n}')
  DLOCK_TOKEN=forged run -75 "$DLOCK" run -k n -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  DLOCK_TOKEN=forged run -75 "$DLOCK" run -k n -w 300ms -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  # Another lock's real token does not open this one either.
  local other
  other=$("$DLOCK" acquire -k elsewhere -t 30s)
  DLOCK_TOKEN=$other run -75 "$DLOCK" run -k n -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  run -0 rcli get 'dlock:{n}'
  assert_output "$holder_token"

  # With the key free, a forged token runs as any run: under a token of its own.
  DLOCK_TOKEN=forged run -0 "$DLOCK" run -k free -n -- sh -c 'echo "$DLOCK_TOKEN"; redis-cli -s "$REDIS_SOCK" get "dlock:{free}"'
  [ "${#lines[@]}" -eq 2 ]
  [[ ${lines[0]} =~ ^[0-9a-f]{32}$ ]]
  [ "${lines[1]}" = "${lines[0]}" ]
  run -0 rcli exists 'dlock:{free}'
  assert_output 0
}

# ---------------------------------------------------------------------------------------------
# several keys

@test "-k a -k b and -k b -k a, 50 times each at once: no deadlock, no overlap" {
  ab_loop() {
    local i rc
    for i in $(seq 50); do
      rc=0
      "$DLOCK" run -k "$1" -k "$2" -- sh -c 'mkdir "$0" || exit 99; sleep 0.01; rmdir "$0"' "$T/inside" || rc=$?
      echo "$rc" >>"$T/statuses-$1$2"
    done
  }
  local start
  start=$(now_ms)
  run -0 timeout 60 bash -c "$(declare -f ab_loop); ab_loop a b 3>&- & ab_loop b a 3>&- & wait"
  echo "100 runs took $(( $(now_ms) - start )) ms"
  run -0 sort "$T/statuses-ab" "$T/statuses-ba"
  [ "${#lines[@]}" -eq 100 ]
  assert_equal "$(uniq -c <<<"$output" | tr -s ' ')" " 100 0"
  run -0 rcli exists 'dlock:{a}' 'dlock:{b}'
  assert_output 0
}

@test "several keys are all or none: one held elsewhere, -n gets 75 and the others are not left held" {
  hold y 30
  local holder=$BG_PID
  run -75 "$DLOCK" run -k x -k y -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  run -0 rcli exists 'dlock:{x}'
  assert_output 0
  run -75 "$DLOCK" run -k y -k x -w 500ms -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  run -0 rcli exists 'dlock:{x}'
  assert_output 0

  # A waiter for x and y holds neither while it waits; it gets both once y is free.
  start_bg both "$DLOCK" run -k x -k y -w 10s -- sh -c 'echo "$DLOCK_KEYS"'
  local both=$BG_PID
  wait_for '[ "$(waiters y)" = 1 ]'
  run -0 "$DLOCK" run -k x -n -- echo x is free
  assert_output 'x is free'
  kill -TERM "$holder"
  local rc=0
  wait "$both" || rc=$?
  [ "$rc" -eq 0 ]
  run -0 cat "$T/both.out"
  assert_output 'x y'
}

@test "several keys: canonical order in DLOCK_KEYS, one fencing token per key" {
  run -0 "$DLOCK" run -k y -k x -- sh -c 'echo "$DLOCK_KEYS|$DLOCK_KEY|$DLOCK_FENCING_TOKENS|$DLOCK_FENCING_TOKEN"'
  local keys key fences fence
  IFS='|' read -r keys key fences fence <<<"$output"
  assert_equal "$keys" 'x y'
  assert_equal "$key" x
  [[ $fences =~ ^[0-9]+\ [0-9]+$ ]]
  assert_equal "$fence" "${fences% *}"
  # Each is that key's own fencing counter.
  run -0 rcli get 'dlock:{x}:fence'
  assert_equal "$output" "${fences% *}"
  run -0 rcli get 'dlock:{y}:fence'
  assert_equal "$output" "${fences#* }"
  # A key given twice counts once.
  run -0 "$DLOCK" run -k z -k z -- sh -c 'echo "$DLOCK_KEYS|$DLOCK_FENCING_TOKENS"'
  [[ $output =~ ^z\|[0-9]+$ ]]
}

# ---------------------------------------------------------------------------------------------
# mixing kinds

@test "mixing kinds on a key is refused with 64 and a clear message" {
  start_bg sem "$DLOCK" run -k mix --limit 3 -- sleep 30
  wait_for '[ "$(slot_holders mix)" = 1 ]'
  run -64 --separate-stderr "$DLOCK" run -k mix -n -- touch "$T/ran"
  [[ $stderr == *"lock 'mix' is held as a semaphore of 3 (--limit 3), which an exclusive lock cannot share"* ]]
  run -64 --separate-stderr "$DLOCK" run -k mix -s -n -- touch "$T/ran"
  [[ $stderr == *"held as a semaphore of 3 (--limit 3), which a shared lock (--shared) cannot share"* ]]
  run -64 --separate-stderr "$DLOCK" run -k mix --limit 4 -n -- touch "$T/ran"
  [[ $stderr == *"held as a semaphore of 3 (--limit 3), which a semaphore of 4 (--limit 4) cannot share"* ]]
  # Refused at once, also when it would wait.
  local start
  start=$(now_ms)
  run -64 "$DLOCK" run -k mix -w 5s -- touch "$T/ran"
  [ $(( $(now_ms) - start )) -lt 2000 ]
  run -64 "$DLOCK" acquire -k mix -t 10s -n
  [ ! -e "$T/ran" ]
  run -0 "$DLOCK" run -k mix --limit 3 -n -- echo same kind
  assert_output 'same kind'

  hold excl 30
  run -64 --separate-stderr "$DLOCK" run -k excl --limit 2 -n -- touch "$T/ran"
  [[ $stderr == *"lock 'excl' is held as an exclusive lock, which a semaphore of 2 (--limit 2) cannot share"* ]]
  [ ! -e "$T/ran" ]
  # Shared and exclusive are one read/write lock: a plain conflict, not a mix.
  run -75 "$DLOCK" run -k excl -s -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
}

@test "--fair with --shared or --limit, and --shared with --limit, are usage errors (64)" {
  run -64 --separate-stderr "$DLOCK" run -k f --fair --shared -- touch "$T/ran"
  [[ $stderr == *"--fair works with the exclusive lock only, not with --shared"* ]]
  run -64 --separate-stderr "$DLOCK" run -k f --fair --limit 2 -- touch "$T/ran"
  [[ $stderr == *"--fair works with the exclusive lock only, not with --limit"* ]]
  run -64 --separate-stderr "$DLOCK" run -k f -s --limit 2 -- touch "$T/ran"
  [[ $stderr == *"--shared and --limit cannot be used together"* ]]
  run -64 "$DLOCK" run -k f --shared --limit 3 -- touch "$T/ran"
  run -64 "$DLOCK" acquire -k f --fair -s -t 10s
  run -64 "$DLOCK" acquire -k f -s --limit 3 -t 10s
  run -64 "$DLOCK" run -k f --limit 0 -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  run -0 rcli exists 'dlock:{f}' 'dlock:{f}:holders' 'dlock:{f}:kind'
  assert_output 0
}

# ---------------------------------------------------------------------------------------------
# status and list

@test "status and list of a semaphore and of shared holders; their keys are gone after release" {
  local i sem_pids=() rd_pids=()
  for i in 1 2; do
    start_bg "sem$i" "$DLOCK" run -k sem --limit 3 -t 20s -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/release"
    sem_pids+=("$BG_PID")
    start_bg "rd$i" "$DLOCK" run -k rd -s -t 20s -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/release"
    rd_pids+=("$BG_PID")
  done
  wait_for '[ "$(slot_holders sem)" = 2 ] && [ "$(slot_holders rd)" = 2 ]'

  run -0 --separate-stderr "$DLOCK" status sem --json
  [ -z "$stderr" ]
  json_ok '
assert d["held"] is True, d
assert d["kind"] == "limit" and d["limit"] == 3, d
hs = d["holders"]
assert sorted(h["pid"] for h in hs) == sorted(int(p) for p in A), hs
for h in hs:
    assert set(h) == {"host", "pid", "user", "command", "note", "acquired_at", "ttl_ms", "fencing_token"}, h
    assert RFC3339.match(h["acquired_at"]), h
    assert is_int(h["ttl_ms"]) and 0 < h["ttl_ms"] <= 20000, h
    assert is_int(h["fencing_token"]) and h["fencing_token"] >= 1, h
    assert h["command"] == "sh", h
assert len({h["fencing_token"] for h in hs}) == 2, hs
' "${sem_pids[@]}"
  run -0 --separate-stderr "$DLOCK" status sem
  assert_line --regexp '^state: +held by 2 of 3 \(--limit 3\)$'
  assert_line --regexp "^holders: +$(id -un)@$(uname -n) pid (${sem_pids[0]}|${sem_pids[1]}), "

  run -0 "$DLOCK" status rd --json
  json_ok '
assert d["held"] is True and d["kind"] == "shared", d
assert "limit" not in d, d
assert sorted(h["pid"] for h in d["holders"]) == sorted(int(p) for p in A), d["holders"]
' "${rd_pids[@]}"
  run -0 "$DLOCK" status rd
  assert_line --regexp '^state: +held shared by 2$'

  run -0 "$DLOCK" list --json
  json_ok '
locks = {s["key"]: s for s in d["locks"]}
assert sorted(locks) == ["rd", "sem"], sorted(locks)
assert locks["sem"]["kind"] == "limit" and locks["sem"]["limit"] == 3, locks["sem"]
assert locks["rd"]["kind"] == "shared", locks["rd"]
assert len(locks["sem"]["holders"]) == 2 and len(locks["rd"]["holders"]) == 2, d
'
  run -0 "$DLOCK" list
  [ "${#lines[@]}" -eq 3 ]
  assert_line --regexp "^rd +$(id -un)@$(uname -n) \+1 "
  assert_line --regexp "^sem +$(id -un)@$(uname -n) \+1 "

  touch "$T/release"
  local pid rc statuses=""
  for pid in "${sem_pids[@]}" "${rd_pids[@]}"; do
    rc=0
    wait "$pid" || rc=$?
    statuses+="$rc "
  done
  assert_equal "$statuses" "0 0 0 0 "
  run -1 "$DLOCK" status sem --json
  json_ok 'assert d["held"] is False and d["kind"] == "exclusive" and "holders" not in d, d'
  run -1 "$DLOCK" status rd
  run -0 rcli exists 'dlock:{sem}:holders' 'dlock:{sem}:slots' 'dlock:{sem}:kind' \
    'dlock:{rd}:holders' 'dlock:{rd}:slots' 'dlock:{rd}:kind' 'dlock:{rd}:writers'
  assert_output 0
  run -0 "$DLOCK" list --json
  json_ok 'assert d["locks"] == [], d'
}

# ---------------------------------------------------------------------------------------------
# acquire, renew, release

@test "acquire, renew and release with --limit and several keys; acquire --json lists keys and fencing tokens" {
  run -0 --separate-stderr "$DLOCK" acquire -k y -k x --limit 2 -t 10s
  [ -z "$stderr" ]
  [[ $output =~ ^[0-9a-f]{32}$ ]]
  local tok=$output
  local key
  for key in x y; do
    run -0 rcli zscore "dlock:{$key}:holders" "$tok"
    [[ $output =~ ^[0-9]+$ ]]
    run -0 rcli get "dlock:{$key}:kind"
    assert_output limit:2
  done
  # A second slot is free; a third is not.
  local tok2
  tok2=$("$DLOCK" acquire -k x -k y --limit 2 -t 10s -n)
  run -75 "$DLOCK" acquire -k x -k y --limit 2 -t 10s -n
  run -0 "$DLOCK" release -k x -k y --token "$tok2"

  run -0 --separate-stderr "$DLOCK" renew -k x -k y --token "$tok" -t 30s
  [ -z "$stderr" ]
  for key in x y; do
    run -0 lease_left "$key" "$tok"
    [ "$output" -gt 25000 ]
    [ "$output" -le 30000 ]
  done
  run -0 --separate-stderr "$DLOCK" release -k y -k x --token "$tok"
  [ -z "$stderr" ]
  run -0 rcli exists 'dlock:{x}:holders' 'dlock:{y}:holders' 'dlock:{x}:kind' 'dlock:{y}:kind'
  assert_output 0
  run -76 "$DLOCK" release -k x -k y --token "$tok"
  run -76 "$DLOCK" renew -k x -k y --token "$tok"

  run -0 --separate-stderr "$DLOCK" acquire -k q -k p -t 10s --json
  [ "${#lines[@]}" -eq 1 ]
  json_ok '
assert d["keys"] == ["p", "q"], d
assert d["key"] == "p", d
ft = d["fencing_tokens"]
assert type(ft) is list and len(ft) == 2 and all(is_int(f) and f >= 1 for f in ft), d
assert d["fencing_token"] == ft[0], d
assert re.match(r"^[0-9a-f]{32}$", d["token"]), d
'
  local json_tok
  json_tok=$(printf '%s' "$output" | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')
  run -0 rcli get 'dlock:{p}'
  assert_output "$json_tok"
  run -0 rcli get 'dlock:{q}'
  assert_output "$json_tok"
  run -0 "$DLOCK" release -k p -k q --token "$json_tok"
  # One key's acquire --json has no "keys".
  run -0 "$DLOCK" acquire -k single -t 10s --limit 2 --json
  json_ok 'assert "keys" not in d and "fencing_tokens" not in d and d["key"] == "single", d'
}
