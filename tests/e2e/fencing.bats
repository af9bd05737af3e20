#!/usr/bin/env bats
# Fencing tokens: one more per acquisition while the counter exists; a missing counter (never
# used, expired, deleted, lost) restarts at the server's clock in microseconds, so tokens never
# go backwards; and the counter expires like every other key dlock writes.
# (A restart of redis-server itself is in tests/stores/redis/restart.bats.)

load ../lib/helpers

# token KEY [RUN-ARGS...]: prints the fencing token a `dlock run` on KEY gets.
token() {
  local key=$1
  shift
  "$DLOCK" run -k "$key" "$@" -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
}

# server_us: the redis-server's clock in microseconds.
server_us() {
  rcli time | paste -sd' ' | awk '{ printf "%d%06d\n", $1, $2 }'
}

@test "a new name starts at the server's clock in microseconds, then counts on by one" {
  local before after first
  before=$(server_us)
  first=$(token f)
  after=$(server_us)
  [ "$first" -ge "$before" ] && [ "$first" -le "$after" ] || fail "$first not in [$before, $after]"
  run -0 token f
  assert_output $((first + 1))
  run -0 "$DLOCK" acquire -k f -t 10s --json
  [[ $output == *"\"fencing_token\":$((first + 2)),"* ]]
  run -0 rcli hget 'dlock:{f}:holder' fence
  assert_output $((first + 2))
  run -0 rcli get 'dlock:{f}:fence'
  assert_output $((first + 2))
}

@test "a counter that exists counts on by one (small tokens stay small)" {
  rcli set 'dlock:{old}:fence' 41 >/dev/null
  run -0 token old
  assert_output 42
  run -0 token old
  assert_output 43
}

@test "the counter deleted after a holder released: the next token is greater" {
  local first second
  first=$(token d)
  rcli del 'dlock:{d}:fence' >/dev/null
  second=$(token d)
  [ "$second" -gt "$first" ] || fail "token went back from $first to $second"
  # even from a small counter (an older dlock's), which is what "token 1 again" was
  rcli set 'dlock:{s}:fence' 5 >/dev/null
  run -0 token s
  assert_output 6
  rcli del 'dlock:{s}:fence' >/dev/null
  [ "$(token s)" -gt 6 ]
}

@test "the counter deleted while a holder holds the lock: the next holder's token is greater" {
  "$DLOCK" run -k h -t 5s -- sh -c 'echo "$DLOCK_FENCING_TOKEN" >"$1"; sleep 0.5' sh "$T/first" 3>&- &
  echo $! >>"$T/bg.pid"
  wait_for '[ -s "$T/first" ]'
  rcli del 'dlock:{h}:fence' >/dev/null
  local second
  second=$(token h -w 10s)
  [ "$second" -gt "$(cat "$T/first")" ] || fail "token went back from $(cat "$T/first") to $second"
  run -0 token h
  assert_output $((second + 1))
  wait
}

@test "the counter expires: 7 days after the last acquisition, or twice the TTL if longer" {
  token e -t 10s >/dev/null
  run -0 rcli pttl 'dlock:{e}:fence'
  [ "$output" -gt $((7 * 86400000 - 60000)) ]
  [ "$output" -le $((7 * 86400000)) ]
  run -0 "$DLOCK" acquire -k e -t 100h
  run -0 rcli pttl 'dlock:{e}:fence'
  [ "$output" -gt $((200 * 3600000 - 60000)) ]
  [ "$output" -le $((200 * 3600000)) ]
  # every key of a used and released name expires
  run -0 "$DLOCK" release -k e --force
  local key
  for key in $(rcli keys '*'); do
    [ "$(rcli pttl "$key")" -gt 0 ] || fail "$key does not expire"
  done
}

@test "status shows the last token, from the same counter" {
  local first
  first=$(token st)
  run -1 "$DLOCK" status st --json
  [[ $output == *"\"last_fencing_token\":$first,"* ]]
}
