#!/usr/bin/env bats
# Another tenant of the database writes dlock's rows directly with the mariadb client, here
# in a look-alike dlock_fence it made before dlock first ran (dlock creates the table only if
# it does not exist): text where dlock keeps numbers, unbounded blobs where it keeps at most
# 1 kB. What dlock reads back is checked and bounded, so status, list and waiters still answer.

load ../../lib/helpers
load ../../lib/mysql_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

@test "mysql: a look-alike dlock_fence with a non-numeric fence and a 5 MB command: status, list and a waiter answer, without the command" {
  mysql_admin -e "CREATE TABLE dlock.dlock_fence (lock_name VARBINARY(64) NOT NULL PRIMARY KEY,
    name LONGBLOB NOT NULL, fence VARCHAR(40) NOT NULL, acquired_ms VARCHAR(40) NOT NULL,
    connection_id VARCHAR(40) NOT NULL, holder_user LONGBLOB NOT NULL,
    holder_host LONGBLOB NOT NULL, holder_pid VARCHAR(40) NOT NULL, command LONGBLOB NOT NULL)"
  start_bg holder "$DLOCK" run -k odd -- sleep 60
  wait_for "\"$DLOCK\" status odd >/dev/null" 10
  start_bg other "$DLOCK" run -k fine -- sleep 60
  wait_for "\"$DLOCK\" status fine >/dev/null" 10
  mysql_admin -e "UPDATE dlock.dlock_fence SET fence = 'abc', holder_pid = '12x', command = REPEAT('x', 5000000) WHERE name = 'dlock:odd'"
  run -0 "$DLOCK" status odd
  [[ $output == *held* ]]
  [ "${#output}" -lt 4000 ]
  run -0 "$DLOCK" list
  [[ $output == *odd* ]]
  [[ $output == *fine* ]]
  [ "${#output}" -lt 4000 ]
  run -75 "$DLOCK" -v run -k odd -w 1s -- true
  [ "${#output}" -lt 4000 ]
}

# The rows of dlock_history of lock NAME (prefixed), counted.
history_rows() { mysql_admin -e "SELECT COUNT(*) FROM dlock.dlock_history WHERE name = 'dlock:$1'"; }

@test "mysql: history keeps a lock's newest 100 rows and drops expired ones; a tenant's 5 MB or garbage rows are left out" {
  run -0 "$DLOCK" run -k hist -- true
  [ "$(history_rows hist)" -eq 2 ]
  # another tenant's rows for the lock (the column widened to hold them): 150 of garbage, then
  # one of 5 MB; and an expired row
  mysql_admin -e "ALTER TABLE dlock.dlock_history MODIFY event LONGBLOB NOT NULL;
    INSERT INTO dlock.dlock_history (lock_key, name, at_ms, event)
      SELECT f.lock_name, f.name, UNIX_TIMESTAMP() * 1000, CONCAT('v1 junk ', s.seq)
      FROM dlock.dlock_fence f, dlock.seq_1_to_150 s WHERE f.name = 'dlock:hist';
    INSERT INTO dlock.dlock_history (lock_key, name, at_ms, event)
      SELECT lock_name, name, UNIX_TIMESTAMP() * 1000, REPEAT('x', 5000000)
      FROM dlock.dlock_fence WHERE name = 'dlock:hist';
    INSERT INTO dlock.dlock_history (lock_key, name, at_ms, event) VALUES ('k', 'dlock:gone', 0, 'old')"
  run -0 "$DLOCK" run -k hist -n -- true
  [ "$(history_rows hist)" -eq 100 ]
  [ "$(history_rows gone)" -eq 0 ]
  run -0 --separate-stderr "$DLOCK" history hist --json --limit 100
  [ "${#output}" -lt 4000 ]
  run -0 python3 -c 'import json, sys
events = [e["event"] for e in json.loads(sys.argv[1])["events"]]
assert events == ["released", "acquired"], events' "$output"
}

@test "mysql: a user that cannot create or write dlock_history, or a table of another shape: runs as before (the lock stays held), no history" {
  run -0 "$DLOCK" -u "$NOFENCE_URL" -v run -k nohist -- sh -c 'sleep 0.3; "$0" status nohist' "$DLOCK"
  [[ $output == *held* ]]
  [[ $output == *"could not add to lock 'nohist''s history"* ]]
  run -0 "$DLOCK" -u "$NOFENCE_URL" history nohist
  [ -z "$output" ]
  # another tenant made dlock_history with columns of its own
  mysql_admin -e "DROP TABLE IF EXISTS dlock.dlock_history; CREATE TABLE dlock.dlock_history (x INT)"
  run -0 "$DLOCK" -v run -k shape -- sh -c 'sleep 0.3; "$0" status shape' "$DLOCK"
  [[ $output == *held* ]]
  [[ $output == *"could not add to lock 'shape''s history"* ]]
  run -0 "$DLOCK" history shape
  [ -z "$output" ]
}
