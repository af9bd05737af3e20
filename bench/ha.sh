#!/usr/bin/env bash
# Benchmarks dlock's uncontended cycle through Redis Sentinel, Redis Cluster and Redlock (five
# independent masters) next to a single node and flock(1), in one run; 8 workers contending
# for one lock on one node, on five (Redlock) and with flock; and the time a holder needs after
# a Sentinel failover until its lease is confirmed on the new master.
#
# Usage: bench/ha.sh [--quick] [--no-deps]
#   --quick     20 runs per command instead of 100, 3 failovers instead of 5, 4 contention
#               cycles per worker instead of 12
#   --no-deps   do not run packaging/install-deps.sh bench first
# Environment: DLOCK_BIN (default: build/src/dlock of this repository), TMPDIR.
#
# It starts, on 127.0.0.1 with free ports and no persistence: one plain redis-server; a master,
# a replica and 3 Sentinels; a Redis Cluster of 3 masters (no replicas); 5 more plain servers for
# Redlock. It stops them on exit.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$BENCH_DIR")
DLOCK_BIN=${DLOCK_BIN:-$REPO/build/src/dlock}

runs=100 failovers=5 cycles=12 deps=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) runs=20 failovers=3 cycles=4 ;;
    --no-deps) deps=0 ;;
    -h | --help) sed -n '2,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) sed -n '2,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 64 ;;
  esac
  shift
done
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
need_tools "$deps" hyperfine redis-server redis-cli flock python3 cc

bench_tmpdir ha
cleanup() {
  set +e
  stop_servers
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT

server() { start_redis "$TMP/$1" "${@:2}"; } # NAME PORT ARGS...: a redis-server in $TMP/NAME

copy_dlock
unset DLOCK_URL DLOCK_PREFIX DLOCK_PASSWORD

read -r SINGLE MASTER REPLICA S1 S2 S3 C1 C2 C3 CB1 CB2 CB3 < <(free_ports 12)
read -r -a REDLOCK_PORTS < <(free_ports 5)
server single "$SINGLE"
REDLOCK_ARGS=()
for p in "${REDLOCK_PORTS[@]}"; do
  server "redlock-$p" "$p"
  REDLOCK_ARGS+=(-u "redis://127.0.0.1:$p")
done
server master "$MASTER"
server replica "$REPLICA" --replicaof 127.0.0.1 "$MASTER"
for s in "$S1" "$S2" "$S3"; do
  mkdir -p "$TMP/sentinel-$s"
  printf 'port %s\nbind 127.0.0.1\ndir %s\nlogfile %s/log\nsentinel monitor bench 127.0.0.1 %s 2\nsentinel down-after-milliseconds bench 1000\nsentinel failover-timeout bench 5000\n' \
    "$s" "$TMP/sentinel-$s" "$TMP/sentinel-$s" "$MASTER" >"$TMP/sentinel-$s/sentinel.conf"
  redis-server "$TMP/sentinel-$s/sentinel.conf" --sentinel &
  SERVER_PIDS+=($!)
done
i=0
CB=("$CB1" "$CB2" "$CB3")
for c in "$C1" "$C2" "$C3"; do
  server "cluster-$c" "$c" --cluster-enabled yes --cluster-port "${CB[$i]}" \
    --cluster-config-file "$TMP/cluster-$c/nodes.conf" --cluster-node-timeout 2000
  i=$((i + 1))
done
redis-cli --cluster create "127.0.0.1:$C1" "127.0.0.1:$C2" "127.0.0.1:$C3" --cluster-yes >"$TMP/cluster-create.log" 2>&1 ||
  die "redis-cli --cluster create failed: $(cat "$TMP/cluster-create.log")"
cluster_ok() { for p in "$C1" "$C2" "$C3"; do redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' || return 1; done; }
wait_until 20 "the cluster" cluster_ok
sentinels_ready() { # each knows the others and the replica (else SENTINEL FAILOVER finds no replica)
  for s in "$S1" "$S2" "$S3"; do
    [ "$(redis-cli -p "$s" sentinel ckquorum bench 2>&1 | cut -c1-2)" = OK ] || return 1
    redis-cli -p "$s" sentinel replicas bench | grep -qx "$REPLICA" || return 1
  done
}
wait_until 30 "the Sentinels" sentinels_ready
SENTINEL_URL="redis-sentinel://127.0.0.1:$S1,127.0.0.1:$S2,127.0.0.1:$S3#bench"

# The key's slot lives on one master; the other two answer MOVED first.
KEY=bench-ha
OWNER="" OTHER=""
for p in "$C1" "$C2" "$C3"; do
  if redis-cli -p "$p" exists "dlock:{$KEY}" 2>&1 | grep -q MOVED; then OTHER=$p; else OWNER=$p; fi
done
[ -n "$OWNER" ] && [ -n "$OTHER" ] || die "could not find the node owning the key's slot"

say "dlock HA benchmark - $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -sr), $(nproc) CPUs"
say "  dlock: $DLOCK_BIN ($("$DLOCK" --version 2>&1 | head -1)); redis $(redis-server --version | awk '{print $3}'), all on 127.0.0.1 TCP"
header "Uncontended lock cycle: acquire, run true, release (hyperfine -N, $runs runs, 5 warm-up)"
hyperfine -N --warmup 5 --runs "$runs" --style basic --export-json "$TMP/ha.json" \
  -n "single node (redis://)" "$(q "$DLOCK") -u redis://127.0.0.1:$SINGLE run -k $KEY -- true" \
  -n "Sentinel (3 sentinels, ROLE)" "$(q "$DLOCK") -u $SENTINEL_URL run -k $KEY -- true" \
  -n "Cluster, the slot's node" "$(q "$DLOCK") -u redis://127.0.0.1:$OWNER run -k $KEY -- true" \
  -n "Cluster, another node (MOVED)" "$(q "$DLOCK") -u redis://127.0.0.1:$OTHER run -k $KEY -- true" \
  -n "Redlock, 5 masters" "$(q "$DLOCK") ${REDLOCK_ARGS[*]} run -k $KEY -- true" \
  -n "flock FILE true" "flock $(q "$TMP/ha.lock") true" \
  >"$TMP/ha.log" 2>&1 || { cat "$TMP/ha.log"; die "hyperfine failed"; }
python3 "$BENCH_DIR/analyze.py" uncontended "$TMP/results.json" "$TMP/ha.json"

header "Contention: 8 workers x $cycles cycles of one lock, started together (helper loop)"
build_helper
contend() { # LABEL COMMAND...: the 8 workers; analyze.py prints the time per critical section
  local label=$1 start w pids=() outs=()
  shift
  start=$(($(date +%s%N) + 500000000))
  for w in 1 2 3 4 5 6 7 8; do
    "$HELPER" loop "$start" "$cycles" 0 -- "$@" >"$TMP/contend-$w.out" 2>>"$TMP/contend.err" &
    pids+=($!)
    outs+=("$TMP/contend-$w.out")
  done
  for w in "${pids[@]}"; do wait "$w" || true; done
  python3 "$BENCH_DIR/analyze.py" contention "$TMP/results.json" "$label" "" "$start" "$cycles" 0 "${outs[@]}"
}
for round in 1 2; do
  contend "dlock, one node" "$DLOCK" -u "redis://127.0.0.1:$SINGLE" run -k bench-contend -- true
  contend "dlock, Redlock (5)" "$DLOCK" "${REDLOCK_ARGS[@]}" run -k bench-contend -- true
  contend "flock" flock "$TMP/contend.lock" true
done
say "  (servers' CPU not counted here: 0 ms)"
[ ! -s "$TMP/contend.err" ] || { say "  stderr of the workers, first lines:"; head -3 "$TMP/contend.err" | sed 's/^/    /'; }

header "Sentinel failover (SENTINEL FAILOVER) under a held lock: time until the lease is confirmed on the new master"
say "  dlock run -t 3s -- sleep 30; the renewals are logged with -v and time-stamped as they arrive"
for n in $(seq "$failovers"); do
  master_port=$(redis-cli -p "$S1" sentinel get-master-addr-by-name bench | tail -n 1)
  log=$TMP/failover-$n.log
  # each stderr line with the time it arrived, in ms since the epoch; dlock's pid in FILE.pid
  (sh -c 'echo $$ >"$0"; exec "$@"' "$TMP/failover-$n.pid" \
    "$DLOCK" -v -u "$SENTINEL_URL" run -k "failover-$n" -t 3s -- sleep 30 2>&1 >/dev/null |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s%3N)" "$line"; done >"$log") &
  runner=$!
  wait_until 10 "the lock" grep -q 'acquired lock' "$log"
  # in sync: the replica has the lock before the switch
  wait_until 10 "the replica's copy" sh -c "[ \"\$(redis-cli -p $( [ "$master_port" = "$MASTER" ] && echo "$REPLICA" || echo "$MASTER") exists 'dlock:{failover-$n}')\" = 1 ]"
  sleep 1
  start=$(date +%s%3N)
  answer=$(redis-cli -p "$S1" sentinel failover bench)
  [ "$answer" = OK ] || die "SENTINEL FAILOVER: $answer"
  # the first renewal after the switch that went to the new master
  wait_until 20 "a renewal on the new master" grep -q 'switched to a new master' "$log"
  wait_until 20 "a confirmed renewal after the switch" sh -c "sed -n '/switched to a new master/,\$p' '$log' | grep -q 'renewed lease'"
  confirmed=$(sed -n '/switched to a new master/,$p' "$log" | grep -m1 'renewed lease' | cut -d' ' -f1)
  switched=$(grep -m1 'switched to a new master' "$log" | cut -d' ' -f1)
  say "  failover $n: SENTINEL FAILOVER at 0 ms; dlock told of the switch at $((switched - start)) ms;" \
    "lease confirmed on the new master at $((confirmed - start)) ms"
  kill -TERM "$(cat "$TMP/failover-$n.pid")" 2>/dev/null || true
  wait "$runner" 2>/dev/null || true
  # the old master must be a replica again before the next round
  old=$master_port
  new=$(redis-cli -p "$S1" sentinel get-master-addr-by-name bench | tail -n 1)
  wait_until 30 "the old master to rejoin as a replica" sh -c "redis-cli -p $old role | head -n 1 | grep -qx slave && redis-cli -p $new info replication | grep -q 'connected_slaves:1'"
  replica_synced() { redis-cli -p "$old" info replication | tr -d '\r' | grep -qx 'master_link_status:up'; }
  wait_until 30 "the old master to sync" replica_synced
done
