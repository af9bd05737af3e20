#!/usr/bin/env bash
# Benchmarks dlock's coordination commands on one local redis-server, in one run: how soon
# `dlock wait` returns after a release (one waiter and 8), next to flock(1) (`flock -s FILE
# true` waiting for an exclusive holder); how close together the parties of `dlock barrier`
# return (5 and 20 parties); how soon `dlock latch --wait` returns after the last of 12
# `--down`; and how many commands one idle `dlock wait` sends per minute. One table at the end.
#
# Usage: bench/coordinate.sh [--quick] [--no-deps]
#   --quick     10 rounds of each instead of 30, and a 30 s idle window instead of 120 s
#   --no-deps   do not run packaging/install-deps.sh bench first
# Environment: DLOCK_BIN (default: build/src/dlock of this repository), TMPDIR.
#
# Every holder (dlock run or flock) runs `head -c1 FIFO` and lets go when the benchmark writes
# to the FIFO, so both tools are released the same way; each time is taken in python3 with
# time.perf_counter() from that write (or the spawn of the last party / count-down) to the
# waiter's exit, seen by a thread blocked in waitpid. It starts one redis-server on a free
# 127.0.0.1 port (no persistence) and stops it on exit. No traffic leaves 127.0.0.1.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
DLOCK_BIN=${DLOCK_BIN:-$REPO/build/src/dlock}

usage() { sed -n '2,17s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

ROUNDS=30 IDLE=120 MODE=full deps=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) ROUNDS=10 IDLE=30 MODE=quick ;;
    --no-deps) deps=0 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 64 ;;
  esac
  shift
done

# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
need_tools "$deps" redis-server redis-cli flock python3
[ -x "$DLOCK_BIN" ] || die "no dlock binary at $DLOCK_BIN (cmake --build build -j2, or set DLOCK_BIN)"
"$DLOCK_BIN" latch --help >/dev/null 2>&1 || die "$DLOCK_BIN has no latch (an older build?)"

bench_tmpdir coordinate
cleanup() {
  set +e
  stop_servers
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT

copy_dlock
REDIS_PORT=$(free_ports 1)
start_redis "$TMP" "$REDIS_PORT"
unset DLOCK_URL DLOCK_PREFIX DLOCK_PASSWORD DLOCK_CONFIG
export DLOCK_SYSTEM_CONFIG=/nonexistent XDG_CONFIG_HOME=/nonexistent # no config file applies

echo "dlock coordination benchmark ($MODE) - $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -sr), $(nproc) CPUs"
echo "  dlock: $("$TMP/dlock" --version 2>&1 | head -1 | sed 's/; TLS:.*$/)/')"
echo "  redis: $(redis-server --version | awk '{print $3}') on 127.0.0.1:$REDIS_PORT; flock: $(flock --version 2>&1 | head -1)"
echo "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$TMP" "$REDIS_PORT" "$ROUNDS" "$IDLE" <<'EOF'
import os, subprocess, sys, threading, time

tmp, port, rounds, idle = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dlock = [os.path.join(tmp, "dlock"), "-u", "redis://127.0.0.1:%s" % port]
devnull = subprocess.DEVNULL

def rcli(*args):
    return subprocess.run(["redis-cli", "-p", port] + list(args), capture_output=True, text=True).stdout.strip()

def until(check, limit=10):
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("bench: timed out waiting")
        time.sleep(0.002)

def spawn(argv):
    """Starts argv; returns (process, box): box[0] is set to perf_counter() when it exits."""
    proc = subprocess.Popen(argv, stdout=devnull, stderr=devnull)
    box = [None, None, proc]
    def reap():
        status = proc.wait()
        box[0] = time.perf_counter()
        box[1] = status
    thread = threading.Thread(target=reap, daemon=True)
    thread.start()
    return thread, box

def pct(values, p):
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k); hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)

def ms(values):
    return "%.1f / %.1f" % (pct(values, 50) * 1000, pct(values, 95) * 1000)

def release_latency(tool, waiters, rnd):
    """A holder that lets go when its FIFO is written; waiters; the time from the write to the
    last waiter's exit."""
    fifo = os.path.join(tmp, "go-%s-%d-%d" % (tool, waiters, rnd))
    os.mkfifo(fifo)
    key, lockfile = "bench-wait-%d-%d" % (waiters, rnd), os.path.join(tmp, "wait.lock")
    hold = ["head", "-c1", fifo]
    if tool == "dlock":
        holder = subprocess.Popen(dlock + ["run", "-k", key, "--"] + hold, stdout=devnull)
        until(lambda: rcli("exists", "dlock:{%s}" % key) == "1")
        waiter = dlock + ["wait", "-k", key, "-w", "60s"]
        registered = lambda: rcli("zcard", "dlock:{%s}:watchers" % key) == str(waiters)
    else:
        holder = subprocess.Popen(["flock", "-x", lockfile] + hold, stdout=devnull)
        time.sleep(0.05)
        waiter = ["flock", "-s", "-w", "60", lockfile, "true"]
        registered = None
    runs = [spawn(waiter) for _ in range(waiters)]
    if registered:
        until(registered)
    else:
        time.sleep(0.3) # flock has no registry to look at: give the waiters time to block
    with open(fifo, "w") as f:
        t0 = time.perf_counter()
        f.write("x")
    for thread, _ in runs:
        thread.join(60)
    holder.wait()
    if any(box[1] != 0 for _, box in runs):
        raise SystemExit("bench: a %s waiter failed" % tool)
    return max(box[0] for _, box in runs) - t0

def barrier_round(parties, rnd):
    key = "bench-barrier-%d" % parties
    runs, t_last = [], 0
    for i in range(parties):
        t_last = time.perf_counter()
        runs.append(spawn(dlock + ["barrier", "-k", key, "--parties", str(parties), "-w", "60s"]))
    for thread, _ in runs:
        thread.join(60)
    if any(box[1] != 0 for _, box in runs):
        raise SystemExit("bench: a barrier party failed")
    ends = [box[0] for _, box in runs]
    return max(ends) - min(ends), max(ends) - t_last

def latch_round(rnd):
    key = "bench-latch-%d" % rnd
    subprocess.run(dlock + ["latch", "-k", key, "--count", "12"], check=True)
    waiters = [spawn(dlock + ["latch", "-k", key, "--wait", "60s"]) for _ in range(3)]
    until(lambda: rcli("zcard", "dlock:{%s}:latch:waiters" % key) == "3")
    downs = []
    for i in range(12):
        t_last = time.perf_counter()
        downs.append(spawn(dlock + ["latch", "-k", key, "--down"]))
    for thread, _ in downs + waiters:
        thread.join(60)
    if any(box[1] != 0 for _, box in downs + waiters):
        raise SystemExit("bench: a latch process failed")
    last_down = max(box[0] for _, box in downs)
    return max(box[0] for _, box in waiters) - last_down, max(box[0] for _, box in waiters) - t_last

results = {}
for name, tool, n in [("dlock wait, 1 waiter", "dlock", 1), ("flock -s, 1 waiter", "flock", 1),
                      ("dlock wait, 8 waiters", "dlock", 8), ("flock -s, 8 waiters", "flock", 8)]:
    results[name] = [release_latency(tool, n, r) for r in range(rounds)]
    print("  %-24s release to last waiter's exit, ms p50 / p95: %s" % (name, ms(results[name])), flush=True)
barrier = {n: [barrier_round(n, r) for r in range(rounds)] for n in (5, 20)}
for n in (5, 20):
    print("  barrier of %-2d: spread %s ms, last start to last exit %s ms" % (
        n, ms([b[0] for b in barrier[n]]), ms([b[1] for b in barrier[n]])), flush=True)
latch = [latch_round(r) for r in range(rounds)]
print("  latch of 12, 3 waiters: last --down's start to last waiter's exit %s ms" % ms([l[1] for l in latch]), flush=True)

# One idle `dlock wait` on a lock held without renewals (acquire --ttl 10m): what it sends.
token = subprocess.run(dlock + ["acquire", "-k", "bench-idle", "-t", "10m"], capture_output=True,
                       text=True, check=True).stdout.strip()
watcher = subprocess.Popen(dlock + ["wait", "-k", "bench-idle"], stdout=devnull)
until(lambda: rcli("zcard", "dlock:{bench-idle}:watchers") == "1")
rcli("config", "resetstat")
time.sleep(idle)
stats = rcli("info", "commandstats")
sent = sum(int(line.split(":calls=")[1].split(",")[0]) for line in stats.splitlines()
           if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_blpop:")))
watcher.terminate(); watcher.wait()
subprocess.run(dlock + ["release", "-k", "bench-idle", "--token", token], check=True)
print("  idle dlock wait: %d scripts and BLPOPs in %d s" % (sent, idle))

print()
print("| measure (%d rounds) | p50 ms | p95 ms |" % rounds)
print("|---|---|---|")
for name in results:
    print("| release to the last waiter's exit: %s | %.1f | %.1f |" % (name, pct(results[name], 50) * 1000, pct(results[name], 95) * 1000))
for n in (5, 20):
    print("| barrier of %d: first to last party's exit | %.1f | %.1f |" % (n, pct([b[0] for b in barrier[n]], 50) * 1000, pct([b[0] for b in barrier[n]], 95) * 1000))
    print("| barrier of %d: last party's start to last exit | %.1f | %.1f |" % (n, pct([b[1] for b in barrier[n]], 50) * 1000, pct([b[1] for b in barrier[n]], 95) * 1000))
print("| latch of 12: last --down's start to the last of 3 waiters' exit | %.1f | %.1f |" % (pct([l[1] for l in latch], 50) * 1000, pct([l[1] for l in latch], 95) * 1000))
print("| idle `dlock wait`: scripts + BLPOPs per minute | %.1f | |" % (sent * 60.0 / idle))
EOF
