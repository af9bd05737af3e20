# Redis Cluster for the bats files of tests/ha (cluster*.bats): a cluster of real redis-server
# (or $REDIS_SERVER) nodes on loopback ports the kernel hands out, built with
# `redis-cli --cluster create`, and what the tests need to find their way in it.
#
# Loads tests/lib/helpers.bash (free_port, server_args, wait_for, start_bg, alive, T, DLOCK...)
# and redefines two of its helpers for a cluster: rcli is `redis-cli -c` against the cluster
# (it follows MOVED and ASK), key_exists asks the cluster; so hold, hold_until and just_renewed
# work unchanged.
#
# Defaults: setup_file starts one cluster of 3 masters with a replica each for the whole file
# (start_cluster) and teardown_file stops it (stop_cluster); setup waits until the cluster is
# settled (a previous test may have moved a slot or failed a master over), empties the masters
# and points DLOCK_URL at the cluster. A file that breaks its cluster starts one per test
# instead, from setup after dlock_setup (the nodes then live in $T/cluster and are recorded in
# $T/cluster.pid, so the teardown stops them whatever happens: redis_nodes.bash).
#
# Exported by start_cluster (space-separated port lists; bats cannot export arrays):
#   CLUSTER_PORTS  every node, in the order they were started
#   MASTER_PORTS   the masters, by the first slot they serve (refreshed by cluster_settled)
#   REPLICA_PORTS  the replicas (refreshed by cluster_settled)
#   CLUSTER_URL    redis://127.0.0.1:PORT of the first node
#   CLUSTER_DIR    the nodes' directories n1, n2... (redis.log, nodes.conf, redis.pid, port);
#                  their pids in $CLUSTER_DIR.pid

load "${BASH_SOURCE[0]%/*}/helpers"
load "${BASH_SOURCE[0]%/*}/redis_nodes"

# The command-line client that matches the server (redis-cli works with both).
if [[ ${REDIS_SERVER:-redis-server} == *valkey-server* ]] && command -v valkey-cli >/dev/null; then
  CLUSTER_CLI=valkey-cli
else
  CLUSTER_CLI=redis-cli
fi

setup_file() { start_cluster; }
teardown_file() { stop_cluster; }
setup() { cluster_setup; }
teardown() { dlock_teardown; }

# cluster_setup: the per-test default: T, a settled cluster, empty masters, DLOCK_URL.
cluster_setup() {
  dlock_setup
  cluster_stabilize
  cluster_settled 30
  reset_cluster
  export DLOCK_URL=$CLUSTER_URL
}

# ncli PORT ARGS...: the client against one node, without following redirects (a MOVED or ASK
# reply is printed as it is, e.g. "MOVED 1234 127.0.0.1:7001").
ncli() {
  local port=$1
  shift
  "$CLUSTER_CLI" -p "$port" "$@"
}

# asking PORT COMMAND...: COMMAND on one node right after ASKING, on one connection: how a
# node that is importing a slot serves its keys. Prints COMMAND's reply only. The arguments
# must not contain blanks or quotes (they go through the client's line reader).
asking() {
  local port=$1
  shift
  printf 'ASKING\n%s\n' "$*" | "$CLUSTER_CLI" -p "$port" | tail -n +2
}

# ccli ARGS...: the client against the cluster (follows MOVED and ASK), through $CCLI_PORT,
# by default the first node.
ccli() {
  "$CLUSTER_CLI" -c -p "${CCLI_PORT:-${CLUSTER_PORTS%% *}}" "$@"
}

# The e2e helpers' names, for the cluster.
rcli() { ccli "$@"; }
key_exists() { [ "$(ccli exists "dlock:{$1}")" = 1 ]; }

# start_cluster [MASTERS [REPLICAS_PER_MASTER [redis-server args...]]]: starts MASTERS *
# (1 + REPLICAS_PER_MASTER) nodes (default 3 and 1), makes a cluster of them, and returns once
# it is settled (cluster_settled). From setup_file the nodes live in $BATS_FILE_TMPDIR/cluster
# (stop_cluster in teardown_file); from a test, in $T/cluster, their pids in $T/cluster.pid.
start_cluster() {
  local masters=${1:-3} replicas=${2:-1}
  shift 2 || shift $#
  local port addrs=()
  if [ -n "${T:-}" ]; then
    CLUSTER_DIR=$T/cluster
  else
    CLUSTER_DIR=$BATS_FILE_TMPDIR/cluster
  fi
  # --cluster-port: the bus port would otherwise be port + 10000, which nobody reserved.
  # --repl-diskless-sync-delay 0: a replica's first sync would otherwise wait 5 s.
  start_redis_nodes "$CLUSTER_DIR" $((masters * (1 + replicas))) \
    --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 2000 --cluster-port FREE_PORT \
    --repl-diskless-sync-delay 0 "$@" || return 1
  for port in $GROUP_PORTS; do addrs+=("127.0.0.1:$port"); done
  CLUSTER_PORTS=$GROUP_PORTS
  CLUSTER_URL=redis://127.0.0.1:${CLUSTER_PORTS%% *}
  export CLUSTER_DIR CLUSTER_PORTS CLUSTER_URL
  if ! "$CLUSTER_CLI" --cluster create "${addrs[@]}" --cluster-replicas "$replicas" \
      --cluster-yes >"$CLUSTER_DIR/create.log" 2>&1; then
    echo "$CLUSTER_CLI --cluster create failed:" >&2
    cat "$CLUSTER_DIR/create.log" >&2
    stop_cluster
    return 1
  fi
  cluster_settled 30 || { stop_cluster; return 1; }
}

# stop_cluster: stops every node start_cluster started (SIGTERM, SIGKILL after 5 s) and waits
# until they are gone.
stop_cluster() { [ -z "${CLUSTER_DIR:-}" ] || stop_redis_nodes "$CLUSTER_DIR"; }

# node_pid PORT: the pid of the node listening on PORT.
node_pid() {
  local dir
  for dir in "$CLUSTER_DIR"/n*; do
    [ "$(cat "$dir/port")" = "$1" ] && { cat "$dir/redis.pid"; return 0; }
  done
  return 1
}

# node_dir PORT: the directory of the node listening on PORT (its redis.log...).
node_dir() {
  local dir
  for dir in "$CLUSTER_DIR"/n*; do
    [ "$(cat "$dir/port")" = "$1" ] && { echo "$dir"; return 0; }
  done
  return 1
}

# kill_node PORT: SIGKILL for one node; returns once it is gone.
kill_node() {
  local pid
  pid=$(node_pid "$1")
  kill -KILL "$pid"
  wait_for "! alive $pid" 5
}

# node_id PORT: the cluster node id of the node on PORT.
node_id() { ncli "$1" cluster myid; }

# live_node: the port of the first node (in CLUSTER_PORTS order) that answers.
live_node() {
  local port
  for port in $CLUSTER_PORTS; do
    [ "$(ncli "$port" ping 2>/dev/null)" = PONG ] && { echo "$port"; return 0; }
  done
  echo "no cluster node answers" >&2
  return 1
}

# cluster_map [VIEW_PORT]: one line per master that serves slots, as VIEW_PORT (default: the
# first live node) sees the cluster: "PORT ID RANGE..." (ranges "lo-hi" or "n"; the "[...]"
# entries of a slot being migrated are left out), ordered by first slot.
cluster_map() {
  local view=${1:-$(live_node)}
  ncli "$view" cluster nodes | awk '
    $3 ~ /master/ && $3 !~ /fail/ {
      split($2, addr, "[:@,]")
      line = ""
      first = -1
      for (i = 9; i <= NF; i++) {
        if ($i ~ /^\[/) continue
        line = line " " $i
        split($i, r, "-")
        if (first < 0 || r[1] + 0 < first) first = r[1] + 0
      }
      if (first >= 0) printf "%d %s %s%s\n", first, addr[2], $1, line
    }' | sort -n | cut -d' ' -f2-
}

# keyslot KEY: the cluster slot of KEY (the hash tag counts: "dlock:{x}" is x's slot).
keyslot() { ncli "${CLUSTER_PORTS%% *}" cluster keyslot "$1"; }

# slot_owner SLOT [VIEW_PORT]: the port of the master serving SLOT, as VIEW_PORT (default: the
# first live node) sees it.
slot_owner() {
  cluster_map "${2:-}" | awk -v s="$1" '{
    for (i = 3; i <= NF; i++) {
      n = split($i, r, "-")
      lo = r[1] + 0
      hi = (n > 1 ? r[2] : r[1]) + 0
      if (s >= lo && s <= hi) { print $1; exit }
    }
  }'
}

# node_for_key KEY: the port of the master serving KEY.
node_for_key() { slot_owner "$(keyslot "$1")"; }

# lock_node NAME: the port of the master serving the lock NAME (dlock:{NAME} and its siblings).
lock_node() { node_for_key "dlock:{$1}"; }

# lock_slot NAME: the slot of the lock NAME.
lock_slot() { keyslot "dlock:{$1}"; }

# name_on PORT [PREFIX]: prints the first lock name PREFIX1, PREFIX2... whose slot the master
# on PORT serves. name_not_on PORT [PREFIX]: the first whose slot it does not serve.
name_on() { _name_where on "$1" "${2:-lock-}"; }
name_not_on() { _name_where off "$1" "${2:-lock-}"; }
_name_where() {
  local op=$1 port=$2 prefix=$3 map i slot owner
  map=$(cluster_map)
  for i in $(seq 1 200); do
    slot=$(keyslot "$prefix$i")
    owner=$(awk -v s="$slot" '{
      for (i = 3; i <= NF; i++) {
        n = split($i, r, "-")
        if (s >= r[1] + 0 && s <= (n > 1 ? r[2] : r[1]) + 0) { print $1; exit }
      }
    }' <<<"$map")
    if { [ "$op" = on ] && [ "$owner" = "$port" ]; } ||
        { [ "$op" = off ] && [ -n "$owner" ] && [ "$owner" != "$port" ]; }; then
      echo "$prefix$i"
      return 0
    fi
  done
  echo "no name $prefix<n> with its slot $op master $port" >&2
  return 1
}

# replica_of PORT: the port of a replica of the master on PORT (the first one listed).
replica_of() {
  local id
  id=$(node_id "$1")
  ncli "$1" cluster nodes | awk -v id="$id" '$3 ~ /slave/ && $3 !~ /fail/ && $4 == id {
    split($2, addr, "[:@,]"); print addr[2]; exit }'
}

# role PORT: master or slave, as the node on PORT says of itself.
role() { ncli "$1" role | head -n 1; }

# _normalized_nodes PORT: the node's CLUSTER NODES without what differs from one node's view to
# another's (myself, ping times, epochs, link state): id, address, flags, master, slots.
_normalized_nodes() {
  ncli "$1" cluster nodes | awk '{
    flags = $3; sub(/myself,/, "", flags)
    line = $1 " " $2 " " flags " " $4
    for (i = 9; i <= NF; i++) line = line " " $i
    print line
  }' | sort
}

# _cluster_is_settled: every node says cluster_state:ok with all slots ok, all views of the
# nodes, their roles and their slots agree (every node known, none failing, no slot being
# migrated), and every replica's link to its master is up. Sets MASTER_PORTS and REPLICA_PORTS.
# (A cluster with a node killed on purpose never settles.)
_cluster_is_settled() {
  local port first="" view info count=0
  for port in $CLUSTER_PORTS; do
    count=$((count + 1))
    info=$(ncli "$port" cluster info 2>/dev/null | tr -d '\r') || return 1
    grep -qx 'cluster_state:ok' <<<"$info" || return 1
    grep -qx 'cluster_slots_ok:16384' <<<"$info" || return 1
    view=$(_normalized_nodes "$port") || return 1
    ! grep -Eq 'fail|handshake|noaddr|\[' <<<"$view" || return 1
    if [ -z "$first" ]; then
      first=$view
    elif [ "$view" != "$first" ]; then
      return 1
    fi
  done
  [ "$(wc -l <<<"$first")" -eq "$count" ] || return 1
  MASTER_PORTS=$(cluster_map | cut -d' ' -f1 | tr '\n' ' ')
  MASTER_PORTS=${MASTER_PORTS% }
  REPLICA_PORTS=$(awk '$3 ~ /slave/ { split($2, a, "[:@,]"); print a[2] }' <<<"$first" | sort -n | tr '\n' ' ')
  REPLICA_PORTS=${REPLICA_PORTS% }
  for port in $REPLICA_PORTS; do
    ncli "$port" info replication | tr -d '\r' | grep -qx 'master_link_status:up' || return 1
  done
  export MASTER_PORTS REPLICA_PORTS
}

# cluster_settled [TIMEOUT_S]: waits (default 30 s) until the cluster is settled (see
# _cluster_is_settled); sets MASTER_PORTS and REPLICA_PORTS. Prints every node's view if not.
cluster_settled() {
  wait_for _cluster_is_settled "${1:-30}" && return 0
  local port
  for port in $CLUSTER_PORTS; do
    echo "node $port:" >&2
    ncli "$port" cluster info 2>&1 | grep -E 'state|slots_ok|known' >&2
    ncli "$port" cluster nodes 2>&1 >&2
  done
  return 1
}

# cluster_stabilize: closes every slot migration left open (a test that failed half way):
# SETSLOT STABLE wherever a node has a slot migrating or importing. The keys stay where they
# were; reset_cluster empties them anyway.
cluster_stabilize() {
  local port slot
  for port in $CLUSTER_PORTS; do
    for slot in $(ncli "$port" cluster nodes 2>/dev/null | awk '$3 ~ /myself/ {
        for (i = 9; i <= NF; i++) if ($i ~ /^\[/) { split(substr($i, 2), a, "-"); print a[1] } }'); do
      ncli "$port" cluster setslot "$slot" stable >/dev/null
    done
  done
}

# reset_cluster: empties every master (the replicas follow) and flushes the scripts of every
# node.
reset_cluster() {
  local port
  for port in $MASTER_PORTS; do
    ncli "$port" flushall >/dev/null
  done
  for port in $CLUSTER_PORTS; do
    ncli "$port" script flush >/dev/null 2>&1 || true
  done
}

# keys_on PORT: the keys the node on PORT has (directly, whatever the slot map says), sorted.
keys_on() { ncli "$1" --scan | sort; }

# wait_renewal PORT NAME [asking]: waits (5 s at most) until the lease of the lock NAME, as the
# node on PORT keeps it (after ASKING with "asking": a slot being imported), grows: a renewal
# reached that node. Sets PTTL to the lease left right after it.
wait_renewal() {
  local port=$1 key="dlock:{$2}" how=${3:-} before now deadline=$(($(now_ms) + 5000))
  before=$(_pttl_on "$port" "$key" "$how")
  [[ $before =~ ^[0-9]+$ ]] || { echo "no lease for $key on $port: $before" >&2; return 1; }
  while :; do
    now=$(_pttl_on "$port" "$key" "$how")
    if [[ $now =~ ^-?[0-9]+$ ]] && [ "$now" -gt $((before + 100)) ]; then
      PTTL=$now
      return 0
    fi
    [[ $now =~ ^[0-9]+$ ]] && [ "$now" -lt "$before" ] && before=$now
    [ "$(now_ms)" -lt "$deadline" ] || { echo "no renewal of $key seen on $port (pttl $now)" >&2; return 1; }
    sleep 0.02
  done
}
_pttl_on() {
  if [ "$3" = asking ]; then
    asking "$1" PTTL "$2"
  else
    ncli "$1" pttl "$2"
  fi
}
