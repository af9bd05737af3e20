# A private PostgreSQL server per bats file, for the postgres:// store (tests/stores/postgres).
#
# start_postgres [-c name=value ...]: initdb into a fresh directory under /tmp (not bats' own
# temporary directory: the server runs as the postgres user when the tests run as root, and
# bats' directories are root's alone), then starts the server on a loopback port the kernel
# hands out (free_port) and on a unix socket in that directory. Roles and database:
#   postgres        superuser, trusted over the unix socket only (psql_admin)
#   dlock           password PG_PASSWORD over TCP, owner of the database dlock (so it may
#                   create the fencing table dlock_fence in its public schema)
#   dlock_nofence   password PG_PASSWORD, may connect to dlock but not create or write
#                   dlock_fence: a lock without fencing token
# Exports PG_DIR, PG_PORT, PG_SOCK_DIR, PG_PID, PG_PASSWORD, PG_HOST, DLOCK_URL (the role
# dlock over TCP, without password), DLOCK_PASSWORD_FILE (the roles' password) and NOFENCE_URL
# (the role dlock_nofence). Extra -c arguments are server settings (the partition test's
# keepalives).
# PG_LISTEN (default 127.0.0.1) and PG_HBA_EXTRA (lines added to pg_hba.conf) widen where it
# listens and whom it lets in.
# Skips the file when the binaries are missing or cannot be run (not root: initdb runs as the
# current user, which works for any user but root).

load "${BASH_SOURCE[0]%/*}/store_helpers"

: "${PG_BIN:=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"

# as_postgres COMMAND...: runs it as the postgres user (root) or as ourselves (anyone else).
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start_postgres() {
  if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/postgres" ]; then
    skip_file "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin; install postgresql)"
    return 0
  fi
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    skip_file "no postgres user to run the PostgreSQL server as (install postgresql)"
    return 0
  fi
  PG_DIR=$(mktemp -d /tmp/dlock-pg.XXXXXX)
  chmod 755 "$PG_DIR"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$PG_DIR"
  export PG_DIR PG_SOCK_DIR=$PG_DIR PG_HOST=127.0.0.1
  PG_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  export PG_PASSWORD
  if ! as_postgres "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth-local=trust \
    --auth-host=scram-sha-256 --no-sync -E UTF8 --locale=C >"$PG_DIR/initdb.log" 2>&1; then
    local runner=postgres
    [ "$(id -u)" -eq 0 ] || runner=$(id -un)
    skip_file "cannot run initdb as $runner: $(tail -n 1 "$PG_DIR/initdb.log")"
    return 0
  fi
  if [ -n "${PG_HBA_EXTRA:-}" ]; then
    printf '%s\n' "$PG_HBA_EXTRA" >>"$PG_DIR/data/pg_hba.conf"
  fi
  local try
  for try in 1 2 3 4 5; do
    PG_PORT=$(free_port)
    rm -f "$PG_DIR/server.log"
    # -c settings: fast (no durability needed), quiet, small; connections enough for every
    # holder, waiter and admin session a test opens at once. One line: pg_ctl hands -o to
    # /bin/sh, where a newline would end the command.
    local options=(-p "$PG_PORT" -k "$PG_SOCK_DIR" -c "listen_addresses=${PG_LISTEN:-127.0.0.1}"
      -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=16MB
      -c max_connections=60 -c log_min_messages=warning "$@")
    if as_postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 \
      -o "${options[*]}" start >"$PG_DIR/pg_ctl.log" 2>&1; then
      PG_PID=$(head -n 1 "$PG_DIR/data/postmaster.pid")
      export PG_PORT PG_PID
      break
    fi
    grep -qs 'could not bind\|Address already in use' "$PG_DIR/server.log" || break
  done
  if [ -z "${PG_PID:-}" ]; then
    echo "PostgreSQL did not start:" >&2
    cat "$PG_DIR/pg_ctl.log" "$PG_DIR/server.log" >&2
    return 1
  fi
  psql_admin -d postgres <<SQL >/dev/null
CREATE ROLE dlock LOGIN PASSWORD '$PG_PASSWORD';
CREATE ROLE dlock_nofence LOGIN PASSWORD '$PG_PASSWORD';
CREATE DATABASE dlock OWNER dlock;
SQL
  # The password in a file (DLOCK_PASSWORD_FILE), not in the URL: a password in a URL draws a
  # warning on every run, and a nested dlock run is given the file's name, never the password.
  (umask 077 && echo "$PG_PASSWORD" >"$BATS_FILE_TMPDIR/pg-password")
  export DLOCK_PASSWORD_FILE=$BATS_FILE_TMPDIR/pg-password
  export DLOCK_URL="postgres://dlock@$PG_HOST:$PG_PORT/dlock"
  # the role without fencing, same server, database and password
  export NOFENCE_URL="postgres://dlock_nofence@$PG_HOST:$PG_PORT/dlock"
}

# stop_postgres: stops the server of this file at once (pg_ctl stop -m immediate), then its
# postmaster by pid if it is still there, and removes its directory.
stop_postgres() {
  if [ -n "${PG_PID:-}" ]; then
    as_postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w -t 10 stop >/dev/null 2>&1 || true
    kill -KILL "$PG_PID" 2>/dev/null || true
  fi
  if [ -n "${PG_DIR:-}" ] && [[ $PG_DIR == /tmp/dlock-pg.* ]]; then
    rm -rf "$PG_DIR"
  fi
}

# psql_admin [psql args...]: psql as the superuser over the unix socket, database dlock unless
# -d says otherwise; stops at the first error; unaligned, tuples only.
psql_admin() {
  as_postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -At -h "$PG_SOCK_DIR" -p "$PG_PORT" \
    -U postgres -d dlock "$@"
}

# The hooks of store.bats (store_helpers.bash).
STORE_FEATURES="shared limit fair coordinate session loss_notice sql min_hold lock_delay replace supersede keep elect history"
STORE_LOSS="its database session ended"

store_start() {
  if "$DLOCK" --version 2>&1 | grep -qi 'libpq not'; then
    skip_file "postgres:// needs libpq: $("$DLOCK" --version 2>&1 | grep -io 'libpq not[^;)]*')"
    return 0
  fi
  start_postgres
}

store_stop() { stop_postgres; }

# Ends every session dlock opened as the role dlock (pg_terminate_backend).
store_end_sessions() {
  psql_admin -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE usename = 'dlock' AND application_name LIKE 'dlock %'"
}
