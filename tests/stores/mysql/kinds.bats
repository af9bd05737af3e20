#!/usr/bin/env bats
# --limit N on MySQL/MariaDB: N GET_LOCK slot names (names.hpp: the hashed name of
# 'dlock:NAME' + X'1F' + 'slot ' + i). A slot goes with its holder's session (kill -9 frees
# it at once); status shows the slot holders; a semaphore refuses a name held exclusive (64);
# a slot taken by another client with GET_LOCK counts.

load ../../lib/helpers
load ../../lib/mysql_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# slot_name KEY I: the GET_LOCK name of slot I of the semaphore KEY, as the server computes it.
slot_name() {
  mysql_admin -e "SELECT CONCAT('dlock:$1~', LEFT(SHA2(CONCAT('dlock:$1', X'1F', 'slot $2'), 256), 32))"
}

# used KEY I: the connection that holds slot I of KEY, or NULL.
used() { mysql_admin -e "SELECT IS_USED_LOCK('$(slot_name "$1" "$2")')"; }

@test "mysql --limit 2: status shows both holders; a third waits; kill -9 of a holder lets it in" {
  start_bg one "$DLOCK" run -k sem --limit 2 -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/one.pid"
  local one=$BG_PID
  wait_for '[ -s "$T/one.pid" ]' 10
  start_bg two "$DLOCK" run -k sem --limit 2 -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/two.pid"
  wait_for '[ -s "$T/two.pid" ]' 10
  run -0 used sem 0
  [ "$output" != NULL ]
  run -0 used sem 1
  [ "$output" != NULL ]
  run -0 "$DLOCK" status sem --json
  echo "$output"
  [ "$(grep -o '"pid"' <<<"$output" | wc -l)" -ge 2 ]
  run -75 "$DLOCK" run -k sem --limit 2 -n -- true
  start_bg third "$DLOCK" run -k sem --limit 2 -w 20s -- sh -c 'date +%s%3N >"$0"' "$T/third"
  local third=$BG_PID
  sleep 1
  [ ! -e "$T/third" ]
  kill -KILL "$one"
  wait "$third"
  [ -e "$T/third" ]
}

@test "mysql --limit: a name held exclusive is refused (64, one line); a slot taken with GET_LOCK counts" {
  start_bg excl "$DLOCK" run -k mix -- sleep 60
  wait_for '"$DLOCK" status mix >/dev/null' 10
  run -64 --separate-stderr "$DLOCK" run -k mix --limit 2 -n -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"held as an exclusive lock, which a semaphore of 2 (--limit 2) cannot share"* ]]
  [ "${#stderr_lines[@]}" -eq 1 ]
  [ ! -e "$T/ran" ]
  # another client takes slot 0 of 'ps' with GET_LOCK: one slot of two is left
  mysql_admin -e "SELECT GET_LOCK('$(slot_name ps 0)', 0), SLEEP(30)" >/dev/null 2>&1 &
  echo "$!" >>"$T/bg.pid"
  wait_for '[ "$(used ps 0)" != NULL ]' 10
  start_bg one "$DLOCK" run -k ps --limit 2 -- sleep 60
  wait_for '[ "$(used ps 1)" != NULL ]' 10
  run -75 "$DLOCK" run -k ps --limit 2 -n -- true
  mysql_admin -e "KILL $(used ps 0)"
}

# reader_name KEY I: the GET_LOCK name of --shared reader I of KEY.
reader_name() {
  mysql_admin -e "SELECT CONCAT('dlock:$1~', LEFT(SHA2(CONCAT('dlock:$1', X'1F', 'reader $2'), 256), 32))"
}

@test "mysql --shared: status shows the shared holders; kill -9 of the last lets a waiting exclusive in; --limit on them is 64" {
  start_bg r1 "$DLOCK" run -k rw --shared -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/r1.pid"
  local r1=$BG_PID
  wait_for '[ -s "$T/r1.pid" ]' 10
  start_bg r2 "$DLOCK" run -k rw --shared -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/r2.pid"
  local r2=$BG_PID
  wait_for '[ -s "$T/r2.pid" ]' 10
  run -0 mysql_admin -e "SELECT IS_USED_LOCK('$(reader_name rw 0)') IS NOT NULL, IS_USED_LOCK('$(reader_name rw 1)') IS NOT NULL, IS_USED_LOCK('dlock:rw') IS NULL"
  assert_output "$(printf '1\t1\t1')"
  run -0 "$DLOCK" status rw --json
  echo "$output"
  [[ $output == *'"shared"'* ]]
  [ "$(grep -o '"pid"' <<<"$output" | wc -l)" -ge 2 ]
  run -64 --separate-stderr "$DLOCK" run -k rw --limit 2 -n -- touch "$T/ran"
  [[ $stderr == *"held as a shared lock (--shared), which a semaphore of 2 (--limit 2) cannot share"* ]]
  start_bg excl "$DLOCK" run -k rw -w 20s -- sh -c 'date +%s%3N >"$0"' "$T/excl"
  local excl=$BG_PID
  sleep 1
  [ ! -e "$T/excl" ]
  kill -KILL "$r1"
  sleep 0.5
  [ ! -e "$T/excl" ] # one shared holder is still in
  kill -KILL "$r2"
  wait "$excl"
  [ -e "$T/excl" ]
}

@test "mysql --shared: another client's GET_LOCK of the lock's name excludes dlock's shared holders" {
  mysql_admin -e "SELECT GET_LOCK('dlock:plain', 0), SLEEP(30)" >/dev/null 2>&1 &
  echo "$!" >>"$T/bg.pid"
  wait_for '[ "$(mysql_admin -e "SELECT IS_USED_LOCK('"'dlock:plain'"') IS NOT NULL")" = 1 ]' 10
  run -75 "$DLOCK" run -k plain --shared -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  start_bg reader "$DLOCK" run -k plain --shared -w 20s -- touch "$T/ran"
  sleep 1
  [ ! -e "$T/ran" ]
  mysql_admin -e "KILL $(mysql_admin -e "SELECT IS_USED_LOCK('dlock:plain')")"
  wait "$BG_PID"
  [ -e "$T/ran" ]
}

# fair_waiters KEY N...: starts --fair waiters on KEY one after another (each queued before
# the next comes), each appending its number to $T/order; their pids in FAIR_PIDS.
fair_waiters() {
  local key=$1 w
  shift
  FAIR_PIDS=()
  for w in "$@"; do
    "$DLOCK" run -k "$key" --fair -w 30s -- sh -c "echo $w >>'$T/order'" 2>"$T/fair$w.err" 3>&- &
    FAIR_PIDS+=($!)
    echo "$!" >>"$T/bg.pid"
    wait_for "[ \"\$(mysql_admin -e \"SELECT COUNT(*) FROM dlock.dlock_queue\" 2>/dev/null)\" -ge $w ]" 10
  done
}

@test "mysql --fair: kill -9 of a waiter does not hold up the queue; another tenant's junk rows are ignored" {
  start_bg hold "$DLOCK" run -k fq -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/release"
  local holder=$BG_PID
  wait_for '"$DLOCK" status fq >/dev/null' 10
  fair_waiters fq 1 2 3
  # junk ahead of everyone: a row whose waiter name no session holds, a ticket of 0
  mysql_admin -e "INSERT INTO dlock.dlock_queue (ticket, lock_name, waiter) SELECT 0, lock_name, 'junk' FROM dlock.dlock_queue LIMIT 1"
  kill -KILL "${FAIR_PIDS[1]}" # waiter 2 dies in the queue
  touch "$T/release"
  wait "$holder"
  wait "${FAIR_PIDS[0]}"
  wait "${FAIR_PIDS[2]}" || { cat "$T"/fair*.err; false; }
  run -0 cat "$T/order"
  assert_output "$(printf '1\n3')"
  run -0 mysql_admin -e "SELECT COUNT(*) FROM dlock.dlock_queue WHERE waiter <> 'junk'"
  assert_output 0
}

@test "mysql --fair: a user who cannot create dlock_queue is refused in one line (--fair, elect); plain locking works" {
  mysql_admin -e "DROP TABLE IF EXISTS dlock.dlock_queue"
  run -0 "$DLOCK" -u "$NOFENCE_URL" run -n -k nq -- true
  run --separate-stderr "$DLOCK" -u "$NOFENCE_URL" run -k nq --fair -- touch "$T/ran"
  echo "$status: $stderr"
  [ ! -e "$T/ran" ]
  [ "$status" -eq 77 ] || [ "$status" -eq 78 ]
  [ "${#stderr_lines[@]}" -eq 1 ]
  [[ $stderr == *dlock_queue* ]]
  # elect queues its candidates the same way, and says so
  run --separate-stderr "$DLOCK" -u "$NOFENCE_URL" elect -k nq -- touch "$T/ran"
  echo "$status: $stderr"
  [ ! -e "$T/ran" ]
  [ "$status" -eq 77 ] || [ "$status" -eq 78 ]
  [ "${#stderr_lines[@]}" -eq 1 ]
  [[ $stderr == *"(and elect)"*dlock_queue* ]]
}

@test "mysql: an exclusive holder waits for a semaphore's holders (GET_LOCK names cannot say N, so no 64)" {
  start_bg sem "$DLOCK" run -k ex --limit 3 -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/sem.pid"
  local sem=$BG_PID
  wait_for '[ -s "$T/sem.pid" ]' 10
  run -75 "$DLOCK" run -k ex -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  start_bg excl "$DLOCK" run -k ex -w 20s -- touch "$T/ran"
  local excl=$BG_PID
  sleep 1
  [ ! -e "$T/ran" ]
  # a waiting exclusive holder holds back new semaphore holders
  run -64 "$DLOCK" run -k ex --limit 3 -n -- true
  kill -KILL "$sem"
  wait "$excl"
  [ -e "$T/ran" ]
}

@test "mysql: a shared holder waits for a semaphore's holders, as an exclusive one does" {
  start_bg sem "$DLOCK" run -k sx --limit 2 -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/sem.pid"
  local sem=$BG_PID
  wait_for '[ -s "$T/sem.pid" ]' 10
  run -75 "$DLOCK" run -k sx --shared -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  start_bg reader "$DLOCK" run -k sx --shared -w 20s -- touch "$T/ran"
  local reader=$BG_PID
  sleep 1
  [ ! -e "$T/ran" ]
  kill -KILL "$sem"
  wait "$reader"
  [ -e "$T/ran" ]
}

@test "mysql: release --force ends shared and semaphore holders; a nested run inside a slot runs at once" {
  start_bg r1 "$DLOCK" run -k fs --shared -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/r1.pid"
  local r1=$BG_PID
  wait_for '[ -s "$T/r1.pid" ]' 10
  run -0 "$DLOCK" release -k fs --force
  local st=0
  wait "$r1" || st=$?
  cat "$T/r1.err"
  [ "$st" -eq 76 ] # its lease (the session) was ended
  run -1 "$DLOCK" status fs
  run -0 timeout 10 "$DLOCK" run -k nl --limit 2 -- "$DLOCK" run -k nl --limit 2 -- echo in a slot
  assert_output 'in a slot'
}
