# Redis Sentinel for the tests in tests/ha: a group of one master, its replicas and three
# Sentinels, all on loopback ports the kernel hands out (free_port), started by
# start_sentinel_group and stopped by pid. Loaded with `load ../lib/sentinel_helpers`; it loads
# helpers.bash, so everything there (start_server, wait_for, start_bg, stop_recorded, T,
# DLOCK...) is at hand.
#
# Where the group lives: started from setup_file (T is not set there), it is the file's and
# lives in $BATS_FILE_TMPDIR/sentinel-group (teardown_file: stop_sentinel_group); started from
# setup or a test, it is the test's and lives in $T/sentinel-group, its pids in
# $T/sentinel-group.pid, so the default teardown (stop_recorded) stops it (redis_nodes.bash).
# Tests that kill or fail over the master start their own.
#
# Sentinel's timers, which set the pace of these tests: a Sentinel finds the replicas in the
# master's INFO (at once on connecting, then every 10 s) and the other Sentinels through hello
# messages on the master (every 2 s), so a group is ready about 2 s after start. A master is
# down after down-after-milliseconds (1 s here); a failover then takes 1 to 3 s more. After
# SENTINEL FAILOVER, the old master (alive) goes on calling itself master, and accepting writes,
# for about 10 s, until the Sentinels reconfigure it as a replica of the new one.

load "${BASH_SOURCE[0]%/*}/helpers"
load "${BASH_SOURCE[0]%/*}/redis_nodes"

SENTINEL_MASTER=mymaster

# The group's data nodes, with repl-diskless-sync-delay 0: a replica that must fully resync
# after a failover (its offset went past the new master's) gets its copy at once instead of
# after the default 5 s, so WAIT (--wait-replicas) on the new master is answered again soon.
DATA_NODE_ARGS=(--repl-diskless-sync-delay 0)

# GROUP_TLS: non-empty for a group whose nodes listen on a TLS port only (NODE_TLS of
# start_redis_node); group_node_args sets NODE_ARGS, what every node of the group (data node and
# Sentinel) is given besides: nothing here, the certificates in a TLS file.
GROUP_TLS=
group_node_args() { NODE_ARGS=(); }

# start_sentinel_group [--replicas N] [--sentinel-password P] [--data-password P]: starts a
# master, N replicas of it (default 1) and 3 Sentinels monitoring it as mymaster (quorum 2,
# down-after 1 s, failover-timeout 5 s), and waits until every Sentinel knows every replica
# (online) and the other two Sentinels. With --data-password the data nodes require P
# (requirepass, masterauth; the Sentinels get it as auth-pass); with --sentinel-password the
# Sentinels require P themselves (requirepass, also used between Sentinels).
# Exports MASTER_PORT, MASTER_PID, REPLICA_PORT, REPLICA_PID (the first replica),
# REPLICA_PORTS, REPLICA_PIDS, SENTINEL_PORTS, SENTINEL_PIDS (space separated),
# SENTINEL_ADDRS (127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3), SENTINEL_URL
# (redis-sentinel://SENTINEL_ADDRS#mymaster), SENTINEL_AUTH and DATA_AUTH (the passwords, for
# scli and ncli), SENTINEL_GROUP_DIR.
start_sentinel_group() {
  local replicas=1 i port
  SENTINEL_AUTH='' DATA_AUTH=''
  while [ $# -gt 0 ]; do
    case $1 in
      --replicas) replicas=$2 ;;
      --sentinel-password) SENTINEL_AUTH=$2 ;;
      --data-password) DATA_AUTH=$2 ;;
      *) echo "start_sentinel_group: unknown argument $1" >&2; return 1 ;;
    esac
    shift 2
  done
  local T=${T:-$BATS_FILE_TMPDIR}
  SENTINEL_GROUP_DIR=$T
  local data_args=()
  [ -z "$DATA_AUTH" ] || data_args+=(--requirepass "$DATA_AUTH" --masterauth "$DATA_AUTH")

  start_data_node master "${data_args[@]}" || return 1
  MASTER_PORT=$SERVER_PORT MASTER_PID=$SERVER_PID
  REPLICA_PORTS='' REPLICA_PIDS=''
  for i in $(seq "$replicas"); do
    start_data_node "replica$i" "${data_args[@]}" --replicaof 127.0.0.1 "$MASTER_PORT" || return 1
    REPLICA_PORTS+="${REPLICA_PORTS:+ }$SERVER_PORT"
    REPLICA_PIDS+="${REPLICA_PIDS:+ }$SERVER_PID"
  done
  REPLICA_PORT=${REPLICA_PORTS%% *} REPLICA_PID=${REPLICA_PIDS%% *}
  # Every replica online and acknowledging writes before the Sentinels look: their first
  # INFO of the master then lists them all.
  wait_for "[ \"\$(printf 'SET test:replicas-ready 1\nWAIT $replicas 200\n' | ncli $MASTER_PORT | tail -n 1)\" = $replicas ]" 10 ||
    { echo "the replicas of 127.0.0.1:$MASTER_PORT did not come online" >&2; return 1; }
  ncli "$MASTER_PORT" del test:replicas-ready >/dev/null

  SENTINEL_PORTS='' SENTINEL_PIDS='' SENTINEL_ADDRS=''
  for i in 1 2 3; do
    start_sentinel "sentinel$i" || return 1
    SENTINEL_PORTS+="${SENTINEL_PORTS:+ }$SENTINEL_PORT"
    SENTINEL_PIDS+="${SENTINEL_PIDS:+ }$SENTINEL_PID"
    SENTINEL_ADDRS+="${SENTINEL_ADDRS:+,}127.0.0.1:$SENTINEL_PORT"
  done
  SENTINEL_URL="redis-sentinel://$SENTINEL_ADDRS#$SENTINEL_MASTER"
  export MASTER_PORT MASTER_PID REPLICA_PORT REPLICA_PID REPLICA_PORTS REPLICA_PIDS \
    SENTINEL_PORTS SENTINEL_PIDS SENTINEL_ADDRS SENTINEL_URL SENTINEL_AUTH DATA_AUTH SENTINEL_GROUP_DIR

  local ready=''
  for port in $SENTINEL_PORTS; do ready+="${ready:+ && }sentinel_ready $port $replicas"; done
  if ! wait_for "$ready" 20; then
    for port in $SENTINEL_PORTS; do
      echo "sentinel 127.0.0.1:$port: $(scli "$port" sentinel ckquorum "$SENTINEL_MASTER" 2>&1);" \
        "replicas: $(sentinel_entries "$port" replicas | tr '\n' ';')" >&2
    done
    return 1
  fi
}

# start_data_node NAME [redis-server args...]: a data node of the group in
# $T/sentinel-group/NAME (start_redis_node, with DATA_NODE_ARGS); sets SERVER_PORT and
# SERVER_PID once it answers as itself.
start_data_node() {
  local name=$1 NODE_ARGS
  shift
  group_node_args
  local NODE_CLI=ncli NODE_TLS=$GROUP_TLS
  start_redis_node "$T/sentinel-group/$name" "" "${DATA_NODE_ARGS[@]}" "${NODE_ARGS[@]}" "$@" ||
    return 1
  SERVER_PORT=$NODE_STARTED_PORT SERVER_PID=$NODE_STARTED_PID
}

# start_sentinel NAME: a Sentinel (the server binary with --sentinel) monitoring 127.0.0.1:
# MASTER_PORT as mymaster, in $T/sentinel-group/NAME with its own config file, which it
# rewrites; sets SENTINEL_PORT and SENTINEL_PID once it answers as itself (start_redis_node).
start_sentinel() {
  local dir=$T/sentinel-group/$1 NODE_ARGS
  mkdir -p "$dir"
  {
    [ -z "$SENTINEL_AUTH" ] || echo "requirepass $SENTINEL_AUTH"
    echo "sentinel resolve-hostnames no"
    echo "sentinel monitor $SENTINEL_MASTER 127.0.0.1 $MASTER_PORT 2"
    echo "sentinel down-after-milliseconds $SENTINEL_MASTER 1000"
    echo "sentinel failover-timeout $SENTINEL_MASTER 5000"
    echo "sentinel parallel-syncs $SENTINEL_MASTER 1"
    [ -z "$DATA_AUTH" ] || echo "sentinel auth-pass $SENTINEL_MASTER $DATA_AUTH"
  } >"$dir/sentinel.conf"
  group_node_args
  local NODE_CLI=scli NODE_CONF=$dir/sentinel.conf NODE_TLS=$GROUP_TLS
  start_redis_node "$dir" "" "${NODE_ARGS[@]}" || return 1
  SENTINEL_PORT=$NODE_STARTED_PORT SENTINEL_PID=$NODE_STARTED_PID
}

# stop_sentinel_group: stops every server of the group (SIGTERM, then SIGKILL: stop_recorded on
# the group's pid files). For teardown_file; a test's group is stopped by the default teardown.
stop_sentinel_group() {
  [ -n "${SENTINEL_GROUP_DIR:-}" ] || return 0
  local BATS_TEST_TMPDIR=$SENTINEL_GROUP_DIR
  stop_recorded
}

# scli PORT ARGS...: redis-cli against a Sentinel (with the Sentinels' password, if any).
scli() {
  local port=$1
  shift
  redis-cli -p "$port" ${SENTINEL_AUTH:+--no-auth-warning -a "$SENTINEL_AUTH"} "$@"
}

# ncli PORT ARGS...: redis-cli against a data node (with the data nodes' password, if any).
ncli() {
  local port=$1
  shift
  redis-cli -p "$port" ${DATA_AUTH:+--no-auth-warning -a "$DATA_AUTH"} "$@"
}

# mcli ARGS...: redis-cli against the master the group started with (MASTER_PORT).
mcli() { ncli "$MASTER_PORT" "$@"; }

# sentinel_entries PORT replicas|sentinels: what the Sentinel at PORT knows of mymaster's
# replicas or of the other Sentinels, one line each: "port=P flags=F master-link-status=S".
sentinel_entries() {
  scli "$1" sentinel "$2" "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r' | awk '
    NR % 2 == 1 { k = $0; next }
    k == "name" { if (e != "") print e; e = "" }
    k == "port" || k == "flags" || k == "master-link-status" { e = e (e == "" ? "" : " ") k "=" $0 }
    END { if (e != "") print e }'
}

# sentinel_ready PORT REPLICAS: whether the Sentinel at PORT knows the two other Sentinels
# (CKQUORUM counts 3 usable) and REPLICAS replicas, each flagged a plain replica whose link
# to the master is up (so that it can be promoted).
sentinel_ready() {
  scli "$1" sentinel ckquorum "$SENTINEL_MASTER" 2>/dev/null | grep -q '^OK 3 usable' &&
    [ "$(sentinel_entries "$1" replicas | grep -c 'flags=slave master-link-status=ok$')" -ge "$2" ]
}

# current_master_port [SENTINEL_PORT]: the master's port as a Sentinel has it (GET-MASTER-ADDR-
# BY-NAME mymaster): the one at SENTINEL_PORT, or the first of SENTINEL_PORTS that answers.
current_master_port() {
  local port addr
  for port in ${1:-$SENTINEL_PORTS}; do
    addr=$(scli "$port" sentinel get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r')
    if [[ $addr =~ ^127\.0\.0\.1$'\n'([0-9]+)$ ]]; then
      echo "${BASH_REMATCH[1]}"
      return 0
    fi
  done
  return 1
}

# new_master_agreed OLDPORT: whether every Sentinel names one master that is not OLDPORT, and
# that node's ROLE says master; sets NEW_MASTER_PORT.
new_master_agreed() {
  local port p first=''
  for port in $SENTINEL_PORTS; do
    p=$(current_master_port "$port") || return 1
    [ "$p" != "$1" ] || return 1
    [ -z "$first" ] || [ "$p" = "$first" ] || return 1
    first=$p
  done
  [ "$(ncli "$first" role 2>/dev/null | head -n 1 | tr -d '\r')" = master ] || return 1
  NEW_MASTER_PORT=$first
}

# wait_for_new_master OLDPORT [TIMEOUT_S]: waits (20 s at most) until every Sentinel names a new
# master, other than OLDPORT, which says it is master; sets NEW_MASTER_PORT and NEW_MASTER_PID.
wait_for_new_master() {
  wait_for "new_master_agreed $1" "${2:-20}" || {
    local port
    for port in $SENTINEL_PORTS; do
      echo "sentinel 127.0.0.1:$port names $(current_master_port "$port" || echo nothing)" >&2
    done
    return 1
  }
  NEW_MASTER_PID=$(pid_of_port "$NEW_MASTER_PORT")
}

# pid_of_port PORT: the pid of the group's data node on PORT.
pid_of_port() {
  local ports pids i
  read -ra ports <<<"$MASTER_PORT $REPLICA_PORTS"
  read -ra pids <<<"$MASTER_PID $REPLICA_PIDS"
  for i in "${!ports[@]}"; do
    [ "${ports[$i]}" != "$1" ] || { echo "${pids[$i]}"; return 0; }
  done
  return 1
}

# node_key_exists PORT NAME: whether the data node on PORT has the lock NAME (default prefix).
node_key_exists() { [ "$(ncli "$1" exists "dlock:{$2}")" = 1 ]; }

# master_key_exists NAME: whether the group's first master has the lock NAME.
master_key_exists() { node_key_exists "$MASTER_PORT" "$1"; }

# lease_end_on PORT NAME: when (ms since the epoch) the lock NAME ends on the data node on PORT
# at the latest, from its PTTL (read, then the clock: an upper bound); nothing and status 1 when
# the node does not have it (or does not answer).
lease_end_on() {
  local pttl at
  pttl=$(ncli "$1" pttl "dlock:{$2}" 2>/dev/null | tr -d '\r')
  ms_into at
  [[ $pttl =~ ^[0-9]+$ ]] && [ "$pttl" -gt 0 ] || return 1
  echo $((at + pttl))
}
