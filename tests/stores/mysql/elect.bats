#!/usr/bin/env bats
# dlock elect and dlock leader on MySQL / MariaDB, what only this store has (the scenarios
# every store passes are in store.bats): the leader's record (its value) is the holder column
# of dlock_policy, which another tenant may write; the leadership is a GET_LOCK name, which
# another client of the server may take with a plain GET_LOCK.

load ../../lib/helpers
load ../../lib/mysql_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# leads TEXT KEY: waits until `dlock leader KEY` starts with TEXT.
leads() { wait_for "\"\$DLOCK\" leader '$2' 2>/dev/null | grep -q '^$1'" 20; }

# record SQL: sets the holder column of the lock junk's dlock_policy row to the SQL expression.
record() { mysql_admin dlock -e "UPDATE dlock_policy SET holder = $1 WHERE name = 'dlock:junk'"; }

@test "mysql elect: another tenant's junk in the leader's record (a value over 256 bytes, 5 MB, not a record): no value shown, exit 0, watchers live on" {
  start_bg leader "$DLOCK" elect -k junk --value good -- sleep 60
  local leader=$BG_PID
  leads 'good ' junk
  start_bg watch "$DLOCK" leader junk --watch
  local watch=$BG_PID
  wait_for "grep -q '^good ' '$T/watch.out'" 10
  # the record as dlock writes it (user, host, pid, command, acquired, ttl, note, value), with
  # a value one byte too long
  record "CONCAT_WS(X'1f', 'u', 'h', '1', 'c', '1', '1', '', REPEAT('v', 257))"
  run -0 "$DLOCK" leader junk
  echo "$output"
  [[ $output == "- ("*"pid $leader"* ]] # the holder of the fencing row, without a value
  [[ $output != *vvv* ]]
  run -0 "$DLOCK" leader junk --json
  json_ok 'assert d["leader"] and d["value"] == "" and d["holder"]["pid"] == int(A[0]), d' "$leader"
  # 256 bytes is a value
  record "CONCAT_WS(X'1f', 'u', 'h', '1', 'c', '1', '1', '', REPEAT('w', 256))"
  run -0 "$DLOCK" leader junk --json
  json_ok 'assert d["value"] == "w" * 256, d'
  # 5 MB in a column another tenant made larger
  mysql_admin dlock -e "ALTER TABLE dlock_policy MODIFY holder LONGBLOB NOT NULL"
  record "REPEAT('x', 5000000)"
  run -0 "$DLOCK" leader junk
  [ "${#output}" -lt 2000 ]
  [[ $output == "- ("* ]]
  run -0 "$DLOCK" status junk
  [ "${#output}" -lt 4000 ]
  record "'not%zz a record'"
  run -0 "$DLOCK" leader junk
  [[ $output == "- ("* ]]
  # the watcher read the same rows at each look: still there, and sees the leader go
  alive "$watch"
  kill -TERM "$leader"
  wait "$leader" || true
  wait_for "grep -qx 'no leader' '$T/watch.out'" 10
  kill -TERM "$watch"
  wait "$watch" || true
  cat "$T/watch.out" "$T/watch.err"
  [ "$(wc -c <"$T/watch.out")" -lt 4000 ]
  ! grep -q 'vvv\|xxx' "$T/watch.out"
}

@test "mysql elect: another client's plain GET_LOCK of the name leads: leader says so (0), candidates wait; its end is a change the watcher sees" {
  # the mariadb client takes the lock's GET_LOCK name (names.hpp: the prefixed name as it is)
  mysql_admin -e "SELECT GET_LOCK('dlock:plain', 0); SELECT SLEEP(600)" >/dev/null 3>&- &
  echo "$!" >>"$T/bg.pid"
  wait_for "[ \"\$(mysql_admin -e \"SELECT IS_USED_LOCK('dlock:plain') IS NOT NULL\")\" = 1 ]" 10
  run -0 "$DLOCK" leader plain
  echo "$output"
  [[ $output == "- (not dlock: MySQL connection "*")" ]]
  run -75 "$DLOCK" elect -k plain --value late -w 1s -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  start_bg watch "$DLOCK" leader plain --watch
  local watch=$BG_PID
  wait_for "[ -s '$T/watch.out' ]" 10
  start_bg candidate "$DLOCK" elect -k plain --value next -- sh -c 'touch "$T/ran"; exec sleep 60'
  sleep 1
  [ ! -e "$T/ran" ]
  # the client's session ends without a word to anyone (KILL): the candidate's wait in the
  # server ends at once, and the watcher sees the candidate
  mysql_admin -e "KILL CONNECTION $(mysql_admin -e "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(600)%'")"
  wait_for "[ -e '$T/ran' ]" 10
  wait_for "grep -q '^next ' '$T/watch.out'" 10
  kill -TERM "$watch"
  wait "$watch" || true
  cat "$T/watch.out"
  [ "$(head -n1 "$T/watch.out" | cut -c1-3)" = "- (" ]
  [ "$(grep -c '^next ' "$T/watch.out")" -eq 1 ]
}
