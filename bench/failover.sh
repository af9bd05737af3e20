#!/usr/bin/env bash
# Measures leader fail-over with `dlock elect` on each lock store, next to `etcdctl elect`, in one
# run: the time from the old leader's command dead to the new leader's command started, after a
# kill -9 of the leader's dlock and after a clean hand-over (the leader's command exits 0).
#
# Usage: bench/failover.sh [--quick] [--no-deps] [--ttl D] [--rounds N] [--only ROWS] [--out DIR]
#   --quick      5 rounds per store and 3 of etcdctl elect (about 2-3 minutes) instead of 20 and 5
#   --no-deps    do not run packaging/install-deps.sh bench first
#   --ttl D      dlock's --ttl on every store (default 2s)
#   --rounds N   rounds per dlock store (etcdctl elect: at most 5, run at once)
#   --only ROWS  only these rows, comma-separated: "dlock Redis,etcdctl elect" (servers still start)
#   --out DIR    keep the raw data (results.jsonl, each round's start lines and stderr) in DIR
# Environment: DLOCK_BIN (default: build/src/dlock of this repository), TMPDIR.
#
# Each round has three candidates on a key of its own: A leads, B and C join one second apart
# (they wait in the store), A's dlock gets SIGKILL (its guard kills the command); B or C takes
# over: "kill -9 fail-over" is its command's start minus the old command's death (seen through a
# pidfd, watched at real-time priority when run as root). Then that leader's command exits 0 and
# the last candidate takes over: "clean hand-over", from the command's last act to the next one's
# first. Every command is `helper lead` (bench/helper.c), which stamps its start (and its clean
# end) itself.
# etcdctl elect runs no command: its leader is the candidate whose first line of output is read,
# its death that of the etcdctl process; its clean hand-over is SIGTERM (it resigns), timed from
# the signal. Its session's TTL is 60 s (clientv3's default; etcdctl 3.4's elect has no option),
# so its kill -9 rounds run at once, beside the dlock rows, on names of their own.
#
# Servers, as bench/stores.sh starts them (bench/lib.sh), on free loopback ports, data in a
# temporary directory, stopped by pid on exit: redis-server, PostgreSQL, MariaDB (when this dlock
# has mysql://), a single-node etcd, and ZooKeeper (when it has zk://) with tickTime 1000 here
# (sessions from 2 s; Debian's 2000 refuses a 2 s one). file:// is a directory on tmpfs.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
DLOCK_BIN=${DLOCK_BIN:-$REPO/build/src/dlock}

usage() { sed -n '6,12s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

quick=0 deps=1 ttl=2s rounds="" only="" out=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --no-deps) deps=0 ;;
    --ttl) ttl=${2:?--ttl needs a duration}; shift ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --only) only=${2:?--only needs row names}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 64 ;;
  esac
  shift
done
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
if [ "$quick" = 1 ]; then MODE=quick ROUNDS=5 ETCDCTL_ROUNDS=3; else MODE=full ROUNDS=20 ETCDCTL_ROUNDS=5; fi
if [ -n "$rounds" ]; then
  [[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive number"
  ROUNDS=$rounds
  [ "$rounds" -ge "$ETCDCTL_ROUNDS" ] || ETCDCTL_ROUNDS=$rounds
fi
SETTLE=1 # seconds between a candidate's start and the next step (it is waiting in the store by then)
ETCDCTL_TTL=60
need_tools "$deps" redis-server redis-cli etcd etcdctl python3 cc
find_pg_bin
[ -x "$DLOCK_BIN" ] || die "no dlock binary at $DLOCK_BIN (cmake --build build -j2, or set DLOCK_BIN)"
python3 -c 'import os; os.pidfd_open' 2>/dev/null || die "python3 without os.pidfd_open (3.9 and Linux 5.3 needed)"
[[ $ttl =~ ^([1-9][0-9]*)(ms|s|m)$ ]] || die "--ttl: a duration such as 2s, 1500ms or 1m"
case ${BASH_REMATCH[2]} in ms) ttl_ms=${BASH_REMATCH[1]} ;; s) ttl_ms=$((BASH_REMATCH[1] * 1000)) ;; *) ttl_ms=$((BASH_REMATCH[1] * 60000)) ;; esac
[ "$ttl_ms" -ge 1000 ] || die "--ttl: at least 1s (dlock's minimum)"

# --------------------------------------------------------------------------------- private servers
bench_tmpdir failover
chmod 755 "$TMP" # the database servers' own users reach their directories in here
[ -z "$out" ] || mkdir -p "$out"
ETCDCTL_JOB=""
cleanup() {
  set +e
  [ -z "$ETCDCTL_JOB" ] || { kill "$ETCDCTL_JOB" 2>/dev/null; wait "$ETCDCTL_JOB" 2>/dev/null; }
  stop_servers
  wait 2>/dev/null
  [ -z "$out" ] || cp "$TMP"/results*.jsonl "$TMP"/rounds/* "$out"/ 2>/dev/null
  rm -rf "$TMP"
  [[ ${FILE_DIR:-} != /dev/shm/dlock-bench-failover.* ]] || rm -rf "$FILE_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'say "bench: stopped by SIGTERM" >&2; exit 143' TERM

start_every_store "$TMP" 1000
FILE_DIR=$TMP/file-locks
if [ -d /dev/shm ] && [ -w /dev/shm ]; then FILE_DIR=$(mktemp -d /dev/shm/dlock-bench-failover.XXXXXX); fi

copy_dlock
unset DLOCK_URL DLOCK_PREFIX DLOCK_PASSWORD DLOCK_CONFIG
export DLOCK_SYSTEM_CONFIG=/nonexistent XDG_CONFIG_HOME=/nonexistent # no config file applies
build_helper
mkdir "$TMP/rounds"

# `dlock elect`, or before it existed `dlock run --fair` (the same campaign: a FIFO of waiters).
if "$DLOCK" --help 2>&1 | grep -q '^ *elect '; then ELECT=(elect); else ELECT=(run --fair); fi

# The rows: NAME, then its URL options (the dlock rows) in URLOPTS.
ROWS=("dlock Redis" "dlock PostgreSQL")
declare -A URLOPTS=(
  ["dlock Redis"]="-u redis://127.0.0.1:$REDIS_PORT"
  ["dlock PostgreSQL"]="-u $PG_URL"
)
if [ -n "$MYSQL_URL" ]; then
  ROWS+=("dlock MariaDB")
  URLOPTS["dlock MariaDB"]="-u $MYSQL_URL --password-file $(q "$MYSQL_PASSWORD_FILE")"
fi
if ! "$DLOCK" --version 2>&1 | grep -qi 'libcurl not'; then
  ROWS+=("dlock etcd")
  URLOPTS["dlock etcd"]="-u etcd://127.0.0.1:$ETCD_PORT"
fi
if [ -n "$ZK_URL" ]; then
  ROWS+=("dlock ZooKeeper")
  URLOPTS["dlock ZooKeeper"]="-u $ZK_URL"
fi
ROWS+=("dlock file")
URLOPTS["dlock file"]="-u file://$FILE_DIR"
ROWS+=("etcdctl elect")
wanted_row() { # ROW: whether ROW is one of ROWS
  local r
  for r in "${ROWS[@]}"; do [ "$r" != "$1" ] || return 0; done
  return 1
}
if [ -n "$only" ]; then
  wanted=()
  IFS=, read -r -a asked <<<"$only"
  for row in "${asked[@]}"; do
    wanted_row "$row" || die "--only: no row '$row' (rows: $(printf '%s, ' "${ROWS[@]}" | sed 's/, $//'))"
  done
  for row in "${ROWS[@]}"; do [[ ",$only," != *",$row,"* ]] || wanted+=("$row"); done
  ROWS=("${wanted[@]}")
fi

say "dlock fail-over benchmark ($MODE) - $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -sr), $(nproc) CPUs"
say "  dlock:      $DLOCK_BIN ($("$DLOCK" --version 2>&1 | head -1 | sed 's/; TLS:.*$/)/')), as 'dlock ${ELECT[*]}'"
say "  servers:    redis $(redis-server --version | awk '{print $3}'), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')${MYSQL_URL:+, MariaDB $(mariadbd --version | awk '{print $3}')}, etcd $(etcd --version | head -1 | awk '{print $3}')${ZK_URL:+, ZooKeeper (tickTime 1000)}; file:// on $(findmnt -no FSTYPE --target "$FILE_DIR" 2>/dev/null | head -1)"
say "  etcdctl:    $(etcdctl version | head -1 | awk '{print $3}'), elect with its session's default TTL ($ETCDCTL_TTL s)"
say "  rounds:     $ROUNDS per dlock store (one after the other)$(! wanted_row "etcdctl elect" || echo ", $ETCDCTL_ROUNDS of etcdctl elect (at once, beside them)")"
if [ "$(id -u)" = 0 ]; then
  say "  timing:     the commands' own stamps; pidfds watched at real-time priority (root)"
else
  say "  timing:     the commands' own stamps; pidfds watched at normal priority (not root: a kill -9"
  say "              figure is short by this script's scheduling delay, a clean one is not)"
fi
say "  load average at start: $(loadavg)"

RES=$TMP/results.jsonl
rounds() { # ROW TTL-LABEL ROUNDS KIND [OPTIONS] -- TEMPLATE...: failover.py's rounds, into RES
  python3 "$BENCH_DIR/failover.py" rounds "$RES" "$1" "$2" "$3" "$4" "$TMP/rounds" --settle "$SETTLE" "${@:5}"
}

if wanted_row "etcdctl elect"; then
  header "etcdctl elect: $ETCDCTL_ROUNDS rounds at once in the background (a kill -9 waits out its ${ETCDCTL_TTL} s session)"
  RES=$TMP/results-etcdctl.jsonl rounds "etcdctl elect" "${ETCDCTL_TTL} s (default)" "$ETCDCTL_ROUNDS" proclaim \
    --jitter $((ETCDCTL_TTL / 3)) --limit $((ETCDCTL_TTL + 60)) --parallel -- etcdctl --endpoints="$ETCD_URL" elect '{key}' '{id}' >"$TMP/etcdctl.progress" 2>&1 &
  ETCDCTL_JOB=$!
fi

for row in "${ROWS[@]}"; do
  [ "$row" != "etcdctl elect" ] || continue
  header "$row: $ROUNDS rounds, --ttl $ttl"
  opts=()
  eval "opts=(${URLOPTS[$row]})"
  rounds "$row" "--ttl $ttl" "$ROUNDS" command --jitter "$((ttl_ms / 3))e-3" --limit $((ttl_ms / 1000 + 30)) -- \
    "$DLOCK" "${opts[@]}" "${ELECT[@]}" -k '{key}' --ttl "$ttl" -- "$HELPER" lead '{log}' '{id}'
done

if [ -n "$ETCDCTL_JOB" ]; then
  header "etcdctl elect (waiting for its rounds)"
  wait "$ETCDCTL_JOB" || say "  its rounds failed: $(tail -2 "$TMP/etcdctl.progress")"
  ETCDCTL_JOB=""
  cat "$TMP/etcdctl.progress"
  cat "$TMP/results-etcdctl.jsonl" >>"$RES" 2>/dev/null || true
fi

header "Result ($MODE; load average at the end: $(loadavg))"
say "Old leader's command dead -> new leader's command started, in ms."
say "kill -9: of the leader's dlock (etcdctl: of etcdctl); clean: the command exits 0 (etcdctl: SIGTERM, it resigns)."
say ""
python3 "$BENCH_DIR/failover.py" table "$RES"
say ""
say "What ends a killed leader's term: Redis, etcd: its lease expires (what is left of --ttl, renewed every"
say "third); ZooKeeper: its session expires (--ttl, checked each tick); PostgreSQL, MariaDB: the server ends"
say "its session when the kernel closes the dead dlock's connection; file://: the kernel drops the flock"
say "when the last process holding it (the command, killed by dlock's guard) exits; etcdctl elect: its"
say "session's lease expires (what is left of 60 s, renewed every 20 s)."
