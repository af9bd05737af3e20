#!/usr/bin/env bats
# Another tenant of the database writes dlock's rows (dlock_fence) directly with psql: what
# dlock reads back is checked and bounded, so status, list and waiters still answer, one bad
# row never hides the others, and no row is read whole when it is far longer than dlock writes.

load ../e2e/helpers
load postgres_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

@test "postgres: another tenant set a held lock's acquired_at to 'infinity': status and list answer (they failed with 70)" {
  start_bg holder "$DLOCK" run -k inf -- sleep 60
  wait_for "\"$DLOCK\" status inf >/dev/null" 10
  start_bg other "$DLOCK" run -k fine -- sleep 60
  wait_for "\"$DLOCK\" status fine >/dev/null" 10
  psql_admin -c "UPDATE dlock_fence SET acquired_at = 'infinity' WHERE name = 'dlock:inf'"
  run -0 "$DLOCK" status inf
  [[ $output == *held* ]]
  run -0 "$DLOCK" list
  [[ $output == *inf* ]]
  [[ $output == *fine* ]]
  run -0 "$DLOCK" list --json
  printf '%s' "$output" | python3 -c 'import json,sys; json.load(sys.stdin)'
}

@test "postgres: another tenant's dlock_fence row with a 20 MB name is not read by list; the other locks are listed" {
  start_bg holder "$DLOCK" run -k fine -- sleep 60
  wait_for "\"$DLOCK\" status fine >/dev/null" 10
  # the tenant holds advisory key 77 in a session of its own, and names it in dlock_fence
  start_bg tenant runuser -u postgres -- "$PG_BIN/psql" -X -q -h "$PG_SOCK_DIR" -p "$PG_PORT" -U postgres -d dlock \
    -c "SELECT pg_advisory_lock(77), pg_sleep(60)"
  wait_for "[ \"\$(psql_admin -c \"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 77\")\" = 1 ]" 10
  psql_admin -c "INSERT INTO dlock_fence VALUES (77, 'dlock:' || repeat('x', 20000000), 1, now())"
  run -0 "$DLOCK" list
  [[ $output == *fine* ]]
  [ "${#output}" -lt 4000 ]
}

@test "postgres: another tenant's trigger raises an error with terminal escapes: dlock's message has them escaped" {
  psql_admin -c "SELECT 1 FROM dlock_fence LIMIT 1" >/dev/null 2>&1 ||
    run -0 "$DLOCK" run -k maketable -- true
  psql_admin -c "CREATE FUNCTION tenant_raise() RETURNS trigger AS \$\$ BEGIN
      RAISE EXCEPTION E'owned\\x1b]0;title\\x07\\x1b[2Jgone'; END \$\$ LANGUAGE plpgsql" \
    -c "CREATE TRIGGER tenant_raise BEFORE INSERT OR UPDATE ON dlock_fence FOR EACH ROW EXECUTE FUNCTION tenant_raise()"
  run "$DLOCK" run -k esc -- true
  psql_admin -c "DROP TRIGGER tenant_raise ON dlock_fence" -c "DROP FUNCTION tenant_raise()"
  echo "$output" | od -c | head -20
  [ "$status" -ne 0 ]
  [[ $output == *owned* ]]
  [[ $output != *$'\e'* ]]
  [[ $output != *$'\a'* ]]
  [[ $output == *'\x1b'* ]]
  run -1 "$DLOCK" status esc # nothing left held
}
