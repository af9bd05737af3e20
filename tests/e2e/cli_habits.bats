#!/usr/bin/env bats
# The command line keeps its promises on every path: durations (empty, too large, days), one
# value per -u, DLOCK_URL split on blanks, flock's --timeout and -x, errors that name the right
# help, the waiting line on a real terminal (tmux), and --connect-timeout for status and list.

load helpers

setup_file() { start_redis; }
teardown_file() { stop_redis; }
setup() { reset_redis; }

teardown() {
  if [ -n "${TMUX_SOCKET:-}" ]; then
    tmux -L "$TMUX_SOCKET" kill-server 2>/dev/null || true
  fi
  if [ -n "${SILENT_PID:-}" ]; then
    kill "$SILENT_PID" 2>/dev/null || true
    wait "$SILENT_PID" 2>/dev/null || true
  fi
}

# ---------------------------------------------------------------------------------------------
# durations

# usage_error_naming OPTION DLOCK-ARGS...: dlock exits 64 at once with one line that names
# OPTION and the help of the subcommand, runs nothing and writes nothing to Redis.
usage_error_naming() {
  local option=$1 start sub word
  shift
  for word in "$@"; do
    case $word in run | status | list | acquire | renew | release) sub=$word; break ;; esac
  done
  start=$(now_ms)
  run -64 --separate-stderr "$DLOCK" "$@"
  [ $(( $(now_ms) - start )) -lt 1000 ] || fail "took $(( $(now_ms) - start )) ms: $*"
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ] || fail "not one line: $stderr"
  [[ $stderr == dlock:*"$option"* ]] || fail "does not name $option: $stderr"
  [[ $stderr == *"(see 'dlock $sub --help')" ]] || fail "does not name dlock $sub --help: $stderr"
  refute_output --partial ran
  [ "$(rcli dbsize)" = 0 ] || fail "wrote to Redis: $*"
}

@test "an empty duration is a usage error for every duration option, never 'not given'" {
  local ran='echo ran'
  usage_error_naming --ttl run -k k -t '' -- $ran
  usage_error_naming --ttl run -k k --ttl= -- $ran
  usage_error_naming --wait run -k k -w '' -- $ran
  usage_error_naming --wait run -k k --timeout '' -- $ran # one option, three names
  usage_error_naming --kill-after run -k k --kill-after '' -- $ran
  usage_error_naming --max-hold run -k k --max-hold '' -- $ran
  usage_error_naming --connect-timeout --connect-timeout '' run -k k -- $ran
  usage_error_naming --ttl acquire -k k -t ''
  usage_error_naming --wait acquire -k k -t 10s -w ''
  usage_error_naming --ttl renew -k k --token abc -t ''
  usage_error_naming --connect-timeout --connect-timeout '' list
  usage_error_naming --connect-timeout --connect-timeout '' status k
}

@test "a duration too large to represent is a usage error, at once, naming the maximum" {
  local huge big_number
  big_number=1$(printf '0%.0s' $(seq 400))
  for huge in 3000000h 2562048h 36501d 100000000000000000000s "$big_number" 1d36500d; do
    usage_error_naming --ttl run -k k -t "$huge" -- echo ran
    [[ $stderr == *"at most 36500d"* ]] || fail "no maximum named: $stderr"
    usage_error_naming --wait run -k k -w "$huge" -- echo ran
    usage_error_naming --max-hold run -k k --max-hold "$huge" -- echo ran
    usage_error_naming --kill-after run -k k --kill-after "$huge" -- echo ran
    usage_error_naming --connect-timeout --connect-timeout "$huge" run -k k -- echo ran
    usage_error_naming --ttl acquire -k k -t "$huge"
    usage_error_naming --ttl renew -k k --token abc -t "$huge"
  done
}

@test "1d is a day, and the largest duration (36500d) works for every option" {
  run -0 "$DLOCK" run -k k -t 1d -- sh -c 'echo $DLOCK_TTL_MS'
  assert_output 86400000
  run -0 "$DLOCK" run -k k -t 1d2h -- sh -c 'echo $DLOCK_TTL_MS'
  assert_output 93600000
  run -0 "$DLOCK" --connect-timeout 36500d run -k k -t 36500d -w 36500d --kill-after 36500d \
    --max-hold 36500d -- sh -c 'redis-cli -s "$REDIS_SOCK" pttl "dlock:{$DLOCK_KEY}"; echo $DLOCK_TTL_MS'
  [ "${lines[0]}" -gt 3153599000000 ] && [ "${lines[0]}" -le 3153600000000 ]
  assert_line --index 1 3153600000000
  run -0 --separate-stderr "$DLOCK" acquire -k k -t 36500d
  local token=$output
  run -0 "$DLOCK" renew -k k --token "$token" -t 36500d
  run -0 "$DLOCK" release -k k --token "$token"
  run -0 "$DLOCK" --connect-timeout 36500d list
}

# ---------------------------------------------------------------------------------------------
# -u / DLOCK_URL

@test "-u takes one value per occurrence: the words after it are the command" {
  run -0 --separate-stderr "$DLOCK" run -k k -u "unix://$REDIS_SOCK" echo hi
  assert_output hi
  run -0 "$DLOCK" run -k k --url "unix://$REDIS_SOCK" echo hi there
  assert_output 'hi there'
  # Several -u are still several URLs (refused until Redlock exists).
  run -64 --separate-stderr "$DLOCK" -u "unix://$REDIS_SOCK" run -k k -u "unix://$REDIS_SOCK" -- true
  [[ $stderr == *"2 URLs given"*Redlock* ]]
}

@test "a comma does not split a URL (Sentinel URLs list hosts with commas)" {
  run -64 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:1,127.0.0.1:2" status k
  [[ $stderr != *"URLs given"* ]] || fail "split at the comma: $stderr"
  run -69 --separate-stderr "$DLOCK" --url="unix://$REDIS_SOCK,unix://$REDIS_SOCK" status k
  [[ $stderr == *"$REDIS_SOCK,unix://$REDIS_SOCK"* ]] || fail "split at the comma: $stderr"
}

@test "DLOCK_URL holds several URLs separated by blanks; -u wins over it" {
  DLOCK_URL="unix://$REDIS_SOCK unix://$REDIS_SOCK" run -64 --separate-stderr "$DLOCK" run -k k -- echo ran
  [[ $stderr == *"2 URLs given"*Redlock* ]]
  refute_output --partial ran
  DLOCK_URL=$'unix://'"$REDIS_SOCK"$'\t\n unix://'"$REDIS_SOCK" run -64 --separate-stderr "$DLOCK" status k
  [[ $stderr == *"2 URLs given"* ]]
  DLOCK_URL="  unix://$REDIS_SOCK  " run -0 "$DLOCK" run -k k -- echo ran
  assert_output ran
  DLOCK_URL="unix://$REDIS_SOCK unix://$REDIS_SOCK" run -0 "$DLOCK" -u "unix://$REDIS_SOCK" run -k k -- echo ran
  assert_output ran
}

# ---------------------------------------------------------------------------------------------
# flock's spellings

@test "--timeout is flock's long name for -w; -x/--exclusive (the default) is accepted" {
  "$DLOCK" run -k held -- sleep 5 &
  wait_for '[ "$(rcli exists "dlock:{held}")" = 1 ]'
  local start=$(now_ms) took
  run -75 "$DLOCK" run -k held --timeout 500ms -- echo ran
  took=$(( $(now_ms) - start ))
  [ "$took" -ge 500 ] && [ "$took" -lt 1500 ]
  refute_output --partial ran
  run -75 "$DLOCK" run -k held --timeout=300ms -x -- true
  run -75 "$DLOCK" run --exclusive -k held -n -- true
  run -75 --separate-stderr "$DLOCK" acquire -k held -t 10s --timeout 300ms --exclusive
  [ -z "$output" ]
  run -64 "$DLOCK" run -k held --timeout 1s -n -- true
  kill %1; wait || true
  run -0 "$DLOCK" run -x -k free --timeout 1s -- echo ran
  assert_output ran
  run -0 --separate-stderr "$DLOCK" acquire -x -k free -t 10s --timeout 1s
}

# ---------------------------------------------------------------------------------------------
# errors

@test "parse errors name the subcommand's help, or dlock --help before a subcommand" {
  local sub
  for sub in run status list acquire renew release; do
    run -64 --separate-stderr "$DLOCK" "$sub" --bogus
    [[ $stderr == *"--bogus"*"(see 'dlock $sub --help')" ]] || fail "$sub: $stderr"
  done
  run -64 --separate-stderr "$DLOCK" --bogus
  [[ $stderr == *"--bogus"*"(see 'dlock --help')" ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" frobnicate
  [[ $stderr == *"(see 'dlock --help')" ]] || fail "$stderr"
}

@test "usage errors found after parsing name the subcommand's help too" {
  run -64 --separate-stderr "$DLOCK" run -k k -t 10x -- true
  [[ $stderr == *"(see 'dlock run --help')" ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" run -k k
  [[ $stderr == *"(see 'dlock run --help')" ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" status ''
  [[ $stderr == *"(see 'dlock status --help')" ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" acquire -k k
  [[ $stderr == *--ttl*"(see 'dlock acquire --help')" ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" release -k k
  [[ $stderr == *"(see 'dlock release --help')" ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" -u http://h list
  [[ $stderr == *"(see 'dlock list --help')" ]] || fail "$stderr"
}

@test "an unknown option wins over a missing required option" {
  run -64 --separate-stderr "$DLOCK" run --limit 2 -- true
  [[ $stderr == *"unknown option --limit"* ]] || fail "$stderr"
  [[ $stderr != *"--key"* ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" acquire --shared
  [[ $stderr == *"unknown option --shared"* ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" renew --bogus
  [[ $stderr == *"unknown option --bogus"* ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" status --bogus
  [[ $stderr == *"unknown option --bogus"* ]] || fail "$stderr"
  # Alone, a missing --key is still reported.
  run -64 --separate-stderr "$DLOCK" run -- true
  [[ $stderr == *"--key is required"* ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" status
  [[ $stderr == *"KEY is required"* ]] || fail "$stderr"
}

@test "renew does not suggest a --force it does not have" {
  run -64 --separate-stderr "$DLOCK" renew -k k --token ''
  [[ $stderr == *--token* ]] || fail "$stderr"
  [[ $stderr != *--force* ]] || fail "$stderr"
  run -64 --separate-stderr env -u DLOCK_TOKEN "$DLOCK" renew -k k
  [[ $stderr == *--token* ]] || fail "$stderr"
  [[ $stderr != *--force* ]] || fail "$stderr"
  run -64 --separate-stderr env -u DLOCK_TOKEN "$DLOCK" release -k k
  [[ $stderr == *--token*--force* ]] || fail "$stderr"
}

@test "release --force works with a DLOCK_TOKEN in the environment; --token with --force is 64" {
  run -0 --separate-stderr "$DLOCK" acquire -k k -t 30s
  local token=$output
  DLOCK_TOKEN=stale-token-of-an-earlier-step run -0 "$DLOCK" release -k k --force
  run -0 rcli exists 'dlock:{k}'
  assert_output 0
  run -64 --separate-stderr "$DLOCK" release -k k --token "$token" --force
  [[ $stderr == *--token*--force* ]] || fail "$stderr"
  # DLOCK_TOKEN still serves renew and release; --token wins over it.
  run -0 --separate-stderr "$DLOCK" acquire -k k -t 30s
  token=$output
  DLOCK_TOKEN=$token run -0 "$DLOCK" renew -k k
  DLOCK_TOKEN=wrong run -0 "$DLOCK" renew -k k --token "$token"
  DLOCK_TOKEN=$token run -0 "$DLOCK" release -k k
  DLOCK_TOKEN='' run -64 "$DLOCK" release -k k
}

@test "a directory as --password-file is a configuration error that says so" {
  mkdir -p "$BATS_TEST_TMPDIR/pwdir"
  run -78 --separate-stderr "$DLOCK" --password-file "$BATS_TEST_TMPDIR/pwdir" run -k k -- echo ran
  [[ $stderr == *"pwdir"*"is a directory"* ]] || fail "$stderr"
  refute_output --partial ran
  run -78 --separate-stderr "$DLOCK" --password-file "$BATS_TEST_TMPDIR/pwdir" status k
  [[ $stderr == *"is a directory"* ]] || fail "$stderr"
}

# ---------------------------------------------------------------------------------------------
# the waiting line, on a real terminal

# pane: the text of the tmux pane, one line per row, trailing blanks removed.
pane() { tmux -L "$TMUX_SOCKET" capture-pane -p -t waiter | sed 's/ *$//'; }

@test "the waiting line fits an 80-column terminal and is erased once the lock is taken" {
  command -v tmux >/dev/null || skip "tmux is not installed"
  export LC_ALL=C.UTF-8
  TMUX_SOCKET=dlock-test-$$
  # A holder whose command line is 300 characters long.
  local release=$BATS_TEST_TMPDIR/release
  "$DLOCK" run -k wl -- sh -c 'until [ -e "$0" ]; do sleep 0.05; done' "$release" \
    "$(printf 'x%.0s' $(seq 300))" &
  wait_for '[ "$(rcli exists "dlock:{wl}")" = 1 ]'

  tmux -u -L "$TMUX_SOCKET" -f /dev/null new-session -d -s waiter -x 80 -y 24 \
    "'$DLOCK' run -k wl -- echo acquired; sleep 60"
  wait_for 'pane | grep -q "waiting for lock"'
  sleep 2.5 # two redraws
  run -0 pane
  local -a drawn
  mapfile -t drawn < <(printf '%s\n' "$output" | grep -v '^$')
  printf 'pane: %s\n' "${drawn[@]}"
  [ "${#drawn[@]}" -eq 1 ] || fail "expected one line, got ${#drawn[@]}"
  [[ ${drawn[0]} == "dlock: waiting for lock 'wl' ("*"s), held by "* ]] || fail "${drawn[0]}"
  # 79 columns, but capture-pane drops trailing blanks
  [ "${#drawn[0]}" -le 79 ] && [ "${#drawn[0]}" -ge 75 ] || fail "${#drawn[0]} columns"

  touch "$release"
  wait_for 'pane | grep -q acquired'
  run -0 pane
  refute_output --partial 'waiting for lock'
  assert_line acquired
  wait
}

@test "the waiting line counts characters, not bytes, and is erased when the waiter gives up" {
  command -v tmux >/dev/null || skip "tmux is not installed"
  export LC_ALL=C.UTF-8
  TMUX_SOCKET=dlock-test-$$
  local key
  key=$(printf 'é%.0s' $(seq 100)) # 200 bytes
  "$DLOCK" run -k "$key" -- sleep 5 &
  wait_for "[ \"\$(rcli exists 'dlock:{$key}')\" = 1 ]"
  tmux -u -L "$TMUX_SOCKET" -f /dev/null new-session -d -s waiter -x 80 -y 24 \
    "'$DLOCK' run -k '$key' -w 2500ms -- true; echo exit=\$?; sleep 60"
  wait_for 'pane | grep -q "waiting for lock"'
  sleep 1.2
  run -0 pane
  # 79 characters: the 25 of "dlock: waiting for lock '" and 54 whole é.
  assert_line "dlock: waiting for lock '${key:0:54}"
  wait_for 'pane | grep -q "exit="' 5
  run -0 pane
  refute_output --partial 'dlock: waiting for lock'
  # The report of the holder begins where the waiting line was, on the first row.
  assert_line --index 0 --regexp "^dlock: gave up waiting for lock 'é+$"
  assert_line exit=75
  kill %1; wait || true
}

# ---------------------------------------------------------------------------------------------
# --connect-timeout for status and list

# silent_peer: a TCP server that accepts connections and never answers; sets SILENT_PORT.
silent_peer() {
  python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept()[0])
' >"$BATS_TEST_TMPDIR/silent.port" &
  SILENT_PID=$!
  wait_for '[ -s "$BATS_TEST_TMPDIR/silent.port" ]'
  SILENT_PORT=$(cat "$BATS_TEST_TMPDIR/silent.port")
}

@test "status and list give up after --connect-timeout on a peer that never answers" {
  silent_peer
  local cmd start took
  for cmd in list "list --json" "list 'a*'" "status k" "status k --json"; do
    start=$(now_ms)
    # shellcheck disable=SC2086
    run -69 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:$SILENT_PORT" --connect-timeout 500ms $cmd
    took=$(( $(now_ms) - start ))
    echo "$cmd: $took ms: $stderr"
    [ "$took" -ge 450 ] && [ "$took" -lt 1500 ] || fail "$cmd took $took ms"
    [ -z "$output" ]
    [[ $stderr == *"timed out"* ]] || fail "$stderr"
  done
  start=$(now_ms)
  DLOCK_CONNECT_TIMEOUT=500ms run -69 "$DLOCK" -u "redis://127.0.0.1:$SILENT_PORT" list
  took=$(( $(now_ms) - start ))
  [ "$took" -ge 450 ] && [ "$took" -lt 1500 ] || fail "DLOCK_CONNECT_TIMEOUT: list took $took ms"
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
