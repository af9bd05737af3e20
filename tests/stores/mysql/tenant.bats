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
