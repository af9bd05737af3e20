#!/usr/bin/env bats
# The command line keeps its promises on every path: durations (empty, too large, days), one
# value per -u, DLOCK_URL split on blanks, flock's --timeout and -x, errors that name the right
# help, the waiting line on a real terminal (tmux), and --connect-timeout for status and list.

load helpers

setup_file() { start_redis; }
teardown_file() { stop_redis; }
setup() { reset_redis; }

# ---------------------------------------------------------------------------------------------
# durations

# usage_error_naming OPTION DLOCK-ARGS...: dlock exits 64 at once with one line that names
# OPTION, runs nothing and writes nothing to Redis.
usage_error_naming() {
  local option=$1 start
  shift
  start=$(now_ms)
  run -64 --separate-stderr "$DLOCK" "$@"
  [ $(( $(now_ms) - start )) -lt 1000 ] || fail "took $(( $(now_ms) - start )) ms: $*"
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ] || fail "not one line: $stderr"
  [[ $stderr == dlock:*"$option"* ]] || fail "does not name $option: $stderr"
  refute_output --partial ran
  [ "$(rcli dbsize)" = 0 ] || fail "wrote to Redis: $*"
}

@test "an empty duration is a usage error for every duration option, never 'not given'" {
  local ran='echo ran'
  usage_error_naming --ttl run -k k -t '' -- $ran
  usage_error_naming --ttl run -k k --ttl= -- $ran
  usage_error_naming --wait run -k k -w '' -- $ran
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
}
