#!/usr/bin/env bats
# Every lock store, black box: one set of scenarios, run once per store through its entry point
# tests/stores/STORE/store.bats (a symbolic link to this file: the store is the name of the
# directory the file was run from, or DLOCK_TEST_STORE). tests/lib/STORE_helpers.bash starts and
# stops the store's own server(s) on loopback and says what the store does (the hooks:
# tests/lib/store_helpers.bash); a scenario whose feature the store lacks checks that it is
# refused (64, one line) or skips, saying why. Scenarios marked sql are the database stores' own
# (URL forms, roles, server settings).
#
# Bounds leave room for a loaded 2-core machine; the hand-over bound (1 s) is the requirement.

# tests/lib, found from this file itself (the link's directory is one level deeper)
TESTS_LIB=$(cd "$(dirname "$(readlink -f "$BATS_TEST_FILENAME")")/../lib" && pwd)
load "$TESTS_LIB/helpers"

STORE=${DLOCK_TEST_STORE:-$(basename "$BATS_TEST_DIRNAME")}
if [ -e "$TESTS_LIB/${STORE}_helpers.bash" ]; then
  load "$TESTS_LIB/${STORE}_helpers"
else
  load "$TESTS_LIB/store_helpers"
  store_start() { skip_file "run tests/stores/STORE/store.bats for a store that has tests/lib/STORE_helpers.bash (or set DLOCK_TEST_STORE), not $STORE"; }
  store_stop() { :; }
fi

setup_file() { store_start; }
teardown_file() { store_stop; true; }

setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# requires WORD: skips a scenario the store does not do (STORE_FEATURES).
requires() { store_has "$1" || skip "$STORE: not a feature of this store ($1)"; }

# The URL of this file's server with another user, password, port or database.
url_with() { # USER PASSWORD PORT DATABASE (sql)
  echo "$STORE://$1:$2@127.0.0.1:$3/$4"
}
password() { if [ "$STORE" = postgres ]; then echo "$PG_PASSWORD"; else echo "$MY_PASSWORD"; fi; }
port() { if [ "$STORE" = postgres ]; then echo "$PG_PORT"; else echo "$MY_PORT"; fi; }

# hold_until KEY FILE [dlock run options...]: a background dlock run (start_bg hold: BG_PID)
# whose command writes its pid to $T/held.pid and lets go once FILE exists; returns once the
# command runs (so the lock is held).
hold_until() {
  local key=$1 file=$2
  shift 2
  rm -f "$T/held.pid"
  start_bg hold "$DLOCK" run -k "$key" "$@" -- sh -c 'echo $$ >"$1.tmp"; mv "$1.tmp" "$1"
    until [ -e "$2" ]; do sleep 0.02; done' sh "$T/held.pid" "$file"
  wait_for "[ -s '$T/held.pid' ]" 10
}

# died_of COMMAND...: runs it from python and prints its return code (negative: the signal
# that killed it; a shell shows death by SIGINT as 130).
died_of() {
  python3 -c 'import subprocess, sys; print(subprocess.run(sys.argv[1:]).returncode)' "$@"
}

# ---------------------------------------------------------------------------------------------
# running under the lock

@test "$STORE: the command's exit status is passed through" {
  run -0 "$DLOCK" run -k pass -- true
  run -3 "$DLOCK" run -k pass -- sh -c 'exit 3'
  run -0 --separate-stderr "$DLOCK" run -k pass -- sh -c 'echo "out $DLOCK_KEY"'
  assert_output "out pass"
  run -127 "$DLOCK" run -k pass -- "$T/no-such-command"
  # killed by a signal: 128+N
  run -0 died_of "$DLOCK" run -k pass -- sh -c 'kill -TERM $$'
  assert_output 143
}

@test "$STORE: -n against a held lock exits 75 and does not run the command" {
  hold_until busy "$T/release"
  local holder=$BG_PID
  run -75 --separate-stderr "$DLOCK" run -k busy -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  # -E changes the code; -v names the holder (user@host, dlock's pid)
  run -9 --separate-stderr "$DLOCK" -v run -k busy -n -E 9 -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  echo "$stderr"
  [[ $stderr == *"$(id -un)@$(uname -n)"*"$holder"* ]]
  touch "$T/release"
  wait "$holder"
  run -0 "$DLOCK" run -k busy -n -- touch "$T/ran"
  [ -e "$T/ran" ]
}

@test "$STORE: a waiter starts within 1 s of the holder's end; -w 1 times out with 75" {
  start_bg holder "$DLOCK" run -k wake -- sh -c 'echo $$ >"$T/held.pid"; sleep 1.5; date +%s%3N >"$T/end"'
  local holder=$BG_PID
  wait_for "[ -s '$T/held.pid' ]" 10
  run -0 "$DLOCK" run -k wake -- sh -c 'date +%s%3N >"$T/start"'
  wait "$holder"
  local gap=$(($(cat "$T/start") - $(cat "$T/end")))
  echo "hand-over took $gap ms"
  [ "$gap" -ge 0 ] && [ "$gap" -lt 1000 ]

  hold_until wake "$T/release"
  local start took
  start=$(now_ms)
  run -75 "$DLOCK" run -k wake -w 1 -- touch "$T/ran"
  took=$(($(now_ms) - start))
  echo "-w 1 gave up after $took ms"
  [ ! -e "$T/ran" ]
  [ "$took" -ge 1000 ] && [ "$took" -lt 3000 ]
}

@test "$STORE: two contending jobs of 10 runs each never overlap (read, sleep, write counter)" {
  echo 0 >"$T/counter"
  local job
  for job in a b; do
    start_bg "job-$job" sh -c 'for i in 1 2 3 4 5 6 7 8 9 10; do
        "$DLOCK" run -k count -w 30s -- sh -c '\''
          [ -e "$T/inside" ] && echo overlap >>"$T/overlaps"
          touch "$T/inside"
          n=$(cat "$T/counter"); sleep 0.05; echo $((n + 1)) >"$T/counter"
          rm "$T/inside"'\'' || echo "run $i: $?" >>"$T/failures"
      done'
  done
  wait_for "[ \"\$(cat '$T/counter')\" = 20 ] || [ -e '$T/failures' ]" 40
  wait
  [ ! -e "$T/failures" ] || { cat "$T/failures"; false; }
  [ ! -e "$T/overlaps" ]
  [ "$(cat "$T/counter")" = 20 ]
}

@test "$STORE: the command inherits no descriptor of dlock's but 0, 1, 2 and file://'s lock" {
  # find, a child of the command's shell, lists the shell's descriptors: "FD TARGET" each.
  # (The caller's fd 3, bats' own, is closed here: it is not dlock's.)
  run -0 --separate-stderr "$DLOCK" run -k fds -- sh -c 'find /proc/$$/fd -mindepth 1 -printf "%f %l\n"; :' 3>&-
  echo "$output"
  local extra
  extra=$(echo "$output" | awk '$1 > 2')
  if [ "$STORE" = file ]; then
    # the held lock file alone (read-only, as flock(1) hands it over): no holder record
    [ "$(echo "$extra" | wc -l)" = 1 ]
    [[ "$extra" == *" $FILE_DIR/locks/"* ]] && [[ "$extra" != *"/.dlock/"* ]]
  else
    [ -z "$extra" ]
  fi
  [ "$(echo "$output" | awk '$1 <= 2' | wc -l)" = 3 ]
  # A nested run (on the key its caller holds) execs its command in place: 0, 1, 2 alone.
  run -0 --separate-stderr "$DLOCK" run -k fds -- \
    "$DLOCK" run -k fds -- sh -c 'find /proc/$$/fd -mindepth 1 -printf "%f %l\n"; :' 3>&-
  echo "$output"
  [ "$(echo "$output" | awk '{print $1}' | sort -n | tr '\n' ' ')" = "0 1 2 " ]
}

# ---------------------------------------------------------------------------------------------
# losing the lock

@test "$STORE: the server ends the holder's session or lease: the command (and its child) stopped, exit 76" {
  # a 6 s lease: a store without a loss notice (Redis) finds out at the next renewal, 2 s on
  start_bg holder "$DLOCK" run -k lose -t 6s -- sh -c 'sleep 60 & echo $! >"$T/child.pid"
    echo $$ >"$T/cmd.pid"; wait'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ] && [ -s '$T/child.pid' ]" 10
  local cmd child
  cmd=$(cat "$T/cmd.pid")
  child=$(cat "$T/child.pid")
  run -0 store_end_sessions
  local start=$(now_ms) # ended (a ZooKeeper client's start can take seconds)
  echo "sessions ended: $output"
  [ "$output" -ge 1 ]
  local st=0
  wait "$holder" || st=$?
  local took=$(($(now_ms) - start))
  echo "dlock exited $st $took ms after that"
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  # the message says how a lock of this store is lost
  grep -qF "lost lock 'lose': $STORE_LOSS" "$T/holder.err"
  # within a third of the TTL (the next renewal, 2 s) and 2 s of slack: before the lease's end
  [ "$took" -lt 4000 ]
  wait_for "gone $cmd && gone $child" 5
  # and the lock is free
  run -0 "$DLOCK" run -k lose -n -- true
}

@test "$STORE: the session ended by the server or by release --force: the command is stopped within 500 ms" {
  # The session is the lease: once the server ended it, another client can take the lock, so
  # dlock stops the command as soon as the server's goodbye arrives (man dlock, DATABASE
  # STORES: "usually within milliseconds"), not at the next renewal. (A Redis holder finds out
  # at its next renewal: man dlock, release --force.)
  requires loss_notice
  local how slow=0
  for how in store_end_sessions "\"\$DLOCK\" release --force -k prompt >/dev/null"; do
    rm -f "$T/cmd.pid" "$T/termed"
    start_bg holder "$DLOCK" run -k prompt -t 30s -- sh -c 'trap "date +%s%3N >\"\$T/termed\"; exit 143" TERM
      echo $$ >"$T/cmd.pid"; while :; do sleep 0.01; done'
    local holder=$BG_PID
    wait_for "[ -s '$T/cmd.pid' ]" 10
    eval "$how" >/dev/null
    local ended=$(now_ms) st=0
    wait "$holder" || st=$?
    [ "$st" -eq 76 ]
    wait_for "[ -s '$T/termed' ]" 1
    local took=$(($(cat "$T/termed") - ended))
    echo "$how: the command got SIGTERM $took ms after the session ended"
    cat "$T/holder.err"
    [ "$took" -lt 500 ] || slow=$((slow + 1))
  done
  [ "$slow" -eq 0 ]
}

@test "$STORE: dlock SIGKILLed: its command is killed and the lock is free at once (a lease: when it ends)" {
  # a 3 s lease, for a store whose lease outlives its holder until it ends
  start_bg holder "$DLOCK" run -k crash -t 3s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  local start=$(now_ms)
  { kill -KILL "$holder" && wait "$holder"; } 2>/dev/null || true
  run -0 "$DLOCK" run -k crash -w 10s -- true
  local took=$(($(now_ms) - start))
  echo "the next run got the lock after $took ms"
  if store_has session; then
    [ "$took" -lt 1000 ]
  else
    [ "$took" -lt 4500 ]
  fi
  wait_for "gone $(cat "$T/cmd.pid")" 5
}

@test "$STORE: release --force ends the holder: it exits 76, the lock is free" {
  # a 6 s lease: a store without a loss notice (Redis) finds out at the next renewal, 2 s on
  start_bg holder "$DLOCK" run -k force -t 6s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  run -0 "$DLOCK" release --force -k force
  local st=0
  wait "$holder" || st=$?
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  wait_for "gone $(cat "$T/cmd.pid")" 5
  run -0 "$DLOCK" run -k force -n -- true
  # a free lock: nothing to end, still 0
  run -0 "$DLOCK" release --force -k force
}

# ---------------------------------------------------------------------------------------------
# who holds it

@test "$STORE: status and list show the holder (user@host, pid), in text and JSON" {
  run -1 "$DLOCK" status who
  hold_until who "$T/release"
  local holder=$BG_PID
  run -0 --separate-stderr "$DLOCK" status who
  echo "$output"
  assert_line --regexp '^state: +held$'
  assert_line --regexp "^holder: +$(id -un)@$(uname -n) pid $holder\$"
  run -0 --separate-stderr "$DLOCK" status who --json
  echo "$output"
  json_ok '
assert d["key"] == "who" and d["held"] is True, d
h = d["holder"]
assert h["pid"] == int(A[0]) and h["user"] == A[1] and h["host"] == A[2], h
assert is_int(d["fencing_token"]) and d["fencing_token"] >= 1, d
' "$holder" "$(id -un)" "$(uname -n)"
  run -0 --separate-stderr "$DLOCK" list
  echo "$output"
  assert_line --regexp "^who .*$(id -un)@$(uname -n).*$holder"
  run -0 --separate-stderr "$DLOCK" list --json
  json_ok '
locks = [s for s in d["locks"] if s["key"] == "who"]
assert len(locks) == 1, d
h = locks[0]["holder"]
assert h["pid"] == int(A[0]) and h["user"] == A[1] and h["host"] == A[2], h
' "$holder" "$(id -un)" "$(uname -n)"
  touch "$T/release"
  wait "$holder"
  run -1 "$DLOCK" status who
}

@test "$STORE: only the command's program name is recorded; the whole line with --record-command, not kept after release" {
  # hold_until's command is sh -c SCRIPT sh FILE...: its arguments name $T
  hold_until rec "$T/release"
  local holder=$BG_PID
  run -0 --separate-stderr "$DLOCK" status rec --json
  echo "$output"
  refute_output --partial "$T"
  run -0 --separate-stderr "$DLOCK" list --json
  refute_output --partial "$T"
  touch "$T/release"
  wait "$holder"
  hold_until rec "$T/release2" --record-command
  holder=$BG_PID
  run -0 --separate-stderr "$DLOCK" status rec --json
  echo "$output"
  if [ "$STORE" != postgres ]; then # PostgreSQL records no command (pg_stat_activity shows it)
    json_ok 'assert d["holder"]["command"].startswith("sh -c "), d["holder"]'
    assert_output --partial "$T/release2"
  fi
  touch "$T/release2"
  wait "$holder"
  if [ "$STORE" = mysql ]; then # the row outlives the lock (its fencing token); the command not
    run -0 mysql_admin -e "SELECT name, fence, command FROM dlock.dlock_fence"
    echo "$output"
    assert_output --partial rec
    refute_output --partial "$T"
  fi
}

# ---------------------------------------------------------------------------------------------
# fencing

@test "$STORE: DLOCK_FENCING_TOKEN is set and strictly increasing across runs" {
  local i
  for i in 1 2 3 4 5; do
    "$DLOCK" run -k fence -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}" >>"$T/tokens"'
  done
  cat "$T/tokens"
  run -0 python3 -c '
import sys
t = [int(x) for x in open(sys.argv[1]).read().split()]
assert len(t) == 5 and all(a < b for a, b in zip(t, t[1:])) and t[0] >= 1, t
' "$T/tokens"
}

@test "$STORE: a user that cannot create or write the fencing table: no DLOCK_FENCING_TOKEN, -v says why (sql)" {
  requires sql
  # the table exists (made by dlock), and the other user has no right on it
  run -0 "$DLOCK" run -k nofence -- true
  run -0 --separate-stderr "$DLOCK" -u "$NOFENCE_URL" -v run -k nofence -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
  echo "$stderr"
  assert_output unset
  [[ $stderr == *"no fencing token"* ]]
  # quiet without -v; the lock itself still works against the other user's holders
  run -0 --separate-stderr "$DLOCK" -u "$NOFENCE_URL" run -k nofence -- true
  [ -z "$stderr" ]
  hold_until nofence "$T/release"
  run -75 "$DLOCK" -u "$NOFENCE_URL" run -k nofence -n -- true
}

# ---------------------------------------------------------------------------------------------
# lock kinds and features

@test "$STORE: --shared: two shared holders run together, an exclusive one waits (or 64, one line)" {
  if ! store_has shared; then
    run -64 --separate-stderr "$DLOCK" run -k sh --shared -- touch "$T/ran"
    echo "$stderr"
    [ ! -e "$T/ran" ]
    [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
    [[ $stderr == *redis* || $stderr == *postgres* || $stderr == *PostgreSQL* || $stderr == *Redis* ]]
    return
  fi
  hold_until sh "$T/release" --shared
  local first=$BG_PID
  run -0 "$DLOCK" run -k sh --shared -n -- touch "$T/second-ran"
  [ -e "$T/second-ran" ]
  run -75 "$DLOCK" run -k sh -n -- true
  start_bg excl "$DLOCK" run -k sh -w 20s -- sh -c 'date +%s%3N >"$T/excl-start"'
  local excl=$BG_PID
  sleep 1
  [ ! -e "$T/excl-start" ]
  # a waiting exclusive run holds back new shared ones (no writer starves)
  run -75 "$DLOCK" run -k sh --shared -n -- true
  local released=$(now_ms)
  touch "$T/release"
  wait "$first"
  wait "$excl"
  local gap=$(($(cat "$T/excl-start") - released))
  echo "exclusive started $gap ms after the shared holder was told to go"
  [ "$gap" -lt 1500 ]
}

@test "$STORE: --fair: waiters take the lock in the order they came" {
  requires fair
  hold_until fair "$T/release"
  local holder=$BG_PID w pids=()
  for w in 1 2 3 4; do
    "$DLOCK" run -k fair --fair -w 30s -- sh -c "echo $w >>'$T/order'" 3>&- &
    pids+=($!)
    echo "$!" >>"$T/bg.pid"
    sleep 0.5 # each waiter queued before the next one comes
  done
  touch "$T/release"
  wait "$holder"
  for w in "${pids[@]}"; do wait "$w"; done
  run -0 cat "$T/order"
  assert_output "$(printf '1\n2\n3\n4')"
}

@test "$STORE: --limit 3: six contenders, never more than 3 inside, all of them run" {
  requires limit
  local i pids=()
  for i in 1 2 3 4 5 6; do
    "$DLOCK" run -k sem --limit 3 -w 30s -- sh -c '
      mkdir "$T/in.$1"; n=$(ls -d "$T"/in.* | wc -l); echo "$n" >>"$T/counts"
      sleep 0.5; rmdir "$T/in.$1"' sh "$i" 3>&- &
    pids+=($!)
    echo "$!" >>"$T/bg.pid"
  done
  for i in "${pids[@]}"; do wait "$i"; done
  run -0 sort -n "$T/counts"
  echo "inside at each entry: $(echo $output)"
  [ "${#lines[@]}" -eq 6 ]
  [ "${lines[5]}" -le 3 ] && [ "${lines[5]}" -ge 2 ]
}

@test "$STORE: what the store does not do (--limit, --fair, wait, barrier, latch, acquire) is refused: 64 and one line" {
  local args refused=()
  store_has limit || refused+=("run -k f --limit 2 -- touch $T/ran")
  store_has fair || refused+=("run -k f --fair -- touch $T/ran")
  store_has coordinate || refused+=("wait -k f -w 1s" "barrier -k f --parties 2 -w 1s"
    "latch -k f --count 2" "latch -k f --down" "latch -k f --wait 1s")
  [ "${#refused[@]}" -gt 0 ] || skip "$STORE: does all of them"
  for args in "${refused[@]}"; do
    # shellcheck disable=SC2086
    run -64 --separate-stderr "$DLOCK" $args
    echo "$args: $stderr"
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ $stderr == dlock:* ]]
  done
  [ ! -e "$T/ran" ]
}

# ---------------------------------------------------------------------------------------------
# a lock that spans several steps: acquire --keep (every store), acquire alone (a lease store)

# keep_processes KEY: the pids of the acquire --keep holder processes of KEY still running.
keep_processes() { pgrep -f -- "acquire -k $1 " || true; }
# one_keep_process KEY: exactly one such process (else what there is, for the failure's log).
one_keep_process() {
  local pids
  pids=$(keep_processes "$1")
  [ "$(printf '%s' "$pids" | grep -c .)" -eq 1 ] && return 0
  echo "keep processes of $1: ${pids:-none}"
  ps -o pid,ppid,stat,etime,args -p "$(echo $pids | tr ' ' ,),1" 2>&1 || true
  return 1
}

@test "$STORE: acquire --keep: its holder process keeps the lock past two TTLs; renew and release by token (a waiter gets it); a second release is 76" {
  requires keep
  # a key of this file's own: every store's file runs at once, and pgrep sees them all
  local kp=kp-$$
  sleep 600 &
  local owner=$! token
  echo "$owner" >>"$T/bg.pid"
  token=$("$DLOCK" acquire -k "$kp" -t 2s --keep --while-pid "$owner")
  [ -n "$token" ]
  run -0 "$DLOCK" status "$kp" --json
  json_ok 'assert d["held"] and "acquire --keep" in d["holder"]["command"], d'
  sleep 5
  run -75 "$DLOCK" run -k "$kp" -n -- true
  run -0 "$DLOCK" renew -k "$kp" --token "$token"
  start_bg waiter "$DLOCK" run -k "$kp" -w 30s -- touch "$T/waiter-ran"
  local waiter=$BG_PID
  sleep 0.5
  [ ! -e "$T/waiter-ran" ]
  run -0 "$DLOCK" release -k "$kp" --token "$token"
  wait "$waiter"
  [ -e "$T/waiter-ran" ]
  wait_for '[ -z "$(keep_processes $kp)" ]' 10
  run -76 "$DLOCK" release -k "$kp" --token "$token"
}

@test "$STORE: acquire --keep: the lock goes with the process it is kept for; -n against it is 75 and leaves no holder process" {
  requires keep
  local ko=ko-$$ # this file's own (see above)
  sleep 600 &
  local owner=$! token
  echo "$owner" >>"$T/bg.pid"
  # a lease long enough that a holder starved of CPU on a loaded machine keeps it (-t 2s: its
  # watchdog may count it lost, and it ends, which this test does not look at)
  token=$("$DLOCK" acquire -k "$ko" -t 10s --keep --while-pid "$owner")
  one_keep_process "$ko"
  run -75 --separate-stderr "$DLOCK" acquire -k "$ko" -t 10s --keep -n
  [ -z "$output" ]
  one_keep_process "$ko"
  # SIGTERM while its holder process waits: both end (143), nothing is taken
  start_bg late "$DLOCK" acquire -k "$ko" -t 10s --keep -w 30s
  local late=$BG_PID
  wait_for "pgrep -P $late >/dev/null" 10
  sleep 0.5 # its holder process is waiting
  kill -TERM "$late"
  local rc=0
  wait "$late" || rc=$?
  echo "acquire --keep waiting, then SIGTERM: $rc; $(cat "$T/late.err")"
  [ "$rc" -eq 143 ]
  wait_for "! pgrep -f -- 'acquire -k $ko -t 10s --keep -w 30s' >/dev/null" 10
  one_keep_process "$ko"
  kill "$owner"
  wait_for "'$DLOCK' run -k '$ko' -n -- true" 10
  wait_for '[ -z "$(keep_processes $ko)" ]' 10
}

@test "$STORE: acquire without --keep: a lease no process keeps (or 64 saying to use --keep)" {
  if ! store_has detached; then
    run -64 --separate-stderr "$DLOCK" acquire -k ad -t 5s
    echo "$stderr"
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ $stderr == *"acquire --keep"* ]]
    run -0 "$DLOCK" run -k ad -n -- true
    return
  fi
  local token
  token=$("$DLOCK" acquire -k ad -t 3s)
  run -75 "$DLOCK" run -k ad -n -- true
  run -0 "$DLOCK" renew -k ad --token "$token" --ttl 10s
  run -0 "$DLOCK" release -k ad --token "$token"
  run -0 "$DLOCK" run -k ad -n -- true
  # not renewed: it expires with its lease
  token=$("$DLOCK" acquire -k ad -t 2s)
  run -75 "$DLOCK" run -k ad -n -- true
  wait_for "'$DLOCK' run -k ad -n -- true" 10
  run -76 "$DLOCK" release -k ad --token "$token"
}

# ---------------------------------------------------------------------------------------------
# waiting without taking: wait, barrier, latch

# party NAME SUBCOMMAND ARGS...: a background `dlock SUBCOMMAND ARGS...` that writes its exit
# status to $T/NAME.end when it returns (start_bg NAME: BG_PID).
party() {
  local name=$1
  shift
  start_bg "$name" bash -c '"$@"; echo $? >"$T/'"$name"'.end"' _ "$DLOCK" "$@"
}
ended() { [ -s "$T/$1.end" ]; }
status_of() { cat "$T/$1.end"; }

@test "$STORE: wait: 0 at once on a free lock (taking nothing); on a held one, 0 once it is released; -w runs out with 75" {
  requires coordinate
  run -0 "$DLOCK" wait -k wf
  run -1 "$DLOCK" status wf
  hold_until wf "$T/release"
  local holder=$BG_PID
  run -75 "$DLOCK" wait -k wf -w 500ms
  party w1 wait -k wf -w 30s
  party w2 wait -k wf -w 30s
  sleep 1
  ! ended w1 && ! ended w2
  touch "$T/release"
  wait "$holder"
  wait_for 'ended w1 && ended w2' 10
  [ "$(status_of w1)" = 0 ] && [ "$(status_of w2)" = 0 ]
  run -0 "$DLOCK" run -k wf -n -- true
}

@test "$STORE: wait: a holder killed with SIGKILL: the waiter returns once its lock is gone" {
  requires coordinate
  hold_until wk "$T/never" -t 2s
  local holder=$BG_PID
  party w wait -k wk -w 30s
  sleep 0.5
  ! ended w
  kill -KILL "$holder"
  wait_for 'ended w' 15
  [ "$(status_of w)" = 0 ]
}

# holders_of KEY: how many holders status counts.
holders_of() {
  "$DLOCK" status "$1" --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin).get("holders") or []))'
}

@test "$STORE: wait on a --shared or --limit 2 lock: 0 once the last of its holders is gone" {
  requires coordinate
  local kind word key
  for kind in --shared "--limit 2"; do
    word=${kind#--}
    word=${word%% *}
    store_has "$word" || continue
    key=wk-$word
    # shellcheck disable=SC2086
    hold_until "$key" "$T/release-$word-1" $kind
    local first=$BG_PID
    # shellcheck disable=SC2086
    start_bg second "$DLOCK" run -k "$key" $kind -- sh -c "until [ -e '$T/release-$word-2' ]; do sleep 0.02; done"
    local second=$BG_PID
    wait_for "[ \"\$(holders_of $key)\" = 2 ]" 10
    party "w-$word" wait -k "$key" -w 30s
    sleep 0.5
    ! ended "w-$word"
    touch "$T/release-$word-1"
    wait "$first"
    sleep 0.5
    ! ended "w-$word" # one holder is left
    touch "$T/release-$word-2"
    wait "$second"
    wait_for "ended w-$word" 10
    [ "$(status_of "w-$word")" = 0 ]
  done
}

@test "$STORE: barrier --parties 3: none returns before the third arrives, then all (0), twice in a row" {
  requires coordinate
  local round
  for round in 1 2; do
    party "a$round" barrier -k bar --parties 3 -w 30s
    party "b$round" barrier -k bar --parties 3 -w 30s
    sleep 1
    ! ended "a$round" && ! ended "b$round"
    run -0 "$DLOCK" barrier -k bar --parties 3 -w 30s
    wait_for "ended a$round && ended b$round" 10
    [ "$(status_of "a$round")" = 0 ] && [ "$(status_of "b$round")" = 0 ]
  done
}

@test "$STORE: barrier: a party that times out (75) withdraws its arrival; another --parties in progress is 64" {
  requires coordinate
  run -75 "$DLOCK" barrier -k late --parties 2 -w 500ms
  # had it counted, this one would make two
  run -75 "$DLOCK" barrier -k late --parties 2 -w 500ms
  party b barrier -k mix --parties 3 -w 10s
  sleep 0.5
  run -64 "$DLOCK" barrier -k mix --parties 2 -w 1s
  assert_output --partial "barrier 'mix' is in progress with --parties 3"
}

@test "$STORE: latch: --count 3, waiters return once three --down brought it to zero; it expires; --down of no latch is 1" {
  requires coordinate
  run -0 "$DLOCK" latch -k fan --count 3 --json
  json_ok 'assert d == {"version": 1, "key": "fan", "count": 3}, d'
  party w1 latch -k fan --wait 30s
  party w2 latch -k fan --wait 30s
  run -0 "$DLOCK" latch -k fan --down --json
  json_ok 'assert d["count"] == 2, d'
  run -0 "$DLOCK" latch -k fan --down
  sleep 0.5
  ! ended w1 && ! ended w2
  run -75 "$DLOCK" latch -k fan --wait 300ms
  run -0 "$DLOCK" latch -k fan --down --json
  json_ok 'assert d["count"] == 0, d'
  wait_for 'ended w1 && ended w2' 10
  [ "$(status_of w1)" = 0 ] && [ "$(status_of w2)" = 0 ]
  run -0 "$DLOCK" latch -k fan --wait 1s
  run -0 "$DLOCK" latch -k short --count 2 --expire 1s
  sleep 2.5
  run -1 "$DLOCK" latch -k short --down
  assert_output --partial "latch 'short' is not set"
  run -1 "$DLOCK" latch -k never --down
}

# ---------------------------------------------------------------------------------------------
# cron and CI policies (--note, --min-hold, --lock-delay, --replace, --supersede)

# requires_policy WORD: skips a policy scenario of a store that refuses it (the refusal is
# checked below).
requires_policy() { store_has "$1" || skip "$STORE: --${1/_/-} is refused here (64)"; }

# job NAME KEY [options...]: a cron job of 0.3 s under `dlock run -n`, in the background
# (BG_PID); its command appends "NAME" to $T/runs.
job() {
  local name=$1 key=$2
  shift 2
  start_bg "$name" "$DLOCK" run -n -k "$key" "$@" -- sh -c 'echo "$1" >>"$2"; sleep 0.3' sh "$name" "$T/runs"
}

@test "$STORE: --note is shown by status, list (text and JSON) and a conflict; printable text only, 256 characters at most" {
  local note='deploy #42 — «ünïcödé» $HOME `x` "q" '\''s'\'' \ 100% 日本 <b>&amp;'
  hold_until noted "$T/release" --note "$note"
  local holder=$BG_PID
  run -0 --separate-stderr "$DLOCK" status noted
  echo "$output"
  assert_line "note:          $note"
  run -0 --separate-stderr "$DLOCK" status noted --json
  json_ok 'assert d["holder"]["note"] == A[0], d' "$note"
  run -0 --separate-stderr "$DLOCK" list
  echo "$output"
  assert_line --regexp "^noted .*$holder"
  assert_output --partial "$note"
  run -0 --separate-stderr "$DLOCK" list --json
  json_ok '
locks = [s for s in d["locks"] if s["key"] == "noted"]
assert len(locks) == 1 and locks[0]["holder"]["note"] == A[0], d
' "$note"
  run -75 --separate-stderr "$DLOCK" -v run -k noted -n -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"note: $note"* ]]
  touch "$T/release"
  wait "$holder"
  # control characters, invisible ones, more than 256 characters: 64 and one line
  local bad long
  long=$(printf 'x%.0s' {1..257})
  for bad in $'tab\there' $'new\nline' $'bidi\u202eoverride' "$long"; do
    run -64 --separate-stderr "$DLOCK" run -k noted --note "$bad" -- touch "$T/ran"
    echo "$stderr"
    [ "${#stderr_lines[@]}" -eq 1 ]
  done
  [ ! -e "$T/ran" ]
  # 256 characters of two bytes each are fine
  long=$(printf 'é%.0s' {1..256})
  hold_until noted "$T/release2" --note "$long"
  holder=$BG_PID
  run -0 --separate-stderr "$DLOCK" status noted --json
  json_ok 'assert d["holder"]["note"] == A[0], d' "$long"
  touch "$T/release2"
  wait "$holder"
}

@test "$STORE: two hosts' cron 1 s apart: without --min-hold the job runs twice (the problem), with it once" {
  # without: the first released before the second asked
  job a plain
  local a=$BG_PID
  sleep 1
  job b plain
  local b=$BG_PID
  wait "$a"
  wait "$b"
  [ "$(grep -c . "$T/runs")" -eq 2 ]
  rm "$T/runs"
  requires_policy min_hold
  local start took
  start=$(now_ms)
  job c period --min-hold 5s
  local c=$BG_PID
  wait "$c"
  took=$(($(now_ms) - start))
  echo "the first job's dlock exited after $took ms (its command takes 300 ms)"
  [ "$took" -lt 4000 ] # its status came back at once, not after --min-hold
  sleep 1
  job d period --min-hold 5s
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 75 ]
  [ "$(cat "$T/runs")" = c ]
}

@test "$STORE: --min-hold: status says 'held until … (--min-hold), command ended'; a waiter gets it then; release --force frees it" {
  requires_policy min_hold
  run -0 "$DLOCK" run -k kept --min-hold 4s --note nightly -- sh -c 'date +%s%3N >"$T/first"'
  run -0 --separate-stderr "$DLOCK" status kept
  echo "$output"
  assert_line --regexp '^state: +held until .* \(--min-hold\), command ended$'
  assert_line "note:          nightly"
  run -0 --separate-stderr "$DLOCK" status kept --json
  json_ok 'assert d["held"] is True and d["command_ended"] is True and 0 < d["ttl_ms"] <= 4000, d'
  run -75 --separate-stderr "$DLOCK" -v run -k kept -n -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"--min-hold"* ]]
  # a waiter is let in when the period ends, not before
  run -0 "$DLOCK" run -k kept -w 10s -- sh -c 'date +%s%3N >"$T/second"'
  local gap=$(($(cat "$T/second") - $(cat "$T/first")))
  echo "the waiter ran $gap ms after the first command"
  [ "$gap" -ge 3500 ]
  # release --force ends a period at once
  run -0 "$DLOCK" run -k kept --min-hold 60s -- true
  run -0 "$DLOCK" status kept
  run -0 "$DLOCK" release --force -k kept
  run -0 "$DLOCK" run -k kept -n -- true
  [ ! -e "$T/ran" ]
}

@test "$STORE: --min-hold: a holder killed with SIGKILL leaves the lock closed until the period ends" {
  requires_policy min_hold
  start_bg holder "$DLOCK" run -k crashed -t 2s --min-hold 5s -- sh -c 'date +%s%3N >"$T/first"; exec sleep 60'
  local holder=$BG_PID
  wait_for "[ -s '$T/first' ]" 10
  { kill -KILL "$holder" && wait "$holder"; } 2>/dev/null || true
  run -75 "$DLOCK" run -k crashed -n -- touch "$T/ran"
  run -0 "$DLOCK" run -k crashed -w 15s -- sh -c 'date +%s%3N >"$T/second"'
  local gap=$(($(cat "$T/second") - $(cat "$T/first")))
  echo "the next run came $gap ms after the killed one started"
  [ "$gap" -ge 4500 ]
  [ ! -e "$T/ran" ]
}

@test "$STORE: --min-hold longer than --max-hold, or with --shared, is 64 (one line)" {
  run -64 --separate-stderr "$DLOCK" run -k f --min-hold 10s --max-hold 5s -- touch "$T/ran"
  [ "${#stderr_lines[@]}" -eq 1 ]
  run -64 --separate-stderr "$DLOCK" run -k f --min-hold 10s --shared -- touch "$T/ran"
  [ "${#stderr_lines[@]}" -eq 1 ]
  run -64 --separate-stderr "$DLOCK" run -k f --supersede -n -- touch "$T/ran"
  [ "${#stderr_lines[@]}" -eq 1 ]
  [ ! -e "$T/ran" ]
}

@test "$STORE: --lock-delay: after a holder killed with SIGKILL the lock stays closed D more; a waiter gets it then" {
  requires_policy lock_delay
  start_bg holder "$DLOCK" run -k delayed -t 2s --lock-delay 3s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  { kill -KILL "$holder" && wait "$holder"; } 2>/dev/null || true
  local killed=$(now_ms)
  wait_for "gone $(cat "$T/cmd.pid")" 5
  # once the lease has ended (at once for a session store), the delay shows
  wait_for "! \"\$DLOCK\" status delayed >/dev/null" 10
  run -1 --separate-stderr "$DLOCK" status delayed
  echo "$output"
  assert_line --regexp '^state: +free after .* \(lock-delay\)'
  run -1 --separate-stderr "$DLOCK" status delayed --json
  json_ok 'assert d["held"] is False and 0 < d["delay_ms"] <= 3000, d'
  run -75 --separate-stderr "$DLOCK" -v run -k delayed -n -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"--lock-delay"* ]]
  run -0 "$DLOCK" run -k delayed -w 15s -- true
  local took=$(($(now_ms) - killed))
  echo "the waiter ran $took ms after the kill"
  [ "$took" -ge 2500 ]
  [ ! -e "$T/ran" ]
}

@test "$STORE: --lock-delay: release --force starts the delay; a clean release does not" {
  requires_policy lock_delay
  run -0 "$DLOCK" run -k clean --lock-delay 30s -- true
  run -0 "$DLOCK" run -k clean -n -- true
  # a 3 s lease: the holder learns of the forced release at its next renewal, within 1 s
  start_bg holder "$DLOCK" run -k forced -t 3s --lock-delay 3s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  run -0 "$DLOCK" release --force -k forced
  local forced=$(now_ms) st=0
  wait "$holder" || st=$?
  [ "$st" -eq 76 ]
  run -75 "$DLOCK" run -k forced -n -- touch "$T/ran"
  run -0 "$DLOCK" run -k forced -w 15s -- true
  local took=$(($(now_ms) - forced))
  echo "the waiter ran $took ms after the forced release"
  [ "$took" -ge 2500 ]
  [ ! -e "$T/ran" ]
}

# replaced_holder KEY COMMAND: a holder under a 3 s lease (renewals each second, 1 s
# --kill-after) running COMMAND, which writes $T/cmd.pid first; returns once it runs.
replaced_holder() {
  start_bg holder "$DLOCK" run -k "$1" -t 3s --kill-after 1s --note "old build" -- sh -c "$2"
  wait_for "[ -s '$T/cmd.pid' ]" 10
}

@test "$STORE: --replace: a holder that exits on SIGTERM is stopped, exits 76 naming the replacer; never two at once" {
  requires_policy replace
  replaced_holder over 'echo $$ >"$T/cmd.pid"; trap "touch \"$T/inside-old-ended\"; rm -f \"$T/inside\"; exit 0" TERM
    touch "$T/inside"; while :; do sleep 0.05; done'
  local holder=$BG_PID
  run -0 --separate-stderr "$DLOCK" run -k over --replace --note "new build" -w 20s -- sh -c '
    [ -e "$T/inside" ] && echo overlap >"$T/overlap"; date +%s%3N >"$T/new"'
  local st=0
  wait "$holder" || st=$?
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  grep -q "replaced by .*new build" "$T/holder.err"
  [ -e "$T/inside-old-ended" ]
  [ ! -e "$T/overlap" ]
  [ -e "$T/new" ]
}

@test "$STORE: --replace: a holder that ignores SIGTERM is killed after --kill-after; the replacer starts after it is dead" {
  requires_policy replace
  replaced_holder over 'echo $$ >"$T/cmd.pid"; trap "" TERM; while :; do sleep 0.05; done'
  local holder=$BG_PID old
  old=$(cat "$T/cmd.pid")
  run -0 --separate-stderr "$DLOCK" run -k over --replace -w 20s -- sh -c '
    case $(ps -o stat= -p "$1") in "" | Z*) ;; *) echo overlap >"$T/overlap" ;; esac' sh "$old"
  local st=0
  wait "$holder" || st=$?
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  grep -q "replaced by" "$T/holder.err"
  [ ! -e "$T/overlap" ]
  gone "$old"
}

@test "$STORE: --supersede: five waiters arriving in turn, only the last runs; the others exit 75 saying so" {
  requires_policy supersede
  hold_until queue "$T/release"
  local holder=$BG_PID i prev=
  for i in 1 2 3 4 5; do
    start_bg "w$i" "$DLOCK" -v run -k queue --supersede --note "build $i" -- sh -c 'echo "$1" >>"$2"' sh "$i" "$T/ran"
    eval "w$i=\$BG_PID"
    # registered: it said what it waits for
    wait_for "grep -q 'waiting for' '$T/w$i.err'" 10
    if [ -n "$prev" ]; then
      # at once, not at the end of a wait's block (30 s)
      wait_for "gone $prev" 10
      local st=0
      wait "$prev" || st=$?
      cat "$T/w$((i - 1)).err"
      [ "$st" -eq 75 ]
      grep -q "superseded by a newer waiter.*build $i" "$T/w$((i - 1)).err"
    fi
    eval "prev=\$w$i"
  done
  touch "$T/release"
  wait "$holder"
  wait "$prev"
  [ "$(cat "$T/ran")" = 5 ]
}

@test "$STORE: --supersede with --replace: the newest waiter replaces the holder too (cancel-in-progress)" {
  requires_policy supersede
  requires_policy replace
  replaced_holder deploy 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID
  run -0 "$DLOCK" run -k deploy --supersede --replace -w 20s -- touch "$T/new"
  local st=0
  wait "$holder" || st=$?
  [ "$st" -eq 76 ]
  [ -e "$T/new" ]
}

@test "$STORE: a policy the store does not have is refused: 64, one line naming the stores that have it" {
  local args refused=()
  store_has min_hold || refused+=("run -k f --min-hold 1s -- touch $T/ran")
  store_has lock_delay || refused+=("run -k f --lock-delay 1s -- touch $T/ran")
  store_has replace || refused+=("run -k f --replace -- touch $T/ran")
  store_has supersede || refused+=("run -k f --supersede -- touch $T/ran")
  [ "${#refused[@]}" -gt 0 ] || skip "$STORE: does all of them"
  for args in "${refused[@]}"; do
    # shellcheck disable=SC2086
    run -64 --separate-stderr "$DLOCK" $args
    echo "$args: $stderr"
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ $stderr == *"not available on"* ]]
  done
  [ ! -e "$T/ran" ]
}

# ---------------------------------------------------------------------------------------------
# errors before the lock

@test "$STORE: a password in the URL works (one warning); bad password 77, refused port 69, unknown database 78 (sql)" {
  requires sql
  local pw port
  pw=$(password)
  port=$(port)
  # the URL's password alone (no DLOCK_PASSWORD_FILE, which would win over it)
  run -0 --separate-stderr env -u DLOCK_PASSWORD_FILE "$DLOCK" -u "$(url_with dlock "$pw" "$port" dlock)" run -k e -- true
  echo "$stderr"
  [ "${#stderr_lines[@]}" -eq 1 ]
  [[ $stderr == *"password in --url"* ]]
  [[ $stderr != *"$pw"* ]]
  run -77 --separate-stderr env -u DLOCK_PASSWORD_FILE "$DLOCK" -u "$(url_with dlock wrong-password "$port" dlock)" run -k e -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr != *wrong-password* ]]
  # the same through DLOCK_PASSWORD
  DLOCK_PASSWORD=wrong-password run -77 --separate-stderr env -u DLOCK_PASSWORD_FILE "$DLOCK" run -k e -- touch "$T/ran"
  run -69 --separate-stderr "$DLOCK" -u "$STORE://dlock@127.0.0.1:$CLOSED_PORT/dlock" run -k e -- touch "$T/ran"
  echo "$stderr"
  run -78 --separate-stderr "$DLOCK" -u "$STORE://dlock@127.0.0.1:$port/dlock_missing" run -k e -- touch "$T/ran"
  echo "$stderr"
  [ ! -e "$T/ran" ]
}

@test "$STORE: a malformed URL is a usage error (64): an unclosed [ or a port that is not a number (sql)" {
  requires sql
  local bad
  for bad in "$STORE://dlock@[::1/dlock" "$STORE://dlock@127.0.0.1:notaport/dlock"; do
    run --separate-stderr "$DLOCK" -u "$bad" run -k e -- touch "$T/ran"
    echo "$bad: exit $status: $stderr"
    [ "$status" -eq 64 ]
  done
  [ ! -e "$T/ran" ]
}

@test "$STORE: a --ttl longer than the server keeps an unreachable session is refused with 64 (sql)" {
  requires sql
  # a server setting that ends sessions after 5 s: PostgreSQL's idle_session_timeout for a
  # role of its own; MariaDB's TCP keepalives (3 s + 1 s x 2) for every new session
  local url=$DLOCK_URL setting
  if [ "$STORE" = postgres ]; then
    psql_admin -d postgres -c "CREATE ROLE dlock_idle LOGIN PASSWORD '$PG_PASSWORD'" \
      -c "ALTER ROLE dlock_idle SET idle_session_timeout = '5s'" \
      -c "GRANT ALL ON DATABASE dlock TO dlock_idle"
    url="postgres://dlock_idle@127.0.0.1:$PG_PORT/dlock"
    setting=idle_session_timeout
  else
    local before
    before=$(mysql_admin -e 'SELECT @@global.tcp_keepalive_time, @@global.tcp_keepalive_interval, @@global.tcp_keepalive_probes')
    echo "keepalives before: $before"
    mysql_admin -e 'SET GLOBAL tcp_keepalive_time = 3, GLOBAL tcp_keepalive_interval = 1, GLOBAL tcp_keepalive_probes = 2'
    setting=tcp_keepalive_time
  fi
  local st_long=0 st_short=0
  "$DLOCK" -u "$url" run -k idle -t 10s -- touch "$T/ran-long" 2>"$T/long.err" || st_long=$?
  "$DLOCK" -u "$url" run -k idle -t 4s -- touch "$T/ran-short" 2>"$T/short.err" || st_short=$?
  if [ "$STORE" != postgres ]; then
    # shellcheck disable=SC2086
    set -- $before
    mysql_admin -e "SET GLOBAL tcp_keepalive_time = $1, GLOBAL tcp_keepalive_interval = $2, GLOBAL tcp_keepalive_probes = $3"
  fi
  cat "$T/long.err" "$T/short.err"
  [ "$st_long" -eq 64 ]
  [ ! -e "$T/ran-long" ]
  [ "$(wc -l <"$T/long.err")" -eq 1 ]
  grep -q "$setting" "$T/long.err"
  # within the limit it runs
  [ "$st_short" -eq 0 ]
  [ -e "$T/ran-short" ]
}

# ---------------------------------------------------------------------------------------------
# signals, names, nesting

@test "$STORE: Ctrl-C (SIGINT) while waiting: dlock dies of SIGINT (130), the lock stays usable" {
  hold_until intr "$T/release"
  local holder=$BG_PID
  run -0 python3 -c 'import subprocess, sys, time, signal
p = subprocess.Popen(sys.argv[1:]); time.sleep(1); p.send_signal(signal.SIGINT); print(p.wait())' \
    "$DLOCK" run -k intr -w 20s -- touch "$T/ran"
  echo "return code: $output (-2: died of SIGINT, 130 in a shell)"
  [ "$output" = -2 ] || [ "$output" = 130 ]
  [ ! -e "$T/ran" ]
  # the holder still holds it, and the interrupted waiter does not take it afterwards
  run -0 "$DLOCK" status intr
  touch "$T/release"
  wait "$holder"
  run -0 "$DLOCK" run -k intr -n -- touch "$T/ran"
  [ -e "$T/ran" ]
}

@test "$STORE: lock names longer than 64 characters, or differing only in case, are distinct locks" {
  local base long1 long2
  base=$(printf 'n%.0s' $(seq 64))
  long1=${base}-first-$(printf 'x%.0s' $(seq 150))
  long2=${base}-second-$(printf 'x%.0s' $(seq 150))
  run -0 --separate-stderr "$DLOCK" run -k "$long1" -- sh -c 'echo "$DLOCK_KEY"'
  assert_output "$long1"
  hold_until "$long1" "$T/release"
  run -75 "$DLOCK" run -k "$long1" -n -- true
  # the same first 64 characters: another lock
  run -0 "$DLOCK" run -k "$long2" -n -- true
  run -0 --separate-stderr "$DLOCK" status "$long1" --json
  json_ok 'assert d["key"] == A[0] and d["held"] is True, d' "$long1"
  run -1 "$DLOCK" status "$long2"
  touch "$T/release"
  wait "$BG_PID"
  # names that differ only in case are other locks (MySQL compares GET_LOCK names without case)
  hold_until Deploy "$T/release2"
  run -0 "$DLOCK" run -k deploy -n -- true
  run -0 "$DLOCK" run -k DEPLOY -n -- true
  run -75 "$DLOCK" run -k Deploy -n -- true
}

@test "$STORE: a nested run on the same key (DLOCK_TOKEN) runs at once under the outer lock" {
  run -0 --separate-stderr "$DLOCK" run -k nest -- sh -c '
    "$DLOCK" run -k nest -n -- sh -c "echo inner \$DLOCK_KEY"
    # without the outer token it is just another contender
    env -u DLOCK_TOKEN "$DLOCK" run -k nest -n -- true; echo "untokened $?"'
  echo "$stderr"
  assert_line "inner nest"
  assert_line "untokened 75"
}

# ---------------------------------------------------------------------------------------------
# elect and leader: one leader at a time, a campaign in order of arrival, the leadership watched

# candidate NAME KEY [elect options...]: a background dlock elect (start_bg NAME) whose command
# records its term in $T/order ("NAME FENCE"), fails the overlap witness if another runs, and
# lets go once $T/NAME.go exists.
candidate() {
  local name=$1 key=$2
  shift 2
  start_bg "$name" "$DLOCK" elect -k "$key" --value "$name" "$@" -- sh -c '
    [ -e "$T/inside" ] && echo "$1 overlaps $(cat "$T/inside")" >>"$T/overlap"
    echo "$1" >"$T/inside"; echo "$1 ${DLOCK_FENCING_TOKEN:-0}" >>"$T/order"
    until [ -e "$T/$1.go" ]; do sleep 0.02; done
    rm -f "$T/inside"' sh "$name"
}

# leads NAME KEY: waits until `dlock leader KEY` names NAME.
leads() { wait_for "\"\$DLOCK\" leader '$2' 2>/dev/null | grep -q '^$1 '" 20; }

@test "$STORE: elect: three candidates lead one at a time, in order of arrival, each term a new fencing token" {
  requires elect
  candidate c1 e3
  leads c1 e3
  candidate c2 e3
  sleep 1 # c2 is queued before c3 comes
  candidate c3 e3
  sleep 1
  touch "$T/c1.go"
  leads c2 e3
  touch "$T/c2.go"
  leads c3 e3
  touch "$T/c3.go"
  local pid
  for pid in $(cat "$T/bg.pid"); do wait "$pid"; done
  cat "$T/order"
  [ ! -e "$T/overlap" ]
  run -0 cut -d' ' -f1 "$T/order"
  assert_output "$(printf 'c1\nc2\nc3')"
  if store_has fencing || [ "$(head -n1 "$T/order" | cut -d' ' -f2)" != 0 ]; then
    sort -n -k2 -c "$T/order" # strictly increasing in the order of the terms
    [ "$(cut -d' ' -f2 "$T/order" | sort -u | wc -l)" -eq 3 ]
  fi
  run -1 "$DLOCK" leader e3
  assert_output "no leader"
}

@test "$STORE: elect: the leader's dlock SIGKILLed: its command dies, then a standby's starts, within the lease + kill-after" {
  requires elect
  # kill-after is ttl/4: the standby must start within 3 s + 0.75 s of the kill (plus room for a
  # loaded machine), and never before the old command is dead
  start_bg leader "$DLOCK" elect -k fo -t 3s --value old -- sh -c 'echo $$ >"$T/old.pid"; exec sleep 60'
  local leader=$BG_PID
  wait_for "[ -s '$T/old.pid' ]" 20
  local old
  old=$(cat "$T/old.pid")
  # A zombie is dead: file://'s flock ends when the old command exits, before its guard reaps it
  start_bg standby "$DLOCK" elect -k fo -t 3s --value new -- sh -c '
    case $(ps -o stat= -p "$1") in "" | Z*) ;; *) echo overlap >"$T/overlap" ;; esac
    date +%s%3N >"$T/new"; exec sleep 60' sh "$old"
  sleep 1 # the standby is queued
  [ ! -e "$T/new" ]
  local killed
  killed=$(now_ms)
  kill -KILL "$leader"
  wait_for "gone $old" 10
  local dead
  dead=$(now_ms)
  wait_for "[ -s '$T/new' ]" 15
  local took=$(($(cat "$T/new") - killed))
  echo "old command dead $((dead - killed)) ms after the kill; the standby's started after $took ms"
  [ ! -e "$T/overlap" ]
  [ "$took" -lt $((3750 + 2000)) ]
  run -0 "$DLOCK" leader fo
  [[ $output == "new "* ]]
}

@test "$STORE: leader: 1 and 'no leader' with none; 0 with the leader's value, holder, since and term; --json; status shows the value" {
  requires elect
  run -1 "$DLOCK" leader lv
  assert_output "no leader"
  run -1 "$DLOCK" leader lv --json
  [[ $output == *'"leader":false'* ]]
  [[ $output == *'"value":null'* ]]
  start_bg leader "$DLOCK" elect -k lv --value "10.1.2.3:8080 v2" -- sh -c 'echo "$DLOCK_FENCING_TOKEN" >"$T/fence"; exec sleep 60'
  wait_for "[ -s '$T/fence' ]" 20
  run -0 "$DLOCK" leader lv
  echo "$output"
  [[ $output == "10.1.2.3:8080 v2 ("*"pid $BG_PID"*", since "*")" ]]
  if [ "$(cat "$T/fence")" != 0 ]; then
    [[ $output == *"term $(cat "$T/fence"))" ]]
  fi
  run -0 "$DLOCK" leader lv --json
  echo "$output"
  [[ $output == *'"leader":true'* ]]
  [[ $output == *'"value":"10.1.2.3:8080 v2"'* ]]
  [[ $output == *"\"pid\":$BG_PID"* ]]
  run -0 "$DLOCK" status lv
  [[ $output == *"value:"*"10.1.2.3:8080 v2"* ]]
  # the default value: who leads
  kill -TERM "$BG_PID"
  wait "$BG_PID" || true
  start_bg leader2 "$DLOCK" elect -k lv -- sh -c 'echo $$ >"$T/second"; exec sleep 60'
  wait_for "[ -s '$T/second' ]" 20
  run -0 "$DLOCK" leader lv
  [[ $output == "$(id -un)@$(hostname) pid $BG_PID ("* ]]
}

@test "$STORE: leader --watch: one line per change of leader, each change once, woken by the store; a dlock run holder seen too" {
  requires elect
  start_bg watch "$DLOCK" leader lw --watch
  local watch=$BG_PID
  wait_for "grep -qx 'no leader' '$T/watch.out'" 10
  candidate a lw
  wait_for "grep -q '^a ' '$T/watch.out'" 10 || { cat "$T/watch.out" "$T/watch.err"; false; }
  candidate b lw
  sleep 1 # b is queued
  touch "$T/a.go"
  wait_for "grep -q '^b ' '$T/watch.out'" 10 || { cat "$T/watch.out" "$T/watch.err"; false; }
  touch "$T/b.go"
  wait_for "[ \"\$(grep -cx 'no leader' '$T/watch.out')\" -ge 2 ]" 10
  sleep 1 # nothing more comes while nothing changes
  kill -TERM "$watch"
  local st=0
  wait "$watch" || st=$?
  cat "$T/watch.out"
  [ "$st" -eq 143 ]
  [ "$(grep -c '^a ' "$T/watch.out")" -eq 1 ]
  [ "$(grep -c '^b ' "$T/watch.out")" -eq 1 ]
  # the same state never twice in a row (a "no leader" between a and b may come or not)
  [ -z "$(uniq -d "$T/watch.out")" ]
  [ "$(head -n1 "$T/watch.out")" = "no leader" ]
  [ "$(tail -n1 "$T/watch.out")" = "no leader" ]
  # --json: one document per change
  start_bg jwatch "$DLOCK" leader lw --watch --json
  local jwatch=$BG_PID
  wait_for "grep -q '\"leader\":false' '$T/jwatch.out'" 10
  candidate c lw
  wait_for "grep -q '\"value\":\"c\"' '$T/jwatch.out'" 10
  kill -TERM "$jwatch"
  wait "$jwatch" || true
  touch "$T/c.go"
  [ "$(wc -l <"$T/jwatch.out")" -eq 2 ]
  # a holder that is not a candidate (dlock run on the election's key) leads too, and is seen
  # while it holds (Redis's watcher saw it only once its block of up to 30 s ended)
  start_bg rwatch "$DLOCK" leader lw --watch
  local rwatch=$BG_PID
  wait_for "grep -qx 'no leader' '$T/rwatch.out'" 10
  run -0 timeout 20 "$DLOCK" run -k lw -- sh -c "until grep -q '^- (' '$T/rwatch.out'; do sleep 0.05; done"
  kill -TERM "$rwatch"
  wait "$rwatch" || true
}

@test "$STORE: elect --keep-campaigning: after each term it campaigns again, behind the candidates waiting; SIGTERM ends it (143)" {
  requires elect
  start_bg keeper "$DLOCK" elect -k kc --keep-campaigning --value keeper -- sh -c 'echo "keeper $DLOCK_FENCING_TOKEN" >>"$T/order"; sleep 1.2'
  local keeper=$BG_PID
  wait_for "[ \"\$(wc -l <'$T/order')\" -ge 1 ]" 20
  start_bg other "$DLOCK" elect -k kc --value other -- sh -c 'echo "other $DLOCK_FENCING_TOKEN" >>"$T/order"'
  local other=$BG_PID
  wait "$other"
  wait_for "[ \"\$(grep -c keeper '$T/order')\" -ge 3 ]" 20
  kill -TERM "$keeper"
  local st=0
  wait "$keeper" || st=$?
  cat "$T/order" "$T/keeper.err"
  [ "$st" -eq 143 ]
  # the other candidate led between two of the keeper's terms
  grep -q other "$T/order"
  [ "$(tail -n1 "$T/order" | cut -d' ' -f1)" = keeper ]
  run -1 "$DLOCK" leader kc
}

@test "$STORE: elect: bad input is 64 with one line (--shared, two keys, an empty or unprintable --value, --keep-campaigning with -n)" {
  local args
  for args in "-k a -s" "-k a --limit 2" "-k a -k b" "-k a --keep-campaigning -n" "-k a --keep-campaigning -w 1s"; do
    # shellcheck disable=SC2086
    run -64 --separate-stderr "$DLOCK" elect $args -- touch "$T/ran"
    echo "$args: $stderr"
    [ "${#stderr_lines[@]}" -eq 1 ]
  done
  run -64 --separate-stderr "$DLOCK" elect -k a --value "$(printf 'a\tb')" -- touch "$T/ran"
  [ "${#stderr_lines[@]}" -eq 1 ]
  run -64 --separate-stderr "$DLOCK" elect -k a --value "" -- touch "$T/ran"
  [ "${#stderr_lines[@]}" -eq 1 ]
  run -64 --separate-stderr "$DLOCK" leader
  [ ! -e "$T/ran" ]
}

# ---------------------------------------------------------------------------------------------
# history

@test "$STORE: history: a run, a skip, a forced release and its loss, a replace; newest first, text and JSON" {
  requires history
  run -0 "$DLOCK" history hist
  [ -z "$output" ] # nothing happened to it yet
  run -3 "$DLOCK" run -k hist --note "first run" -- sh -c 'exit 3'
  # a skip while a holder has it
  hold_until hist "$T/go"
  local holder=$BG_PID
  run -75 "$DLOCK" run -k hist -n -- true
  touch "$T/go"
  wait "$holder"
  # a forced release, which the holder learns of at a renewal: 76
  rm -f "$T/cmd.pid"
  start_bg holder "$DLOCK" run -k hist -t 3s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  run -0 "$DLOCK" release --force -k hist
  local st=0
  wait "$holder" || st=$?
  [ "$st" -eq 76 ]
  # a replace
  rm -f "$T/cmd.pid"
  replaced_holder hist 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  holder=$BG_PID
  run -0 "$DLOCK" run -k hist --replace --note "new build" -w 20s -- true
  st=0
  wait "$holder" || st=$?
  [ "$st" -eq 76 ]

  run -0 --separate-stderr "$DLOCK" history hist --json
  echo "$output"
  # the command line is never recorded
  [[ "$output" != *"sleep 60"* ]]
  python3 - "$(whoami)" "$output" <<'PY'
import json, sys
me, doc = sys.argv[1], json.loads(sys.argv[2])
assert doc["version"] == 1 and doc["lock"] == "hist", doc
ev = doc["events"]  # newest first
kinds = sorted(e["event"] for e in ev)
assert kinds == sorted(["acquired"] * 5 + ["released"] * 3 + ["skipped", "forced", "lost", "replaced"]), kinds
def at(pred):
    found = [i for i, e in enumerate(ev) if pred(e)]
    assert len(found) == 1, found
    return found[0]
first = at(lambda e: e["event"] == "acquired" and e["note"] == "first run")
assert first == len(ev) - 1, "the oldest event is the first run's acquisition"
ended = at(lambda e: e["event"] == "released" and e["exit_status"] == 3)
skip = at(lambda e: e["event"] == "skipped")
lost = at(lambda e: e["event"] == "lost")
replaced = at(lambda e: e["event"] == "replaced")
forced = at(lambda e: e["event"] == "forced")
assert first > ended > skip > lost > replaced, (first, ended, skip, lost, replaced)
assert forced > replaced
e = ev[ended]
assert e["user"] == me and e["host"] and e["pid"] > 0 and e["held_ms"] >= 0, e
assert "no_wait" in ev[skip]["detail"] and ev[skip]["waited_ms"] >= 0, ev[skip]
assert "evicted" in ev[forced]["detail"], ev[forced]
assert ev[lost]["exit_status"] == 76, ev[lost]
assert ev[replaced]["exit_status"] == 76 and "replaced by" in ev[replaced]["detail"], ev[replaced]
assert "new build" in ev[replaced]["detail"] and ev[replaced]["note"] == "old build", ev[replaced]
assert all(a["at_ms"] > 0 and a["at"].endswith("Z") for a in ev)
PY
  # text: a header and one line per event; --limit keeps the newest
  run -0 "$DLOCK" history hist --limit 2
  [ "${#lines[@]}" -eq 3 ]
  [[ "${lines[0]}" == TIME*EVENT*HOLDER* ]]
  run -0 "$DLOCK" history hist --json --limit 1
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert len(d["events"]) == 1' "$output"
  run -64 "$DLOCK" history hist --limit 0
}
