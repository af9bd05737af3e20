#!/usr/bin/env bats
# Who holds what: status and list, in human and JSON form, against holders that are real dlock
# processes or real keys in a private redis-server; JSON is checked with python3's json module
# (json_ok). Timing bounds leave room for a loaded 2-core machine, except the explicit "list of
# 2000 locks in under a second" requirement.

load ../lib/helpers

# ---------------------------------------------------------------------------------------------
# status

@test "status of a held lock: exit 0, human fields, JSON fields, pid, TTL and fencing token" {
  # Two earlier holders, so the fencing token is the first one's plus 2 for the one we look at.
  run -0 "$DLOCK" run -k st -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  local first=$output
  run -0 "$DLOCK" run -k st -- true
  start_bg holder "$DLOCK" run -k st -t 20s -- sh -c 'echo "$DLOCK_FENCING_TOKEN" >"$1.tmp"; mv "$1.tmp" "$1"; exec sleep 30' sh "$T/fence"
  local pid=$BG_PID
  wait_for '[ -s "$T/fence" ]' 10
  local fence
  fence=$(cat "$T/fence")
  [ "$fence" = $((first + 2)) ]

  run -0 --separate-stderr "$DLOCK" status st
  [ -z "$stderr" ]
  assert_line --regexp '^lock: +st$'
  assert_line --regexp '^state: +held$'
  assert_line --regexp "^holder: +$(id -un)@$(uname -n) pid $pid\$"
  assert_line --regexp '^command: +sh$'
  assert_line --regexp '^acquired at: +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z'
  assert_line --regexp '^lease left: +[0-9]'
  assert_line --regexp "^fencing token: +$fence\$"
  assert_line --regexp '^waiters: +0$'

  run -0 --separate-stderr "$DLOCK" status st --json
  [ -z "$stderr" ]
  [ "${#lines[@]}" -eq 1 ]
  json_ok '
assert d["version"] == 1 and is_int(d["version"]), d
assert set(d) == STATUS_FIELDS | {"version"}, sorted(d)
assert d["key"] == "st"
held_status(d)
h = d["holder"]
assert h["pid"] == int(A[0]), (h["pid"], A[0])
assert h["user"] == A[2] and h["host"] == A[3], h
assert h["command"] == "sh", h
assert 0 < d["ttl_ms"] <= 20000, d["ttl_ms"]
assert d["held_ms"] >= 0
assert d["fencing_token"] == int(A[1]) == d["last_fencing_token"], d
assert d["waiters"] == 0
' "$pid" "$fence" "$(id -un)" "$(uname -n)"
}

@test "status of a free lock exits 1 with held false and nulls" {
  run -1 --separate-stderr "$DLOCK" status never-used
  assert_line --regexp '^lock: +never-used$'
  assert_line --regexp '^state: +free$'
  refute_line --regexp '^holder:'
  run -1 --separate-stderr "$DLOCK" status never-used --json
  json_ok '
assert d["version"] == 1
assert d["key"] == "never-used"
assert d["held"] is False
assert d["holder"] is None and d["acquired_at"] is None and d["fencing_token"] is None, d
assert d["last_fencing_token"] == 0 and d["waiters"] == 0, d
'
  # A lock that was held and released: free, but the last fencing token is remembered.
  run -0 "$DLOCK" run -k used -- true
  run -0 "$DLOCK" run -k used -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  local last=$output
  run -1 "$DLOCK" status used --json
  json_ok '
assert d["held"] is False and d["holder"] is None and d["fencing_token"] is None, d
assert d["last_fencing_token"] == int(A[0]), d
' "$last"
}

@test "status: 64 for a bad key, 69 when Redis is unreachable" {
  run -64 --separate-stderr "$DLOCK" status ''
  [[ $stderr == dlock:* ]]
  [ -z "$output" ]
  run -64 "$DLOCK" status "$(printf 'a\tb')"
  run -64 "$DLOCK" status "$(head -c 1025 /dev/zero | tr '\0' k)"
  run -64 "$DLOCK" status
  run -64 "$DLOCK" status k --bogus
  run -69 --separate-stderr "$DLOCK" -u "unix://$T/none.sock" status k
  [ -z "$output" ]
  [[ $stderr == dlock:* ]]
  run -69 --separate-stderr "$DLOCK" -u "unix://$T/none.sock" status k --json
  [ -z "$output" ]
  run -69 "$DLOCK" -u "redis://127.0.0.1:$(free_port)" status k
}

@test "status counts the waiters of a held lock" {
  start_bg holder "$DLOCK" run -k wt -t 20s -- sleep 30
  wait_for 'key_exists wt' 10
  start_bg waiter1 "$DLOCK" run -k wt -w 30s -- true
  start_bg waiter2 "$DLOCK" run -k wt -w 30s -- true
  wait_for '"$DLOCK" status wt --json | grep -q "\"waiters\":2"' 10
  run -0 "$DLOCK" status wt --json
  json_ok 'assert d["waiters"] == 2, d["waiters"]'
  run -0 "$DLOCK" status wt
  assert_line --regexp '^waiters: +2$'
}

# ---------------------------------------------------------------------------------------------
# list

@test "list: held locks sorted by key, PATTERN, --prefix namespaces, empty list, JSON" {
  # An empty namespace prints nothing and exits 0.
  run -0 --separate-stderr "$DLOCK" list
  [ -z "$output" ]
  [ -z "$stderr" ]
  run -0 "$DLOCK" list --json
  json_ok 'assert d == {"version": 1, "locks": []}, d'

  # Holders created out of order: two dlock run processes and one acquire from a script.
  start_bg web "$DLOCK" run -k web -t 20s -- sleep 30
  local web_pid=$BG_PID
  start_bg build "$DLOCK" run -k ci-build -t 20s -- sleep 31
  local build_pid=$BG_PID
  bash -c 'echo $$ >"$1"; "$DLOCK" acquire -k ci-alpha -t 60s >/dev/null; exit $?' script "$T/alpha-script"
  local alpha_pid
  alpha_pid=$(cat "$T/alpha-script")
  # Another namespace, and a lock that was used and released (only its fence counter is left).
  "$DLOCK" --prefix other: acquire -k ci-other -t 60s >/dev/null
  run -0 "$DLOCK" run -k ci-done -- true
  rcli set 'unrelated' x >/dev/null
  wait_for 'key_exists web && key_exists ci-build' 10

  run -0 --separate-stderr "$DLOCK" list
  [ -z "$stderr" ]
  [ "${#lines[@]}" -eq 4 ]
  [[ ${lines[0]} =~ ^KEY\ +HOLDER\ +PID\ +HELD\ +TTL\ +FENCE\ +WAITERS\ +COMMAND\ +NOTE$ ]]
  [ "$(printf '%s\n' "$output" | awk 'NR > 1 { print $1 }' | tr '\n' ' ')" = "ci-alpha ci-build web " ]
  assert_line --regexp "^ci-alpha +$(id -un)@$(uname -n) +$alpha_pid +.* bash\$"
  assert_line --regexp "^ci-build +$(id -un)@$(uname -n) +$build_pid +.* [1-9][0-9]* +0 +sleep\$"
  assert_line --regexp "^web +$(id -un)@$(uname -n) +$web_pid +.* [1-9][0-9]* +0 +sleep\$"

  run -0 "$DLOCK" list --json
  [ "${#lines[@]}" -eq 1 ]
  json_ok '
assert set(d) == {"version", "locks"} and d["version"] == 1, d
keys = [s["key"] for s in d["locks"]]
assert keys == ["ci-alpha", "ci-build", "web"], keys
for s in d["locks"]:
    assert set(s) == STATUS_FIELDS, sorted(s)
    held_status(s)
    assert 0 < s["ttl_ms"] <= 60000, s
    assert s["fencing_token"] == s["last_fencing_token"], s
pids = {s["key"]: s["holder"]["pid"] for s in d["locks"]}
assert pids == {"ci-alpha": int(A[0]), "ci-build": int(A[1]), "web": int(A[2])}, pids
assert d["locks"][2]["holder"]["command"] == "sleep", d["locks"][2]
' "$alpha_pid" "$build_pid" "$web_pid"

  # PATTERN is a glob on lock names.
  run -0 "$DLOCK" list 'ci-*'
  [ "${#lines[@]}" -eq 3 ]
  [ "$(printf '%s\n' "$output" | awk 'NR > 1 { print $1 }' | tr '\n' ' ')" = "ci-alpha ci-build " ]
  run -0 "$DLOCK" list 'ci-*' --json
  json_ok 'assert [s["key"] for s in d["locks"]] == ["ci-alpha", "ci-build"], d'
  run -0 "$DLOCK" list 'w?b' --json
  json_ok 'assert [s["key"] for s in d["locks"]] == ["web"], d'
  run -0 --separate-stderr "$DLOCK" list 'nothing-*'
  [ -z "$output" ]
  run -0 "$DLOCK" list 'nothing-*' --json
  json_ok 'assert d == {"version": 1, "locks": []}, d'

  # --prefix / DLOCK_PREFIX isolate namespaces.
  run -0 "$DLOCK" --prefix other: list
  [ "${#lines[@]}" -eq 2 ]
  [[ ${lines[1]} == ci-other\ * ]]
  DLOCK_PREFIX=other: run -0 "$DLOCK" list --json
  json_ok 'assert [s["key"] for s in d["locks"]] == ["ci-other"], d'
  run -0 "$DLOCK" --prefix nobody: list
  [ -z "$output" ]
  # Glob characters in the prefix match literally.
  "$DLOCK" --prefix 'p*:' acquire -k star -t 60s >/dev/null
  "$DLOCK" --prefix 'pX:' acquire -k x -t 60s >/dev/null
  run -0 "$DLOCK" --prefix 'p*:' list --json
  json_ok 'assert [s["key"] for s in d["locks"]] == ["star"], d'
  run -0 "$DLOCK" --prefix 'p?:' list --json
  json_ok 'assert d["locks"] == [], d'

  run -69 --separate-stderr "$DLOCK" -u "unix://$T/none.sock" list
  [ -z "$output" ]
}

@test "list of 2000 held locks takes under a second on loopback" {
  # 2000 locks in dlock's own layout: lock key with PX, holder hash, fence counter.
  rcli eval "
    for i = 1, tonumber(ARGV[1]) do
      local k = 'dlock:{lock-' .. i .. '}'
      redis.call('SET', k, string.format('%032x', i), 'PX', 120000)
      redis.call('HSET', k .. ':holder', 'host', 'host-' .. (i % 7), 'pid', tostring(10000 + i),
                 'user', 'ci', 'command', 'make deploy-' .. i, 'acquired_ms', ARGV[2],
                 'fence', tostring(i), 'ttl_ms', '120000')
      redis.call('PEXPIRE', k .. ':holder', 120000)
      redis.call('SET', k .. ':fence', tostring(i))
    end
    return redis.call('DBSIZE')" 0 2000 "$(now_ms)" >/dev/null
  run -0 rcli dbsize
  assert_output 6000

  # The best of three tries must be under a second: the requirement is on dlock, not on a
  # scheduling hiccup of this (possibly loaded) machine.
  local url="redis://127.0.0.1:$REDIS_PORT"
  timed_list -u "$url" list --json
  echo "# list --json of 2000 locks: ${TIMES[*]} ms" >&3
  [ "$BEST" -lt 1000 ]
  [ ! -s "$T/list.err" ]
  run -0 cat "$T/list.out"
  json_ok '
locks = d["locks"]
assert len(locks) == 2000, len(locks)
keys = [s["key"] for s in locks]
assert keys == sorted(keys), "not sorted"
assert set(keys) == {"lock-%d" % i for i in range(1, 2001)}
for s in locks:
    i = int(s["key"][5:])
    assert s["held"] is True and s["holder"]["pid"] == 10000 + i, s
    assert s["holder"]["command"] == "make deploy-%d" % i and s["fencing_token"] == i, s
    assert 0 < s["ttl_ms"] <= 120000, s
'

  timed_list -u "$url" list
  echo "# list (table) of 2000 locks: ${TIMES[*]} ms" >&3
  [ "$BEST" -lt 1000 ]
  run -0 cat "$T/list.out"
  [ "${#lines[@]}" -eq 2001 ]
  [ "$(printf '%s\n' "$output" | awk 'NR > 1 { print $1 }' | LC_ALL=C sort -c && echo sorted)" = sorted ]
}

# timed_list DLOCK-ARGS...: runs dlock up to three times (stopping at the first run under a
# second), output in $T/list.out and $T/list.err; each must exit 0. Sets TIMES (ms of each
# run) and BEST.
timed_list() {
  local start end try rc
  TIMES=()
  BEST=999999
  for try in 1 2 3; do
    start=${EPOCHREALTIME/[.,]/}
    rc=0
    "$DLOCK" "$@" >"$T/list.out" 2>"$T/list.err" || rc=$?
    end=${EPOCHREALTIME/[.,]/}
    [ "$rc" -eq 0 ] || { cat "$T/list.err" >&2; return 1; }
    TIMES+=($(( (end - start) / 1000 )))
    [ "${TIMES[-1]}" -lt "$BEST" ] && BEST=${TIMES[-1]}
    [ "$BEST" -lt 1000 ] && break
  done
  return 0
}

@test "list of 2000 locks still works with a short --connect-timeout: each request has its own" {
  rcli eval "
    for i = 1, 2000 do
      local k = 'dlock:{many-' .. i .. '}'
      redis.call('SET', k, 't' .. i, 'PX', 120000)
      redis.call('HSET', k .. ':holder', 'host', 'h', 'pid', tostring(i), 'user', 'u',
                 'command', 'c', 'fence', tostring(i))
      redis.call('PEXPIRE', k .. ':holder', 120000)
    end" 0 >/dev/null
  run -0 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:$REDIS_PORT" --connect-timeout 300ms list
  [ "${#lines[@]}" -eq 2001 ]
}

@test "status and list stay valid with awkward keys and command lines (UTF-8, tabs, newlines)" {
  local key='q"b\ é' long
  long=$(printf 'é%.0s' $(seq 200))
  # The recorded command line is truncated; here the cut falls inside a two-byte character.
  start_bg holder "$DLOCK" run -k "$key" -t 20s --record-command -- sh -c 'exec sleep 30' "$(printf 'a\tb\nc')" "x$long"
  wait_for "key_exists '$key'" 10

  run -0 --separate-stderr "$DLOCK" status "$key" --json
  json_ok '
assert d["key"] == A[0], d["key"]
c = d["holder"]["command"]
assert c.startswith("sh -c exec sleep 30 a\tb\nc x\u00e9"), repr(c[:40])
assert len(c.encode()) <= 256, len(c.encode())
assert set(c[len("sh -c exec sleep 30 a\tb\nc x"):]) <= {"\u00e9", "\ufffd"}, repr(c[-10:])
' "$key"
  run -0 --separate-stderr "$DLOCK" list --json
  json_ok 'assert [s["key"] for s in d["locks"]] == [A[0]], d' "$key"

  # Human output: one line per field, one row per lock.
  run -0 --separate-stderr "$DLOCK" status "$key"
  [ "${#lines[@]}" -eq 8 ]
  assert_line --regexp '^command: +sh -c exec sleep 30 a(\\t|.)b(\\n|.)c x'
  run -0 --separate-stderr "$DLOCK" list
  [ "${#lines[@]}" -eq 2 ]
  [[ ${lines[1]} == "$key "* ]]
}

# Every key and value in Redis, as text (hashes, strings, lists, sorted sets).
store_text() {
  local k
  for k in $(rcli --scan); do
    echo "$k"
    case $(rcli type "$k") in
    hash) rcli hgetall "$k" ;;
    string) rcli get "$k" ;;
    list) rcli lrange "$k" 0 -1 ;;
    zset) rcli zrange "$k" 0 -1 withscores ;;
    esac
  done
}

@test "only the program's name is recorded for status and list; the whole line with --record-command (or the config file)" {
  # -c 'STRING' is sh's; an argument never reaches the store
  start_bg secret "$DLOCK" run -k sec -t 20s -c 'exec sleep 30 # secret-in-c'
  start_bg argv "$DLOCK" run -k arg -t 20s -- /usr/bin/env SECRET=secret-in-argv sleep 31
  wait_for "key_exists sec && key_exists arg" 10
  run -0 --separate-stderr "$DLOCK" status sec --json
  json_ok 'assert d["holder"]["command"] == "sh", d["holder"]'
  run -0 --separate-stderr "$DLOCK" status arg
  assert_line --regexp '^command: +env$'
  run -0 --separate-stderr "$DLOCK" list --json
  refute_output --partial secret
  run -0 store_text
  refute_output --partial secret
  # --record-command: the whole (truncated) line
  start_bg whole "$DLOCK" run -k whole -t 20s --record-command -- sh -c 'exec sleep 32' shown-arg
  wait_for "key_exists whole" 10
  run -0 --separate-stderr "$DLOCK" status whole --json
  json_ok 'assert d["holder"]["command"] == "sh -c exec sleep 32 shown-arg", d["holder"]'
  # the same from the config file's [run] section
  printf '[run]\nrecord-command = true\n' >"$T/dlock.conf"
  chmod 600 "$T/dlock.conf"
  start_bg conf "$DLOCK" --config "$T/dlock.conf" run -k conf -t 20s -- sh -c 'exec sleep 33' conf-arg
  wait_for "key_exists conf" 10
  run -0 --separate-stderr "$DLOCK" status conf
  assert_line --regexp '^command: +sh -c exec sleep 33 conf-arg$'
}

@test "acquire records its caller's program name, never the caller's command line" {
  cat >"$T/step.sh" <<'EOS'
"$DLOCK" acquire -k caller -t 60s >"$T/caller.token"
EOS
  run -0 bash "$T/step.sh" caller-secret-arg
  run -0 --separate-stderr "$DLOCK" status caller --json
  json_ok 'assert d["holder"]["command"] == "bash", d["holder"]'
  run -0 store_text
  refute_output --partial caller-secret-arg
  run -0 "$DLOCK" release -k caller --token "$(cat "$T/caller.token")"
}

# prom_ok PYTHON [ARG...]: parses $output with the Prometheus project's own parser
# (prometheus_client) into `m`, {(name, key): value}, and `labels`, {(name, key): labels}, checks
# that no series comes twice and that each family has its HELP and TYPE once, and runs the
# python statements with A = the extra arguments.
prom_ok() {
  local code=$1
  shift
  printf '%s' "$output" | /usr/bin/python3 -c "
import collections, sys, time
from prometheus_client.parser import text_string_to_metric_families
A = sys.argv[1:]
text = sys.stdin.buffer.read().decode('utf-8')  # strict: the format is UTF-8
m, labels = {}, {}
for family in text_string_to_metric_families(text):
    assert family.type == 'gauge' and family.documentation, family
    for s in family.samples:
        assert (s.name, s.labels['key']) not in m, ('twice', s)
        m[(s.name, s.labels['key'])] = s.value
        labels[(s.name, s.labels['key'])] = s.labels
for kind in ('HELP', 'TYPE'):
    names = [l.split()[2] for l in text.splitlines() if l.startswith('# ' + kind + ' ')]
    assert len(names) == len(set(names)), (kind, collections.Counter(names))
$code
" "$@"
}

@test "list --format prometheus: one series per lock and family, parsed by prometheus_client; hostile key names" {
  /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || skip "python3-prometheus-client is not installed (packaging/install-deps.sh test)"
  # nothing held: nothing printed (a valid, empty exposition)
  run -0 --separate-stderr "$DLOCK" list --format prometheus
  [ -z "$output" ]
  local odd='q"b\}x é'
  hold_until "$odd" "$T/go" -t 20s
  start_bg waiter "$DLOCK" run -k "$odd" -w 30s -- true
  start_bg sem1 "$DLOCK" run -k sem --limit 3 -t 20s -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/go"
  start_bg sem2 "$DLOCK" run -k sem --limit 3 -t 20s -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/go"
  wait_for "[ \"\$(rcli zcard 'dlock:{sem}:holders')\" = 2 ] && [ \"\$(waiters '$odd')\" = 1 ]" 10
  # Another tenant's keys: a newline and a brace in the name, and two names that are not UTF-8
  # (which would both be U+FFFD: the second is left out rather than given twice).
  rcli set $'dlock:{ten\nant}' theirs >/dev/null
  rcli set $'dlock:{\xff}' theirs >/dev/null
  rcli set $'dlock:{\xfe}' theirs >/dev/null

  run -0 --separate-stderr "$DLOCK" list --format prometheus
  [[ $stderr == *"is left out: its name is another's once made UTF-8"* ]]
  prom_ok '
odd, now = A[0], time.time()
assert {k for (n, k) in m if n == "dlock_lock_held"} == {odd, "sem", "ten\nant", "\ufffd"}, m
assert m[("dlock_lock_held", odd)] == 1 and labels[("dlock_lock_held", odd)]["kind"] == "exclusive", labels
assert m[("dlock_lock_waiters", odd)] == 1 and m[("dlock_lock_holders", odd)] == 1, m
assert ("dlock_lock_limit", odd) not in m and m[("dlock_lock_command_ended", odd)] == 0, m
assert 0 < m[("dlock_lock_lease_remaining_seconds", odd)] <= 20, m
assert 0 <= m[("dlock_lock_held_seconds", odd)] < 60, m
assert abs(m[("dlock_lock_acquired_timestamp_seconds", odd)] - now) < 60, m
assert m[("dlock_lock_fencing_token", odd)] == int(A[1]), (m, A[1])
assert labels[("dlock_lock_held", "sem")]["kind"] == "limit", labels
assert m[("dlock_lock_holders", "sem")] == 2 and m[("dlock_lock_limit", "sem")] == 3, m
assert m[("dlock_lock_waiters", "sem")] == 0, m
' "$odd" "$("$DLOCK" status "$odd" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["last_fencing_token"])')"
  # PATTERN as for the table
  run -0 --separate-stderr "$DLOCK" list 'se?' --format prometheus
  prom_ok 'assert {k for (n, k) in m} == {"sem"}, m'

  # --json is --format json; a format it does not know, or two that disagree, is 64
  run -0 --separate-stderr "$DLOCK" list 'se?' --format json
  json_ok 'assert [s["key"] for s in d["locks"]] == ["sem"], d'
  run -0 --separate-stderr "$DLOCK" list 'se?' --json --format json
  json_ok 'assert [s["key"] for s in d["locks"]] == ["sem"], d'
  run -64 --separate-stderr "$DLOCK" list --format yaml
  [ "$stderr" = "dlock: --format must be table, json or prometheus (got 'yaml') (see 'dlock list --help')" ]
  run -64 --separate-stderr "$DLOCK" list --json --format prometheus
  [[ $stderr == *"--json and --format prometheus cannot be used together"* ]]
  touch "$T/go"
}

@test "list --format prometheus on file:// (no server): held, waiters, holders" {
  /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || skip "python3-prometheus-client is not installed (packaging/install-deps.sh test)"
  local url=file://$T/locks
  start_bg holder "$DLOCK" -u "$url" run -k 'job "1"' -- sh -c 'touch "$0"; until [ -e "$1" ]; do sleep 0.02; done' "$T/in" "$T/go"
  started holder '[ -e "$T/in" ]'
  start_bg waiter "$DLOCK" -u "$url" run -k 'job "1"' -w 30s -- true
  wait_for "\"\$DLOCK\" -u '$url' status 'job \"1\"' --json | grep -q '\"waiters\":1'" 10
  run -0 --separate-stderr "$DLOCK" -u "$url" list --format prometheus
  prom_ok '
k = "job \"1\""
assert {key for (n, key) in m} == {k}, m
assert m[("dlock_lock_held", k)] == 1 and labels[("dlock_lock_held", k)]["kind"] == "exclusive", labels
assert m[("dlock_lock_waiters", k)] == 1 and m[("dlock_lock_holders", k)] == 1, m
assert ("dlock_lock_lease_remaining_seconds", k) not in m, m  # the lock lives with its process
'
  touch "$T/go"
}
