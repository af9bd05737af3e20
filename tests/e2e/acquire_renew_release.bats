#!/usr/bin/env bats
# Holding a lock across the steps of a script: acquire (the token, --json, the fencing token,
# conflicts, --wait), renew and release by token or DLOCK_TOKEN, release --force evicting a
# running holder, and a three-step CI script. JSON is checked with json_ok (helpers.bash).

load ../lib/helpers

# ---------------------------------------------------------------------------------------------
# acquire, renew, release

@test "acquire prints the token alone; renew and release by token; DLOCK_TOKEN" {
  run -0 --separate-stderr "$DLOCK" acquire -k ar -t 4s
  [ -z "$stderr" ]
  [ "${#lines[@]}" -eq 1 ]
  [[ $output =~ ^[0-9a-f]{32}$ ]]
  local tok=$output
  run -0 rcli get 'dlock:{ar}'
  assert_output "$tok"
  run -0 "$DLOCK" status ar

  # Without --ttl, renew restores the lease length given at acquire.
  sleep 1.2
  run rcli pttl 'dlock:{ar}'
  [ "$output" -le 2900 ]
  run -0 --separate-stderr "$DLOCK" renew -k ar --token "$tok"
  [ -z "$output" ]
  [ -z "$stderr" ]
  run rcli pttl 'dlock:{ar}'
  [ "$output" -gt 3000 ]
  [ "$output" -le 4000 ]

  # --ttl sets a new lease length, for the holder metadata too.
  run -0 "$DLOCK" renew -k ar --token "$tok" --ttl 10s
  run rcli pttl 'dlock:{ar}'
  [ "$output" -gt 9000 ]
  [ "$output" -le 10000 ]
  run rcli pttl 'dlock:{ar}:holder'
  [ "$output" -gt 9000 ]
  [ "$output" -le 10000 ]
  run -0 "$DLOCK" status ar --json
  json_ok 'assert 9000 < d["ttl_ms"] <= 10000, d'

  # A wrong token neither renews nor releases.
  local wrong=0123456789abcdef0123456789abcdef
  run -76 --separate-stderr "$DLOCK" renew -k ar --token "$wrong" --ttl 30s
  [ -z "$output" ]
  [[ $stderr == dlock:* ]]
  run rcli pttl 'dlock:{ar}'
  [ "$output" -le 10000 ]
  run -76 "$DLOCK" release -k ar --token "$wrong"
  run -0 rcli get 'dlock:{ar}'
  assert_output "$tok"
  DLOCK_TOKEN=$wrong run -76 "$DLOCK" renew -k ar
  DLOCK_TOKEN=$wrong run -76 "$DLOCK" release -k ar
  run -0 "$DLOCK" status ar

  # DLOCK_TOKEN works for renew.
  DLOCK_TOKEN=$tok run -0 "$DLOCK" renew -k ar -t 5s
  run rcli pttl 'dlock:{ar}'
  [ "$output" -gt 4000 ]
  [ "$output" -le 5000 ]

  # The right token releases, once.
  run -0 --separate-stderr "$DLOCK" release -k ar --token "$tok"
  [ -z "$output" ]
  [ -z "$stderr" ]
  run -0 rcli exists 'dlock:{ar}' 'dlock:{ar}:holder'
  assert_output 0
  run -1 "$DLOCK" status ar
  run -76 "$DLOCK" release -k ar --token "$tok"
  run -76 "$DLOCK" renew -k ar --token "$tok"
  run -0 rcli exists 'dlock:{ar}'
  assert_output 0

  # DLOCK_TOKEN works for release.
  tok=$("$DLOCK" acquire -k ar -t 5s)
  DLOCK_TOKEN=$tok run -0 "$DLOCK" release -k ar
  run -0 rcli exists 'dlock:{ar}'
  assert_output 0
}

@test "acquire records the calling script as the holder: its pid and program name" {
  cat >"$T/ci-step.sh" <<'EOF'
echo $$ >"$T/step.pid.txt"
"$DLOCK" acquire -k parent -t 60s >"$T/step.token"
rc=$?
exit $rc
EOF
  run -0 sh "$T/ci-step.sh" marker-arg
  local pid
  pid=$(cat "$T/step.pid.txt")
  run -0 "$DLOCK" status parent --json
  json_ok '
assert d["holder"]["pid"] == int(A[0]), (d["holder"], A[0])
assert d["holder"]["command"] == "sh", d["holder"]
' "$pid" "$T/ci-step.sh"
  run -0 "$DLOCK" status parent
  assert_line --regexp "^holder: +.* pid $pid\$"
  assert_line --regexp "^command: +sh\$"
  run -0 "$DLOCK" release -k parent --token "$(cat "$T/step.token")"
}

@test "acquire: -n and --wait conflicts (75, -E), usage errors (64), expiry on its own" {
  local tok
  tok=$("$DLOCK" acquire -k c -t 60s)
  [[ $tok =~ ^[0-9a-f]{32}$ ]]

  run -75 --separate-stderr "$DLOCK" acquire -k c -t 5s -n
  [ -z "$output" ]
  run -75 --separate-stderr "$DLOCK" acquire -k c -t 5s --no-wait --json
  [ -z "$output" ]
  run -3 --separate-stderr "$DLOCK" acquire -k c -t 5s -E 3 -n
  [ -z "$output" ]
  run -0 rcli get 'dlock:{c}'
  assert_output "$tok"

  local start took
  start=$(now_ms)
  run -75 --separate-stderr "$DLOCK" acquire -k c -t 5s --wait 1s
  took=$(( $(now_ms) - start ))
  [ -z "$output" ]
  [ "$took" -ge 1000 ]
  [ "$took" -lt 3000 ]
  start=$(now_ms)
  run -4 "$DLOCK" acquire -k c -t 5s -w 1s -E 4
  took=$(( $(now_ms) - start ))
  [ "$took" -ge 1000 ]
  [ "$took" -lt 3000 ]
  run -0 rcli get 'dlock:{c}'
  assert_output "$tok"

  # --wait gets the lock when the holder lets go in time.
  start_bg holder "$DLOCK" run -k w -t 10s -- sh -c 'touch "$1"; sleep 1.5' sh "$T/w.started"
  wait_for '[ -e "$T/w.started" ]' 10
  run -0 --separate-stderr "$DLOCK" acquire -k w -t 5s -w 20s
  [[ $output =~ ^[0-9a-f]{32}$ ]]
  local wtok=$output
  run -0 rcli get 'dlock:{w}'
  assert_output "$wtok"

  # Usage errors: nothing printed on stdout, nothing written.
  run -64 --separate-stderr "$DLOCK" acquire -k u
  [ -z "$output" ]
  [[ $stderr == dlock:* ]]
  run -64 "$DLOCK" acquire -k u -t 0.5s
  run -64 "$DLOCK" acquire -k u -t 0
  run -64 "$DLOCK" acquire -k u -t 10x
  run -64 "$DLOCK" acquire -t 5s
  run -64 "$DLOCK" acquire -k '' -t 5s
  run -64 "$DLOCK" acquire -k "$(printf 'a\nb')" -t 5s
  run -64 "$DLOCK" acquire -k u -t 5s -w 1s -n
  run -64 "$DLOCK" acquire -k u -t 5s -w soon
  run -64 "$DLOCK" renew -k u
  run -64 "$DLOCK" renew -k u --token "$tok" -t 0.5s
  run -64 "$DLOCK" release -k u
  run -64 --separate-stderr "$DLOCK" release -k c
  [[ $stderr == dlock:* ]]
  run -64 "$DLOCK" release -k c --token "$tok" --force
  run -0 rcli exists 'dlock:{u}' 'dlock:{u}:holder' 'dlock:{u}:fence'
  assert_output 0
  run -0 rcli get 'dlock:{c}'
  assert_output "$tok"

  # 69 when unreachable, for each subcommand.
  local none="unix://$T/none.sock"
  run -69 --separate-stderr "$DLOCK" -u "$none" acquire -k u -t 5s
  [ -z "$output" ]
  run -69 "$DLOCK" -u "$none" renew -k u --token "$tok"
  run -69 "$DLOCK" -u "$none" release -k u --token "$tok"
  run -69 "$DLOCK" -u "$none" release -k u --force

  # A lock acquired and never released expires by itself after its TTL.
  "$DLOCK" acquire -k e -t 2s >/dev/null
  key_exists e
  wait_for '! key_exists e' 5
  run -0 rcli exists 'dlock:{e}:holder'
  assert_output 0
  run -1 "$DLOCK" status e
  run -0 --separate-stderr "$DLOCK" acquire -k e -t 5s -n
  [[ $output =~ ^[0-9a-f]{32}$ ]]
}

@test "acquire --json: version, key, token, fencing_token, ttl_ms; the fencing token increases by one" {
  run -0 --separate-stderr "$DLOCK" acquire -k js -t 30s --json
  [ -z "$stderr" ]
  [ "${#lines[@]}" -eq 1 ]
  json_ok '
assert set(d) == {"version", "key", "token", "fencing_token", "ttl_ms"}, sorted(d)
assert d["version"] == 1 and is_int(d["version"]), d
assert d["key"] == "js", d
assert type(d["token"]) is str and re.match(r"^[0-9a-f]{32}$", d["token"]), d
assert is_int(d["fencing_token"]) and d["fencing_token"] >= 1, d
assert is_int(d["ttl_ms"]) and d["ttl_ms"] == 30000, d
'
  local tok first
  tok=$(json_ok 'print(d["token"])')
  first=$(json_ok 'print(d["fencing_token"])')
  run -0 rcli get 'dlock:{js}'
  assert_output "$tok"
  run -0 "$DLOCK" status js --json
  json_ok 'assert d["fencing_token"] == int(A[0]) and 0 < d["ttl_ms"] <= 30000, d' "$first"
  run -0 "$DLOCK" release -k js --token "$tok"

  # Every acquisition of the key, whichever way, takes the next fencing token.
  local expected
  for expected in $((first + 1)) $((first + 2)) $((first + 3)); do
    run -0 "$DLOCK" acquire -k js -t 1m --json
    tok=$(json_ok '
assert d["fencing_token"] == int(A[0]) and d["ttl_ms"] == 60000, d
print(d["token"])' "$expected")
    run -0 rcli hget 'dlock:{js}:holder' fence
    assert_output "$expected"
    run -0 "$DLOCK" release -k js --token "$tok"
  done
  run -1 "$DLOCK" status js --json
  json_ok 'assert d["fencing_token"] is None and d["last_fencing_token"] == int(A[0]) + 3, d' "$first"
  run -0 "$DLOCK" run -k js -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  assert_output $((first + 4))
  "$DLOCK" acquire -k js -t 1m >/dev/null
  run -0 "$DLOCK" release -k js --force
  run -0 "$DLOCK" acquire -k js -t 1m --json
  json_ok 'assert d["fencing_token"] == int(A[0]) + 6, d' "$first"
  # A different key has its own counter.
  run -0 "$DLOCK" acquire -k js2 -t 1m --json
  local other
  other=$(json_ok 'print(d["fencing_token"])')
  run -0 rcli get 'dlock:{js2}:fence'
  assert_output "$other"
  run -0 rcli get 'dlock:{js}:fence'
  assert_output $((first + 6))
}

# ---------------------------------------------------------------------------------------------
# release --force

@test "release --force evicts a running holder, which exits 76; force on a free lock is 0" {
  start_bg runner "$DLOCK" run -k fr -t 2s -- sh -c 'echo $$ >"$1"; exec sleep 30' sh "$T/cmd.pid"
  local runner=$BG_PID
  wait_for '[ -s "$T/cmd.pid" ] && key_exists fr' 10
  local cmd_pid
  cmd_pid=$(cat "$T/cmd.pid")

  local start
  start=$(now_ms)
  run -0 --separate-stderr "$DLOCK" release -k fr --force
  [ -z "$output" ]
  [[ $stderr == *evicted* ]]
  [[ $stderr == *"pid $runner"* ]]
  [[ $stderr == *"(sh)"* ]] # the program name, as recorded
  [ "$(printf '%s\n' "$stderr" | grep -c evicted)" -eq 1 ]
  run -0 rcli exists 'dlock:{fr}' 'dlock:{fr}:holder'
  assert_output 0

  # The runner finds out at its next renewal, stops the command and exits 76.
  wait_for "! alive $runner" 10
  local rc=0
  wait "$runner" || rc=$?
  [ "$rc" -eq 76 ]
  [ $(( $(now_ms) - start )) -lt 8000 ]
  refute alive "$cmd_pid"
  [ "$(rcli exists 'dlock:{fr}')" = 0 ]

  # Force on a free lock: 0, and nobody evicted.
  run -0 --separate-stderr "$DLOCK" release -k fr --force
  [[ $stderr != *evicted* ]]
  run -0 "$DLOCK" release -k never-held --force

  # Force on a lock taken with acquire names the calling script.
  bash -c 'echo $$ >"$1"; "$DLOCK" acquire -k fa -t 60s >/dev/null; exit $?' script "$T/script-pid"
  run -0 --separate-stderr "$DLOCK" release -k fa --force
  [[ $stderr == *evicted*"pid $(cat "$T/script-pid")"* ]]
  run -1 "$DLOCK" status fa

  # In another namespace.
  "$DLOCK" --prefix other: acquire -k fa -t 60s >/dev/null
  run -0 rcli exists 'other:{fa}'
  assert_output 1
  run -0 --separate-stderr "$DLOCK" --prefix other: release -k fa --force
  [[ $stderr == *evicted* ]]
  run -0 rcli exists 'other:{fa}'
  assert_output 0
}

# ---------------------------------------------------------------------------------------------
# A CI job holding a lock across several steps

@test "a three-step CI script holds the lock across steps; competitors get 75 until it releases" {
  cat >"$T/ci.sh" <<'EOF'
# Steps wait for the test to say go, so competitors run exactly between them.
wait_go() {
  i=0
  until [ -e "$T/$1" ]; do
    sleep 0.05
    i=$((i + 1))
    [ "$i" -lt 600 ] || exit 9
  done
}
set -e
echo $$ >"$T/ci.pid.txt"
TOKEN=$("$DLOCK" acquire -k deploy -t 5s)
echo "$TOKEN" >"$T/token"
echo step1 >>"$T/log"
touch "$T/after-step1"
wait_go go2
"$DLOCK" renew -k deploy --token "$TOKEN"
echo step2 >>"$T/log"
touch "$T/after-step2"
wait_go go3
"$DLOCK" release -k deploy --token "$TOKEN"
echo released >>"$T/log"
EOF
  start_bg ci sh "$T/ci.sh"
  local ci=$BG_PID
  wait_for '[ -e "$T/after-step1" ]' 10 || { cat "$T/ci.err" >&2; false; }
  local ci_pid tok
  ci_pid=$(cat "$T/ci.pid.txt")
  tok=$(cat "$T/token")
  [[ $tok =~ ^[0-9a-f]{32}$ ]]

  # Between step 1 and step 2 (the lease is 5s: nothing slow here): the script holds the
  # lock; a competitor does not run.
  run -0 "$DLOCK" status deploy
  assert_line --regexp "^holder: +.* pid $ci_pid\$"
  assert_line --regexp '^command: +sh$'
  run -75 "$DLOCK" run -k deploy -n -- touch "$T/competitor-ran"
  [ ! -e "$T/competitor-ran" ]
  sleep 0.5
  local before
  before=$(rcli pttl 'dlock:{deploy}')
  [ "$before" -gt 0 ]
  [ "$before" -lt 4600 ]
  touch "$T/go2"

  # Between step 2 and release: the lease was renewed to its full length.
  wait_for '[ -e "$T/after-step2" ]' 10 || { cat "$T/ci.err" >&2; false; }
  run rcli pttl 'dlock:{deploy}'
  [ "$output" -gt "$before" ]
  [ "$output" -gt 3000 ]
  [ "$output" -le 5000 ]
  run -0 rcli get 'dlock:{deploy}'
  assert_output "$tok"
  run -75 "$DLOCK" run -k deploy -n -c "touch '$T/competitor-ran'"
  [ ! -e "$T/competitor-ran" ]
  touch "$T/go3"

  wait_for "! alive $ci" 10
  local rc=0
  wait "$ci" || rc=$?
  [ "$rc" -eq 0 ]
  run -0 cat "$T/log"
  assert_output $'step1\nstep2\nreleased'
  run -0 rcli exists 'dlock:{deploy}'
  assert_output 0
  run -0 "$DLOCK" run -k deploy -n -- echo ran
  assert_output ran
}
