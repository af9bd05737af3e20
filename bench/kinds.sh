#!/usr/bin/env bash
# Benchmarks dlock's lock kinds against each other and against flock(1), in one run on one local
# redis-server: the uncontended cost per section (acquire, run true, release) of the exclusive
# lock, a --limit 3 semaphore and a --shared lock, next to flock -x and flock -s; and the
# throughput of 6 workers contending for one key with each kind. One table at the end.
#
# Usage: bench/kinds.sh [--quick] [--no-deps]
#   --quick     50 uncontended runs per command instead of 200, 10 contended sections per worker
#               instead of 30, 1 contention round instead of 2
#   --no-deps   do not run packaging/install-deps.sh bench first
# Environment: DLOCK_BIN (default: build/src/dlock of this repository, built with
#   cmake --build build -j2 when missing), TMPDIR.
#
# It starts one redis-server on a free 127.0.0.1 port (no persistence, data in a temporary
# directory) and stops it on exit. No traffic leaves 127.0.0.1.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
DLOCK_BIN=${DLOCK_BIN:-$REPO/build/src/dlock}

usage() { sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

quick=0 deps=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --no-deps) deps=0 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 64 ;;
  esac
  shift
done

if [ "$quick" = 1 ]; then
  MODE=quick RUNS=50 SECTIONS=10 ROUNDS=1
else
  MODE=full RUNS=200 SECTIONS=30 ROUNDS=2
fi
WARMUP=5        # uncontended: unmeasured runs per command first
WORKERS=6       # contended: workers on one key, started together
SECTION_MS=20   # contended: each section runs 'sleep 0.020' (the same for every variant)
LIMIT=3         # the semaphore's number of slots
STEP_LIMIT=240  # seconds: upper bound of any one contention step
SECTION_S=$(printf '0.%03d' "$SECTION_MS")

# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

# ------------------------------------------------------------------------------------ dependencies
need_tools "$deps" redis-server redis-cli flock python3 cc timeout sleep
if [ ! -x "$DLOCK_BIN" ]; then
  [ -f "$REPO/build/CMakeCache.txt" ] || die "no dlock binary at $DLOCK_BIN and no build directory (configure with cmake, or set DLOCK_BIN)"
  say "bench: no dlock at $DLOCK_BIN; building it (cmake --build build -j2)"
  cmake --build "$REPO/build" -j2 >/dev/null || die "cmake --build build -j2 failed"
  [ -x "$DLOCK_BIN" ] || die "the build did not produce $DLOCK_BIN"
fi

# --------------------------------------------------------------------------------- private server
bench_tmpdir kinds
cleanup() {
  set +e
  local p
  for p in $(jobs -p); do
    [[ " ${SERVER_PIDS[*]} " == *" $p "* ]] || kill "$p" 2>/dev/null
  done
  stop_servers
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'say "bench: stopped by SIGTERM" >&2; exit 143' TERM

REDIS_PORT=$(free_ports 1)
start_redis "$TMP" "$REDIS_PORT"

copy_dlock
"$DLOCK" run --help 2>&1 | grep -q -- '--limit' || die "$DLOCK_BIN has no --limit (an older build?)"
"$DLOCK" run --help 2>&1 | grep -q -- '--shared' || die "$DLOCK_BIN has no --shared (an older build?)"
unset DLOCK_URL DLOCK_PREFIX DLOCK_PASSWORD
URL=redis://127.0.0.1:$REDIS_PORT

build_helper

# The variants: NAME<TAB>lock prefix (the command follows it). Each has its own key or file.
# Written as shell words; the same prefix is used uncontended (+ true) and contended (+ sleep).
VARIANTS=$TMP/variants.tsv
{
  printf 'dlock exclusive\t%q -u %s run -k bench-kinds-x --\n' "$DLOCK" "$URL"
  printf 'dlock --limit %s\t%q -u %s run -k bench-kinds-limit --limit %s --\n' "$LIMIT" "$DLOCK" "$URL" "$LIMIT"
  printf 'dlock --shared\t%q -u %s run -k bench-kinds-shared -s --\n' "$DLOCK" "$URL"
  printf 'flock -x\tflock -x %q\n' "$TMP/x.lock"
  printf 'flock -s\tflock -s %q\n' "$TMP/s.lock"
  printf 'no lock\t\n'
} >"$VARIANTS"

say "dlock lock kinds benchmark ($MODE) - $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -sr), $(nproc) CPUs"
say "  dlock: $DLOCK_BIN ($("$DLOCK" --version 2>&1 | head -1 | sed 's/; TLS:.*$/)/')), copied to the temporary directory"
say "  redis: $(redis-server --version | awk '{print $3}') on $URL, --save '' --appendonly no"
say "  flock: $(flock --version 2>&1 | head -1); lock files in $TMP"
say "  load average at start: $(loadavg) (other work on this machine skews every figure)"

# ------------------------------------------------------------------------ 1. uncontended cost
header "1. Uncontended: one lock process per section (acquire, run true, release); $RUNS runs each after $WARMUP warm-up, variants interleaved"
say "  timed in python3 with time.perf_counter_ns() around posix_spawn + waitpid"
python3 - "$VARIANTS" "$RUNS" "$WARMUP" "$TMP/uncontended.tsv" <<'EOF'
import os, shlex, sys, time
variants_file, runs, warmup, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
variants = []
for line in open(variants_file):
    name, prefix = line.rstrip("\n").split("\t")
    variants.append((name, shlex.split(prefix) + ["true"]))
actions = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]

def once(argv):
    t0 = time.perf_counter_ns()
    pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    t1 = time.perf_counter_ns()
    return t1 - t0, os.waitstatus_to_exitcode(status)

times = {name: [] for name, _ in variants}
failed = {name: 0 for name, _ in variants}
for _ in range(warmup):
    for name, argv in variants:
        once(argv)
for i in range(runs):
    # rotate the order so no variant always follows the same one
    k = i % len(variants)
    for name, argv in variants[k:] + variants[:k]:
        ns, code = once(argv)
        times[name].append(ns)
        if code != 0:
            failed[name] += 1
with open(out, "w") as f:
    for name, _ in variants:
        f.write("%s\t%d\t%s\n" % (name, failed[name], " ".join(map(str, times[name]))))
EOF
say "  done"

# ------------------------------------------------------------------------------- 2. contention
header "2. Contended: $WORKERS workers x $SECTIONS sections of 'sleep $SECTION_S' on one key, started together; $ROUNDS round(s), variants interleaved"
say "  each worker is bench/helper.c's loop (posix_spawnp + waitpid, one lock process per section);"
say "  wall = last worker's end - common start"
: >"$TMP/contended.tsv"
contend() { # NAME PREFIX ROUND
  local name=$1 prefix=$2 round=$3 tag start w end_max=0 failed=0 pids=() outs=()
  local -a cmd
  eval "cmd=($prefix sleep $SECTION_S)"
  tag=$(printf '%s' "$name" | tr -c 'a-zA-Z0-9' '_')
  start=$(($(now_ns) + 500000000)) # all workers sleep until then
  for ((w = 1; w <= WORKERS; w++)); do
    timeout -k 5 "$STEP_LIMIT" "$HELPER" loop "$start" "$SECTIONS" 0 -- "${cmd[@]}" \
      >"$TMP/contend-$tag-$round-$w.out" 2>>"$TMP/contend-$tag.err" &
    pids+=($!)
    outs+=("$TMP/contend-$tag-$round-$w.out")
  done
  for w in "${pids[@]}"; do wait "$w" || true; done
  for w in "${outs[@]}"; do
    read -r e f _ _ <"$w" || die "$name: a worker printed nothing (timed out after ${STEP_LIMIT}s?)"
    [ "$e" -gt "$end_max" ] && end_max=$e
    failed=$((failed + f))
  done
  printf '%s\t%s\t%s\t%s\n' "$name" "$round" "$((end_max - start))" "$failed" >>"$TMP/contended.tsv"
  say "  round $round  $(printf '%-16s' "$name") $(awk -v n="$((end_max - start))" 'BEGIN { printf "%7.3f s", n / 1e9 }')"
  if [ -s "$TMP/contend-$tag.err" ]; then
    say "    stderr ($(wc -l <"$TMP/contend-$tag.err") lines), first lines:"
    head -3 "$TMP/contend-$tag.err" | sed 's/^/      /'
    : >"$TMP/contend-$tag.err"
  fi
}
for ((round = 1; round <= ROUNDS; round++)); do
  while IFS=$'\t' read -r name prefix; do
    contend "$name" "$prefix" "$round"
  done <"$VARIANTS"
done

# --------------------------------------------------------------------------------------- table
header "Result ($MODE; load average at the end: $(loadavg))"
python3 - "$VARIANTS" "$TMP/uncontended.tsv" "$TMP/contended.tsv" "$WORKERS" "$SECTIONS" "$SECTION_MS" "$LIMIT" "$ROUNDS" "$RUNS" <<'EOF'
import sys
vfile, ufile, cfile = sys.argv[1:4]
workers, sections, section_ms, limit, rounds, runs = map(int, sys.argv[4:10])

def pct(vals, p):
    s = sorted(vals)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)

variants = [line.rstrip("\n").split("\t") for line in open(vfile)]
unc = {}
for line in open(ufile):
    name, failed, times = line.rstrip("\n").split("\t")
    t = [int(x) / 1e6 for x in times.split()]
    unc[name] = (sum(t) / len(t), pct(t, 50), pct(t, 95), int(failed))
con = {}
for line in open(cfile):
    name, rnd, wall_ns, failed = line.rstrip("\n").split("\t")
    walls, fails = con.setdefault(name, ([], [0]))
    walls.append(int(wall_ns) / 1e9)
    fails[0] += int(failed)

# how many sections can run at once, so the least possible wall time (the sleeps alone)
concurrency = {"dlock exclusive": 1, "dlock --limit %d" % limit: limit, "dlock --shared": workers,
               "flock -x": 1, "flock -s": workers, "no lock": workers}
base = {"dlock exclusive": "dlock exclusive", "dlock --limit %d" % limit: "dlock exclusive",
        "dlock --shared": "dlock exclusive", "flock -x": "flock -x", "flock -s": "flock -x"}
total = workers * sections

hdr1 = "%-16s | %-39s | %s" % ("", "uncontended, ms per section (%d runs)" % runs,
                               "contended: %d workers x %d sections of sleep %d ms (mean of %d round%s)"
                               % (workers, sections, section_ms, rounds, "" if rounds == 1 else "s"))
hdr2 = "%-16s | %7s %7s %7s %7s %5s | %8s %9s %10s %8s %8s %5s" % (
    "variant", "mean", "p50", "p95", "d mean", "fail", "wall s", "range s", "sections/s", "x base", "ideal s", "fail")
print(hdr1)
print(hdr2)
print("-" * len(hdr2))
rate = {}
for name, _ in variants:
    walls, fails = con[name]
    rate[name] = total / (sum(walls) / len(walls))
for name, _ in variants:
    mean, p50, p95, ufail = unc[name]
    b = base.get(name)
    d = "%+7.2f" % (mean - unc[b][0]) if b and b != name else "%7s" % "-"
    walls, fails = con[name]
    wall = sum(walls) / len(walls)
    rng = "%.2f-%.2f" % (min(walls), max(walls)) if len(walls) > 1 else "-"
    x = "%8.2f" % (rate[name] / rate[b]) if b and b != name else "%8s" % "-"
    conc = concurrency[name]
    ideal = -(-workers // conc) * sections * section_ms / 1000
    print("%-16s | %7.2f %7.2f %7.2f %s %5d | %8.3f %9s %10.1f %s %8.2f %5d" % (
        name, mean, p50, p95, d, ufail, wall, rng, rate[name], x, ideal, fails[0]))
print()
print("d mean: mean minus the exclusive lock's of the same tool (dlock exclusive, flock -x).")
print("x base: sections/s divided by the exclusive lock's of the same tool.")
print("ideal s: the sleeps alone, with as many sections at once as the kind allows (exclusive 1,")
print("  --limit %d: %d, shared and no lock: all %d); wall - ideal is what locking and process starts cost." % (limit, limit, workers))
print("fail: lock processes that exited non-zero.")
print()
print("Commands (uncontended, then contended):")
for name, prefix in variants:
    print("  %-16s %s" % (name, (prefix + " true").strip()))
    print("  %-16s %s" % ("", (prefix + " sleep %.3f" % (section_ms / 1000)).strip()))
EOF
