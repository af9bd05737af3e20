#!/usr/bin/env bats
# wait, barrier and latch on the database stores, black box: the core scenarios of
# tests/e2e/coordinate.bats (Redis), plus what only a database has: the gates' rows in the
# table dlock_gate, which another tenant of the database may write, and waiting parties whose
# sessions end with a kill -9. Run through tests/stores/postgres/coordinate.bats and
# tests/stores/mysql/coordinate.bats (symbolic links to this file: the store is the name of
# the directory it was run from). Each party records its exit status and the moment it
# returned (µs) itself, so the checks are on the order of events.

TESTS_LIB=$(cd "$(dirname "$(readlink -f "$BATS_TEST_FILENAME")")/../lib" && pwd)
load "$TESTS_LIB/helpers"
STORE=${DLOCK_TEST_STORE:-$(basename "$BATS_TEST_DIRNAME")}
load "$TESTS_LIB/${STORE}_helpers"

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# tenant SQL: runs SQL in dlock's database as its administrator (another tenant, or an operator).
tenant() {
  if [ "$STORE" = postgres ]; then
    psql_admin -c "$1"
  else
    mysql_admin dlock -N -e "$1"
  fi
}

# party NAME SUBCOMMAND ARGS...: a background `dlock SUBCOMMAND ARGS...` that writes
# "STATUS MICROSECONDS" to $T/NAME.end when it returns (start_bg NAME: BG_PID).
party() {
  local name=$1
  shift
  start_bg "$name" bash -c '"$@"; rc=$?; echo "$rc ${EPOCHREALTIME/[.,]/}" >"$T/'"$name"'.end"' \
    _ "$DLOCK" "$@"
}
ended() { [ -s "$T/$1.end" ]; }
status_of() { cut -d' ' -f1 "$T/$1.end"; }
ended_at() { cut -d' ' -f2 "$T/$1.end"; }
now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

# woken_bound: the most µs a waiter may take after what opened its gate for the test to count
# it as woken rather than as the next look of its safety net (every 5 s or more): generous
# for a loaded machine. MySQL's KILL QUERY that ends a sleeping waiter was seen to be held up
# for seconds on MariaDB 10.11 now and then (the safety net then wakes it): an order only there.
woken_bound() { if [ "$STORE" = postgres ]; then echo 2500000; else echo 7000000; fi; }

# held KEY: whether dlock status sees the lock held.
held() { "$DLOCK" status "$1" >/dev/null 2>&1; }

# holding KEY FILE [options]: a background dlock run whose command runs until FILE exists;
# returns once the lock is held (BG_PID: its dlock).
holding() {
  local key=$1 file=$2
  shift 2
  start_bg "hold-$key" "$DLOCK" run -k "$key" "$@" -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$file"
  wait_for "held '$key'" 10
}

# gate_key KEY: the lock name's key in dlock_gate, as an SQL literal (PostgreSQL: its advisory
# key; MySQL: its GET_LOCK name, which a short lower-case name is as it is).
gate_key() {
  if [ "$STORE" = postgres ]; then
    psql_admin -c "SELECT ('x' || left(encode(sha256('dlock:$1'), 'hex'), 16))::bit(64)::bigint"
  else
    echo "'dlock:$1'"
  fi
}

# arrivals KEY: the parties arrived at barrier KEY, as dlock_gate holds them.
arrivals() {
  tenant "SELECT COUNT(*) FROM dlock_gate WHERE gate_key = $(gate_key "$1") AND member LIKE 'p:%'" \
    2>/dev/null || echo 0
}

# ---------------------------------------------------------------------------------------------
# dlock wait

@test "$STORE coordinate: wait on a free lock returns 0 at once and takes nothing" {
  run -0 "$DLOCK" wait -k free
  run -1 "$DLOCK" status free
  run -0 "$DLOCK" run -n -k free -- true
}

@test "$STORE coordinate: wait returns soon after the release, not before" {
  holding rel "$T/go"
  party w wait -k rel -w 20s
  sleep 2
  ! ended w
  local before
  before=$(now_us)
  touch "$T/go"
  wait_for 'ended w' 10
  [ "$(status_of w)" = 0 ]
  echo "wait returned $(( ($(ended_at w) - before) / 1000 )) ms after the holder was let go" | tee -a "${TIMINGS:-/dev/null}"
  # the holder's release announces it (no safety-net round): generous for a loaded machine
  [ $(( $(ended_at w) - before )) -lt 1500000 ]
}

@test "$STORE coordinate: waiters are not serialized: one release lets every waiter go" {
  holding many "$T/go"
  local i
  for i in 1 2 3; do party "w$i" wait -k many -w 20s; done
  sleep 1
  ! ended w1
  touch "$T/go"
  wait_for 'ended w1 && ended w2 && ended w3' 10
  for i in 1 2 3; do [ "$(status_of "w$i")" = 0 ]; done
}

@test "$STORE coordinate: wait counts a release even when a lock waiter takes the lock at once" {
  holding handover "$T/go"
  start_bg next "$DLOCK" run -k handover -w 20s -- sleep 6
  party w wait -k handover -w 20s
  sleep 1
  ! ended w
  touch "$T/go"
  wait_for 'ended w' 5
  [ "$(status_of w)" = 0 ]
  # the second holder still has it: the wait did not wait for it
  run -0 "$DLOCK" status handover
}

@test "$STORE coordinate: a holder killed -9: wait returns once its session is gone" {
  holding dead "$T/never"
  local holder=$BG_PID
  party w wait -k dead -w 20s
  sleep 1
  ! ended w
  kill -KILL "$holder"
  wait_for 'ended w' 10
  [ "$(status_of w)" = 0 ]
}

@test "$STORE coordinate: wait --wait runs out: 75, or -E" {
  holding busy "$T/never"
  run -75 "$DLOCK" wait -k busy -w 300ms
  run -3 "$DLOCK" wait -k busy -w 200ms -E 3
  run -75 --separate-stderr "$DLOCK" -v wait -k busy -w 200ms
  [[ $stderr == *"gave up waiting for lock 'busy' to be free after 200ms"* ]]
}

@test "$STORE coordinate: a signal ends wait with 128+N" {
  holding sig "$T/never"
  party w wait -k sig
  sleep 1
  kill -TERM "$(pgrep -P "$BG_PID")"
  wait_for 'ended w'
  [ "$(status_of w)" = 143 ]
}

# ---------------------------------------------------------------------------------------------
# dlock barrier

@test "$STORE coordinate: barrier: three parties go on together, none before the last" {
  party a barrier -k b3 --parties 3 -w 30s
  party b barrier -k b3 --parties 3 -w 30s
  wait_for '[ "$(arrivals b3)" = 2 ]' 10
  sleep 1
  ! ended a
  ! ended b
  local before
  before=$(now_us)
  run -0 "$DLOCK" barrier -k b3 --parties 3 -w 30s
  wait_for 'ended a && ended b' 10
  [ "$(status_of a)" = 0 ]
  [ "$(status_of b)" = 0 ]
  echo "parties returned $(( ($(ended_at a) - before) / 1000 )) and $(( ($(ended_at b) - before) / 1000 )) ms after the last arrived" | tee -a "${TIMINGS:-/dev/null}"
  [ "$(ended_at a)" -gt "$before" ]
  # woken by the trip, not by their next look (see woken_bound)
  [ $(( $(ended_at a) - before )) -lt "$(woken_bound)" ]
  [ $(( $(ended_at b) - before )) -lt "$(woken_bound)" ]
  [ "$(arrivals b3)" = 0 ]
}

@test "$STORE coordinate: barrier generations: the same barrier is used again" {
  local round
  for round in 1 2; do
    party "a$round" barrier -k gen --parties 2 -w 30s
    run -0 "$DLOCK" barrier -k gen --parties 2 -w 30s
    wait_for "ended a$round" 10
    [ "$(status_of "a$round")" = 0 ]
  done
}

@test "$STORE coordinate: barrier in progress with another --parties: 64 in one line" {
  party a barrier -k mismatch --parties 3 -w 30s
  wait_for '[ "$(arrivals mismatch)" = 1 ]' 10
  run -64 --separate-stderr "$DLOCK" barrier -k mismatch --parties 2 -w 5s
  echo "$stderr"
  [[ $stderr == *"in progress with --parties 3"* ]]
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}

@test "$STORE coordinate: a party that times out withdraws its arrival" {
  run -75 "$DLOCK" barrier -k lapse --parties 2 -w 1s
  [ "$(arrivals lapse)" = 0 ]
  party b barrier -k lapse --parties 2 -w 30s
  sleep 1
  ! ended b
  run -0 "$DLOCK" barrier -k lapse --parties 2 -w 30s
  wait_for 'ended b' 10
  [ "$(status_of b)" = 0 ]
}

@test "$STORE coordinate: kill -9 of a waiting party: its arrival lapses; the others do not count it" {
  party a barrier -k killed --parties 2 -w 60s
  local victim=$BG_PID
  wait_for '[ "$(arrivals killed)" = 1 ]' 10
  kill -KILL "$(pgrep -P "$victim")"
  # a party refreshes its arrival every 5 s; a dead one's lapses 2 s after that
  sleep 8
  party b barrier -k killed --parties 2 -w 60s
  sleep 2
  ! ended b
  run -0 "$DLOCK" barrier -k killed --parties 2 -w 30s
  wait_for 'ended b' 10
  [ "$(status_of b)" = 0 ]
}

# ---------------------------------------------------------------------------------------------
# dlock latch

@test "$STORE coordinate: latch: waiters go on once the count reaches zero, not before" {
  run -0 "$DLOCK" latch -k l2 --count 2
  party w1 latch -k l2 --wait 30s
  party w2 latch -k l2 --wait 30s
  run -0 --separate-stderr "$DLOCK" latch -k l2 --down --json
  [[ $output == *'"count":1'* ]]
  sleep 1
  ! ended w1
  local before
  before=$(now_us)
  run -0 "$DLOCK" latch -k l2 --down
  wait_for 'ended w1 && ended w2' 10
  [ "$(status_of w1)" = 0 ]
  [ "$(status_of w2)" = 0 ]
  echo "waiters returned $(( ($(ended_at w1) - before) / 1000 )) ms after the last count-down" | tee -a "${TIMINGS:-/dev/null}"
  # woken by the count-down, not by their next look (see woken_bound)
  [ $(( $(ended_at w1) - before )) -lt "$(woken_bound)" ]
  [ $(( $(ended_at w2) - before )) -lt "$(woken_bound)" ]
  # at zero it stays there: a later waiter goes on at once; another --down keeps it at zero
  run -0 "$DLOCK" latch -k l2 --wait 1s
  run -0 "$DLOCK" latch -k l2 --down
}

@test "$STORE coordinate: latch --down on no latch is 1; a latch expires; --wait runs out with 75" {
  run -1 --separate-stderr "$DLOCK" latch -k none --down
  [[ $stderr == *"is not set"* ]]
  run -0 "$DLOCK" latch -k short --count 1 --expire 1s
  run -75 "$DLOCK" latch -k short --wait 300ms
  sleep 1.5
  run -1 "$DLOCK" latch -k short --down
  # nothing of it is left once another latch is set (every write sweeps what expired)
  run -0 "$DLOCK" latch -k other --count 1 --expire 1h
  run -0 tenant "SELECT COUNT(*) FROM dlock_gate WHERE until_ms < $(now_ms)"
  [ "$output" = 0 ]
}

@test "$STORE coordinate: a waiting latch party killed -9 leaves nothing that stops the others" {
  run -0 "$DLOCK" latch -k lk --count 1
  party victim latch -k lk --wait 30s
  local victim=$BG_PID
  party w latch -k lk --wait 30s
  sleep 1
  kill -KILL "$(pgrep -P "$victim")"
  run -0 "$DLOCK" latch -k lk --down
  wait_for 'ended w' 10
  [ "$(status_of w)" = 0 ]
}

# hold_row KEY MEMBER SECONDS: another session holds KEY's MEMBER row of dlock_gate locked for
# SECONDS (a party stalled mid-step, or a tenant); row_locked KEY MEMBER: whether one does.
hold_row() {
  local sleep_sql=("START TRANSACTION" "SELECT SLEEP($3)")
  [ "$STORE" != postgres ] || sleep_sql=("BEGIN" "SELECT pg_sleep($3)")
  tenant "${sleep_sql[0]}; SELECT member FROM dlock_gate WHERE gate_key = $(gate_key "$1") AND member = '$2' FOR UPDATE; ${sleep_sql[1]}; COMMIT" >/dev/null
}
row_locked() {
  ! tenant "SELECT member FROM dlock_gate WHERE gate_key = $(gate_key "$1") AND member = '$2' FOR UPDATE NOWAIT" >/dev/null 2>&1
}
# end_holds: ends the sessions of hold_row (in the server: its client may outlive the test).
end_holds() {
  if [ "$STORE" = postgres ]; then
    tenant "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(%' AND pid <> pg_backend_pid()" >/dev/null
  else
    local id
    for id in $(tenant "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(%'"); do
      tenant "KILL $id" || true
    done
  fi
}

@test "$STORE coordinate: a latch row held past the gate's lock timeout (a stalled party): --down waits and counts once; held for good: one line, no hang" {
  run -0 "$DLOCK" latch -k busy --count 2
  start_bg holder hold_row busy latch 3.5
  wait_for "row_locked busy latch" 10
  # the gate's statements give up on a row lock after 2 s; the step is then tried again, within
  # the time a request has (--connect-timeout)
  run -0 "$DLOCK" latch -k busy --down --connect-timeout 10s
  run -0 --separate-stderr "$DLOCK" latch -k busy --down --json
  [[ $output == *'"count":0'* ]]
  # a row held for good: refused in one line once the request's time is up, not waited for
  run -0 "$DLOCK" latch -k stuck --count 1
  start_bg holder2 hold_row stuck latch 25
  wait_for "row_locked stuck latch" 10
  run -69 --separate-stderr timeout 35 "$DLOCK" latch -k stuck --down
  echo "$stderr"
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  # and when the request may wait longer than every attempt: the lock timeout, 69
  run -69 --separate-stderr timeout 35 "$DLOCK" latch -k stuck --down --connect-timeout 20s
  echo "$stderr"
  [[ $stderr == *"lock"* ]]
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  end_holds
}

@test "$STORE coordinate: another tenant holds rows of dlock_gate locked, a live one and an expired one: other names' latches and barriers go on" {
  run -0 "$DLOCK" latch -k live --count 1
  tenant "INSERT INTO dlock_gate (gate_key, member, generation, parties, latch_count, until_ms) VALUES ($(gate_key lapsed), 'latch', 0, 0, 1, 5)"
  start_bg h1 hold_row live latch 30
  start_bg h2 hold_row lapsed latch 30
  wait_for "row_locked live latch && row_locked lapsed latch" 10
  # each latch set and barrier trip sweeps the expired rows of every name: it leaves the held
  # ones (it used to wait for them, and run out of time: 69)
  run -0 "$DLOCK" latch -k other --count 1
  run -0 "$DLOCK" latch -k other --down
  party a barrier -k ob --parties 2 -w 30s
  run -0 "$DLOCK" barrier -k ob --parties 2 -w 30s
  wait_for 'ended a' 10
  [ "$(status_of a)" = 0 ]
  run -0 tenant "SELECT COUNT(*) FROM dlock_gate WHERE gate_key = $(gate_key lapsed)"
  [ "$output" = 1 ]
  # once free, it goes with the next sweep
  end_holds
  wait_for '! row_locked lapsed latch' 10
  run -0 "$DLOCK" latch -k other --count 1
  run -0 tenant "SELECT COUNT(*) FROM dlock_gate WHERE gate_key = $(gate_key lapsed)"
  [ "$output" = 0 ]
}

# ---------------------------------------------------------------------------------------------
# Another tenant of the database

@test "$STORE coordinate: another tenant's junk rows in dlock_gate: ignored, swept, never a hang" {
  run -0 "$DLOCK" latch -k made --count 1 # creates the table
  local key far=$(( $(now_ms) + 10 * 365 * 86400000 ))
  key=$(gate_key junk)
  tenant "INSERT INTO dlock_gate (gate_key, member, generation, parties, latch_count, until_ms) VALUES
    ($key, 'p:forever', 1, 0, -1, $far), ($key, 'zz-not-dlock', -7, -7, -7, $far),
    ($key, 'barrier', -5, -100, -1, $far), ($key, 'latch', 0, 0, -9, $far)"
  # a latch of a negative count is no latch; a barrier of junk state starts afresh
  run -1 "$DLOCK" latch -k junk --down
  run -75 "$DLOCK" latch -k junk --wait 300ms
  party a barrier -k junk --parties 2 -w 30s
  sleep 1
  ! ended a
  run -0 "$DLOCK" barrier -k junk --parties 2 -w 30s
  wait_for 'ended a' 10
  [ "$(status_of a)" = 0 ]
  # the junk arrival and the stranger's row were swept
  run -0 tenant "SELECT COUNT(*) FROM dlock_gate WHERE member IN ('p:forever', 'zz-not-dlock')"
  [ "$output" = 0 ]
}

@test "$STORE coordinate: a user who cannot create dlock_gate: barrier and latch refused in one line naming it; wait works" {
  tenant "DROP TABLE IF EXISTS dlock_gate"
  run --separate-stderr "$DLOCK" --url "$NOFENCE_URL" barrier -k nope --parties 2 -w 1s
  echo "$status: $stderr"
  [ "$status" -eq 77 ] || [ "$status" -eq 78 ]
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  [[ $stderr == *dlock_gate* ]]
  run --separate-stderr "$DLOCK" --url "$NOFENCE_URL" latch -k nope --count 1
  echo "$status: $stderr"
  [ "$status" -eq 77 ] || [ "$status" -eq 78 ]
  [[ $stderr == *dlock_gate* ]]
  run -0 "$DLOCK" --url "$NOFENCE_URL" wait -k nope -w 1s
}
