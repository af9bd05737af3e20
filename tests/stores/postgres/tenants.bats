#!/usr/bin/env bats
# PostgreSQL shared with another tenant (a second database role): objects it puts where
# dlock's role would look (a writable public schema, a schema earlier in the search path)
# never run with dlock's role; a password in the URL's query is seen by no other user; and
# what dlock reads back from its rows (written directly with psql) is checked and bounded, so
# status, list and waiters still answer and no row is read whole when it is far longer than
# dlock writes.
# psql_admin sets the scene; the role mallory writes its objects.

load ../../lib/helpers
load ../../lib/postgres_helpers

setup_file() {
  store_start
  [ -n "${STORE_SKIP:-}" ] || psql_admin -d postgres -c "CREATE ROLE mallory LOGIN" >/dev/null
}
teardown_file() { store_stop; true; }

setup() {
  skip_if_file_skipped
  dlock_setup
  # mallory: another tenant of the database, allowed to create in public (PostgreSQL 14's
  # default, or a careless grant), with a table pwned that records who ran its code.
  psql_admin <<'SQL' >/dev/null 2>&1
DROP TABLE IF EXISTS public.dlock_fence;
DROP SCHEMA IF EXISTS dlock CASCADE;
DROP OWNED BY mallory CASCADE;
SQL
  psql_admin <<'SQL' >/dev/null
GRANT CREATE ON SCHEMA public TO mallory;
SET ROLE mallory;
CREATE TABLE public.pwned (who text);
GRANT INSERT, SELECT ON public.pwned TO PUBLIC;
CREATE FUNCTION public.mark() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN INSERT INTO public.pwned VALUES (current_user); RETURN NEW; END $$;
SQL
}
teardown() { dlock_teardown; }

# The rows of public.pwned: who ran mallory's code.
pwned() { psql_admin -c "SELECT coalesce(string_agg(who, ','), '') FROM public.pwned"; }

# mallory's look-alike dlock_fence in SCHEMA, with a trigger that runs as whoever writes it.
lookalike() { # SCHEMA
  psql_admin <<SQL >/dev/null
SET ROLE mallory;
CREATE TABLE $1.dlock_fence (lock_key bigint PRIMARY KEY, name text NOT NULL,
  fence bigint NOT NULL, acquired_at timestamptz NOT NULL);
GRANT ALL ON $1.dlock_fence TO PUBLIC;
CREATE TRIGGER mark BEFORE INSERT OR UPDATE ON $1.dlock_fence
  FOR EACH ROW EXECUTE FUNCTION public.mark();
SQL
}

@test "postgres: another role's dlock_fence in public is refused (78, one line), its trigger never runs as dlock" {
  lookalike public
  run -78 --separate-stderr "$DLOCK" run -k t1 -- touch "$T/ran"
  echo "$stderr"
  [ ! -e "$T/ran" ]
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  [[ $stderr == dlock:*public.dlock_fence*mallory* ]]
  [ -z "$(pwned)" ]
  # nothing was left held, and status and list refuse it as well
  run -0 psql_admin -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
  assert_output 0
  run -78 --separate-stderr "$DLOCK" status t1
  run -78 --separate-stderr "$DLOCK" list
  [ -z "$(pwned)" ]
}

@test "postgres: a look-alike dlock_fence in a schema earlier in the search path is refused; dlock's own is kept" {
  # dlock's own table first, in public
  run -0 "$DLOCK" run -k t2 -- true
  run -0 psql_admin -c "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'public.dlock_fence'::regclass"
  assert_output dlock
  # mallory owns the schema named after dlock's role: "$user" comes before public
  psql_admin -c "CREATE SCHEMA dlock AUTHORIZATION mallory; GRANT USAGE ON SCHEMA dlock TO PUBLIC" >/dev/null
  lookalike dlock
  run -78 --separate-stderr "$DLOCK" run -k t2 -- touch "$T/ran"
  echo "$stderr"
  [ ! -e "$T/ran" ]
  [[ $stderr == *dlock.dlock_fence*mallory* ]]
  [ -z "$(pwned)" ]
}

@test "postgres: a function of another role that shadows PostgreSQL's own (pg_try_advisory_lock(text)) is never called" {
  psql_admin <<'SQL' >/dev/null
SET ROLE mallory;
CREATE FUNCTION public.pg_try_advisory_lock(text) RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN INSERT INTO public.pwned VALUES (current_user); RETURN true; END $$;
CREATE FUNCTION public.pg_advisory_unlock(text) RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN INSERT INTO public.pwned VALUES (current_user); RETURN true; END $$;
GRANT EXECUTE ON FUNCTION public.pg_try_advisory_lock(text), public.pg_advisory_unlock(text) TO PUBLIC;
SQL
  run -0 "$DLOCK" run -k t3 -- true
  [ -z "$(pwned)" ]
  # and the lock was a real one: held while the command runs
  run -0 "$DLOCK" run -k t3 -- sh -c 'env -u DLOCK_TOKEN "$1" run -k t3 -n -- true; echo "inner $?"' sh "$DLOCK"
  assert_output "inner 75"
  [ -z "$(pwned)" ]
}

@test "postgres: ?password= and sslpassword= are scrubbed from argv, from the command's DLOCK_URL and from messages" {
  local url="postgres://dlock@$PG_HOST:$PG_PORT/dlock?password=$PG_PASSWORD&sslpassword=ssl-secret&sslmode=disable"
  unset DLOCK_PASSWORD_FILE
  DLOCK_URL=$url start_bg holder "$DLOCK" -u "$url" run -k sec -- sh -c \
    'echo "$DLOCK_URL" >"$1.tmp"; mv "$1.tmp" "$1"; until [ -e "$2" ]; do sleep 0.02; done' sh "$T/url" "$T/release"
  local holder=$BG_PID
  wait_for "[ -s '$T/url' ]" 10
  run -0 cat "/proc/$holder/cmdline"
  refute_output --partial "$PG_PASSWORD"
  refute_output --partial ssl-secret
  run -0 cat "$T/url"
  assert_output "postgres://dlock@$PG_HOST:$PG_PORT/dlock?sslmode=disable"
  touch "$T/release"
  wait "$holder"
  # libpq quotes what it cannot decode: not in dlock's message
  run -64 --separate-stderr "$DLOCK" -u "postgres://dlock@$PG_HOST:$PG_PORT/dlock?password=sec%zzret" status x
  echo "$stderr"
  [[ $stderr == dlock:* ]]
  [[ $stderr != *sec%zzret* && $stderr != *zzret* ]]
}

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

# The rows of dlock_history of lock NAME (prefixed), counted.
history_rows() { psql_admin -c "SELECT count(*) FROM dlock_history WHERE name = 'dlock:$1'"; }

@test "postgres: history keeps a lock's newest 100 rows and drops expired ones; a tenant's 20 MB or garbage rows are left out" {
  run -0 "$DLOCK" run -k hist -- true
  [ "$(history_rows hist)" -eq 2 ]
  # another tenant's rows for the lock: 150 of garbage, then one of 20 MB; and an expired row
  psql_admin -c "INSERT INTO dlock_history (lock_key, name, at_ms, event)
      SELECT (SELECT lock_key FROM dlock_fence WHERE name = 'dlock:hist'), 'dlock:hist',
        floor(extract(epoch from now()) * 1000)::bigint, 'v1 junk ' || i FROM generate_series(1, 150) i" \
    -c "INSERT INTO dlock_history (lock_key, name, at_ms, event)
      SELECT lock_key, name, floor(extract(epoch from now()) * 1000)::bigint, repeat('x', 20000000)
      FROM dlock_fence WHERE name = 'dlock:hist'" \
    -c "INSERT INTO dlock_history (lock_key, name, at_ms, event) VALUES (1, 'dlock:gone', 0, 'old')"
  run -0 "$DLOCK" run -k hist -n -- true
  [ "$(history_rows hist)" -eq 100 ]
  [ "$(history_rows gone)" -eq 0 ]
  run -0 --separate-stderr "$DLOCK" history hist --json --limit 100
  [ "${#output}" -lt 4000 ]
  run -0 python3 -c 'import json, sys
events = [e["event"] for e in json.loads(sys.argv[1])["events"]]
assert events == ["released", "acquired"], events' "$output"
}

@test "postgres: a role that cannot create or write dlock_history runs as before (its lock stays held); another role's look-alike is never used" {
  run -0 "$DLOCK" -u "$NOFENCE_URL" -v run -k nohist -- sh -c 'sleep 0.3; "$0" status nohist' "$DLOCK"
  [[ $output == *held* ]]
  [[ $output == *"could not add to lock 'nohist''s history"* ]]
  run -0 "$DLOCK" -u "$NOFENCE_URL" history nohist
  [ -z "$output" ]
  # mallory's dlock_history in public, with a trigger that records who wrote it
  psql_admin -c "DROP TABLE IF EXISTS public.dlock_history" >/dev/null
  psql_admin <<'SQL' >/dev/null
SET ROLE mallory;
CREATE TABLE public.dlock_history (id bigint, lock_key bigint, name text, at_ms bigint, event text);
GRANT ALL ON public.dlock_history TO PUBLIC;
CREATE TRIGGER mark BEFORE INSERT ON public.dlock_history FOR EACH ROW EXECUTE FUNCTION public.mark();
SQL
  run -0 "$DLOCK" run -k lookalike -- true
  run -78 --separate-stderr "$DLOCK" history lookalike
  [[ $stderr == dlock:*public.dlock_history*mallory* ]]
  [ -z "$(pwned)" ]
}
