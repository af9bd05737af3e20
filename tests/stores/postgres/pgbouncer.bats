#!/usr/bin/env bats
# PostgreSQL behind a pooler: a real PgBouncer (Debian's pgbouncer) in front of this file's
# PostgreSQL, in transaction pooling mode (the database dlock) and in session mode (the
# database dlock_session, the same one behind it). dlock's locks are session advisory locks,
# which a transaction pooler leaves on whichever server connection a statement got (other
# clients share it, or the lock is gone for the next statement: pgbouncer #617), so every
# command that opens a session through it refuses with exit 78 and one line, before any lock
# is taken. A client cannot tell a session pool from a transaction pool, so that is refused
# too. The same PostgreSQL reached directly still works.

load ../../lib/helpers
load ../../lib/postgres_helpers

# start_pgbouncer: PgBouncer on a loopback port the kernel hands out, with its configuration,
# log and pid file in $PG_DIR/bouncer, run as the postgres user when root (it refuses to run
# as root). It passes the role dlock, with the roles' password, to the database dlock behind
# two names: dlock (transaction mode) and dlock_session (session mode). Exports BOUNCER_PID,
# BOUNCER_URL and SESSION_POOL_URL.
start_pgbouncer() {
  : "${PGBOUNCER:=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)}"
  if [ ! -x "$PGBOUNCER" ]; then
    skip_file "pgbouncer not found (install pgbouncer)"
    return 0
  fi
  local dir=$PG_DIR/bouncer try port
  as_postgres mkdir -p "$dir"
  printf '"dlock" "%s"\n' "$PG_PASSWORD" | as_postgres tee "$dir/userlist.txt" >/dev/null
  for try in 1 2 3 4 5; do
    port=$(free_port)
    as_postgres tee "$dir/pgbouncer.ini" >/dev/null <<INI
[databases]
dlock = host=127.0.0.1 port=$PG_PORT dbname=dlock
dlock_session = host=127.0.0.1 port=$PG_PORT dbname=dlock pool_mode=session
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 4
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    as_postgres rm -f "$dir/pgbouncer.log" "$dir/pgbouncer.pid"
    if as_postgres "$PGBOUNCER" -d "$dir/pgbouncer.ini" 2>"$dir/start.err"; then
      wait_for "[ -s '$dir/pgbouncer.pid' ]" 10 || true
      BOUNCER_PID=$(cat "$dir/pgbouncer.pid" 2>/dev/null)
      if [ -n "$BOUNCER_PID" ] \
        && wait_for "grep -qs 'listening on 127.0.0.1:$port' '$dir/pgbouncer.log'" 10; then
        break
      fi
    fi
    [ -z "${BOUNCER_PID:-}" ] || kill -TERM "$BOUNCER_PID" 2>/dev/null || true
    BOUNCER_PID=
    grep -qs 'Address already in use' "$dir/pgbouncer.log" "$dir/start.err" || break
  done
  if [ -z "${BOUNCER_PID:-}" ]; then
    echo "PgBouncer did not start:" >&2
    cat "$dir/start.err" "$dir/pgbouncer.log" >&2
    return 1
  fi
  export BOUNCER_PID BOUNCER_URL="postgres://dlock@127.0.0.1:$port/dlock"
  export SESSION_POOL_URL="postgres://dlock@127.0.0.1:$port/dlock_session"
}

# stop_pgbouncer: stops this file's PgBouncer by its pid (SIGINT: at once), SIGKILL if it is
# still there a second later.
stop_pgbouncer() {
  [ -n "${BOUNCER_PID:-}" ] || return 0
  kill -INT "$BOUNCER_PID" 2>/dev/null || true
  wait_for "! alive $BOUNCER_PID" 1 2>/dev/null || kill -KILL "$BOUNCER_PID" 2>/dev/null || true
}

setup_file() {
  store_start
  [ -n "${STORE_SKIP:-}" ] || start_pgbouncer
}
teardown_file() {
  stop_pgbouncer
  store_stop
  true
}

setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# The advisory locks PostgreSQL holds, of any session: none after a refusal.
advisory_locks() { psql_admin -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"; }

# What a refusal says (of URL, default BOUNCER_URL): one line, exit 78, naming the pooler and
# what to do instead.
assert_refused() {
  assert_equal "$status" 78
  assert_equal "${#lines[@]}" 1
  assert_line --index 0 --partial "dlock: PostgreSQL at ${1:-$BOUNCER_URL} is a connection pooler"
  assert_line --index 0 --partial "session advisory locks"
  assert_line --index 0 --partial "connect dlock to PostgreSQL directly"
}

@test "run through PgBouncer in transaction mode: 78, one line, the command does not run and no lock is taken" {
  # psql through the same pooler works: it is up, and the refusal is dlock's
  run "$PG_BIN/psql" -X -At "postgresql://dlock:$PG_PASSWORD@${BOUNCER_URL#postgres://dlock@}" -c 'SELECT 1'
  assert_success
  assert_output 1
  run --separate-stderr "$DLOCK" -u "$BOUNCER_URL" run -k pooled -- touch "$T/ran"
  output=$stderr
  lines=("${stderr_lines[@]}")
  assert_refused
  [ ! -e "$T/ran" ]
  assert_equal "$(advisory_locks)" 0
}

@test "every other command through PgBouncer: 78, one line each" {
  local args
  # renew and release --token send the session's first check alone (their first query has
  # parameters); the others with their first query
  for args in "status pooled" "list" "acquire -k pooled --ttl 10s --keep" "wait -k pooled -w 1s" \
    "release -k pooled --force" "barrier -k pooled --parties 2 -w 1s" "latch -k pooled --count 1" \
    "renew -k pooled --token abc" "release -k pooled --token abc" "leader pooled"; do
    # shellcheck disable=SC2086 # the subcommand and its arguments, split on purpose
    run --separate-stderr "$DLOCK" -u "$BOUNCER_URL" $args
    output=$stderr
    lines=("${stderr_lines[@]}")
    echo "dlock $args" >&2
    assert_refused
  done
  assert_equal "$(advisory_locks)" 0
}

@test "a session pool is refused too: a client cannot tell it from a transaction pool" {
  run --separate-stderr "$DLOCK" -u "$SESSION_POOL_URL" run -k pooled -- touch "$T/ran"
  output=$stderr
  lines=("${stderr_lines[@]}")
  assert_refused "$SESSION_POOL_URL"
  [ ! -e "$T/ran" ]
}

@test "the same PostgreSQL directly still works" {
  run "$DLOCK" run -k pooled -- sh -c 'echo "$DLOCK_KEY"'
  assert_success
  assert_output pooled
}
