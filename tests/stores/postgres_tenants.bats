#!/usr/bin/env bats
# PostgreSQL shared with another tenant (a second database role): objects it puts where
# dlock's role would look (a writable public schema, a schema earlier in the search path)
# never run with dlock's role; and a password in the URL's query is seen by no other user.
# psql_admin sets the scene; the role mallory writes its objects.

load ../e2e/helpers
load postgres_helpers

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
