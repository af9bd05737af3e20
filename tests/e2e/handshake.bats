#!/usr/bin/env bats
# A refused handshake (AUTH, SELECT) stops dlock before anything else reaches the server: the
# exit status says why, the command does not run, and no key is written in any database.
# The script cache is warmed first, so that a command sent after the refusal would take the
# lock at once (EVALSHA) instead of failing with NOSCRIPT.

load ../lib/helpers

NOSEL_PW=nosel-Secret-4a1f # ACL user with every right but SELECT
FULL_PW=full-Secret-8c0e   # ACL user with every right

setup_file() {
  start_redis
  rcli acl setuser nosel on ">$NOSEL_PW" '~*' '+@all' -select >/dev/null
  rcli acl setuser full on ">$FULL_PW" '~*' '+@all' >/dev/null
}

setup() {
  dlock_setup
  unset DLOCK_PASSWORD
  run -0 "$DLOCK" run -k warm -- true # loads the acquire and release scripts
  rcli flushall >/dev/null
}

# refused STATUS DLOCK-ARGS...: dlock exits STATUS with one diagnostic line, the command
# (which would print "ran") did not run, and no database holds a key.
refused() {
  local expect=$1
  shift
  run "-$expect" --separate-stderr "$DLOCK" "$@" run -k hs -- echo ran
  refute_output --partial ran
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  [[ $stderr == dlock:* ]]
  run -0 rcli info keyspace
  refute_output --partial keys=
  local db
  for db in 0 1 2 15; do
    [ "$(rcli -n "$db" dbsize)" = 0 ] || fail "database $db holds $(rcli -n "$db" keys '*')"
  done
}

@test "a database index the server refuses is a configuration error (78), and nothing is written" {
  refused 78 -u "unix://$REDIS_SOCK?db=99"
  [[ $stderr == *"database 99"* ]]
  [[ $stderr == *"DB index is out of range"* ]]
  refused 78 -u "redis://127.0.0.1:$REDIS_PORT/16"
}

@test "a user without +select on a /1 URL gets 77 (NOPERM), and nothing is written" {
  DLOCK_PASSWORD=$NOSEL_PW refused 77 -u "redis://nosel@127.0.0.1:$REDIS_PORT/1"
  [[ $stderr == *NOPERM* ]]
  [[ $stderr != *"$NOSEL_PW"* ]]
  DLOCK_PASSWORD=$NOSEL_PW refused 77 -u "unix://nosel@$REDIS_SOCK?db=2"
  # the same user in database 0 needs no SELECT and gets the lock
  DLOCK_PASSWORD=$NOSEL_PW run -0 "$DLOCK" -u "unix://nosel@$REDIS_SOCK" run -k hs -- echo ran
  assert_output ran
}

@test "a password sent to a server that has none gets 77, and nothing is written" {
  DLOCK_PASSWORD=not-needed refused 77
  [[ $stderr == *"without any password configured"* ]]
  DLOCK_PASSWORD=not-needed refused 77 -u "redis://127.0.0.1:$REDIS_PORT/1"
}

@test "status, acquire and release --force send nothing after a refused SELECT either" {
  run -0 "$DLOCK" -u "unix://$REDIS_SOCK?db=3" acquire -k hs -t 30s
  run -78 "$DLOCK" -u "unix://$REDIS_SOCK?db=99" acquire -k hs -t 30s
  run -78 "$DLOCK" -u "unix://$REDIS_SOCK?db=99" status hs
  run -78 "$DLOCK" -u "unix://$REDIS_SOCK?db=99" release -k hs --force
  run -0 rcli -n 3 exists 'dlock:{hs}'
  assert_output 1
  run -0 rcli -n 0 dbsize
  assert_output 0
}

@test "a handshake that succeeds: the lock is in the URL's database, renewed and released" {
  DLOCK_PASSWORD=$FULL_PW run -0 "$DLOCK" -u "unix://full@$REDIS_SOCK?db=5" run -k hs -t 1s -- sh -c \
    'sleep 1.5; redis-cli -s "$REDIS_SOCK" -n 5 get "dlock:{hs}" | grep -qx "$DLOCK_TOKEN" && echo held'
  assert_output held
  run -0 rcli -n 5 exists 'dlock:{hs}'
  assert_output 0
}
