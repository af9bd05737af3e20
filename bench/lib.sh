# Shared by the benchmarks in bench/ (each sources it after reading its options): printing,
# waiting, free ports, the temporary directory, the private servers they start on 127.0.0.1
# and stop by pid (redis-server, etcd, PostgreSQL, MariaDB, ZooKeeper), and the fixed copy of
# dlock they measure.
# The caller sets BENCH_DIR, REPO and DLOCK_BIN, and runs under set -euo pipefail.

say() { printf '%s\n' "$*"; }
header() { printf '\n== %s   [at %d s]\n' "$*" "$SECONDS"; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }
now_ns() { date +%s%N; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
q() { printf '%q' "$1"; } # quoting for hyperfine -N (shell-words)

# need_tools DEPS TOOL...: runs packaging/install-deps.sh bench first unless DEPS is 0 (the
# scripts' --no-deps), then dies naming the first TOOL that is not installed.
need_tools() {
  local deps=$1 tool
  shift
  [ "$deps" = 0 ] || "$REPO/packaging/install-deps.sh" bench >/dev/null
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool is missing (packaging/install-deps.sh bench)"
  done
}

# wait_until SECONDS DESCRIPTION COMMAND...: retries COMMAND every 50 ms; dies after SECONDS.
wait_until() {
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.05
  done
}

# free_ports N: N free loopback ports (asked of the kernel at once, so all different).
free_ports() {
  python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])' "$1"
}

# bench_tmpdir NAME: a new temporary directory, in TMP.
bench_tmpdir() { TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock-bench-$1.XXXXXX"); }

# The servers started here, by pid: stop_servers stops them (the scripts' cleanup).
SERVER_PIDS=()

# start_redis DIR PORT [redis-server args...]: a redis-server on 127.0.0.1:PORT, in the
# background of this shell (not daemonized: its pid is REDIS_PID, whose /proc a benchmark may
# read), without persistence, its data and redis.log in DIR; returns once it answers PING.
start_redis() {
  local dir=$1 port=$2
  shift 2
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --daemonize no "$@" &
  REDIS_PID=$!
  SERVER_PIDS+=("$REDIS_PID")
  wait_until 10 "redis-server on 127.0.0.1:$port" sh -c "[ \"\$(redis-cli -p $port ping)\" = PONG ]"
}

# start_etcd DIR PORT PEER_PORT: a single-node etcd serving clients on 127.0.0.1:PORT, its data
# in DIR/etcd (etcd fsyncs to whatever disk holds it) and its log in DIR/etcd.log; returns once
# it is healthy. Sets ETCD_URL, ETCD_PID; exports ETCDCTL_API=3.
start_etcd() {
  local dir=$1 port=$2 peer=$3
  ETCD_URL=http://127.0.0.1:$port
  etcd --name bench --data-dir "$dir/etcd" \
    --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "bench=http://127.0.0.1:$peer" --initial-cluster-state new \
    >"$dir/etcd.log" 2>&1 &
  ETCD_PID=$!
  SERVER_PIDS+=("$ETCD_PID")
  export ETCDCTL_API=3
  wait_until 20 "etcd" etcdctl --endpoints="$ETCD_URL" endpoint health
}

# as_db USER COMMAND...: as that user when root (the database servers refuse to run as root).
as_db() {
  local user=$1
  shift
  if [ "$(id -u)" = 0 ]; then runuser -u "$user" -- "$@"; else "$@"; fi
}

# find_pg_bin: sets PG_BIN to the newest installed PostgreSQL's bin directory, or dies.
find_pg_bin() {
  PG_BIN=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1)
  [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] || die "PostgreSQL's server is missing (apt-get install postgresql)"
}

# start_postgres DIR PORT: a new cluster in DIR/data (initdb, trust on loopback, the packaged
# defaults: fsync on), serving 127.0.0.1:PORT and a socket in DIR; returns once it answers.
# Sets PG_BIN, PG_DATA (stop_servers stops it: pg_ctl stop -m immediate) and PG_URL. Run as
# root, it runs as postgres: DIR's parents must be open to it (chmod 755 the temporary directory).
PG_DATA=""
start_postgres() {
  local dir=$1 port=$2
  [ -n "${PG_BIN:-}" ] || find_pg_bin
  mkdir -p "$dir"
  [ "$(id -u)" != 0 ] || chown postgres "$dir"
  as_db postgres "$PG_BIN/initdb" -D "$dir/data" -A trust -U postgres >"$dir/initdb.log" 2>&1 ||
    die "initdb failed: $(tail -3 "$dir/initdb.log")"
  PG_DATA=$dir/data
  as_db postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$dir/log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null ||
    die "PostgreSQL did not start: $(tail -3 "$dir/log")"
  PG_URL=postgres://postgres@127.0.0.1:$port/postgres
}

# have_mariadb: whether this dlock has the mysql:// store (MariaDB's client) and mariadbd is here.
have_mariadb() { "$DLOCK_BIN" --version 2>&1 | grep -qi mariadb && command -v mariadbd >/dev/null; }

# start_mariadb DIR PORT: a new MariaDB in DIR/data (mariadb-install-db, packaged defaults,
# binary log off) on 127.0.0.1:PORT, with a database and a user dlock for dlock; returns once it
# answers. Sets MYSQL_URL and MYSQL_PASSWORD_FILE (for --password-file). Run as root, it runs as
# mysql (DIR's parents open to it, as for start_postgres).
start_mariadb() {
  local dir=$1 port=$2
  mkdir -p "$dir"
  [ "$(id -u)" != 0 ] || chown mysql "$dir"
  as_db mysql mariadb-install-db --datadir="$dir/data" --auth-root-authentication-method=normal \
    >"$dir/install.log" 2>&1 || die "mariadb-install-db failed: $(tail -3 "$dir/install.log")"
  as_db mysql mariadbd --no-defaults --datadir="$dir/data" --socket="$dir/sock" \
    --port="$port" --bind-address=127.0.0.1 --skip-log-bin --pid-file="$dir/pid" \
    --log-error="$dir/log" </dev/null >/dev/null 2>&1 &
  wait_until 30 "MariaDB" mariadb --no-defaults -S "$dir/sock" -uroot -e 'select 1'
  SERVER_PIDS+=("$(cat "$dir/pid")") # mariadbd's own, not runuser's (which does not pass SIGTERM on)
  mariadb --no-defaults -S "$dir/sock" -uroot -e \
    "CREATE DATABASE dlock; CREATE USER dlock@'127.0.0.1' IDENTIFIED BY 'bench'; GRANT ALL ON dlock.* TO dlock@'127.0.0.1'"
  MYSQL_PASSWORD_FILE=$dir/password
  printf 'bench\n' >"$MYSQL_PASSWORD_FILE"
  MYSQL_URL=mysql://dlock@127.0.0.1:$port/dlock
}

# have_zookeeper: whether this dlock has the zk:// store and a ZooKeeper server (Debian's
# zookeeper package and java) is here.
have_zookeeper() {
  "$DLOCK_BIN" --version 2>&1 | grep -q 'ZooKeeper C client [0-9]' && command -v java >/dev/null &&
    [ -e /usr/share/java/zookeeper.jar ]
}

# start_zookeeper DIR PORT [TICK_MS]: a standalone ZooKeeper on 127.0.0.1:PORT, its data and log
# in DIR, tickTime TICK_MS (default 2000, Debian's: sessions of 2 to 20 ticks); returns once it
# answers ruok. Sets ZK_URL (the chroot /dlock-bench).
start_zookeeper() {
  local dir=$1 port=$2 tick=${3:-2000} classpath="" jar
  mkdir -p "$dir"
  printf '%s\n' "tickTime=$tick" "dataDir=$dir/data" "clientPort=$port" clientPortAddress=127.0.0.1 \
    admin.enableServer=false 4lw.commands.whitelist=ruok >"$dir/zoo.cfg"
  for jar in zookeeper zookeeper-jute slf4j-api slf4j-nop netty-handler netty-common netty-transport \
    netty-buffer netty-resolver netty-codec netty-transport-native-epoll netty-transport-native-unix-common \
    metrics-core commons-cli snappy-java; do classpath+=/usr/share/java/$jar.jar:; done
  java -cp "$classpath" -Dzookeeper.admin.enableServer=false org.apache.zookeeper.server.quorum.QuorumPeerMain \
    "$dir/zoo.cfg" >"$dir/log" 2>&1 &
  SERVER_PIDS+=($!)
  wait_until 60 "ZooKeeper" bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && echo ruok >&3 && grep -q imok <&3"
  ZK_URL=zk://127.0.0.1:$port/dlock-bench
}

# stop_servers: SIGTERM for every server started here (SIGCONT first: a stopped one), and an
# immediate stop of PostgreSQL (pg_ctl's server is not our child).
stop_servers() {
  local pid
  [ -z "$PG_DATA" ] || as_db postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" stop -m immediate >/dev/null 2>&1
  for pid in "${SERVER_PIDS[@]}"; do
    kill -CONT "$pid" 2>/dev/null
    kill "$pid" 2>/dev/null
  done
  return 0
}

# copy_dlock: copies DLOCK_BIN (and dlock-tls.so beside it) into TMP and sets DLOCK to the copy:
# one fixed binary is measured even if the build directory is rebuilt (or being relinked, which
# is retried) meanwhile.
copy_dlock() {
  local attempt
  for attempt in 1 2 3 4 5; do
    cp "$DLOCK_BIN" "$TMP/dlock" 2>/dev/null && "$TMP/dlock" --version >/dev/null 2>&1 && break
    [ "$attempt" -lt 5 ] || die "could not copy a working $DLOCK_BIN"
    sleep 2
  done
  [ ! -e "$(dirname "$DLOCK_BIN")/dlock-tls.so" ] || cp "$(dirname "$DLOCK_BIN")/dlock-tls.so" "$TMP/"
  DLOCK=$TMP/dlock
}

# build_helper: compiles bench/helper.c (static when it can) into HELPER.
build_helper() {
  HELPER=$TMP/helper
  cc -O2 -static -o "$HELPER" "$BENCH_DIR/helper.c" 2>/dev/null || cc -O2 -o "$HELPER" "$BENCH_DIR/helper.c" ||
    die "could not compile bench/helper.c"
}

# start_every_store DIR [ZK_TICK_MS]: the servers of every store this dlock speaks, on free
# loopback ports, data under DIR: redis-server (REDIS_PORT), PostgreSQL (PG_PORT), MariaDB and
# ZooKeeper when this dlock has them (MYSQL_URL, ZK_URL: empty when not), and etcd.
start_every_store() {
  local dir=$1 tick=${2:-2000}
  read -r REDIS_PORT PG_PORT MARIADB_PORT ETCD_PORT ETCD_PEER_PORT ZK_PORT < <(free_ports 6)
  start_redis "$dir" "$REDIS_PORT"
  start_postgres "$dir/pg" "$PG_PORT"
  MYSQL_URL=""
  if have_mariadb; then start_mariadb "$dir/mariadb" "$MARIADB_PORT"; fi
  ZK_URL=""
  if have_zookeeper; then start_zookeeper "$dir/zk" "$ZK_PORT" "$tick"; fi
  start_etcd "$dir" "$ETCD_PORT" "$ETCD_PEER_PORT"
}
