# Redlock for the bats files of tests/ha (redlock*.bats): N independent redis-server (or
# $REDIS_SERVER) masters on loopback ports the kernel hands out, no replication between them,
# and dlock given all of them (several --url).
#
# Loads tests/lib/helpers.bash (free_port, server_args, wait_for, start_bg, alive, T, DLOCK...).
#
# start_nodes from setup_file starts nodes for the whole file (in $BATS_FILE_TMPDIR/nodes,
# stopped by stop_nodes in teardown_file); from a test (or from setup after dlock_setup), for
# that test only (in $T/nodes, their pids in $T/nodes.pid, so the default teardown stops them
# whatever happens): redis_nodes.bash. A file whose tests do not break nodes starts them once; a file whose
# tests restart them starts them per test. Freezing (SIGSTOP) is undone by redlock_setup and by
# the teardown.
#
# Exported by start_nodes (space-separated lists; bats cannot export arrays):
#   NODE_PORTS    every node's port, node 1 first
#   NODE_PIDS     every node's pid, in the same order (refreshed by restart_node)
#   NODE_DIR      the nodes' directories n1, n2... (redis.log, redis.pid, port); their pids
#                 in $NODE_DIR.pid
#   REDLOCK_URLS  redis://127.0.0.1:PORT of every node, separated by spaces: the form
#                 DLOCK_URL takes
# redlock_setup (the per-test default) sets the array RL: the same URLs as -u arguments,
#   for "$DLOCK" "${RL[@]}" run ...

load "${BASH_SOURCE[0]%/*}/helpers"
load "${BASH_SOURCE[0]%/*}/redis_nodes"

setup_file() { start_nodes 5 && warm_up; }
teardown_file() { stop_nodes; }
setup() { redlock_setup; }
teardown() { redlock_teardown; }

# redlock_setup: the per-test default: T, every node running (SIGCONT) and empty, RL, and
# DLOCK_URL unset (each test says which URLs it gives).
redlock_setup() {
  dlock_setup
  unset DLOCK_URL
  [ -z "${NODE_PORTS:-}" ] || { reset_nodes; redlock_args; }
}

# redlock_teardown: wakes frozen nodes (so that what a test left queued runs), then the
# default teardown (stops what the test recorded, per-test nodes included).
redlock_teardown() {
  thaw_all
  dlock_teardown
}

# redlock_args: RL=(-u URL1 -u URL2 ...) for the current nodes.
redlock_args() {
  local port
  RL=()
  for port in $NODE_PORTS; do RL+=(-u "redis://127.0.0.1:$port"); done
}

# start_nodes N [redis-server args...]: starts N independent nodes (see the top of this file:
# start_redis_nodes) and returns once each answers as itself.
start_nodes() {
  local count=$1 port urls=()
  shift
  if [ -n "${T:-}" ]; then
    NODE_DIR=$T/nodes
  else
    NODE_DIR=$BATS_FILE_TMPDIR/nodes
  fi
  export NODE_DIR
  start_redis_nodes "$NODE_DIR" "$count" "$@" || return 1
  for port in $GROUP_PORTS; do urls+=("redis://127.0.0.1:$port"); done
  NODE_PORTS=$GROUP_PORTS
  NODE_PIDS=$GROUP_PIDS
  REDLOCK_URLS=${urls[*]}
  export NODE_PORTS NODE_PIDS REDLOCK_URLS
  redlock_args
}

# stop_nodes: stops every node start_nodes (or restart_node) started, in this NODE_DIR, and
# waits until they are gone.
stop_nodes() { [ -z "${NODE_DIR:-}" ] || stop_redis_nodes "$NODE_DIR"; }

# node_port I, node_pid I: node I's (1-based) port and current pid.
node_port() { cut -d' ' -f"$1" <<<"$NODE_PORTS"; }
node_pid() { cat "$NODE_DIR/n$1/redis.pid"; }

# ncli PORT ARGS...: redis-cli against one node (given up after 5 s: a frozen node never
# answers).
ncli() {
  local port=$1
  shift
  timeout 5 redis-cli -p "$port" "$@"
}

# nodecli I ARGS...: redis-cli against node I.
nodecli() {
  local i=$1
  shift
  ncli "$(node_port "$i")" "$@"
}

# freeze I...: SIGSTOP for nodes I... (their sockets stay open; what is sent queues up).
# thaw I...: SIGCONT. thaw_all: SIGCONT for every node started here.
freeze() { local i; for i in "$@"; do kill -STOP "$(node_pid "$i")"; done; }
thaw() { local i; for i in "$@"; do kill -CONT "$(node_pid "$i")"; done; }
thaw_all() {
  [ -n "${NODE_DIR:-}" ] && [ -s "$NODE_DIR.pid" ] || return 0
  local pid
  while read -r pid; do kill -CONT "$pid" 2>/dev/null || true; done <"$NODE_DIR.pid"
}

# restart_node I: kills node I (SIGKILL) and starts a new, empty one on the same port (no
# persistence: it comes back without the lock); refreshes NODE_PIDS.
restart_node() {
  local i=$1 port pid
  port=$(node_port "$i")
  pid=$(node_pid "$i")
  kill -KILL "$pid"
  wait_for "! alive $pid" 5
  # forget the dead pid (it may be reused): only live nodes are stopped at the end
  sed -i "/^$pid\$/d" "$NODE_DIR.pid"
  start_redis_node "$NODE_DIR/n$i" "$port" || { echo "node $i did not restart on $port" >&2; return 1; }
  local j pids=()
  for j in $(seq "$(wc -w <<<"$NODE_PORTS")"); do pids+=("$(node_pid "$j")"); done
  NODE_PIDS=${pids[*]}
  export NODE_PIDS
}

# reset_nodes: every node running and without keys (the script cache stays: see warm_up).
reset_nodes() {
  local port
  thaw_all
  for port in $NODE_PORTS; do
    ncli "$port" flushall >/dev/null
  done
}

# warm_up: one dlock run across the nodes, so that every node has dlock's acquire and release
# scripts cached. (A node answers a script it does not have with NOSCRIPT and gets it in full
# next; dlock acquire exits once a majority granted the lock, so on cold nodes a late node may
# be left without the lock.) dlock run waits for every node's answer to its release, so all
# five have both scripts after it.
warm_up() {
  "$DLOCK" "${RL[@]}" run -k warm-up -t 5s -- true
  local port
  for port in $NODE_PORTS; do ncli "$port" flushall >/dev/null; done
}

# holders NAME: how many nodes have the lock NAME (the key dlock:{NAME}).
holders() {
  local port n=0
  for port in $NODE_PORTS; do
    [ "$(ncli "$port" exists "dlock:{$1}")" = 1 ] && n=$((n + 1))
  done
  echo "$n"
}

# held_on_all NAME TOKEN: whether every node has the lock NAME with TOKEN.
held_on_all() {
  local port
  for port in $NODE_PORTS; do
    [ "$(ncli "$port" get "dlock:{$1}")" = "$2" ] || return 1
  done
}

# wait_held_on_all NAME TOKEN: waits (2 s at most) until every node has the lock NAME with
# TOKEN (dlock run goes on once a majority granted it; the others follow within milliseconds).
wait_held_on_all() {
  wait_for "held_on_all '$1' '$2'" 2 || { echo "not on every node: $(leftovers "$1")" >&2; return 1; }
}

# nothing_left NAME: whether no node has the lock NAME or its holder record.
nothing_left() {
  local port
  for port in $NODE_PORTS; do
    [ "$(ncli "$port" exists "dlock:{$1}" "dlock:{$1}:holder")" = 0 ] || return 1
  done
}

# leftovers NAME: "PORT: keys" for every node that still has the lock NAME (for messages).
leftovers() {
  local port
  for port in $NODE_PORTS; do
    echo "$port: $(ncli "$port" --scan --pattern "dlock:{$1}*" | sort | tr '\n' ' ')"
  done
}

# max_fence NAME: the largest fencing counter of the lock NAME among the nodes.
max_fence() {
  local port v max=0
  for port in $NODE_PORTS; do
    v=$(ncli "$port" get "dlock:{$1}:fence")
    [ -n "$v" ] && [ "$v" -gt "$max" ] && max=$v
  done
  echo "$max"
}

# fences NAME: every node's fencing counter of the lock NAME (for messages).
fences() {
  local port
  for port in $NODE_PORTS; do echo -n "$port=$(ncli "$port" get "dlock:{$1}:fence") "; done
}

# fence_of_majority NAME TOKEN: whether TOKEN is the largest counter of a majority of the nodes
# (a fencing token Redlock hands out): some node's counter, and a majority's not above it.
fence_of_majority() {
  local port v equal=0 below=0 count=0
  for port in $NODE_PORTS; do
    count=$((count + 1))
    v=$(ncli "$port" get "dlock:{$1}:fence")
    [ -n "$v" ] || continue
    [ "$v" = "$2" ] && equal=1
    [ "$v" -le "$2" ] && below=$((below + 1))
  done
  [ "$equal" = 1 ] && [ "$below" -ge $((count / 2 + 1)) ]
}

# wait_lease_grows PORT NAME: waits (5 s at most) until the lease of the lock NAME on the node
# on PORT grows: a renewal just reached it.
wait_lease_grows() {
  local port=$1 key="dlock:{$2}" before now deadline=$(($(now_ms) + 5000))
  before=$(ncli "$port" pttl "$key")
  while :; do
    now=$(ncli "$port" pttl "$key")
    [ "$now" -gt $((before + 100)) ] && return 0
    [ "$now" -lt "$before" ] && before=$now
    [ "$(now_ms)" -lt "$deadline" ] || { echo "no renewal of $key seen on $port (pttl $now)" >&2; return 1; }
    sleep 0.005
  done
}

# renewed_everywhere NAME: waits (5 s at most) until the lease of the lock NAME grew on every
# node: a renewal reached each of them.
renewed_everywhere() {
  local key="dlock:{$1}" port before=() grown=() i now deadline=$(($(now_ms) + 5000)) left
  for port in $NODE_PORTS; do before+=("$(ncli "$port" pttl "$key")"); grown+=(0); done
  while :; do
    i=0
    left=0
    for port in $NODE_PORTS; do
      if [ "${grown[i]}" = 0 ]; then
        now=$(ncli "$port" pttl "$key")
        if [ "$now" -gt $((before[i] + 100)) ]; then
          grown[i]=1
        else
          [ "$now" -ge "${before[i]}" ] || before[i]=$now
          left=$((left + 1))
        fi
      fi
      i=$((i + 1))
    done
    [ "$left" -gt 0 ] || return 0
    [ "$(now_ms)" -lt "$deadline" ] || { echo "no renewal of $key seen on every node: $(leftovers "$1")" >&2; return 1; }
    sleep 0.005
  done
}

# exit_of PID: waits for the background job PID (a child of this shell) and sets RC to its
# exit status.
exit_of() {
  RC=0
  wait "$1" || RC=$?
}
