# Groups of redis-server (or $REDIS_SERVER) nodes for the tests of tests/ha: a Sentinel group,
# a Redis Cluster, Redlock's independent nodes. One way to start a node and wait for it, one way
# to stop a group. Needs helpers.bash (server_args, free_port, lost_port_race, wait_for, alive).
#
# A node lives in GROUP/NAME (its redis.log, redis.pid, port) and its pid is recorded in
# GROUP.pid: a group in $T (started by a test, or by setup after dlock_setup) is stopped by the
# default teardown, which stops every pid of a $T/*.pid; a group of the file's, in
# $BATS_FILE_TMPDIR, by stop_redis_nodes GROUP in teardown_file.

# start_redis_node DIR PORT [redis-server args...]: a daemonized node in DIR (server_args: loopback,
# the unix socket DIR/redis.sock, no persistence, DIR/redis.log), its pid appended to GROUP.pid
# (DIR is GROUP/NAME); returns once it answers as itself: INFO's process_id is its pidfile's, so
# a server that took the port meanwhile is not mistaken for it. PORT empty: a free port, and
# another one if the race for it was lost; otherwise that port (a restart), waited for while
# someone else holds it. An argument FREE_PORT: see server_args. Variables that change how:
#   NODE_CLI   the command that talks to a node, given PORT ARGS... (default node_cli: plain
#              redis-cli; a file's own with a password or TLS)
#   NODE_CONF  a configuration file to start from (a Sentinel's: the server rewrites it)
#   NODE_TLS   non-empty: PORT is a TLS port (--tls-port), the plain one closed (--port 0)
# Sets NODE_STARTED_PORT and NODE_STARTED_PID.
start_redis_node() {
  local dir=$1 want=$2 try port pid conf=()
  shift 2
  mkdir -p "$dir"
  [ -z "${NODE_CONF:-}" ] || conf=("$NODE_CONF" --sentinel)
  for try in 1 2 3 4 5 6 7 8 9 10; do
    port=${want:-$(free_port)}
    if [ -n "${NODE_TLS:-}" ]; then
      server_args "$dir" 0 --tls-port "$port" --daemonize yes --pidfile "$dir/redis.pid" "$@"
    else
      server_args "$dir" "$port" --daemonize yes --pidfile "$dir/redis.pid" "$@"
    fi
    rm -f "$dir/redis.log" "$dir/redis.pid"
    "${REDIS_SERVER:-redis-server}" "${conf[@]}" "${SERVER_ARGS[@]}" 3>&- || return 1
    if wait_for "[ -s '$dir/redis.pid' ] && [ \"\$(_node_pid_reported $port)\" = \"\$(cat '$dir/redis.pid' 2>/dev/null)\" ] ||
        lost_port_race '$dir'" 10 && ! lost_port_race "$dir"; then
      pid=$(cat "$dir/redis.pid")
      echo "$pid" >>"${dir%/*}.pid"
      echo "$port" >"$dir/port"
      NODE_STARTED_PORT=$port NODE_STARTED_PID=$pid
      return 0
    fi
    if [ -s "$dir/redis.pid" ]; then kill -9 "$(cat "$dir/redis.pid")" 2>/dev/null || true; fi
    lost_port_race "$dir" || break
    # the same port (a restart): wait for whoever took it to let go
    [ -z "$want" ] || sleep 0.2
  done
  echo "redis-server in $dir did not start:" >&2
  cat "$dir/redis.log" >&2
  return 1
}

# node_cli PORT ARGS...: redis-cli against the node on PORT (given up after 2 s: a frozen node
# never answers).
node_cli() {
  local port=$1
  shift
  timeout 2 redis-cli -p "$port" "$@"
}

_node_pid_reported() { "${NODE_CLI:-node_cli}" "$1" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p'; }

# start_redis_nodes GROUP COUNT [redis-server args...]: COUNT nodes GROUP/n1, GROUP/n2...
# (start_redis_node, each on a free port); stops them all if one does not start. Sets
# GROUP_PORTS and GROUP_PIDS (space separated, n1 first).
start_redis_nodes() {
  local group=$1 count=$2 i ports=() pids=()
  shift 2
  mkdir -p "$group"
  for i in $(seq "$count"); do
    if ! start_redis_node "$group/n$i" "" "$@"; then
      stop_redis_nodes "$group"
      return 1
    fi
    ports+=("$NODE_STARTED_PORT")
    pids+=("$NODE_STARTED_PID")
  done
  GROUP_PORTS=${ports[*]} GROUP_PIDS=${pids[*]}
}

# stop_redis_nodes GROUP: stops every node whose pid GROUP.pid records (SIGCONT, SIGTERM, SIGKILL
# after 5 s) and waits until they are gone.
stop_redis_nodes() {
  [ -s "$1.pid" ] || return 0
  local pid pids=() i any
  while read -r pid; do pids+=("$pid"); done <"$1.pid"
  for pid in "${pids[@]}"; do
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
  done
  for i in $(seq 100); do
    any=0
    for pid in "${pids[@]}"; do alive "$pid" && any=1 && break; done
    [ "$any" = 0 ] && return 0
    sleep 0.05
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}
