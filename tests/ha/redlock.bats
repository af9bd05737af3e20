#!/usr/bin/env bats
# Redlock: dlock given five independent masters (several --url; redlock_helpers.bash starts
# them once for the file) takes the lock on all of them with one token, runs the command while
# a majority holds it, and releases it everywhere; run, acquire, renew, release, status, list,
# waiting, contention, the per-node timeout, and the usage errors. The tests here break no
# node for good (they delete keys, give closed ports, or freeze a node and the next setup
# continues it); restarting nodes, and nodes that have never run dlock's scripts:
# redlock_faults.bats.

load ../lib/redlock_helpers

# A command for dlock run: writes "TOKEN TTL_MS FENCING_TOKEN" to $1 (atomically), then waits
# until $2 exists and exits with ${3:-0}.
HOLD_SCRIPT='echo "$DLOCK_TOKEN $DLOCK_TTL_MS $DLOCK_FENCING_TOKEN" >"$1.tmp"; mv "$1.tmp" "$1"
  until [ -e "$2" ]; do sleep 0.02; done
  exit "${3:-0}"'

@test "run: the same token on every node, DLOCK_TTL_MS a bit under the TTL, the largest fencing counter, released everywhere" {
  start_bg runner "$DLOCK" "${RL[@]}" run -k basic -t 10s -- sh -c "$HOLD_SCRIPT" sh "$T/env" "$T/go" 7
  local runner=$BG_PID
  started runner '[ -s "$T/env" ]'
  local token ttl_ms fence
  read -r token ttl_ms fence <"$T/env"
  [[ $token =~ ^[0-9a-f]{32}$ ]] || fail "token: $token"
  wait_held_on_all basic "$token"
  # The validity: 10 s less the time taken and the drift (1% + 2 ms = 102 ms); the five nodes
  # are local, so at most 100 ms went by.
  echo "DLOCK_TTL_MS=$ttl_ms"
  [ "$ttl_ms" -le $((10000 - 102)) ] || fail "DLOCK_TTL_MS $ttl_ms is not under ttl - drift"
  [ "$ttl_ms" -gt $((10000 - 102 - 100)) ] || fail "DLOCK_TTL_MS $ttl_ms: more than 100 ms lost"
  # The fencing token is the largest of the granting majority's counters (each node's counter
  # started at its own clock): one node's counter, and at least three are not above it.
  fence_of_majority basic "$fence" || fail "fencing token $fence: $(fences basic)"
  local port
  for port in $NODE_PORTS; do
    run -0 ncli "$port" hget "dlock:{basic}:holder" pid
    [ "$output" -gt 0 ] || fail "no holder record on $port"
  done
  touch "$T/go"
  exit_of "$runner"
  [ "$RC" -eq 7 ] || { cat "$T/runner.err" >&2; fail "exit $RC"; }
  [ ! -s "$T/runner.err" ] || { cat "$T/runner.err" >&2; fail "diagnostics on a clean run"; }
  nothing_left basic || fail "left after the release: $(leftovers basic)"
  # The counters stay, for the next acquisition.
  for port in $NODE_PORTS; do
    run -0 ncli "$port" exists "dlock:{basic}:fence"
    assert_output 1
  done
}

@test "DLOCK_URL with several URLs separated by spaces is Redlock too; the fencing token grows" {
  export DLOCK_URL=$REDLOCK_URLS
  run -0 --separate-stderr "$DLOCK" run -k env -t 5s -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  [ -z "$stderr" ] || fail "stderr: $stderr"
  local first=$output
  fence_of_majority env "$first" || fail "fencing token $first: $(fences env)"
  run -0 --separate-stderr "$DLOCK" run -k env -t 5s -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  [ "$output" -gt "$first" ] || fail "fencing token $output after $first"
  # and status sees all five
  run -0 "$DLOCK" acquire -k env -t 5s
  run -0 "$DLOCK" status env
  assert_line --regexp '^nodes: +5 of 5 hold it \(a majority is 3\)$'
}

@test "the fencing token strictly increases over 100 runs in a row" {
  local i token prev=0 back=()
  for i in $(seq 100); do
    token=$("$DLOCK" "${RL[@]}" run -n -k mono -t 5s -- sh -c 'echo "$DLOCK_FENCING_TOKEN"')
    [[ $token =~ ^[0-9]+$ ]] || fail "run $i: fencing token '$token'"
    [ "$token" -gt "$prev" ] || back+=("run $i: $token after $prev")
    prev=$token
  done
  [ "${#back[@]}" -eq 0 ] || fail "${#back[@]} of 100 went back (counters now: $(fences mono)): ${back[*]:0:3}"
}

@test "held: -n exits 75 (or -E's code) without running the command; the holder keeps the lock" {
  start_bg hold "$DLOCK" "${RL[@]}" run -k busy -t 10s -- sh -c "$HOLD_SCRIPT" sh "$T/env" "$T/go"
  local holder=$BG_PID token
  started hold '[ -s "$T/env" ]'
  read -r token _ <"$T/env"
  wait_held_on_all busy "$token"
  run -75 "$DLOCK" "${RL[@]}" run -n -k busy -t 5s -- touch "$T/ran"
  [ ! -e "$T/ran" ] || fail "the command ran"
  run -3 "$DLOCK" "${RL[@]}" run -n -E 3 -k busy -t 5s -- touch "$T/ran"
  [ ! -e "$T/ran" ] || fail "the command ran"
  run -75 "$DLOCK" "${RL[@]}" acquire -n -k busy -t 5s
  # The refused attempts took nothing from the holder.
  held_on_all busy "$token" || fail "holder lost the lock somewhere: $(leftovers busy)"
  touch "$T/go"
  exit_of "$holder"
  [ "$RC" -eq 0 ] || { cat "$T/hold.err" >&2; fail "holder exit $RC"; }
  nothing_left busy || fail "left: $(leftovers busy)"
}

@test "a waiter is woken by the release, long before the holder's lease would end" {
  start_bg hold "$DLOCK" "${RL[@]}" run -k wake -t 30s -- sh -c "$HOLD_SCRIPT" sh "$T/env" "$T/go"
  local holder=$BG_PID
  started hold '[ -s "$T/env" ]'
  start_bg waiter "$DLOCK" "${RL[@]}" run -k wake -t 5s -w 20s -- sh -c 'date +%s%3N >"$0"' "$T/got"
  local waiter=$BG_PID
  # registered as a waiter (status counts the most any node counts)
  wait_for '[ "$("$DLOCK" "${RL[@]}" status wake --json | sed -n "s/.*\"waiters\":\([0-9]*\).*/\1/p")" = 1 ]' 10
  sleep 0.3
  [ ! -e "$T/got" ] || fail "the waiter ran while the lock was held"
  local released
  released=$(now_ms)
  touch "$T/go"
  exit_of "$holder"
  [ "$RC" -eq 0 ] || { cat "$T/hold.err" >&2; fail "holder exit $RC"; }
  exit_of "$waiter"
  [ "$RC" -eq 0 ] || { cat "$T/waiter.err" >&2; fail "waiter exit $RC"; }
  local gap=$(($(cat "$T/got") - released))
  echo "the waiter ran ${gap} ms after the holder was told to end"
  [ "$gap" -lt 1000 ] || fail "woken after $gap ms: not by the release"
  nothing_left wake || fail "left: $(leftovers wake)"
}

@test "--wait runs out while held: 75 after about the wait" {
  run -0 "$DLOCK" "${RL[@]}" acquire -k wout -t 20s
  local start took
  start=$(now_ms)
  run -75 "$DLOCK" "${RL[@]}" run -w 1s -k wout -t 5s -- touch "$T/ran"
  took=$(($(now_ms) - start))
  echo "gave up after $took ms"
  [ ! -e "$T/ran" ] || fail "the command ran"
  [ "$took" -ge 1000 ] || fail "gave up after $took ms"
  [ "$took" -lt 2500 ] || fail "gave up after $took ms"
}

@test "--fair with several URLs: usage error 64, nothing taken" {
  run -64 --separate-stderr "$DLOCK" "${RL[@]}" run --fair -k fair -t 5s -- touch "$T/ran"
  [[ $stderr == *--fair* ]] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ] || fail "the command ran"
  run -64 "$DLOCK" "${RL[@]}" acquire --fair -k fair -t 5s
  export DLOCK_URL=$REDLOCK_URLS
  run -64 "$DLOCK" run --fair -w 1s -k fair -t 5s -- touch "$T/ran"
  [ ! -e "$T/ran" ] || fail "the command ran"
  [ "$(holders fair)" = 0 ] || fail "taken: $(leftovers fair)"
}

@test "--shared and --limit with several URLs: usage error 64, nothing taken" {
  run -64 --separate-stderr "$DLOCK" "${RL[@]}" run --shared -k kinds -t 5s -- touch "$T/ran"
  [[ $stderr == *"--shared: not available on Redlock (several --url): independent masters cannot agree on one state"*"; it needs one Redis server"* ]] || fail "stderr: $stderr"
  run -64 --separate-stderr "$DLOCK" "${RL[@]}" run --limit 3 -k kinds -t 5s -- touch "$T/ran"
  [[ $stderr == *"--limit: not available on Redlock (several --url)"* ]] || fail "stderr: $stderr"
  run -64 "$DLOCK" "${RL[@]}" acquire --limit 2 -k kinds -t 5s
  [ ! -e "$T/ran" ] || fail "the command ran"
  [ "$(holders kinds)" = 0 ] || fail "taken: $(leftovers kinds)"
}

@test "wait, barrier and latch with several URLs: usage error 64, nothing written" {
  local sub
  for sub in "wait -k coord -w 1s" "barrier -k coord --parties 2 -w 1s" "latch -k coord --count 2" \
    "latch -k coord --down" "latch -k coord --wait 1s"; do
    # shellcheck disable=SC2086 # the subcommand's words
    run -64 --separate-stderr "$DLOCK" "${RL[@]}" $sub
    [[ $stderr == *"wait, barrier and latch: not available on Redlock (several --url): independent masters"*"; it needs one Redis server"* ]] || fail "$sub: $stderr"
  done
  local port
  for port in $NODE_PORTS; do
    [ -z "$(ncli "$port" --scan --pattern 'dlock:{coord}*')" ] || fail "written: $(leftovers coord)"
  done
}

@test "elect and leader --watch with several URLs: usage error 64, nothing written; leader alone reads the majority" {
  run -64 --separate-stderr "$DLOCK" "${RL[@]}" elect -k el -t 5s -- touch "$T/ran"
  [[ $stderr == *"elect and leader --watch: not available on Redlock (several --url): independent masters"* ]] || fail "stderr: $stderr"
  [ "${#stderr_lines[@]}" -eq 1 ] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ] || fail "the command ran"
  run -64 --separate-stderr "$DLOCK" "${RL[@]}" leader el --watch
  [[ $stderr == *"not available on Redlock"* ]] || fail "stderr: $stderr"
  [ "$(holders el)" = 0 ] || fail "taken: $(leftovers el)"
  run -1 "$DLOCK" "${RL[@]}" leader el
  [ "$output" = "no leader" ] || fail "output: $output"
  "$DLOCK" "${RL[@]}" run -k el -t 5s -- sh -c 'echo $$ >"$1"; sleep 30' sh "$T/pid" &
  echo $! >>"$T/bg.pid"
  wait_for "[ -s '$T/pid' ]" 10
  run -0 "$DLOCK" "${RL[@]}" leader el
  [[ $output == "- ("*"pid "* ]] || fail "output: $output"
}

@test "history with several URLs: usage error 64 naming the stores that keep one; a run records nothing" {
  run -0 "$DLOCK" "${RL[@]}" run -k hi -t 5s -- true
  run -64 --separate-stderr "$DLOCK" "${RL[@]}" history hi
  [[ $stderr == *"history: not available on Redlock (several --url): independent masters cannot agree on one order of events"*"one Redis server"* ]] || fail "stderr: $stderr"
  [ "${#stderr_lines[@]}" -eq 1 ] || fail "stderr: $stderr"
  # each master alone is one Redis server, which keeps histories; nothing was written to it
  run -0 "$DLOCK" -u "${RL[1]}" history hi
  [ -z "$output" ] || fail "output: $output"
}

@test "leader with several URLs shows the value the majority's holder records name" {
  run -0 "$DLOCK" "${RL[@]}" acquire -k elv -t 20s
  local port
  for port in $NODE_PORTS; do
    ncli "$port" hset 'dlock:{elv}:holder' value 'node-a:8080' >/dev/null
  done
  run -0 "$DLOCK" "${RL[@]}" leader elv
  assert_output --regexp '^node-a:8080 \(.* pid [0-9]+, since .*, term [0-9]+\)$'
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" status elv --json
  json_ok 'assert d["holder"]["value"] == "node-a:8080", d'
  run -0 "$DLOCK" "${RL[@]}" release --force -k elv
}

@test "several keys across the nodes: all taken on a majority, the same token, released together" {
  run -0 "$DLOCK" "${RL[@]}" run -k rk-b -k rk-a -t 5s -- sh -c 'echo "$DLOCK_KEYS|$DLOCK_TOKEN"'
  local keys=${output%%|*} token=${output#*|} port
  assert_equal "$keys" "rk-a rk-b"
  [ -n "$token" ]
  [ "$(holders rk-a)" = 0 ] || fail "left: $(leftovers rk-a)"
  [ "$(holders rk-b)" = 0 ] || fail "left: $(leftovers rk-b)"
  # Held on every node while the command runs.
  start_bg multi "$DLOCK" "${RL[@]}" run -k rk-a -k rk-b -t 5s -- sleep 30
  wait_for '[ "$(holders rk-a)" = 5 ] && [ "$(holders rk-b)" = 5 ]'
  run -75 "$DLOCK" "${RL[@]}" run -k rk-b -n -- true
  kill -TERM "$BG_PID"
  wait_for '[ "$(holders rk-a)" = 0 ] && [ "$(holders rk-b)" = 0 ]'
}

@test "a Sentinel URL among several: usage error 64, nothing taken" {
  local port=${NODE_PORTS%% *}
  run -64 --separate-stderr "$DLOCK" "${RL[@]}" -u "redis-sentinel://127.0.0.1:$port#mymaster" \
    run -k sent -t 5s -- touch "$T/ran"
  [[ $stderr == *Sentinel* ]] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ] || fail "the command ran"
  run -64 "$DLOCK" -u "redis-sentinel://127.0.0.1:$port#mymaster" -u "redis://127.0.0.1:$port" status sent
  export DLOCK_URL="redis://127.0.0.1:$port redis-sentinel://127.0.0.1:$port#mymaster"
  run -64 "$DLOCK" acquire -k sent -t 5s
  [ "$(holders sent)" = 0 ] || fail "taken: $(leftovers sent)"
}

@test "status across the nodes: held while a majority names the holder, one line per node, JSON quorum and nodes" {
  run -0 "$DLOCK" "${RL[@]}" acquire -k st -t 20s
  local token=$output
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" status st
  assert_line --regexp '^lock: +st$'
  assert_line --regexp '^state: +held$'
  assert_line --regexp '^nodes: +5 of 5 hold it \(a majority is 3\)$'
  local port
  for port in $NODE_PORTS; do
    assert_line --regexp "^ +redis://127\.0\.0\.1:$port: held by [^ ]+ pid [0-9]+, lease left "
  done

  # Two nodes lose it: still held (3 of 5).
  local p1 p2 p3
  read -r p1 p2 p3 _ <<<"$NODE_PORTS"
  ncli "$p1" del "dlock:{st}" "dlock:{st}:holder" >/dev/null
  ncli "$p2" del "dlock:{st}" "dlock:{st}:holder" >/dev/null
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" status st
  assert_line --regexp '^state: +held$'
  assert_line --regexp '^nodes: +3 of 5 hold it \(a majority is 3\)$'
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" status st --json
  json_ok '
held_status(d)
assert d["key"] == "st", d
assert d["quorum"] == 3, d
urls = ["redis://127.0.0.1:" + p for p in A[0].split()]
assert [n["url"] for n in d["nodes"]] == urls, d["nodes"]
assert all(n["reachable"] is True for n in d["nodes"]), d["nodes"]
assert [n["held"] for n in d["nodes"]] == [False, False, True, True, True], d["nodes"]
for n in d["nodes"][2:]:
    assert n["ttl_ms"] > 15000, n
    assert is_int(n["fencing_token"]) and n["fencing_token"] <= d["fencing_token"], n
' "$NODE_PORTS"

  # A third one: free (exit 1), the two that still have it shown.
  ncli "$p3" del "dlock:{st}" "dlock:{st}:holder" >/dev/null
  run -1 --separate-stderr "$DLOCK" "${RL[@]}" status st
  assert_line --regexp '^state: +free$'
  assert_line --regexp '^nodes: +2 of 5 hold it \(a majority is 3\)$'
  run -1 --separate-stderr "$DLOCK" "${RL[@]}" status st --json
  json_ok '
assert d["held"] is False, d
assert d["quorum"] == 3, d
assert [n["held"] for n in d["nodes"]] == [False, False, False, True, True], d["nodes"]
' 
  # The token still holds it where it is: release says 76 (no majority), and clears those.
  run -76 "$DLOCK" "${RL[@]}" release -k st --token "$token"
  nothing_left st || fail "left: $(leftovers st)"
}

@test "list across the nodes: the locks a majority holds, text and JSON" {
  run -0 "$DLOCK" "${RL[@]}" acquire -k la -t 20s
  run -0 "$DLOCK" "${RL[@]}" acquire -k lb -t 20s
  run -0 "$DLOCK" "${RL[@]}" acquire -k lc -t 20s
  local p1 p2 p3
  read -r p1 p2 p3 _ <<<"$NODE_PORTS"
  # lb: 3 of 5 (listed); lc: 2 of 5 (not listed)
  ncli "$p1" del "dlock:{lb}" "dlock:{lb}:holder" >/dev/null
  ncli "$p2" del "dlock:{lb}" "dlock:{lb}:holder" >/dev/null
  local p
  for p in "$p1" "$p2" "$p3"; do ncli "$p" del "dlock:{lc}" "dlock:{lc}:holder" >/dev/null; done
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" list
  assert_line --index 0 --regexp '^KEY +HOLDER'
  assert_line --regexp '^la +'
  assert_line --regexp '^lb +'
  refute_line --regexp '^lc +'
  [ "${#lines[@]}" -eq 3 ] || fail "lines: $output"
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" list 'l[bc]' --json
  json_ok '
locks = d["locks"]
assert [l["key"] for l in locks] == ["lb"], locks
l = locks[0]
held_status(l)
assert l["quorum"] == 3, l
assert [n["url"] for n in l["nodes"]] == ["redis://127.0.0.1:" + p for p in A[0].split()], l["nodes"]
assert [n["held"] for n in l["nodes"]] == [False, False, True, True, True], l["nodes"]
assert all(n["reachable"] is True for n in l["nodes"]), l["nodes"]
' "$NODE_PORTS"
}

@test "acquire, renew, release across five nodes; release again is 76" {
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" acquire -k ar -t 4s
  [ -z "$stderr" ] || fail "stderr: $stderr"
  [[ $output =~ ^[0-9a-f]{32}$ ]] || fail "token: $output"
  local tok=$output port
  held_on_all ar "$tok" || fail "not on every node: $(leftovers ar)"
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" acquire --json -n -k ar2 -t 4s
  json_ok '
assert d["key"] == "ar2", d
assert re.match(r"^[0-9a-f]{32}$", d["token"]), d
assert is_int(d["fencing_token"]) and d["fencing_token"] > 0, d
assert 4000 - 42 - 100 < d["ttl_ms"] <= 4000 - 42, d
'
  # renew --ttl: a majority extended it (dlock renew exits once a majority confirmed; a node
  # that answered NOSCRIPT first may not have got the script's body by then)
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" renew -k ar --token "$tok" --ttl 20s
  [ -z "$output$stderr" ] || fail "output: $output $stderr"
  local extended=0
  for port in $NODE_PORTS; do
    run -0 ncli "$port" pttl "dlock:{ar}"
    [ "$output" -le 19000 ] || extended=$((extended + 1))
  done
  [ "$extended" -ge 3 ] || fail "extended on $extended nodes: $(leftovers ar)"
  # renew with DLOCK_TOKEN and the remembered TTL; a wrong token is 76
  DLOCK_TOKEN=$tok run -0 "$DLOCK" "${RL[@]}" renew -k ar
  run -76 "$DLOCK" "${RL[@]}" renew -k ar --token 0123456789abcdef0123456789abcdef
  held_on_all ar "$tok" || fail "the wrong token changed something: $(leftovers ar)"
  # another acquire is refused while held
  run -75 "$DLOCK" "${RL[@]}" acquire -n -k ar -t 4s
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" release -k ar --token "$tok"
  [ -z "$output$stderr" ] || fail "output: $output $stderr"
  nothing_left ar || fail "left after the release: $(leftovers ar)"
  run -76 "$DLOCK" "${RL[@]}" release -k ar --token "$tok"
  run -76 "$DLOCK" "${RL[@]}" renew -k ar --token "$tok"
  # free again for anyone
  run -0 "$DLOCK" "${RL[@]}" acquire -n -k ar -t 4s
  run -0 "$DLOCK" "${RL[@]}" release -k ar --force
  nothing_left ar || fail "left after release --force: $(leftovers ar)"
}

@test "a majority that says the lock is no longer held: the command is stopped, 76" {
  start_bg runner "$DLOCK" "${RL[@]}" run -k gone -t 1s -- sh -c 'echo $$ >"$0"; exec sleep 30' "$T/cmd.pid"
  local runner=$BG_PID
  started runner '[ -s "$T/cmd.pid" ]'
  local cmd p1 p2 p3
  cmd=$(cat "$T/cmd.pid")
  read -r p1 p2 p3 _ <<<"$NODE_PORTS"
  local p
  for p in "$p1" "$p2" "$p3"; do ncli "$p" del "dlock:{gone}" >/dev/null; done
  exit_of "$runner"
  [ "$RC" -eq 76 ] || { cat "$T/runner.err" >&2; fail "exit $RC"; }
  gone "$cmd" || fail "the command still runs"
  grep -q 'lost' "$T/runner.err" || { cat "$T/runner.err" >&2; fail "no word of the loss"; }
}

@test "a node that lost the lock while a majority holds it is given it back with the same token" {
  start_bg runner "$DLOCK" "${RL[@]}" run -k rejoin -t 1s -- sh -c "$HOLD_SCRIPT" sh "$T/env" "$T/go"
  local runner=$BG_PID token
  started runner '[ -s "$T/env" ]'
  read -r token _ <"$T/env"
  local p1 p2
  read -r p1 p2 _ <<<"$NODE_PORTS"
  ncli "$p1" del "dlock:{rejoin}" >/dev/null
  ncli "$p2" del "dlock:{rejoin}" "dlock:{rejoin}:holder" >/dev/null
  wait_for "[ \"\$(ncli $p1 get 'dlock:{rejoin}')\" = $token ] && [ \"\$(ncli $p2 get 'dlock:{rejoin}')\" = $token ]" 5 ||
    fail "not re-joined: $(leftovers rejoin)"
  # renewed on all five, every third of the TTL
  renewed_everywhere rejoin
  renewed_everywhere rejoin
  alive "$runner" || { cat "$T/runner.err" >&2; fail "dlock stopped"; }
  touch "$T/go"
  exit_of "$runner"
  [ "$RC" -eq 0 ] || { cat "$T/runner.err" >&2; fail "exit $RC"; }
  nothing_left rejoin || fail "left: $(leftovers rejoin)"
}

@test "nodes that refuse connections: a majority left runs the command, a minority left is 69" {
  local live=(${NODE_PORTS}) closed=(-u redis://127.0.0.1:1 -u redis://127.0.0.1:2 -u redis://127.0.0.1:3)
  # 3 live of 5
  run -0 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:${live[0]}" -u "redis://127.0.0.1:${live[1]}" \
    -u "redis://127.0.0.1:${live[2]}" "${closed[@]:0:4}" run -n -k cl -t 5s -- touch "$T/ran3"
  [ -e "$T/ran3" ] || fail "the command did not run"
  # 2 live of 5
  run -69 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:${live[0]}" -u "redis://127.0.0.1:${live[1]}" \
    "${closed[@]}" run -n -k cl -t 5s -- touch "$T/ran2"
  [ ! -e "$T/ran2" ] || fail "the command ran"
  # (the refusals come first: the tally is taken when a majority can no longer grant it)
  [[ $stderr =~ "no majority of the 5 nodes: "[0-2]" of 5 granted the lock; ".*"127.0.0.1:1: ".*"127.0.0.1:2: " ]] ||
    fail "stderr: $stderr"
  # nothing left on the live ones (what they granted was given back)
  nothing_left cl || fail "left: $(leftovers cl)"
  # status without a majority answering: 69
  run -69 "$DLOCK" -u "redis://127.0.0.1:${live[0]}" -u "redis://127.0.0.1:${live[1]}" "${closed[@]}" status cl
}

@test "contending run loops never overlap (4 workers x 20 critical sections)" {
  # The witness: mkdir is atomic; a second holder inside finds the directory there (exit 99).
  local witness='mkdir "$0" 2>/dev/null || { echo "overlap" >>"$1"; exit 99; }
    echo x >>"$2"; sleep 0.01; rmdir "$0"'
  worker() {
    local i rc
    for i in $(seq 20); do
      rc=0
      # -t 25s: each node gets 500 ms to answer (a fiftieth of the TTL, the most there is);
      # with -t 5s (100 ms), a loaded machine made a run's first attempt time out on every
      # node (69, nothing reached yet to wait for). This test is about exclusion, not latency.
      "$DLOCK" "${RL[@]}" run -w 30s -k c -t 25s -- sh -c "$witness" "$T/witness" "$T/overlaps" "$T/entries" || rc=$?
      [ "$rc" -eq 0 ] || echo "worker $1 round $i: exit $rc" >>"$T/failures"
    done
  }
  local start w pids=()
  start=$(now_ms)
  for w in 1 2 3 4; do
    start_bg "worker$w" worker "$w"
    pids+=("$BG_PID")
  done
  for w in "${pids[@]}"; do
    wait "$w" || true
  done
  echo "80 critical sections in $(($(now_ms) - start)) ms"
  [ ! -e "$T/overlaps" ] || fail "overlaps: $(wc -l <"$T/overlaps")"
  [ ! -e "$T/failures" ] || { cat "$T/failures" "$T"/worker*.err >&2; fail "runs failed"; }
  local entries
  entries=$(wc -l <"$T/entries")
  [ "$entries" -eq 80 ] || fail "$entries critical sections"
  nothing_left c || fail "left: $(leftovers c)"
}

@test "the per-node timeout is a fiftieth of the TTL, from 50 ms to 500 ms" {
  freeze 1 2 3
  local ttl want start took
  for ttl in 1s:50ms 5s:100ms 10s:200ms 60s:500ms; do
    want=${ttl#*:}
    start=$(now_ms)
    run -69 --separate-stderr "$DLOCK" "${RL[@]}" run -n -k "to-${ttl%:*}" -t "${ttl%:*}" -- touch "$T/ran"
    took=$(($(now_ms) - start))
    [ ! -e "$T/ran" ] || fail "-t ${ttl%:*}: the command ran"
    [[ $stderr == *"no answer within $want;"* ]] || fail "-t ${ttl%:*}: $stderr"
    [ "$took" -lt $((${want%ms} + 1000)) ] || fail "-t ${ttl%:*}: gave up after $took ms"
  done
}

@test "status and list with a node frozen: it is shown unreachable, the majority still tells" {
  start_bg hold "$DLOCK" "${RL[@]}" run -k fr -t 30s -- sh -c 'echo "$DLOCK_TOKEN" >"$0.tmp"; mv "$0.tmp" "$0"; sleep 30' "$T/token"
  started hold '[ -s "$T/token" ]'
  wait_held_on_all fr "$(cat "$T/token")"
  freeze 5
  local start took
  start=$(now_ms)
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" status fr --json
  took=$(($(now_ms) - start))
  echo "status took $took ms"
  json_ok '
held_status(d)
assert d["quorum"] == 3, d
assert [n["reachable"] for n in d["nodes"]] == [True, True, True, True, False], d["nodes"]
assert [n["held"] for n in d["nodes"]] == [True, True, True, True, False], d["nodes"]
assert d["nodes"][4]["url"] == "redis://127.0.0.1:" + A[0], d["nodes"]
' "$(node_port 5)"
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" list --json
  json_ok '
locks = d["locks"]
assert [l["key"] for l in locks] == ["fr"], locks
assert locks[0]["quorum"] == 3, locks
assert [n["reachable"] for n in locks[0]["nodes"]] == [True, True, True, True, False], locks[0]["nodes"]
assert [n["held"] for n in locks[0]["nodes"]] == [True, True, True, True, False], locks[0]["nodes"]
'
}

@test "another tenant's records on some nodes (a fence that is not a number, a holder record of 64 MB): run takes the lock, status and list work" {
  local port1 port2
  read -r port1 port2 _ <<<"$NODE_PORTS"
  redis-cli -p "$port1" SET 'dlock:{tenant}:fence' 'not a number' >/dev/null
  redis-cli -p "$port2" SET 'dlock:{other}' not-a-dlock-token PX 120000 >/dev/null
  head -c $((64 * 1024 * 1024)) /dev/zero | tr '\0' x \
    | redis-cli -p "$port2" -x HSET 'dlock:{other}:holder' command >/dev/null
  run -0 "$DLOCK" "${RL[@]}" run -k tenant -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  [[ $output =~ ^[0-9]+$ ]]
  start_bg holder "$DLOCK" "${RL[@]}" run -k tenant -t 20s -- sleep 30
  wait_for '"$DLOCK" "${RL[@]}" status tenant >/dev/null' 10
  run -0 --separate-stderr /usr/bin/time -v -o "$T/list.time" "$DLOCK" "${RL[@]}" list
  assert_line --regexp "^tenant +$(id -un)@"
  # Not read whole: main took hundreds of MB for one 64 MB record.
  [ "$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$T/list.time")" -lt 40000 ]
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" status tenant --json
  json_ok 'assert d["held"] is True and d["fencing_token"] >= 1, d'
}

@test "--note on every node; a --lock-delay that a majority's nodes keep after release --force" {
  "$DLOCK" "${RL[@]}" acquire -k rn --ttl 30s --note 'redlock: nightly' >"$T/token"
  run -75 "$DLOCK" -v "${RL[@]}" run -n -k rn -- true
  assert_output --partial 'redlock: nightly'
  # Each node's holder armed with a 3 s delay, as acquire.lua arms it for --lock-delay 3s.
  local port
  for port in $NODE_PORTS; do
    node_cli "$port" HSET 'dlock:{rn}:holder' delay_ms 3000 >/dev/null
    node_cli "$port" PEXPIRE 'dlock:{rn}:holder' 33000 >/dev/null
  done
  run -0 "$DLOCK" "${RL[@]}" release --force -k rn
  run -75 "$DLOCK" "${RL[@]}" run -n -k rn -- true
  run -1 "$DLOCK" "${RL[@]}" status rn
  # Two nodes' delays cleared: three still refuse; a third: a majority is free.
  read -r port _ <<<"$NODE_PORTS"
  node_cli "$port" DEL 'dlock:{rn}:holder' >/dev/null
  node_cli "$(awk '{ print $2 }' <<<"$NODE_PORTS")" DEL 'dlock:{rn}:holder' >/dev/null
  run -75 "$DLOCK" "${RL[@]}" run -n -k rn -- true
  node_cli "$(awk '{ print $3 }' <<<"$NODE_PORTS")" DEL 'dlock:{rn}:holder' >/dev/null
  run -0 "$DLOCK" "${RL[@]}" run -n -k rn -- true
}

@test "--min-hold and --replace across the nodes: kept by a majority after the command; a replaced holder exits 76 naming the replacer" {
  run -0 "$DLOCK" "${RL[@]}" run -k rm --min-hold 5s -- true
  run -0 --separate-stderr "$DLOCK" "${RL[@]}" status rm --json
  json_ok 'assert d["held"] is True and d["command_ended"] is True and 0 < d["ttl_ms"] <= 5000, d'
  run -75 "$DLOCK" "${RL[@]}" run -n -k rm -- true
  run -0 "$DLOCK" "${RL[@]}" release --force -k rm
  start_bg holder "$DLOCK" "${RL[@]}" run -k rm -t 3s --kill-after 1s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID st=0
  wait_for "[ -s '$T/cmd.pid' ]" 10
  run -0 "$DLOCK" "${RL[@]}" run -k rm --replace --note successor -w 20s -- touch "$T/new"
  wait "$holder" || st=$?
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  grep -q "replaced by .*successor" "$T/holder.err"
  [ -e "$T/new" ]
}
