#!/usr/bin/env bats
# dlock run: exit statuses, environment, conflicts and bad input.

load ../lib/helpers

@test "passes the command's exit status through" {
  run -3 "$DLOCK" run -k k -- sh -c 'exit 3'
  run -0 "$DLOCK" run -k k -- true
  run -1 "$DLOCK" run -k k -- false
}

@test "a command killed by signal N gives 128+N" {
  run -137 "$DLOCK" run -k k -- sh -c 'kill -9 $$'
  run -143 "$DLOCK" run -k k -- sh -c 'kill -TERM $$'
}

@test "-c runs a shell command" {
  run -0 --separate-stderr "$DLOCK" run -k k -c 'echo "$((6*7))"'
  assert_output 42
  [ -z "$stderr" ]
}

@test "the command sees DLOCK_KEY, DLOCK_TOKEN, DLOCK_FENCING_TOKEN, DLOCK_TTL_MS" {
  run -0 "$DLOCK" run -k env-key -t 7s -- sh -c 'echo "$DLOCK_KEY $DLOCK_TTL_MS $DLOCK_FENCING_TOKEN ${#DLOCK_TOKEN}"'
  assert_output --regexp '^env-key 7000 [1-9][0-9]* 32$'
  local fence
  fence=$(cut -d' ' -f3 <<<"$output")
  run -0 "$DLOCK" run -k env-key -- sh -c 'echo $DLOCK_FENCING_TOKEN'
  assert_output $((fence + 1))
}

@test "the command inherits no descriptor of dlock's but 0, 1 and 2 (the caller's others neither)" {
  # find, a child of the command's shell, lists the shell's descriptors: "FD TARGET" each. A
  # descriptor of the caller's (7) is dlock's to close too: the command gets 0, 1, 2 only.
  run -0 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:$REDIS_PORT" run -k fds -- \
    sh -c 'find /proc/$$/fd -mindepth 1 -printf "%f %l\n"; :' 7</dev/null
  echo "$output"
  [ "$(echo "$output" | awk '{print $1}' | sort -n | tr '\n' ' ')" = "0 1 2 " ]
}

@test "the token is the lock value while the command runs, and the lock is gone after" {
  run -0 "$DLOCK" run -k tok -- sh -c 'redis-cli -s "$REDIS_SOCK" get "dlock:{tok}" | grep -qx "$DLOCK_TOKEN"'
  run -0 rcli exists 'dlock:{tok}' 'dlock:{tok}:holder'
  assert_output 0
}

@test "every key expires, the fencing counter too" {
  "$DLOCK" run -k exp -t 20s -- sleep 1 &
  wait_for '[ "$(rcli exists "dlock:{exp}")" = 1 ]'
  run rcli pttl 'dlock:{exp}'
  [ "$output" -gt 0 ]
  [ "$output" -le 20000 ]
  run rcli pttl 'dlock:{exp}:holder'
  [ "$output" -gt 0 ]
  [ "$output" -le 20000 ]
  wait
  run rcli pttl 'dlock:{exp}:fence'
  [ "$output" -gt 0 ] && [ "$output" -le $((7 * 86400000)) ]
}

@test "stdout is the command's alone and dlock is silent on success" {
  run -0 --separate-stderr "$DLOCK" run -k k -- echo hello
  assert_output hello
  [ -z "$stderr" ]
}

@test "-n gives up at once with 75 while the lock is held" {
  hold held 3
  local start=$(now_ms)
  run -75 "$DLOCK" run -k held -n -- echo ran
  refute_output --partial ran
  [ $(( $(now_ms) - start )) -lt 1000 ]
}

@test "-E changes the conflict exit status" {
  hold held 3
  run -9 "$DLOCK" run -k held -n -E 9 -- true
  run -0 "$DLOCK" run -k held -n -E 0 -- true
}

@test "a conflict in cron (stderr not a terminal) prints nothing; -v names the holder" {
  hold held 3
  run -75 --separate-stderr "$DLOCK" run -k held -n -- true
  [ -z "$stderr" ]
  run -75 --separate-stderr "$DLOCK" -v run -k held -n -- true
  [[ $stderr == *"held by"*"(sleep)"* ]]
}

@test "-w gives up after about the wait time" {
  hold held 5
  local start=$(now_ms)
  run -75 "$DLOCK" run -k held -w 1s -- true
  local took=$(( $(now_ms) - start ))
  [ "$took" -ge 1000 ] && [ "$took" -lt 2500 ] # how close: waiting.bats
}

@test "-w gets the lock when the holder finishes in time" {
  hold held 1
  run -0 "$DLOCK" run -k held -w 5s -- echo got-it
  assert_output got-it
  wait
}

@test "usage errors exit 64 with one line and leave nothing in Redis" {
  run -64 --separate-stderr "$DLOCK" run -- true
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  [[ $stderr == dlock:* ]]
  run -64 "$DLOCK" run -k k
  run -64 "$DLOCK" run -k k --bogus -- true
  run -64 "$DLOCK" run -k k -t 10x -- true
  run -64 "$DLOCK" run -k k -t 0.5s -- true
  run -64 "$DLOCK" run -k k -w soon -- true
  run -64 "$DLOCK" run -k k -w 1s -n -- true
  run -64 "$DLOCK" run -k k --kill-after=-1s -- true
  run -64 "$DLOCK" run -k k --max-hold 0 -- true
  run -64 "$DLOCK" run -k k --on-lost maybe -- true
  run -64 "$DLOCK" run -k k -E 300 -- true
  run -64 "$DLOCK" run -k k -c 'true' -- true
  run -64 "$DLOCK" run -k '' -- true
  run -64 "$DLOCK" run -k "$(printf 'a\tb')" -- true
  run -64 "$DLOCK" run -k "$(head -c 1025 /dev/zero | tr '\0' k)" -- true
  run -64 "$DLOCK" -u 'http://localhost' run -k k -- true
  run -64 "$DLOCK" -u 'redis://localhost:99999' run -k k -- true
  run -64 "$DLOCK" -u "unix://$REDIS_SOCK" -u "unix://$REDIS_SOCK" run -k k -- true
  run -64 "$DLOCK" frobnicate
  run -64 "$DLOCK"
  run -0 rcli dbsize
  assert_output 0
  run -0 "$DLOCK" run -k "$(head -c 1024 /dev/zero | tr '\0' k)" -- true
}

@test "126 when the command cannot be executed, 127 when it is not found; the lock is released" {
  run -127 --separate-stderr "$DLOCK" run -k k -- /no/such/command
  [[ $stderr == *"/no/such/command"* ]]
  printf 'data\n' >"$BATS_TEST_TMPDIR/not-executable"
  chmod 644 "$BATS_TEST_TMPDIR/not-executable"
  run -126 "$DLOCK" run -k k -- "$BATS_TEST_TMPDIR/not-executable"
  run -127 "$DLOCK" run -k k -- no-such-command-in-path
  run -0 rcli exists 'dlock:{k}'
  assert_output 0
}

@test "69 when Redis is unreachable" {
  run -69 --separate-stderr "$DLOCK" -u "unix://$BATS_TEST_TMPDIR/none.sock" run -k k -- echo ran
  refute_output --partial ran
  [[ $stderr == dlock:*none.sock* ]]
  run -69 "$DLOCK" -u "redis://127.0.0.1:$CLOSED_PORT" run -k k -- true
}

@test "69 when the server is a read-only replica" {
  start_server replica --replicaof 127.0.0.1 "$REDIS_PORT"
  run -69 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:$SERVER_PORT" run -k k -- echo ran
  refute_output --partial ran
  [[ $stderr == *READONLY* ]]
}

@test "--version and --help" {
  run -0 "$DLOCK" --version
  [[ $output == "dlock "*hiredis* ]]
  run -0 "$DLOCK" --help
  assert_output --partial run
  run -0 "$DLOCK" run --help
  assert_output --partial --max-hold
}

@test "--max-hold stops the command with 124 and releases the lock" {
  local start=$(now_ms)
  run -124 "$DLOCK" run -k mh --max-hold 500ms -- sleep 30
  [ $(( $(now_ms) - start )) -lt 3000 ]
  run -0 rcli exists 'dlock:{mh}'
  assert_output 0
}

@test "--max-hold escalates to SIGKILL after --kill-after" {
  local start=$(now_ms)
  run -124 "$DLOCK" run -k mh --max-hold 300ms --kill-after 300ms -- sh -c 'trap "" TERM; sleep 30 & wait; sleep 30'
  [ $(( $(now_ms) - start )) -lt 3000 ]
}

@test "a database other than 0 via the URL" {
  run -0 "$DLOCK" -u "unix://$REDIS_SOCK?db=3" run -k dbk -- sh -c 'redis-cli -s "$REDIS_SOCK" -n 3 exists "dlock:{dbk}"'
  assert_output 1
  run -0 "$DLOCK" -u "redis://127.0.0.1:$REDIS_PORT/4" run -k dbk -- sh -c 'redis-cli -s "$REDIS_SOCK" -n 4 exists "dlock:{dbk}"'
  assert_output 1
}

@test "--prefix and DLOCK_PREFIX namespace the keys" {
  run -0 "$DLOCK" --prefix app1: run -k p -- sh -c 'redis-cli -s "$REDIS_SOCK" exists "app1:{p}"'
  assert_output 1
  DLOCK_PREFIX=app2: run -0 "$DLOCK" run -k p -- sh -c 'redis-cli -s "$REDIS_SOCK" exists "app2:{p}"'
  assert_output 1
}
