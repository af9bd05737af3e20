# Shared by the benchmarks in bench/ (each sources it after reading its options): printing,
# waiting, free ports, the temporary directory, the private servers they start on 127.0.0.1
# and stop by pid (redis-server, etcd), and the fixed copy of dlock they measure.
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

# stop_servers: SIGTERM for every server started here (SIGCONT first: a stopped one).
stop_servers() {
  local pid
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
