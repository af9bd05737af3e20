#!/usr/bin/env bash
# Benchmarks dlock against flock(1) and etcdctl lock on this machine.
#
# Usage: bench/run.sh [--quick] [--no-deps] [--out DIR]
#   --quick     smaller counts (about 1-2 minutes instead of about 5-8)
#   --no-deps   do not run packaging/install-deps.sh bench first
#   --out DIR   keep the raw data (hyperfine JSON, stamps, MONITOR captures, results.json) in DIR
# Environment: DLOCK_BIN (default: build/src/dlock of this repository), TMPDIR,
#   BENCH_TIME_LIMIT (seconds after which the whole run is stopped; default 900, 300 with --quick).
#
# It starts its own redis-server (unix socket and a free loopback port, no persistence) and its own
# single-node etcd (loopback only, data directory in the temporary directory, so etcd fsyncs to
# whatever disk holds TMPDIR) and stops both on exit. No traffic leaves 127.0.0.1.
#
# Sections: 1 uncontended cycle, 2 contention (8 workers), 3 hand-over latency, 4 Redis commands per
# critical section and per 5 s waiter, 5 many waiters on one key, 6 peak RSS; then a summary table.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
DLOCK_BIN=${DLOCK_BIN:-$REPO/build/src/dlock}

usage() { sed -n '2,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

quick=0 deps=1 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --no-deps) deps=0 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 64 ;;
  esac
  shift
done

if [ "$quick" = 1 ]; then
  MODE=quick
  HF_RUNS=20          # section 1: hyperfine runs per command
  CONT_ROUNDS=2       # section 2: rounds, each tool once per round (interleaved against load drift)
  CONT_CYCLES=4       # section 2: cycles per worker (8 workers) per round
  HANDOVERS=50        # section 3: hand-overs wanted per tool
  CMD_CYCLES=8        # section 4: cycles per worker (8 workers) under MONITOR
  WAITERS=(10 100 300)
  RSS_RUNS=5
else
  MODE=full
  HF_RUNS=100
  CONT_ROUNDS=5
  CONT_CYCLES=8
  HANDOVERS=200
  CMD_CYCLES=25
  WAITERS=(10 100 1000)
  RSS_RUNS=10
fi
WORKERS=8        # section 2 and 4
HO_WORKERS=3     # section 3: one holder and (nearly always) two waiters
QUIET_HOLD_MS=100  # section 3b: how long the command holds the lock
QUIET_PAUSE_MS=40  # section 3b: pause of each worker between its lock processes
BATCH=50         # section 5: waiters started per batch
STEP_LIMIT=240   # seconds: upper bound of any one measured step

# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

# ------------------------------------------------------------------------------------ dependencies
if [ "$deps" = 1 ]; then
  "$REPO/packaging/install-deps.sh" bench
fi
if [ ! -x /usr/bin/time ]; then # GNU time, for peak RSS (section 6)
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends time >/dev/null ||
    say "bench: could not install the 'time' package; section 6 falls back to /proc VmHWM"
fi
need_tools 0 hyperfine etcd etcdctl redis-server redis-cli flock python3 cc timeout
[ -x "$DLOCK_BIN" ] || die "no dlock binary at $DLOCK_BIN (build it, or set DLOCK_BIN)"

# --------------------------------------------------------------------------------- private servers
bench_tmpdir run
RES=$TMP/results.json
SOCK=$TMP/redis.sock
MON_PID=""
cleanup() {
  set +e
  [ -n "$MON_PID" ] && kill "$MON_PID" 2>/dev/null
  local p
  for p in $(jobs -p); do
    [[ " ${SERVER_PIDS[*]} " == *" $p "* ]] || kill "$p" 2>/dev/null
  done
  stop_servers
  wait 2>/dev/null
  if [ -n "$out" ]; then
    mkdir -p "$out" && cp -r "$TMP"/. "$out"/ && rm -f "$out/redis.sock" && say "raw data kept in $out"
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'say "bench: stopped by SIGTERM (time limit of ${TIME_LIMIT}s?)" >&2; exit 143' TERM
# Watchdog: the whole run is bounded even if a lock tool hangs.
TIME_LIMIT=${BENCH_TIME_LIMIT:-$([ "$quick" = 1 ] && echo 300 || echo 900)}
python3 -c 'import os, sys, time; time.sleep(float(sys.argv[1])); os.kill(int(sys.argv[2]), 15)' \
  "$TIME_LIMIT" "$$" &

# Redis needs a file descriptor per client (section 5 connects 1000+ of them).
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

read -r REDIS_PORT ETCD_PORT ETCD_PEER_PORT < <(free_ports 3)

rcli() { redis-cli -s "$SOCK" "$@"; }
start_redis "$TMP" "$REDIS_PORT" --unixsocket "$SOCK" --unixsocketperm 700 --maxclients 10000
start_etcd "$TMP" "$ETCD_PORT" "$ETCD_PEER_PORT"

copy_dlock
DLOCK_SRC=$DLOCK_BIN
DLOCK_BIN=$DLOCK

export DLOCK_URL=unix://$SOCK
unset DLOCK_PREFIX DLOCK_PASSWORD

build_helper
analyze() { python3 "$BENCH_DIR/analyze.py" "$1" "$RES" "${@:2}"; }

monitor_start() { # FILE (redis-cli itself in the background, not a subshell, so MON_PID is its pid)
  redis-cli -s "$SOCK" monitor >"$1" 2>/dev/null &
  MON_PID=$!
  wait_until 5 "MONITOR" grep -q '^OK' "$1"
}
monitor_stop() {
  sleep 0.3 # let Redis flush the last lines
  kill "$MON_PID" 2>/dev/null || true
  wait "$MON_PID" 2>/dev/null || true
  MON_PID=""
}
redis_cpu() { # used_cpu_sys + used_cpu_user of the Redis process, in seconds
  rcli info cpu | tr -d '\r' | awk -F: '$1 == "used_cpu_sys" || $1 == "used_cpu_user" { s += $2 } END { printf "%.6f", s }'
}
info_field() { # SECTION FIELD
  rcli info "$1" | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'
}
lock_held() { [ "$(rcli exists "dlock:{$1}")" = 1 ]; } # KEY
server_cpu() { # CPU seconds used so far by redis-server and etcd together (from /proc, 1/CLK_TCK steps)
  local tck
  tck=$(getconf CLK_TCK)
  cat "/proc/$REDIS_PID/stat" "/proc/$ETCD_PID/stat" 2>/dev/null |
    awk -v t="$tck" '{ sub(/^.*\) /, ""); s += $12 + $13 } END { printf "%.2f", s / t }'
}

say "dlock benchmark ($MODE) - $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -sr), $(nproc) CPUs"
say "  dlock:   $DLOCK_SRC ($("$DLOCK_BIN" --version 2>&1 | head -1)), copied to the temporary directory"
say "  redis:   $(redis-server --version | awk '{print $3}') on unix socket and 127.0.0.1:$REDIS_PORT," \
  "--save '' --appendonly no --maxclients $(rcli config get maxclients | tail -1)"
say "  etcd:    $(etcd --version | head -1 | awk '{print $3}'), single node on 127.0.0.1:$ETCD_PORT, data in $TMP"
say "  flock:   $(flock --version 2>&1 | head -1); hyperfine $(hyperfine --version | awk '{print $2}');" \
  "open files limit $(ulimit -n)"
say "  dlock connects with DLOCK_URL=unix://…/redis.sock unless a row says tcp"
say "  load average at start: $(loadavg) (other work on this machine skews every figure)"
analyze load start "$(cut -d' ' -f1 /proc/loadavg)" "$(nproc)"

# Calibration: which EVALSHA digest is which script (acquire, release, renew), from MONITOR.
monitor_start "$TMP/calibrate.mon"
"$DLOCK_BIN" run -k bench-cal1 -- true                # loads the scripts
"$DLOCK_BIN" run -k bench-cal2 -- true                # acquire, then release
"$DLOCK_BIN" run -k bench-cal3 -t 1s -- sleep 0.8     # renews at least once
monitor_stop
read -r ACQ_SHA REL_SHA RENEW_SHA < <(python3 - "$TMP/calibrate.mon" <<'EOF'
import re, sys
shas = {"cal2": [], "cal3": []}
for line in open(sys.argv[1], errors="replace"):
    if "[0 lua]" in line or '"EVALSHA"' not in line:
        continue
    toks = re.findall(r'"((?:[^"\\]|\\.)*)"', line)
    for k in shas:
        if any(t.endswith("{bench-%s}" % k) for t in toks):
            shas[k].append(toks[1])
acq, rel = shas["cal2"][0], shas["cal2"][-1]
renew = next((s for s in shas["cal3"] if s not in (acq, rel)), "none")
print(acq, rel, renew)
EOF
) || die "could not identify the scripts from MONITOR"
say "  scripts: acquire ${ACQ_SHA:0:12}…, release ${REL_SHA:0:12}…, renew ${RENEW_SHA:0:12}…"

# ------------------------------------------------------------------------ 1. uncontended cycle
header "1. Uncontended lock cycle: acquire, run true, release (hyperfine -N, $HF_RUNS runs, 5 warm-up)"
timeout -k 5 "$STEP_LIMIT" hyperfine -N --warmup 5 --runs "$HF_RUNS" --style basic --export-json "$TMP/uncontended.json" \
  -n "dlock run -k K -- true" "$(q "$DLOCK_BIN") run -k bench-uncontended -- true" \
  -n "dlock (tcp 127.0.0.1) run -- true" "$(q "$DLOCK_BIN") -u redis://127.0.0.1:$REDIS_PORT run -k bench-uncontended -- true" \
  -n "flock FILE true" "flock $(q "$TMP/uncontended.lock") true" \
  -n "etcdctl lock K true" "etcdctl --endpoints=$ETCD_URL lock bench-uncontended true" \
  -n "dlock run --help (start-up and options, no store)" "$(q "$DLOCK_BIN") run --help" \
  -n "flock --version (start-up only)" "flock --version" \
  -n "true (no lock: process start)" "true" \
  >"$TMP/uncontended.log" 2>&1 || { cat "$TMP/uncontended.log"; die "hyperfine failed"; }
analyze uncontended "$TMP/uncontended.json"

# ------------------------------------------------------------------------------- 2. contention
contend() { # TOOL LABEL CYCLES COMMAND...: $WORKERS workers started together, each runs COMMAND CYCLES times
  local tool=$1 label=$2 cycles=$3 tag start w cpu0 cpu1
  shift 3
  tag=$(printf '%s' "$tool$label" | tr -c 'a-zA-Z0-9' '_')
  cpu0=$(server_cpu)
  start=$(($(now_ns) + 500000000)) # all workers sleep until then
  local pids=() outs=()
  for ((w = 1; w <= WORKERS; w++)); do
    timeout -k 5 "$STEP_LIMIT" "$HELPER" loop "$start" "$cycles" 0 -- "$@" \
      >"$TMP/contend-$tag-$w.out" 2>>"$TMP/contend-$tag.err" &
    pids+=($!)
    outs+=("$TMP/contend-$tag-$w.out")
  done
  for w in "${pids[@]}"; do wait "$w" || true; done
  cpu1=$(server_cpu)
  analyze contention "$tool" "$label" "$start" "$cycles" "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')" "${outs[@]}"
  if [ -s "$TMP/contend-$tag.err" ]; then
    say "    stderr of $tool ($(wc -l <"$TMP/contend-$tag.err") lines), first lines:"
    head -3 "$TMP/contend-$tag.err" | sed 's/^/      /'
  fi
}
header "2. Contention: $WORKERS workers x $CONT_CYCLES cycles of 'true' on one lock, started together; wall time / ($WORKERS x $CONT_CYCLES); $CONT_ROUNDS rounds, tools interleaved"
say "  CPU each = user+sys of the worker's processes (lock tool and command) / critical sections, and of"
say "  redis-server + etcd (both always running) / critical sections; with 2 CPUs, (clients + servers) / 2"
say "  is the floor of the time per critical section when the step is CPU-bound."
for ((round = 1; round <= CONT_ROUNDS; round++)); do
  contend "no lock (true alone)" "round $round" "$CONT_CYCLES" true
  contend "dlock" "round $round" "$CONT_CYCLES" "$DLOCK_BIN" run -k bench-contend -- true
  contend "flock" "round $round" "$CONT_CYCLES" flock "$TMP/contend.lock" true
  contend "etcdctl lock" "round $round" "$CONT_CYCLES" etcdctl --endpoints="$ETCD_URL" lock bench-contend true
done
analyze contention-ratio "no lock (true alone)" dlock flock "etcdctl lock"

# -------------------------------------------------------------------------- 3. hand-over latency
handover() { # TOOL MONITOR(0|1) HOLD_MS PAUSE_MS LOCK-COMMAND-PREFIX...: $HO_WORKERS workers loop on one lock
  local tool=$1 mon=$2 hold=$3 pause=$4 tag start w per
  shift 4
  tag=$(printf '%s' "$tool" | tr -c 'a-zA-Z0-9' '_')
  per=$(((HANDOVERS + HO_WORKERS - 1) / HO_WORKERS + 3))
  [ "$mon" = 1 ] && monitor_start "$TMP/handover-$tag.mon"
  start=$(($(now_ns) + 500000000))
  local pids=()
  for ((w = 1; w <= HO_WORKERS; w++)); do
    timeout -k 5 "$STEP_LIMIT" "$HELPER" loop "$start" "$per" "$pause" -- "$@" "$HELPER" stamp "$TMP/handover-$tag.log" "w$w" "$hold" \
      >"$TMP/handover-$tag-$w.out" 2>>"$TMP/handover-$tag.err" &
    pids+=($!)
  done
  for w in "${pids[@]}"; do wait "$w" || true; done
  if [ "$mon" = 1 ]; then
    monitor_stop
    analyze handover "$tool" "$TMP/handover-$tag.log" "$TMP/handover-$tag.mon" "$ACQ_SHA" "$REL_SHA"
  else
    analyze handover "$tool" "$TMP/handover-$tag.log"
  fi
  local failed
  failed=$(awk '{ s += $2 } END { print s + 0 }' "$TMP"/handover-"$tag"-*.out)
  [ "$failed" = 0 ] || say "    $failed runs of $tool exited non-zero; stderr: $(head -2 "$TMP/handover-$tag.err")"
}
header "3. Hand-over latency: next holder's command start - previous holder's command end ($HO_WORKERS workers, ~$HANDOVERS hand-overs)"
say "  The command is a static C helper that stamps CLOCK_REALTIME first thing in main() and right before"
say "  it exits. The figure includes: the holder's command exit, the lock tool reaping it, the release,"
say "  waking the waiter, its acquisition, and its fork+exec of the next command up to main()."
say "  a) back to back: the command exits at once and each worker starts its next lock process at once,"
say "     so a new lock process is starting up (competing for the 2 CPUs) during most hand-overs"
handover "dlock" 0 0 0 "$DLOCK_BIN" run -k bench-handover --
handover "dlock, MONITOR attached" 1 0 0 "$DLOCK_BIN" run -k bench-handover-mon --
handover "flock" 0 0 0 flock "$TMP/handover.lock"
handover "etcdctl lock" 0 0 0 etcdctl --endpoints="$ETCD_URL" lock bench-handover
say "  b) quiet: the command holds the lock ${QUIET_HOLD_MS} ms and each worker pauses ${QUIET_PAUSE_MS} ms before its next"
say "     lock process, so the waiters are already blocked and nothing else starts during a hand-over"
handover "dlock, quiet" 0 "$QUIET_HOLD_MS" "$QUIET_PAUSE_MS" "$DLOCK_BIN" run -k bench-handover-q --
handover "dlock, quiet, MONITOR attached" 1 "$QUIET_HOLD_MS" "$QUIET_PAUSE_MS" "$DLOCK_BIN" run -k bench-handover-qm --
handover "flock, quiet" 0 "$QUIET_HOLD_MS" "$QUIET_PAUSE_MS" flock "$TMP/handover-q.lock"
say "  Process start baseline, to subtract (part of every figure above):"
"$HELPER" spawnlat 200 >"$TMP/spawnlat.txt"
timeout -k 5 "$STEP_LIMIT" hyperfine -N --warmup 5 --runs 50 --style basic --export-json "$TMP/sh-date.json" \
  "sh -c 'date +%s%N'" >"$TMP/sh-date.log" 2>&1 || die "hyperfine failed: $(cat "$TMP/sh-date.log")"
analyze baseline "$TMP/spawnlat.txt" "$TMP/sh-date.json"

# ------------------------------------------------------------------- 4. Redis commands per section
header "4. Redis commands (INFO commandstats after CONFIG RESETSTAT; MONITOR attached to tell client from Lua)"
say "  a) per critical section: $WORKERS workers x $CMD_CYCLES cycles of dlock run -- true on one key"
rcli config resetstat >/dev/null
monitor_start "$TMP/commands.mon"
contend "dlock, MONITOR attached" "4a" "$CMD_CYCLES" "$DLOCK_BIN" run -k bench-commands -- true
rcli info commandstats >"$TMP/commands.stats" # MONITOR lines after this INFO are not counted
monitor_stop
analyze cmdstats contention "$((WORKERS * CMD_CYCLES))" "$TMP/commands.stats" "$TMP/commands.mon" "$ACQ_SHA" "$REL_SHA" "$RENEW_SHA"

say ""
say "  b) one waiter, -w 5s, while another dlock holds the lock running 'sleep 7' (default ttl 30s)"
"$DLOCK_BIN" run -k bench-waiter -- sleep 7 &
holder=$!
wait_until 10 "the holder" lock_held bench-waiter
rcli config resetstat >/dev/null
monitor_start "$TMP/waiter.mon"
t0=$(now_ns)
rc=0
timeout -k 5 30 "$DLOCK_BIN" run -k bench-waiter -w 5s -- true 2>"$TMP/waiter.err" || rc=$?
t1=$(now_ns)
rcli info commandstats >"$TMP/waiter.stats"
monitor_stop
say "  waiter exited with status $rc after $(((t1 - t0) / 1000000)) ms (expected: 75 after about 5000 ms)"
[ -s "$TMP/waiter.err" ] && say "  waiter stderr: $(head -3 "$TMP/waiter.err")"
analyze cmdstats waiter5s 1 "$TMP/waiter.stats" "$TMP/waiter.mon" "$ACQ_SHA" "$REL_SHA" "$RENEW_SHA"
hrc=0
wait "$holder" || hrc=$?
[ "$hrc" = 0 ] || say "  the holder exited with status $hrc (expected 0)"

# ------------------------------------------------------------------------ 5. many waiters, one key
header "5. Many dlock processes waiting on one key (each: dlock run -k K -- true), started in batches of $BATCH"
say "  A gate holder keeps the lock while the waiters start; the clock and the Redis CPU count start when it"
say "  lets go. Hand-overs = number of waiters (gate -> 1st, ..., last-but-one -> last)."
for W in "${WAITERS[@]}"; do
  key=bench-waiters-$W
  go=$TMP/go-$W
  : >"$TMP/waiters-$W.codes"
  "$DLOCK_BIN" run -k "$key" -- sh -c "while [ ! -e '$go' ]; do sleep 0.01; done" &
  gate=$!
  wait_until 10 "the gate holder" lock_held "$key"
  t0=$(now_ns)
  wpids=()
  for ((i = 1; i <= W; i++)); do
    "$DLOCK_BIN" run -k "$key" -- true 2>>"$TMP/waiters-$W.err" &
    wpids+=($!)
    if ((i % BATCH == 0 || i == W)); then
      deadline=$(($(date +%s) + 60))
      until [ "$(info_field clients blocked_clients)" -ge "$i" ]; do
        [ "$(date +%s)" -lt "$deadline" ] ||
          die "only $(info_field clients blocked_clients) of $i waiters blocked after 60 s"
        sleep 0.05
      done
    fi
  done
  t1=$(now_ns)
  rcli config resetstat >/dev/null
  cpu0=$(redis_cpu)
  t2=$(now_ns)
  touch "$go"
  for p in "${wpids[@]}"; do
    rc=0
    wait "$p" || rc=$?
    echo "$rc" >>"$TMP/waiters-$W.codes"
  done
  t3=$(now_ns)
  cpu1=$(redis_cpu)
  rcli info commandstats >"$TMP/waiters-$W.stats"
  wpids=()
  grc=0
  wait "$gate" || grc=$?
  [ "$grc" = 0 ] || say "  the gate holder exited with status $grc"
  analyze waiters "$W" "$(((t1 - t0) / 1000000))e-3" "$(((t3 - t2) / 1000000))e-3" "$cpu0" "$cpu1" \
    "$TMP/waiters-$W.codes" "$TMP/waiters-$W.stats" "$TMP/waiters-$W.err"
done

# -------------------------------------------------------------------------------- 6. peak RSS
header "6. Peak RSS ($RSS_RUNS runs each)"
rss_runs() { # TOOL COMMAND...
  local tool=$1 i vals=()
  shift
  for ((i = 0; i < RSS_RUNS; i++)); do
    if [ -x /usr/bin/time ]; then
      /usr/bin/time -f '%M' -o "$TMP/rss.txt" "$@" >/dev/null
      vals+=("$(tail -1 "$TMP/rss.txt")")
    fi
  done
  analyze rss "$tool" "${vals[@]}"
}
rss_runs "dlock run -k K -- true" "$DLOCK_BIN" run -k bench-rss -- true
rss_runs "flock FILE true" flock "$TMP/rss.lock" true
rss_runs "etcdctl lock K true" etcdctl --endpoints="$ETCD_URL" lock bench-rss true
# shellcheck disable=SC2016 # $PPID is for the inner sh: dlock's pid
hwm=$("$DLOCK_BIN" run -k bench-rss -- sh -c 'grep VmHWM /proc/$PPID/status' | awk '{print $2}')
say "  (by /usr/bin/time, max RSS of the process and its children; cross-check: dlock's own VmHWM read"
say "   from /proc while its command runs: ${hwm:-?} kB)"

# --------------------------------------------------------------------------------------- summary
analyze load end "$(cut -d' ' -f1 /proc/loadavg)" "$(nproc)"
header "Summary ($MODE; load average at the end: $(loadavg))"
analyze summary "$MODE"
