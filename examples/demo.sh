#!/usr/bin/env bash
# The README's first command: installs what is missing, builds dlock, then runs it for real:
# two jobs contend for one lock on a throwaway redis-server (unix socket in a temp dir) that
# this script starts and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

packaging/install-deps.sh build
for pkg in redis-server redis-tools; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ -n "${missing[*]:-}" ]; then
  sudo=(); [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# A fresh configuration, so the build uses the libraries installed now.
rm -f build-demo/CMakeCache.txt
cmake -S . -B build-demo -DDLOCK_BUILD_TESTS=OFF >/dev/null
cmake --build build-demo -j"$(nproc)" >build-demo.log 2>&1 || { cat build-demo.log; exit 1; }
rm -f build-demo.log
dlock=$PWD/build-demo/src/dlock

tmp=$(mktemp -d)
cleanup() {
  [ -s "$tmp/redis.pid" ] && kill "$(cat "$tmp/redis.pid")" 2>/dev/null || true
  sleep 0.2
  rm -rf "$tmp"
}
trap cleanup EXIT
redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 --save '' \
  --appendonly no --dir "$tmp" --daemonize yes --pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log"
for _ in $(seq 100); do
  redis-cli -s "$tmp/redis.sock" ping 2>/dev/null | grep -q PONG && break
  sleep 0.05
done
export DLOCK_URL=unix://$tmp/redis.sock

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
job() { # job NAME SECONDS: what a cron job would do under the lock
  echo "$(date +%T.%3N) $1 starts (fencing token $DLOCK_FENCING_TOKEN)"
  sleep "$2"
  echo "$(date +%T.%3N) $1 ends"
}
export -f job

"$dlock" --version
say "1. Job A takes the lock 'nightly-report' for 3 seconds; job B waits for it (-w 10s, -v)."
"$dlock" run -k nightly-report -t 2s -- bash -c 'job A 3' &
sleep 0.5
"$dlock" status nightly-report
"$dlock" -v run -k nightly-report -w 10s -- bash -c 'job B 1'
wait

say "2. Job C holds the lock; job D uses -n (cron style): it gives up at once with exit 75."
"$dlock" run -k nightly-report -- bash -c 'job C 2' &
sleep 0.5
rc=0
"$dlock" -v run -k nightly-report -n -- bash -c 'job D 1' || rc=$?
echo "job D: dlock exited with $rc (75: lock held elsewhere; the command did not run)"
wait

say "3. The lock is deleted from under a running job: dlock stops it and exits 76."
"$dlock" run -k nightly-report -t 3s -- bash -c 'job E 30' &
sleep 0.5
redis-cli -s "$tmp/redis.sock" del 'dlock:{nightly-report}' >/dev/null
rc=0
wait $! || rc=$?
echo "job E: dlock exited with $rc"
say "Done: the throwaway redis-server is stopped and its directory removed."
