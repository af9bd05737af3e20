#!/usr/bin/env bats
# The command line keeps its promises on every path: durations (empty, too large, days), one
# value per -u, DLOCK_URL split on blanks, flock's --timeout and -x, usage errors that name the
# right help, a directory given as --password-file.

load ../lib/helpers

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
  [ "${lines[0]}" -gt 3153599000000 ]
  [ "${lines[0]}" -le 3153600000000 ]
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
  # Several -u are still several URLs: Redlock, which refuses the same server twice.
  run -64 --separate-stderr "$DLOCK" -u "unix://$REDIS_SOCK" run -k k -u "unix://$REDIS_SOCK" -- true
  [[ $stderr == *"given twice"*Redlock* ]] || fail "stderr: $stderr"
}

@test "a comma does not split a URL (Sentinel URLs list hosts with commas)" {
  run -64 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:1,127.0.0.1:2" status k
  [[ $stderr != *"given twice"* ]] || fail "split at the comma: $stderr"
  run -69 --separate-stderr "$DLOCK" --url="unix://$REDIS_SOCK,unix://$REDIS_SOCK" status k
  [[ $stderr == *"$REDIS_SOCK,unix://$REDIS_SOCK"* ]] || fail "split at the comma: $stderr"
}

@test "DLOCK_URL holds several URLs separated by blanks; -u wins over it" {
  DLOCK_URL="unix://$REDIS_SOCK unix://$REDIS_SOCK" run -64 --separate-stderr "$DLOCK" run -k k -- echo ran
  [[ $stderr == *"given twice"*Redlock* ]] || fail "stderr: $stderr"
  refute_output --partial ran
  DLOCK_URL=$'unix://'"$REDIS_SOCK"$'\t\n unix://'"$REDIS_SOCK" run -64 --separate-stderr "$DLOCK" status k
  [[ $stderr == *"given twice"* ]] || fail "stderr: $stderr"
  DLOCK_URL="  unix://$REDIS_SOCK  " run -0 "$DLOCK" run -k k -- echo ran
  assert_output ran
  DLOCK_URL="unix://$REDIS_SOCK unix://$REDIS_SOCK" run -0 "$DLOCK" -u "unix://$REDIS_SOCK" run -k k -- echo ran
  assert_output ran
}

# ---------------------------------------------------------------------------------------------
# flock's spellings

@test "--timeout is flock's long name for -w; -x/--exclusive (the default) is accepted" {
  hold held 5
  local start=$(now_ms) took
  run -75 "$DLOCK" run -k held --timeout 500ms -- echo ran
  took=$(( $(now_ms) - start ))
  [ "$took" -ge 500 ]
  [ "$took" -lt 1500 ]
  refute_output --partial ran
  run -75 "$DLOCK" run -k held --timeout=300ms -x -- true
  run -75 "$DLOCK" run --exclusive -k held -n -- true
  run -75 --separate-stderr "$DLOCK" acquire -k held -t 10s --timeout 300ms --exclusive
  [ -z "$output" ]
  run -64 "$DLOCK" run -k held --timeout 1s -n -- true
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
  run -64 --separate-stderr "$DLOCK" run --lmit 2 -- true
  [[ $stderr == *"unknown option --lmit"* ]] || fail "$stderr"
  [[ $stderr != *"--key"* ]] || fail "$stderr"
  run -64 --separate-stderr "$DLOCK" acquire --sharde
  [[ $stderr == *"unknown option --sharde"* ]] || fail "$stderr"
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

@test "a feature the store lacks is refused (64, one line) before any I/O, even with the store down" {
  # Nothing listens on port 1: a store asked before the feature is checked would end 69.
  local args url
  for args in "etcd://127.0.0.1:1 run --wait-replicas 1" \
    "postgres://dlock@127.0.0.1:1/db run --wait-replicas 1" \
    "mysql://dlock@127.0.0.1:1/db acquire --ttl 30s" "zk://127.0.0.1:1 acquire --ttl 30s" \
    "postgres://dlock@127.0.0.1:1/db acquire --ttl 30s" "zk://127.0.0.1:1 run --wait-replicas 1" \
    "file://$BATS_TEST_TMPDIR/no-such-dir acquire --ttl 30s"; do
    set -- $args
    url=$1
    shift
    if [ "$1" = run ]; then
      run -64 --separate-stderr timeout 30 "$DLOCK" "$@" -u "$url" --key k -- echo ran
    else
      run -64 --separate-stderr timeout 30 "$DLOCK" "$@" -u "$url" --key k
    fi
    [[ $stderr == "dlock: "*": not available on "* ]] || fail "$args: $stderr"
    [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ] || fail "$args: not one line: $stderr"
    refute_output --partial ran
  done
}
