#!/usr/bin/env bats
# --limit N on PostgreSQL: N advisory slots of the two-int4 form beside the name's own key
# (semaphore.hpp). A slot goes with its holder's session (kill -9 frees it at once); status
# shows every slot holder; the kinds exclude each other (64, one line); psql sees the slots in
# pg_locks.

load ../../lib/helpers
load ../../lib/postgres_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# key_exists KEY: dlock status says KEY is held (hold_until waits for it).
key_exists() { "$DLOCK" status "$1" >/dev/null 2>&1; }

# slot_rows: how many slots of two-int4 advisory locks are granted (the semaphore's holders).
slot_rows() {
  psql_admin -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 \
    AND granted AND mode = 'ExclusiveLock'"
}

@test "--limit 2: status shows both holders; a third waits; kill -9 of a holder lets it in at once" {
  start_bg one "$DLOCK" run -k sem --limit 2 -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/one.pid"
  local one=$BG_PID
  start_bg two "$DLOCK" run -k sem --limit 2 -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/two.pid"
  wait_for '[ -s "$T/one.pid" ] && [ -s "$T/two.pid" ]' 10
  run -0 slot_rows
  assert_output 2
  run -0 "$DLOCK" status sem --json
  echo "$output"
  [[ $output == *'"limit:2"'* || $output == *'semaphore'* || $output == *'"limit"'* ]]
  [ "$(grep -o '"pid"' <<<"$output" | wc -l)" -ge 2 ]
  run -0 "$DLOCK" list --json
  echo "$output"
  [[ $output == *'"sem"'* ]]
  [ "$(grep -o '"pid"' <<<"$output" | wc -l)" -ge 2 ]
  run -75 "$DLOCK" run -k sem --limit 2 -n -- true
  start_bg third "$DLOCK" run -k sem --limit 2 -w 20s -- sh -c 'date +%s%3N >"$0"' "$T/third"
  local third=$BG_PID
  sleep 1
  [ ! -e "$T/third" ]
  # the holder's dlock dies with no release: its session ends, and the slot with it
  local killed=$(now_ms)
  kill -KILL "$one"
  wait "$third"
  echo "third got in $(($(cat "$T/third") - killed)) ms after the kill"
  [ -e "$T/third" ]
}

@test "--limit and the other kinds exclude each other: 64, one line naming the kind in use" {
  hold_until mix "$T/release" --limit 3
  wait_for '[ "$(slot_rows)" -eq 1 ]' 10
  run -64 --separate-stderr "$DLOCK" run -k mix -n -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"held as a semaphore of 3 (--limit 3), which an exclusive lock cannot share"* ]]
  run -64 --separate-stderr "$DLOCK" run -k mix --shared -n -- touch "$T/ran"
  [[ $stderr == *"held as a semaphore of 3 (--limit 3), which a shared lock (--shared) cannot share"* ]]
  run -64 --separate-stderr "$DLOCK" run -k mix --limit 4 -n -- touch "$T/ran"
  [[ $stderr == *"held as a semaphore of 3 (--limit 3), which a semaphore of 4 (--limit 4) cannot share"* ]]
  [ "${#stderr_lines[@]}" -eq 1 ]
  [ ! -e "$T/ran" ]
  run -0 "$DLOCK" run -k mix --limit 3 -n -- echo same kind
  assert_output 'same kind'
  touch "$T/release"
  wait "$BG_PID"
  # the other way round: an exclusive holder, then a semaphore
  rm -f "$T/release"
  hold_until mix "$T/release"
  wait_for '"$DLOCK" status mix >/dev/null' 10
  run -64 --separate-stderr "$DLOCK" run -k mix --limit 2 -n -- touch "$T/ran"
  [[ $stderr == *"held as an exclusive lock, which a semaphore of 2 (--limit 2) cannot share"* ]]
  [ ! -e "$T/ran" ]
  touch "$T/release"
  wait "$BG_PID"
  # nothing is left behind: no slot, no marker
  run -0 psql_admin -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
  assert_output 0
}

@test "--limit: a slot taken with psql counts (two-int4 advisory lock beside the name's key)" {
  # slot 0 of 'dlock:ps' as semaphore.hpp lays it out, taken by a psql session
  local k
  k=$(psql_admin -c "SELECT ('x' || left(encode(sha256('dlock:ps'), 'hex'), 16))::bit(64)::bigint")
  local hold="SELECT pg_advisory_lock(($k >> 32)::int4, ((($k & 4294967295) + 1) % 4294967296)::bit(32)::int4); SELECT pg_sleep(30)"
  psql_admin -c "$hold" >/dev/null 2>&1 &
  local psql=$!
  echo "$psql" >>"$T/bg.pid"
  wait_for '[ "$(slot_rows)" -eq 1 ]' 10
  run -0 "$DLOCK" run -k ps --limit 2 -n -- echo one left
  assert_output 'one left'
  hold_until ps "$T/release" --limit 2
  wait_for '[ "$(slot_rows)" -eq 2 ]' 10
  run -75 "$DLOCK" run -k ps --limit 2 -n -- true
  touch "$T/release"
  wait "$BG_PID"
  kill "$psql" 2>/dev/null || true
  psql_admin -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()" >/dev/null
}

# fair_order KEY N...: starts --fair waiters 1..N on KEY one after another (each queued before
# the next comes), each appending its number to $T/order; their pids in FAIR_PIDS.
fair_waiters() {
  local key=$1 w
  shift
  FAIR_PIDS=()
  for w in "$@"; do
    "$DLOCK" run -k "$key" --fair -w 30s -- sh -c "echo $w >>'$T/order'" 2>"$T/fair$w.err" 3>&- &
    FAIR_PIDS+=($!)
    echo "$!" >>"$T/bg.pid"
    wait_for "[ \"\$(psql_admin -c \"SELECT count(*) FROM dlock_queue\" 2>/dev/null)\" -ge $w ]" 10
  done
}

@test "--fair: kill -9 of a waiter does not hold up the queue; another tenant's junk rows are ignored" {
  hold_until fq "$T/release"
  local holder=$BG_PID
  fair_waiters fq 1 2 3
  # junk: a row for the lock, of no live session, ahead of everyone (another tenant's)
  psql_admin -c "INSERT INTO dlock_queue (ticket, lock_key, session_id) OVERRIDING SYSTEM VALUE \
    SELECT -5, lock_key, 1 FROM dlock_queue LIMIT 1" >/dev/null
  kill -KILL "${FAIR_PIDS[1]}" # waiter 2 dies in the queue
  touch "$T/release"
  wait "$holder"
  wait "${FAIR_PIDS[0]}"
  wait "${FAIR_PIDS[2]}" || { cat "$T"/fair*.err; false; }
  run -0 cat "$T/order"
  assert_output "$(printf '1\n3')"
  # nothing is left in the queue
  run -0 psql_admin -c "SELECT count(*) FROM dlock_queue"
  assert_output 0
}

@test "--fair: a user who cannot create dlock_queue is refused in one line (--fair, elect); plain locking works" {
  psql_admin -c "DROP TABLE IF EXISTS dlock_queue" >/dev/null
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
