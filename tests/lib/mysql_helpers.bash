# A private MariaDB server per bats file, for the mysql:// store (tests/stores/mysql).
#
# start_mariadb [mariadbd args...]: mariadb-install-db into a fresh directory under /tmp (not
# bats' own temporary directory: the server runs as the mysql user when the tests run as root,
# and bats' directories are root's alone), then mariadbd on a loopback port the kernel hands
# out (free_port) and on a unix socket in that directory, without binary log. Accounts and
# database:
#   root            over the unix socket only, by socket authentication (mysql_admin; not
#                   root: the account of the user running the tests, made the same way)
#   dlock           password MY_PASSWORD, every right on the databases dlock% (so that a
#                   missing database dlock_missing is unknown, not forbidden)
#   dlock_nofence   password MY_PASSWORD, SELECT only on dlock: may take locks (GET_LOCK
#                   needs no right) but not create or write a fencing table
# Exports MY_DIR, MY_PORT, MY_SOCK, MY_PID, MY_PASSWORD, DLOCK_URL (dlock over TCP, without
# password), DLOCK_PASSWORD_FILE (the users' password) and NOFENCE_URL (dlock_nofence).
# MY_LISTEN (default 127.0.0.1: addresses, comma-separated) and MY_CLIENT_HOSTS (more client
# addresses the user dlock may come from, space-separated) widen where it listens and whom it
# lets in (the partition test's network namespace).
# Skips the file when the binaries are missing or cannot be run.

load "${BASH_SOURCE[0]%/*}/store_helpers"

: "${MARIADBD:=$(command -v mariadbd || command -v mysqld || ls /usr/sbin/mariadbd 2>/dev/null || true)}"
: "${MARIADB_INSTALL_DB:=$(command -v mariadb-install-db || command -v mysql_install_db || true)}"
: "${MARIADB_CLIENT:=$(command -v mariadb || command -v mysql || true)}"

# as_mysql COMMAND...: runs it as the mysql user (root) or as ourselves (anyone else).
as_mysql() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u mysql -- "$@"
  else
    "$@"
  fi
}

start_mariadb() {
  if [ -z "$MARIADBD" ] || [ -z "$MARIADB_INSTALL_DB" ]; then
    skip_file "MariaDB server binaries not found (mariadbd, mariadb-install-db; install mariadb-server)"
    return 0
  fi
  if [ -z "$MARIADB_CLIENT" ]; then
    skip_file "MariaDB client not found (mariadb; install mariadb-client)"
    return 0
  fi
  if [ "$(id -u)" -eq 0 ] && ! id mysql >/dev/null 2>&1; then
    skip_file "no mysql user to run the MariaDB server as (install mariadb-server)"
    return 0
  fi
  MY_DIR=$(mktemp -d /tmp/dlock-my.XXXXXX)
  chmod 755 "$MY_DIR"
  [ "$(id -u)" -ne 0 ] || chown mysql: "$MY_DIR"
  MY_SOCK=$MY_DIR/mysqld.sock
  export MY_DIR MY_SOCK
  MY_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  export MY_PASSWORD
  if ! as_mysql "$MARIADB_INSTALL_DB" --no-defaults --datadir="$MY_DIR/data" \
    --auth-root-authentication-method=socket --auth-root-socket-user="$(id -un)" \
    --skip-test-db --skip-name-resolve >"$MY_DIR/install.log" 2>&1; then
    local runner=mysql
    [ "$(id -u)" -eq 0 ] || runner=$(id -un)
    skip_file "cannot run mariadb-install-db as $runner: $(tail -n 1 "$MY_DIR/install.log")"
    return 0
  fi
  local try i
  for try in 1 2 3 4 5; do
    MY_PORT=$(free_port)
    rm -f "$MY_DIR/error.log" "$MY_DIR/mysqld.pid"
    # in a subshell, so that the background job is not this shell's (no "Killed" notice), and
    # without bats' fd 3
    (as_mysql "$MARIADBD" --no-defaults --datadir="$MY_DIR/data" --socket="$MY_SOCK" \
      --port="$MY_PORT" --bind-address="${MY_LISTEN:-127.0.0.1}" --skip-log-bin --skip-name-resolve \
      --pid-file="$MY_DIR/mysqld.pid" --log-error="$MY_DIR/error.log" \
      --innodb-buffer-pool-size=16M --innodb-log-file-size=8M --innodb-flush-log-at-trx-commit=0 \
      --skip-innodb-doublewrite --max-connections=60 "$@" 3>&- >/dev/null 2>&1 &)
    for i in $(seq 600); do
      if [ -s "$MY_DIR/mysqld.pid" ] && mysql_admin -e 'SELECT 1' >/dev/null 2>&1; then
        MY_PID=$(cat "$MY_DIR/mysqld.pid")
        export MY_PORT MY_PID
        break 2
      fi
      grep -qs 'Do you already have another .*server running\|Address already in use\|Aborting' \
        "$MY_DIR/error.log" && break
      sleep 0.05
    done
    grep -qs 'Address already in use\|another .*server running' "$MY_DIR/error.log" || break
  done
  if [ -z "${MY_PID:-}" ]; then
    echo "mariadbd did not start:" >&2
    cat "$MY_DIR/error.log" >&2
    # one that started but did not answer
    [ ! -s "$MY_DIR/mysqld.pid" ] || kill -KILL "$(cat "$MY_DIR/mysqld.pid")" 2>/dev/null || true
    return 1
  fi
  mysql_admin <<SQL
CREATE DATABASE dlock;
CREATE USER 'dlock'@'127.0.0.1' IDENTIFIED BY '$MY_PASSWORD';
CREATE USER 'dlock'@'localhost' IDENTIFIED BY '$MY_PASSWORD';
GRANT ALL ON \`dlock%\`.* TO 'dlock'@'127.0.0.1';
GRANT ALL ON \`dlock%\`.* TO 'dlock'@'localhost';
CREATE USER 'dlock_nofence'@'127.0.0.1' IDENTIFIED BY '$MY_PASSWORD';
GRANT SELECT ON dlock.* TO 'dlock_nofence'@'127.0.0.1';
SQL
  local client
  for client in ${MY_CLIENT_HOSTS:-}; do
    mysql_admin -e "CREATE USER 'dlock'@'$client' IDENTIFIED BY '$MY_PASSWORD';
      GRANT ALL ON \`dlock%\`.* TO 'dlock'@'$client'"
  done
  # The password in a file (DLOCK_PASSWORD_FILE), not in the URL: a password in a URL draws a
  # warning on every run, and a nested dlock run is given the file's name, never the password.
  (umask 077 && echo "$MY_PASSWORD" >"$BATS_FILE_TMPDIR/my-password")
  export DLOCK_PASSWORD_FILE=$BATS_FILE_TMPDIR/my-password
  export DLOCK_URL="mysql://dlock@127.0.0.1:$MY_PORT/dlock"
  # the user without fencing, same server, database and password
  export NOFENCE_URL="mysql://dlock_nofence@127.0.0.1:$MY_PORT/dlock"
}

# stop_mariadb: stops the server of this file at once (SIGKILL by pid: nothing in it needs to
# survive) and removes its directory.
stop_mariadb() {
  if [ -n "${MY_PID:-}" ]; then
    kill -KILL "$MY_PID" 2>/dev/null || true
    local i
    for i in $(seq 100); do
      kill -0 "$MY_PID" 2>/dev/null || break
      sleep 0.05
    done
  fi
  if [ -n "${MY_DIR:-}" ] && [[ $MY_DIR == /tmp/dlock-my.* ]]; then
    rm -rf "$MY_DIR"
  fi
}

# mysql_admin [mariadb args...]: the client as root (or the user running the tests, the one
# mariadb-install-db made the socket-authenticated administrator) over the unix socket, no default database;
# batch mode (tab-separated, no column names), which stops at the first error.
mysql_admin() {
  "$MARIADB_CLIENT" --no-defaults -S "$MY_SOCK" -u "$(id -un)" -B -N "$@"
}

# The hooks of store.bats (store_helpers.bash).
STORE_FEATURES="shared limit fair coordinate session loss_notice sql min_hold lock_delay replace supersede keep elect history"
STORE_LOSS="its database session ended"

store_start() {
  if ! "$DLOCK" --version 2>&1 | grep -qi 'mariadb\|mysql'; then
    skip_file "mysql:// store not built (dlock --version does not mention libmariadb or libmysqlclient)"
    return 0
  fi
  start_mariadb
  [ -z "${STORE_SKIP:-}" ] || return 0
  local st=0
  "$DLOCK" status probe >"$BATS_FILE_TMPDIR/probe.out" 2>&1 || st=$?
  if [ "$st" -gt 1 ]; then
    skip_file "mysql:// store not built: dlock status answered $st: $(head -n 1 "$BATS_FILE_TMPDIR/probe.out")"
  fi
}

store_stop() { stop_mariadb; }

# Ends every session of the user dlock (KILL CONNECTION).
store_end_sessions() {
  local id n=0
  for id in $(mysql_admin -e "SELECT id FROM information_schema.processlist WHERE user = 'dlock'"); do
    mysql_admin -e "KILL CONNECTION $id" && n=$((n + 1))
  done
  echo "$n"
}
