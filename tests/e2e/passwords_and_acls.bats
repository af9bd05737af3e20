#!/usr/bin/env bats
# dlock run against a Redis that requires a password, and ACL users: where the password comes
# from, what a refusal gives (77, or 78 for a bad password file), and that no password ever
# shows in ps or in dlock's output.

load ../lib/helpers

# Every password of this file; none may ever appear in dlock's output.
PW=default-Secret-7f3a           # the default user's (requirepass)
DL_PW=dl-Secret-91c2             # ACL user with just the rights dlock run needs
NOKEYS_PW=nokeys-Secret-55e1     # ACL user without access to dlock's keys
NOEVAL_PW=noeval-Secret-0b7d     # ACL user without EVALSHA/EVAL
NOCMD_PW=nocmd-Secret-3d9e       # ACL user without a command the scripts call
WRONG_PW=wrong-Secret-c4d8       # no user has it
ALL_PWS=("$PW" "$DL_PW" "$NOKEYS_PW" "$NOEVAL_PW" "$NOCMD_PW" "$WRONG_PW")

# What `dlock run` calls: EVALSHA (EVAL when the script cache is empty), BLPOP while waiting,
# and, inside its scripts, the commands below. All its keys start with the prefix "dlock:".
# Keep this in step with src/stores/redis/scripts/: the ACL test fails on anything missing.
DL_COMMANDS=(evalsha eval blpop get set del exists time pttl pexpire hset hget hmget hdel hexists
  type strlen hstrlen zadd zrem zscore zrange zrangebyscore zremrangebyscore zcount zcard llen rpush decr
  xadd xrevrange)

setup_file() {
  export REDIS_AUTH=$PW
  start_redis --requirepass "$PW"
  local rules=() cmd
  for cmd in "${DL_COMMANDS[@]}"; do
    rules+=("+$cmd")
  done
  rcli acl setuser dl on ">$DL_PW" '~dlock:*' "${rules[@]}" >/dev/null
  rcli acl setuser nokeys on ">$NOKEYS_PW" '~other:*' "${rules[@]}" >/dev/null
  rcli acl setuser noeval on ">$NOEVAL_PW" '~dlock:*' "${rules[@]}" -evalsha -eval >/dev/null
  rcli acl setuser nocmd on ">$NOCMD_PW" '~dlock:*' "${rules[@]}" -hset >/dev/null
}

setup() {
  dlock_setup
  rcli acl log reset >/dev/null
  unset DLOCK_PASSWORD
  TCP_URL=redis://127.0.0.1:$REDIS_PORT
}

# refute_secrets TEXT...: fails if any password of this file occurs in TEXT.
refute_secrets() {
  local pw
  for pw in "${ALL_PWS[@]}"; do
    if [[ "$*" == *"$pw"* ]]; then
      echo "password '$pw' leaked in: $*" >&2
      return 1
    fi
  done
}

# dl STATUS DLOCK-ARGS...: runs dlock, expects STATUS, keeps stderr apart in $stderr, and
# checks that neither stdout nor stderr shows a password.
dl() {
  local expect=$1
  shift
  run "-$expect" --separate-stderr "$DLOCK" "$@"
  refute_secrets "$output" "$stderr"
}

# one_line: $stderr is exactly one dlock diagnostic.
one_line() {
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ] && [[ $stderr == dlock:* ]]
}

# dlock's own command line and its children's (the command and the guard), as ps shows them.
ps_args_of_tree() {
  ps -o args= -p "$1"
  ps -o args= --ppid "$1"
  tr '\0' ' ' <"/proc/$1/cmdline"
  echo
}

@test "the right password via DLOCK_PASSWORD, --password-file, or the URL (with a warning)" {
  DLOCK_PASSWORD=$PW dl 0 run -k a -- true
  [ -z "$stderr" ]
  DLOCK_PASSWORD=$PW dl 0 -u "$TCP_URL" run -k a -- true
  [ -z "$stderr" ]

  printf '%s\n' "$PW" >"$T/pw"
  chmod 600 "$T/pw"
  dl 0 --password-file "$T/pw" run -k a -- true
  [ -z "$stderr" ]
  dl 0 --password-file "$T/pw" -u "$TCP_URL" run -k a -- true
  [ -z "$stderr" ]

  dl 0 -u "redis://:$PW@127.0.0.1:$REDIS_PORT" run -k a -- echo ran
  assert_output ran
  one_line
  [[ $stderr == *password* ]]

  # DLOCK_PASSWORD wins over a password in the URL
  DLOCK_PASSWORD=$PW dl 0 -u "redis://:$WRONG_PW@127.0.0.1:$REDIS_PORT" run -k a -- true
  run -0 rcli exists 'dlock:{a}'
  assert_output 0
}

@test "a wrong password gives 77 and one line that does not show it" {
  DLOCK_PASSWORD=$WRONG_PW dl 77 run -k a -- echo ran
  refute_output --partial ran
  one_line
  [[ $stderr == *WRONGPASS* ]]

  printf '%s\n' "$WRONG_PW" >"$T/pw"
  dl 77 --password-file "$T/pw" -u "$TCP_URL" run -k a -- true
  one_line

  dl 77 -u "redis://:$WRONG_PW@127.0.0.1:$REDIS_PORT" run -k a -- true
  # the warning about the URL password, then the refusal naming the endpoint redacted
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 2 ]
  [[ $stderr == *"redis://:***@127.0.0.1:$REDIS_PORT"* ]]

  DLOCK_PASSWORD=$WRONG_PW dl 77 -u "redis://dl@127.0.0.1:$REDIS_PORT" run -k a -- true
  one_line
  run -0 rcli dbsize
  assert_output 0
}

# needs_password URL: $stderr is one line naming URL that says how to give the password, in
# place of Redis's NOAUTH or "unauthenticated multibulk length" (run's script has more than 10
# arguments, which Redis refuses before AUTH as a protocol error).
needs_password() {
  one_line
  assert_equal "$stderr" "dlock: $1: the server requires a password: give it with --password-file FILE or DLOCK_PASSWORD"
}

@test "no password at all gives 77 and says how to give one" {
  dl 77 run -k a -- echo ran
  refute_output --partial ran
  needs_password "unix://$REDIS_SOCK"
  dl 77 -u "$TCP_URL" run -k a -- true
  needs_password "$TCP_URL"
  dl 77 -u "$TCP_URL/2" run -k a -n -- true
  needs_password "$TCP_URL/2"
  dl 77 status a
  needs_password "unix://$REDIS_SOCK"
  dl 77 -u "$TCP_URL" acquire -k a -t 10s
  needs_password "$TCP_URL"
  dl 77 list
  needs_password "unix://$REDIS_SOCK"
  run -0 rcli dbsize
  assert_output 0
}

@test "status, list, acquire, renew, release: 77 for a refused password, 78 for a bad password file" {
  local pw=$PW url="unix://$REDIS_SOCK" tok
  DLOCK_PASSWORD=$pw run -1 "$DLOCK" -u "$url" status k
  tok=$(DLOCK_PASSWORD=$pw "$DLOCK" -u "$url" acquire -k k -t 60s)
  DLOCK_PASSWORD=$pw run -0 "$DLOCK" -u "$url" status k
  # Shorter than the lease a renewal would restore (60 s): a renewal that got through shows.
  rcli pexpire 'dlock:{k}' 50000 >/dev/null

  local cmd
  for cmd in "status k" "status k --json" "list" "list --json" "renew -k k --token $tok" \
    "release -k k --token $tok" "release -k k --force"; do
    # shellcheck disable=SC2086
    run -77 --separate-stderr "$DLOCK" -u "$url" $cmd
    [ -z "$output" ]
    [[ $stderr == dlock:* ]]
    DLOCK_PASSWORD=$WRONG_PW run -77 "$DLOCK" -u "$url" $cmd
    run -78 "$DLOCK" -u "$url" --password-file "$T/no-such-file" $cmd
  done
  run -0 rcli get 'dlock:{k}'
  assert_output "$tok"
  run -0 rcli pttl 'dlock:{k}'
  [ "$output" -gt 0 ]
  [ "$output" -le 50000 ]

  # acquire, as run: 77 without a password (not 70), and no token on stdout.
  run -77 --separate-stderr "$DLOCK" -u "$url" acquire -k other -t 5s
  [ -z "$output" ]
  DLOCK_PASSWORD=$WRONG_PW run -77 "$DLOCK" -u "$url" acquire -k other -t 5s
}

@test "an unreadable password file gives 78 and the command does not run" {
  dl 78 --password-file "$T/missing" run -k a -- echo ran
  refute_output --partial ran
  one_line
  [[ $stderr == *"$T/missing"* ]]
  mkdir "$T/dir"
  dl 78 --password-file "$T/dir" run -k a -- echo ran
  refute_output --partial ran
  one_line
  if [ "$(id -u)" -ne 0 ]; then # root reads anything
    printf '%s\n' "$PW" >"$T/locked"
    chmod 000 "$T/locked"
    dl 78 --password-file "$T/locked" run -k a -- true
    one_line
  fi
  # a good DLOCK_PASSWORD does not paper over a bad --password-file
  DLOCK_PASSWORD=$PW dl 78 --password-file "$T/missing" run -k a -- true
  run -0 rcli dbsize
  assert_output 0
}

@test "an ACL user with only the rights dlock run needs: acquire, conflict, wait, release" {
  export DLOCK_PASSWORD=$DL_PW DLOCK_URL=redis://dl@127.0.0.1:$REDIS_PORT
  rcli script flush >/dev/null
  dl 0 run -k a -c 'echo "$DLOCK_FENCING_TOKEN"'
  assert_output --regexp '^[1-9][0-9]*$'
  [ -z "$stderr" ]
  run -0 rcli exists 'dlock:{a}'
  assert_output 0

  "$DLOCK" run -k b -t 2s -- sleep 1.5 3>&- &
  echo $! >>"$T/bg.pid"
  wait_for '[ "$(rcli exists "dlock:{b}")" = 1 ]'
  dl 75 -v run -k b -n -- true
  [[ $stderr == *"held by"* ]]
  refute_secrets "$stderr"
  dl 0 run -k b -w 5s -- echo got-it
  assert_output got-it
  [ -z "$stderr" ]
  wait
  run -0 rcli exists 'dlock:{b}' 'dlock:{b}:holder'
  assert_output 0

  # over the unix socket, user and password in the URL
  DLOCK_PASSWORD='' dl 0 -u "unix://dl:$DL_PW@$REDIS_SOCK" run -k a -- true
  one_line

  # Redis refused nothing along the way (a refused release would only be a warning)
  run -0 rcli acl log
  assert_output ''
}

@test "the same ACL user can wait, meet at a barrier and use a latch" {
  export DLOCK_PASSWORD=$DL_PW DLOCK_URL=redis://dl@127.0.0.1:$REDIS_PORT
  rcli script flush >/dev/null
  "$DLOCK" run -k w -- sleep 1 3>&- &
  echo $! >>"$T/bg.pid"
  wait_for '[ "$(rcli exists "dlock:{w}")" = 1 ]'
  dl 0 wait -k w -w 5s
  "$DLOCK" barrier -k b --parties 2 -w 5s 3>&- &
  local party=$!
  dl 0 barrier -k b --parties 2 -w 5s
  wait "$party"
  dl 75 barrier -k lone --parties 2 -w 200ms
  dl 0 latch -k l --count 2
  dl 0 latch -k l --down
  dl 75 latch -k l --wait 200ms
  dl 0 latch -k l --down
  dl 0 latch -k l --wait 1s
  dl 0 latch -k l --count 0
  # Redis refused nothing along the way
  run -0 rcli acl log
  assert_output ''
}

@test "an ACL user without access to the keys, or without EVALSHA/EVAL, gets 77 and NOPERM" {
  DLOCK_PASSWORD=$NOKEYS_PW dl 77 -u "redis://nokeys@127.0.0.1:$REDIS_PORT" run -k a -- echo ran
  refute_output --partial ran
  one_line
  [[ $stderr == *NOPERM* ]]
  DLOCK_PASSWORD=$NOEVAL_PW dl 77 -u "unix://noeval@$REDIS_SOCK" run -k a -- echo ran
  refute_output --partial ran
  one_line
  [[ $stderr == *NOPERM* ]]
  run -0 rcli dbsize
  assert_output 0
}

@test "an ACL user without a command the lock script calls gets 77" {
  DLOCK_PASSWORD=$NOCMD_PW dl 77 -u "redis://nocmd@127.0.0.1:$REDIS_PORT" run -k a -- echo ran
  refute_output --partial ran
  one_line
}

@test "the unix socket with a password: DLOCK_PASSWORD, in the URL, and a wrong one" {
  [[ $DLOCK_URL == "unix://$REDIS_SOCK" ]]
  DLOCK_PASSWORD=$PW dl 0 run -k u -- sh -c 'redis-cli -s "$REDIS_SOCK" --no-auth-warning -a "$REDIS_AUTH" exists "dlock:{u}"'
  assert_output 1
  [ -z "$stderr" ]
  dl 0 -u "unix://:$PW@$REDIS_SOCK" run -k u -- true
  one_line
  [[ $stderr == *password* ]]
  dl 77 -u "unix://:$WRONG_PW@$REDIS_SOCK" run -k u -- true
  [[ $stderr == *"unix://:***@$REDIS_SOCK"* ]]
  DLOCK_PASSWORD=$WRONG_PW dl 77 run -k u -- true
  one_line
}

@test "with DLOCK_PASSWORD the password is not in ps while dlock runs" {
  DLOCK_PASSWORD=$PW "$DLOCK" -u "$TCP_URL" run -k ps1 -- sleep 30 2>"$T/err" 3>&- &
  local pid=$!
  echo "$pid" >>"$T/bg.pid"
  wait_for '[ "$(rcli exists "dlock:{ps1}")" = 1 ]'
  run -0 ps_args_of_tree "$pid"
  echo "$output"
  assert_output --partial "run -k ps1 -- sleep 30"
  assert_output --partial "$TCP_URL"
  refute_secrets "$output"
  local st=0
  kill -TERM "$pid"
  wait "$pid" || st=$?
  [ "$st" -eq 143 ]
  [ ! -s "$T/err" ]
}

@test "a password in --url is overwritten with '*' in argv while dlock runs" {
  "$DLOCK" -u "redis://:$PW@127.0.0.1:$REDIS_PORT" run -k ps2 -- sleep 30 2>"$T/err" 3>&- &
  local pid=$!
  echo "$pid" >>"$T/bg.pid"
  wait_for '[ "$(rcli exists "dlock:{ps2}")" = 1 ]'
  run -0 ps_args_of_tree "$pid"
  echo "$output"
  refute_secrets "$output"
  assert_output --partial "redis://:*"
  assert_output --partial "@127.0.0.1:$REDIS_PORT"
  assert_output --partial "run -k ps2 -- sleep 30"
  local st=0
  kill -TERM "$pid"
  wait "$pid" || st=$?
  [ "$st" -eq 143 ]
  refute_secrets "$(cat "$T/err")"
  [ "$(wc -l <"$T/err")" -eq 1 ]

  # the same for an ACL user's password in a unix socket URL
  "$DLOCK" -u "unix://dl:$DL_PW@$REDIS_SOCK" run -k ps3 -- sleep 30 2>"$T/err" 3>&- &
  pid=$!
  echo "$pid" >>"$T/bg.pid"
  wait_for '[ "$(rcli exists "dlock:{ps3}")" = 1 ]'
  run -0 ps_args_of_tree "$pid"
  refute_secrets "$output"
  assert_output --partial "unix://dl:*"
  st=0
  kill -TERM "$pid"
  wait "$pid" || st=$?
  [ "$st" -eq 143 ]
}

@test "a URL-like argument of the command is passed on unchanged" {
  DLOCK_PASSWORD=$PW dl 0 run -k a -- echo "redis://:not-a-secret@example.invalid"
  assert_output "redis://:not-a-secret@example.invalid"
}

@test "no --url warning for a URL-like argument of the command" {
  DLOCK_PASSWORD=$PW dl 0 run -k a -- echo "redis://:x@example.invalid"
  [ -z "$stderr" ]
}

@test "errors that name the endpoint redact the password" {
  local port=$CLOSED_PORT
  dl 69 -u "redis://:$PW@127.0.0.1:$port" run -k a -- true
  [[ $stderr == *"redis://:***@127.0.0.1:$port"* ]]
  dl 69 -u "unix://dl:$DL_PW@$T/none.sock" run -k a -- true
  [[ $stderr == *"unix://dl:***@$T/none.sock"* ]]
  DLOCK_PASSWORD=$PW dl 69 -u "redis://127.0.0.1:$port" run -k a -- true
  one_line
}

# ---------------------------------------------------------------------------------------------
# the password and the command's environment

@test "the command does not see DLOCK_PASSWORD, nor a password in DLOCK_URL" {
  export DLOCK_PASSWORD=$PW DLOCK_URL=$TCP_URL
  dl 0 run -k env -- sh -c 'env | grep "^DLOCK_PASSWORD" || echo "no password"'
  assert_output "no password"
  unset DLOCK_PASSWORD
  export DLOCK_URL="redis://:$PW@127.0.0.1:$REDIS_PORT"
  run -0 --separate-stderr "$DLOCK" run -k env -- sh -c 'echo "url=$DLOCK_URL"; env | grep "^DLOCK_" | grep -c "$0"' "$PW" || true
  refute_secrets "$output"
  assert_line "url=redis://127.0.0.1:$REDIS_PORT"
  assert_line 0
}

@test "--export-password: the command sees the password, and a nested dlock call works" {
  export DLOCK_PASSWORD=$PW DLOCK_URL=$TCP_URL DLOCK
  run -0 "$DLOCK" run -k outer --export-password -- sh -c '[ "$DLOCK_PASSWORD" = "$0" ] && "$DLOCK" run -k inner -- echo nested-ok' "$PW"
  assert_output nested-ok
  # without it the nested call has no password: 77, and says how to give one
  run -77 "$DLOCK" run -k outer -- sh -c '"$DLOCK" run -k inner -- echo never'
  refute_output --partial never
}

@test "a password from --password-file reaches nested calls by name only (DLOCK_PASSWORD_FILE)" {
  printf '%s\n' "$PW" >"$T/pw"
  cd "$T"
  export DLOCK_URL=$TCP_URL DLOCK
  run -0 --separate-stderr "$DLOCK" --password-file pw run -k outer -- sh -c 'echo "file=$DLOCK_PASSWORD_FILE"; "$DLOCK" run -k inner -- echo nested-ok'
  refute_secrets "$output" "$stderr"
  assert_line "file=$T/pw"
  assert_line nested-ok
  # DLOCK_PASSWORD_FILE is read by dlock itself too
  DLOCK_PASSWORD_FILE=$T/pw run -0 "$DLOCK" run -k f -- echo via-env
  assert_output via-env
}

@test "a password in memory makes dlock non-dumpable: the same user cannot read its environment" {
  [ "$(id -u)" = 0 ] || skip "needs root: runs dlock as nobody"
  local dir
  dir=$(mktemp -d)
  chmod 1777 "$dir"
  # The command (nobody, as dlock) reads its own shell's environment, then its dlock's (the
  # parent of its guard, dlock's fork).
  local look='d=$(awk "{print \$4}" /proc/$PPID/stat); cat /proc/$$/environ >/dev/null && echo own
    cat /proc/$d/environ >/dev/null 2>&1 && echo dlock-readable || echo dlock-protected'
  DLOCK_PASSWORD=$PW run -0 --separate-stderr setpriv --reuid=nobody --regid=nogroup --clear-groups \
    "$DLOCK" -u "$TCP_URL" run -k dump -- sh -c "$look"
  assert_output $'own\ndlock-protected'
  # Without a password (a file:// lock), dlock stays dumpable: the check above can tell.
  run -0 --separate-stderr setpriv --reuid=nobody --regid=nogroup --clear-groups \
    "$DLOCK" -u "file://$dir/locks" run -k dump -- sh -c "$look"
  rm -rf "$dir"
  assert_output $'own\ndlock-readable'
}

@test "set-uid or set-gid, dlock refuses to run (78): it reads files and environment its caller chooses" {
  [ "$(id -u)" = 0 ] || skip "needs root: makes a set-uid root copy and runs it as nobody"
  local dir
  dir=$(mktemp -d)
  chmod 755 "$dir"
  cp "$DLOCK" "$dir/dlock"
  chmod 4755 "$dir/dlock"
  run --separate-stderr setpriv --reuid=nobody --regid=nogroup --clear-groups "$dir/dlock" --version
  local setuid_status=$status setuid_stderr=$stderr
  chmod 2755 "$dir/dlock"
  run --separate-stderr setpriv --reuid=nobody --regid=nogroup --clear-groups "$dir/dlock" status k
  rm -rf "$dir"
  [ "$setuid_status" = 78 ] && [ "$status" = 78 ]
  [ "$setuid_stderr" = "dlock: refusing to run set-uid or set-gid" ] || { echo "$setuid_stderr"; false; }
}
