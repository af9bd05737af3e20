#!/usr/bin/env bats
# The database stores' side records (dlock_policy) for --min-hold, --lock-delay, --replace and
# --note, black box: a session lock goes with dlock's session, so what must outlive the holder
# is a row that every dlock reads right after it takes the session lock. Run through
# tests/stores/postgres/policies.bats and tests/stores/mysql/policies.bats (symbolic links to
# this file: the store is the name of the directory it was run from). The other tenant of the
# database writes the rows with the server's own client, as its administrator.

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
    mysql_admin dlock -e "$1"
  fi
}

# holding KEY FILE [options]: a background dlock run whose command runs until FILE exists;
# returns once the command runs (BG_PID: its dlock).
holding() {
  local key=$1 file=$2
  shift 2
  rm -f "$T/held.pid"
  start_bg hold "$DLOCK" run -k "$key" "$@" -- sh -c 'echo $$ >"$1.tmp"; mv "$1.tmp" "$1"
    until [ -e "$2" ]; do sleep 0.02; done' sh "$T/held.pid" "$file"
  wait_for "[ -s '$T/held.pid' ]" 10
}

@test "$STORE policies: --min-hold keeps the lock after a clean release; status says held; it is free after" {
  run -0 "$DLOCK" run -n -k once --min-hold 3s -- true
  ms_into released_at
  run -75 --separate-stderr "$DLOCK" run -n -k once -- touch "$T/second"
  echo "$stderr"
  [ ! -e "$T/second" ]
  run -0 --separate-stderr "$DLOCK" status once --json
  echo "$output"
  json_ok 'assert d["held"] is True, d'
  # a waiter waits for the known end, and gets it then
  run -0 --separate-stderr "$DLOCK" run -k once -w 10s -- touch "$T/third"
  ms_into got_at
  [ -e "$T/third" ]
  echo "waited $((got_at - released_at)) ms"
  [ $((got_at - released_at)) -ge 2500 ]
  [ $((got_at - released_at)) -lt 6000 ]
}

@test "$STORE policies: two hosts 1 s apart with --min-hold run the job once" {
  run -0 env DLOCK_HOSTNAME=a "$DLOCK" run -n -k nightly --min-hold 10s -- sh -c "echo a >>'$T/ran'"
  sleep 1
  run -75 env DLOCK_HOSTNAME=b "$DLOCK" run -n -k nightly --min-hold 10s -- sh -c "echo b >>'$T/ran'"
  [ "$(cat "$T/ran")" = a ]
  run -0 "$DLOCK" release -k nightly --force
  run -0 "$DLOCK" run -n -k nightly -- true
}

@test "$STORE policies: kill -9 of a --min-hold holder keeps the lock closed until its end" {
  holding crash "$T/never" --min-hold 4s
  local pid=$BG_PID
  kill -9 "$pid"
  wait "$pid" || true
  ms_into killed_at
  run -75 --separate-stderr "$DLOCK" run -n -k crash -- true
  echo "$stderr"
  run -0 --separate-stderr "$DLOCK" run -k crash -w 10s -- true
  ms_into got_at
  echo "waited $((got_at - killed_at)) ms"
  [ $((got_at - killed_at)) -ge 2000 ]
}

@test "$STORE policies: release --force frees a lock kept for its --min-hold at once" {
  run -0 "$DLOCK" run -n -k forced --min-hold 1h -- true
  run -75 "$DLOCK" run -n -k forced -- true
  run -0 "$DLOCK" release -k forced --force
  run -0 "$DLOCK" run -n -k forced -- true
}

@test "$STORE policies: a lock-delay after kill -9 of the holder, none after a clean release" {
  holding delayed "$T/never" --lock-delay 3s
  local pid=$BG_PID
  kill -9 "$pid"
  wait "$pid" || true
  ms_into killed_at
  run -75 --separate-stderr "$DLOCK" run -n -k delayed -- true
  echo "$stderr"
  run -1 --separate-stderr "$DLOCK" status delayed --json
  echo "$output"
  run -0 --separate-stderr "$DLOCK" run -k delayed -w 10s -- true
  ms_into got_at
  echo "waited $((got_at - killed_at)) ms"
  [ $((got_at - killed_at)) -ge 2500 ]
  # a clean release disarms it
  run -0 "$DLOCK" run -n -k delayed --lock-delay 1h -- true
  run -0 "$DLOCK" run -n -k delayed -- true
}

@test "$STORE policies: a lock-delay after release --force" {
  holding forcedelay "$T/never" --lock-delay 3s
  local pid=$BG_PID
  run -0 "$DLOCK" release -k forcedelay --force
  ms_into forced_at
  wait "$pid" || true
  run -75 --separate-stderr "$DLOCK" run -n -k forcedelay -- true
  echo "$stderr"
  run -0 --separate-stderr "$DLOCK" run -k forcedelay -w 10s -- true
  ms_into got_at
  echo "waited $((got_at - forced_at)) ms"
  [ $((got_at - forced_at)) -ge 2500 ]
}

@test "$STORE policies: --note is kept with the holder (a 1 KB note of 4-byte characters)" {
  local note
  note=$(python3 -c 'print("\U0001F512" * 256)')
  holding noted "$T/go" --note "$note"
  run -0 tenant "SELECT holder FROM dlock_policy"
  [[ $output == *"$note"* ]]
  touch "$T/go"
  wait "$BG_PID"
  run -0 tenant "SELECT COUNT(*) FROM dlock_policy WHERE holder LIKE '%$note%'"
  echo "$output"
  [ "$output" = 0 ]
}

@test "$STORE policies: --replace asks the holder to go; it stops its command and exits 76; the replacer runs" {
  holding replaced "$T/never" --ttl 3s --note "old job"
  local holder=$BG_PID
  run -0 --separate-stderr "$DLOCK" run -k replaced --replace --note "new job" -w 20s -- touch "$T/new"
  echo "$stderr"
  [ -e "$T/new" ]
  local rc=0
  wait "$holder" || rc=$?
  [ "$rc" -eq 76 ]
  cat "$T/hold.err"
  grep -q "new job" "$T/hold.err"
}

@test "$STORE policies: another tenant's rows (huge, malformed, a far-future hold_until) never hang status or acquire; release --force clears them" {
  holding tenant "$T/go" --note "mine"
  local pid=$BG_PID
  if [ "$STORE" = postgres ]; then
    tenant "UPDATE dlock_policy SET holder = repeat('x', 1000000), replace_by = 'garbage%zz', hold_until = 9000000000000000000"
  else
    tenant "UPDATE dlock_policy SET holder = REPEAT('x', 60000), replace_by = 'garbage%zz', hold_until = 9000000000000000000"
  fi
  run -0 --separate-stderr timeout 10 "$DLOCK" status tenant --json
  echo "$output"
  run -75 --separate-stderr timeout 10 "$DLOCK" run -n -k tenant -- true
  touch "$T/go"
  wait "$pid"
  # kept: its release found a hold_until far away
  run -0 --separate-stderr timeout 10 "$DLOCK" status tenant --json
  echo "$output"
  run -75 --separate-stderr timeout 10 "$DLOCK" run -n -k tenant -- true
  run -0 "$DLOCK" release -k tenant --force
  run -0 timeout 10 "$DLOCK" run -n -k tenant -- true
  # a row of nobody's, of garbage
  if [ "$STORE" = postgres ]; then
    tenant "INSERT INTO dlock_policy SELECT 1, 'x', repeat('y', 100000), -5, '', -1, true, -1, -1, '' ON CONFLICT DO NOTHING"
  else
    tenant "INSERT IGNORE INTO dlock_policy (lock_name, token_fp, session_id, holder, hold_until, released, delay_ms, ended_at, replace_by) VALUES ('x', REPEAT('y', 64), -5, '', -1, 1, -1, -1, '')"
  fi
  run -0 timeout 10 "$DLOCK" run -n -k tenant -- true
}

@test "$STORE policies: a user who cannot create dlock_policy locks as before; --min-hold is refused in one line" {
  tenant "DROP TABLE IF EXISTS dlock_policy"
  run -0 --separate-stderr "$DLOCK" run -n -k plain --url "$NOFENCE_URL" -- true
  run --separate-stderr "$DLOCK" run -n -k plain --url "$NOFENCE_URL" --min-hold 10s -- touch "$T/ran"
  echo "$status: $stderr"
  [ ! -e "$T/ran" ]
  [ "$status" -eq 77 ] || [ "$status" -eq 78 ] || [ "$status" -eq 69 ]
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  [[ $stderr == *dlock_policy* ]]
}

@test "$STORE policies: a dlock_policy of other columns (another tenant's) leaves plain locking working; the policies fail in one line" {
  if [ "$STORE" = postgres ]; then
    tenant "DROP TABLE IF EXISTS dlock_policy; CREATE TABLE dlock_policy (lock_key bigint PRIMARY KEY, junk text)"
  else
    tenant "DROP TABLE IF EXISTS dlock_policy; CREATE TABLE dlock_policy (lock_name VARBINARY(64) PRIMARY KEY, junk TEXT)"
  fi
  run -0 --separate-stderr "$DLOCK" run -n -k odd --note "still works" -- touch "$T/ran"
  [ -e "$T/ran" ]
  run -1 --separate-stderr "$DLOCK" status odd
  run -0 --separate-stderr "$DLOCK" list
  run --separate-stderr "$DLOCK" run -n -k odd --min-hold 10s -- touch "$T/ran2"
  echo "$status: $stderr"
  [ "$status" -eq 78 ]
  [ ! -e "$T/ran2" ]
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  tenant "DROP TABLE dlock_policy"
}

@test "$STORE policies: what a holder killed with SIGKILL left is swept by a later clean release, once nothing keeps it" {
  holding swept "$T/never" --note "crashed"
  kill -9 "$BG_PID"
  wait "$BG_PID" || true
  run -0 tenant "SELECT COUNT(*) FROM dlock_policy WHERE holder LIKE '%crashed%'"
  [ "$output" = 1 ]
  # a lock-delay not yet stamped is kept (the next acquirer of that lock stamps it)
  holding swept2 "$T/never2" --lock-delay 1h
  kill -9 "$BG_PID"
  wait "$BG_PID" || true
  run -0 "$DLOCK" run -n -k other -- true
  run -0 tenant "SELECT COUNT(*) FROM dlock_policy WHERE holder LIKE '%crashed%'"
  [ "$output" = 0 ]
  run -75 "$DLOCK" run -n -k swept2 -- true
  # release --force clears a delay whose holder is gone
  run -0 "$DLOCK" release -k swept2 --force
  run -0 "$DLOCK" run -n -k swept2 -- true
}

@test "$STORE history: hand-overs back to back lose no event (two holders' records at once deadlocked, and one was dropped)" {
  local i
  for i in $(seq 1 12); do "$DLOCK" run -k hd -w 60s -- true & done
  wait
  run -0 "$DLOCK" history hd --limit 100 --json
  local n
  n=$(python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])["events"]))' "$output")
  echo "events: $n"
  [ "$n" -eq 24 ]
}
