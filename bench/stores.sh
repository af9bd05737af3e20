#!/usr/bin/env bash
# Benchmarks dlock on each lock store it speaks, side by side with flock(1) and etcdctl lock, in
# one run: Redis, PostgreSQL, (when this dlock has the mysql:// store) MariaDB, file://, etcd and
# (zk://) ZooKeeper.
#
# Usage: bench/stores.sh [--quick] [--no-deps] [--no-kinds] [--out DIR] [--only ROWS]
#   --quick     smaller counts (about 2-3 minutes instead of about 6-9)
#   --no-deps   do not run packaging/install-deps.sh bench first
#   --no-kinds  no "--limit 3" and "--shared" row per store (exclusive locks only)
#   --out DIR   keep the raw data (hyperfine JSON, stamps, results.json) in DIR
#   --only ROWS measure only these rows, comma-separated: "dlock file,flock" (servers still start)
# Environment: DLOCK_BIN (default: build/src/dlock of this repository), TMPDIR.
#
# It starts its own servers, each with its packaged defaults except where said, on free loopback
# ports with data in a temporary directory, and stops them by pid on exit: redis-server (no
# persistence), PostgreSQL (initdb, trust on loopback), MariaDB (mariadb-install-db, binary
# log off) and a single-node etcd. Run as root, the database servers run as their own users
# (postgres, mysql). No traffic leaves 127.0.0.1.
#
# Sections: 1 uncontended cycle, 2 contention (8 workers), 3 hand-over latency, 4 peak RSS; then
# one table with a row per store. Each store also has a "--limit 3" and a "--shared" row (on keys
# of their own) in sections 1, 2 and 4: the cost of a slot or a reader against the exclusive
# lock's; hand-over (section 3) does not apply to them, since its three workers never wait.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
DLOCK_BIN=${DLOCK_BIN:-$REPO/build/src/dlock}

usage() { sed -n '5,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

quick=0 deps=1 kinds=1 out="" only=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --no-deps) deps=0 ;;
    --no-kinds) kinds=0 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --only) only=${2:?--only needs row names}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 64 ;;
  esac
  shift
done

if [ "$quick" = 1 ]; then
  MODE=quick HF_RUNS=20 CONT_ROUNDS=1 CONT_CYCLES=4 HANDOVERS=30 RSS_RUNS=3
else
  MODE=full HF_RUNS=100 CONT_ROUNDS=3 CONT_CYCLES=8 HANDOVERS=120 RSS_RUNS=10
fi
WORKERS=8          # section 2: workers on one lock
HO_WORKERS=3       # section 3: one holder and (nearly always) two waiters
HO_HOLD_MS=100     # section 3: how long the command holds the lock, so the waiters are blocked
HO_PAUSE_MS=40     # section 3: pause of each worker between its lock processes
STEP_LIMIT=240     # seconds: upper bound of any one measured step

# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

# ------------------------------------------------------------------------------------ dependencies
need_tools "$deps" hyperfine redis-server redis-cli etcd etcdctl flock python3 cc timeout
[ -x /usr/bin/time ] || die "GNU time (/usr/bin/time) is missing (packaging/install-deps.sh bench)"
find_pg_bin
[ -x "$DLOCK_BIN" ] || die "no dlock binary at $DLOCK_BIN (cmake --build build -j2, or set DLOCK_BIN)"

# --------------------------------------------------------------------------------- private servers
bench_tmpdir stores
chmod 755 "$TMP" # the database servers' own users reach their directories in here
RES=${out:+$out/results.json}
RES=${RES:-$TMP/results.json}
[ -z "$out" ] || mkdir -p "$out"
cleanup() {
  set +e
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null; done
  stop_servers
  wait 2>/dev/null
  [ -z "$out" ] || cp "$TMP"/*.json "$TMP"/handover-*.log "$out"/ 2>/dev/null
  rm -rf "$TMP"
  [[ ${FILE_DIR:-} != /dev/shm/dlock-bench-file.* ]] || rm -rf "$FILE_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'say "bench: stopped by SIGTERM" >&2; exit 143' TERM

start_every_store "$TMP"

copy_dlock
unset DLOCK_URL DLOCK_PREFIX DLOCK_PASSWORD DLOCK_CONFIG
export DLOCK_CONFIG='' # no config file of this machine's

build_helper
KIND_TOOLS=()
analyze() { python3 "$BENCH_DIR/analyze.py" "$1" "$RES" "${@:2}"; }

# The tools: NAME and the lock command's prefix (the command follows it), one per line. The same
# key or file for every section: each section's last process has let go before the next starts.
TOOLS=("dlock Redis" "dlock PostgreSQL")
declare -A PREFIX=(
  ["dlock Redis"]="$(q "$DLOCK") -u redis://127.0.0.1:$REDIS_PORT run -k bench-stores --"
  ["dlock PostgreSQL"]="$(q "$DLOCK") -u $PG_URL run -k bench-stores --"
  ["flock"]="flock $(q "$TMP/bench.lock")"
  ["etcdctl lock"]="etcdctl --endpoints=$ETCD_URL lock bench-stores"
)
if [ -n "$MYSQL_URL" ]; then
  TOOLS+=("dlock MariaDB")
  PREFIX["dlock MariaDB"]="$(q "$DLOCK") -u $MYSQL_URL --password-file $(q "$MYSQL_PASSWORD_FILE") run -k bench-stores --"
fi
# file://: a directory on tmpfs when there is one, as /run/lock is (the fencing counter's
# fdatasync then costs nothing; on a disk it is a flush per acquisition).
FILE_DIR=$TMP/file-locks
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  FILE_DIR=$(mktemp -d /dev/shm/dlock-bench-file.XXXXXX)
fi
TOOLS+=("dlock file")
PREFIX["dlock file"]="$(q "$DLOCK") -u file://$FILE_DIR run -k bench-stores --"
if ! "$DLOCK" --version 2>&1 | grep -qi 'libcurl not'; then
  # etcd:// (the JSON gateway over libcurl): the key dlock:bench-stores/<lease>, beside
  # etcdctl's bench-stores/<lease> (another lock, so the rows do not contend).
  TOOLS+=("dlock etcd")
  PREFIX["dlock etcd"]="$(q "$DLOCK") -u etcd://127.0.0.1:$ETCD_PORT run -k bench-stores --"
fi
if [ -n "$ZK_URL" ]; then
  TOOLS+=("dlock ZooKeeper") # a 30 s session (--ttl's default: within tickTime 2 s's 4-40 s)
  PREFIX["dlock ZooKeeper"]="$(q "$DLOCK") -u $ZK_URL run -k bench-stores --"
fi
TOOLS+=("flock" "etcdctl lock")
if [ "$kinds" = 1 ]; then
  # Every store's --limit 3 and --shared rows, where the store has the kind (exit 64 otherwise).
  for tool in "${TOOLS[@]}"; do
    [[ $tool == "dlock "* ]] || continue
    for kind in "--limit 3" "--shared"; do
      key=bench-${kind#--}
      key=${key%% *}
      row="${PREFIX[$tool]/run -k bench-stores --/run -k $key $kind --}"
      if eval "$row true" >/dev/null 2>&1; then
        KIND_TOOLS+=("$tool $kind")
        PREFIX["$tool $kind"]=$row
      else
        say "  no '$tool $kind' row: that store refuses the kind"
      fi
    done
  done
  PREFIX["flock -s"]="flock -s $(q "$TMP/bench-shared.lock")"
  TOOLS+=("${KIND_TOOLS[@]}" "flock -s")
fi
if [ -n "$only" ]; then
  wanted=() missing=""
  IFS=, read -r -a rows <<<"$only"
  for row in "${rows[@]}"; do
    [ -n "${PREFIX[$row]+x}" ] || missing+=" '$row'"
  done
  [ -z "$missing" ] || die "--only: no row$missing (rows: $(printf '%s, ' "${TOOLS[@]}" | sed 's/, $//'))"
  for tool in "${TOOLS[@]}"; do
    [[ ",$only," == *",$tool,"* ]] && wanted+=("$tool")
  done
  TOOLS=("${wanted[@]}")
fi
prefix_words() { eval "WORDS=(${PREFIX[$1]})"; } # TOOL: its prefix as an array in WORDS

say "dlock stores benchmark ($MODE) - $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -sr), $(nproc) CPUs"
say "  dlock:      $DLOCK_BIN ($("$DLOCK" --version 2>&1 | head -1)), copied to the temporary directory"
say "  Redis:      $(redis-server --version | awk '{print $3}'), 127.0.0.1:$REDIS_PORT, --save '' --appendonly no"
say "  PostgreSQL: $("$PG_BIN/postgres" --version | awk '{print $3}'), 127.0.0.1:$PG_PORT, packaged defaults (fsync on: each acquisition's fencing upsert commits)"
if [ -n "$MYSQL_URL" ]; then
  say "  MariaDB:    $(mariadbd --version | awk '{print $3}'), 127.0.0.1:$MARIADB_PORT, packaged defaults, binary log off"
else
  say "  MariaDB:    no row (this dlock has no mysql:// store, or mariadbd is not installed)"
fi
if [ -n "$ZK_URL" ]; then
  say "  ZooKeeper:  $(sed -n 's/.*ZooKeeper C client \([0-9.]*\).*/server 3.8, C client \1/p' <<<"$("$DLOCK" --version 2>&1)"), standalone, 127.0.0.1:$ZK_PORT, tickTime 2000 (Debian's default)"
else
  say "  ZooKeeper:  no row (this dlock has no zk:// store, or java / the zookeeper package is missing)"
fi
say "  etcd:       $(etcd --version | head -1 | awk '{print $3}'), single node, 127.0.0.1:$ETCD_PORT, data in $TMP"
say "  file://:    $FILE_DIR ($(findmnt -no FSTYPE --target "$FILE_DIR" 2>/dev/null | head -1)); flock's file: $TMP/bench.lock"
say "  flock:      $(flock --version 2>&1 | head -1); hyperfine $(hyperfine --version | awk '{print $2}')"
say "  every dlock row but file:// connects over TCP to 127.0.0.1; load average at start: $(loadavg)"
analyze load start "$(cut -d' ' -f1 /proc/loadavg)" "$(nproc)"

# ------------------------------------------------------------------------ 1. uncontended cycle
header "1. Uncontended lock cycle: acquire, run true, release (hyperfine -N, $HF_RUNS runs, 5 warm-up)"
hf=()
for tool in "${TOOLS[@]}"; do hf+=(-n "$tool" "${PREFIX[$tool]} true"); done
timeout -k 5 "$STEP_LIMIT" hyperfine -N --warmup 5 --runs "$HF_RUNS" --style basic \
  --export-json "$TMP/uncontended.json" "${hf[@]}" -n "true (no lock: process start)" true \
  >"$TMP/uncontended.log" 2>&1 || { cat "$TMP/uncontended.log"; die "hyperfine failed"; }
analyze uncontended "$TMP/uncontended.json"

# ------------------------------------------------------------------------------- 2. contention
header "2. Contention: $WORKERS workers x $CONT_CYCLES cycles of 'true' on one lock, started together; $CONT_ROUNDS round(s), tools interleaved"
say "  wall time / critical sections; CPU: the workers' processes (lock tool and command) only"
for ((round = 1; round <= CONT_ROUNDS; round++)); do
  for tool in "${TOOLS[@]}"; do
    prefix_words "$tool"
    tag=$(printf '%s' "$tool-$round" | tr -c 'a-zA-Z0-9' '_')
    start=$(($(now_ns) + 500000000)) # all workers sleep until then
    pids=() outs=()
    for ((w = 1; w <= WORKERS; w++)); do
      timeout -k 5 "$STEP_LIMIT" "$HELPER" loop "$start" "$CONT_CYCLES" 0 -- "${WORDS[@]}" true \
        >"$TMP/contend-$tag-$w.out" 2>>"$TMP/contend-$tag.err" &
      pids+=($!)
      outs+=("$TMP/contend-$tag-$w.out")
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
    analyze contention "$tool" "round $round" "$start" "$CONT_CYCLES" 0 "${outs[@]}"
    [ ! -s "$TMP/contend-$tag.err" ] || say "    stderr of $tool: $(head -2 "$TMP/contend-$tag.err")"
  done
done

# -------------------------------------------------------------------------- 3. hand-over latency
header "3. Hand-over latency: next holder's command start - previous holder's command end ($HO_WORKERS workers, ~$HANDOVERS hand-overs)"
say "  The command holds the lock $HO_HOLD_MS ms and each worker pauses $HO_PAUSE_MS ms before its next lock"
say "  process, so the waiters are already blocked (dlock: in the store) when the holder lets go. The"
say "  figure includes the command's exit, the release, waking the waiter, its acquisition (the fencing"
say "  token too) and its fork+exec of the next command up to main()."
per=$(((HANDOVERS + HO_WORKERS - 1) / HO_WORKERS + 3))
for tool in "${TOOLS[@]}"; do
  [[ $tool != *" --limit 3" && $tool != *" --shared" && $tool != "flock -s" ]] || continue # nobody waits here
  prefix_words "$tool"
  tag=$(printf '%s' "$tool" | tr -c 'a-zA-Z0-9' '_')
  start=$(($(now_ns) + 500000000))
  pids=()
  for ((w = 1; w <= HO_WORKERS; w++)); do
    timeout -k 5 "$STEP_LIMIT" "$HELPER" loop "$start" "$per" "$HO_PAUSE_MS" -- "${WORDS[@]}" \
      "$HELPER" stamp "$TMP/handover-$tag.log" "w$w" "$HO_HOLD_MS" \
      >"$TMP/handover-$tag-$w.out" 2>>"$TMP/handover-$tag.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  analyze handover "$tool" "$TMP/handover-$tag.log"
  failed=$(awk '{ s += $2 } END { print s + 0 }' "$TMP"/handover-"$tag"-*.out)
  [ "$failed" = 0 ] || say "    $failed runs of $tool exited non-zero; stderr: $(head -2 "$TMP/handover-$tag.err")"
done

# -------------------------------------------------------------------------------- 4. peak RSS
header "4. Peak RSS of the lock process running true ($RSS_RUNS runs each, /usr/bin/time -f %M)"
for tool in "${TOOLS[@]}"; do
  prefix_words "$tool"
  vals=()
  for ((i = 0; i < RSS_RUNS; i++)); do
    /usr/bin/time -f '%M' -o "$TMP/rss.txt" "${WORDS[@]}" true >/dev/null
    vals+=("$(tail -1 "$TMP/rss.txt")")
  done
  analyze rss "$tool" "${vals[@]}"
done

# --------------------------------------------------------------------------------------- table
analyze load end "$(cut -d' ' -f1 /proc/loadavg)" "$(nproc)"
header "Result ($MODE; load average at the end: $(loadavg))"
analyze stores "${TOOLS[@]}"
