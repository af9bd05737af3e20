#!/usr/bin/env bats
# A server that cannot serve now (OOM, MASTERDOWN, CLUSTERDOWN, LOADING): exit 69 with the
# server's own words, never 70, and the command does not run.
# Each test starts its own server on a free port, in its own directory, and stops it by pid.

load helpers

setup() {
  export T=$BATS_TEST_TMPDIR
  : >"$T/servers.pid"
}

teardown() {
  local pid
  while read -r pid; do
    kill -9 "$pid" 2>/dev/null || true
  done <"$T/servers.pid"
}

# background COMMAND...: runs COMMAND in the background, outside this shell's job table (no
# "Killed" notice when teardown kills it), without bats' fd 3; its pid goes to servers.pid.
background() {
  ("$@" 3>&- & echo $! >>"$T/servers.pid")
}

# start_server NAME [redis-server args...]: starts a server in $T/NAME on a free loopback port
# (SERVER_PORT), without persistence, and waits until it answers PING (PONG, LOADING or
# MASTERDOWN: any Redis reply).
start_server() {
  local dir=$T/$1
  shift
  mkdir -p "$dir"
  SERVER_PORT=$(free_port)
  background "${REDIS_SERVER:-redis-server}" --port "$SERVER_PORT" --bind 127.0.0.1 --save '' \
    --appendonly no --dir "$dir" --logfile "$dir/log" "$@"
  wait_for "redis-cli -p $SERVER_PORT ping 2>/dev/null | grep -q ." 10
}

# unavailable URL WORDS [GLOBAL-ARGS...]: dlock run against URL exits 69 with one diagnostic
# line that contains WORDS, and the command does not run.
unavailable() {
  local url=$1 words=$2
  shift 2
  run -69 --separate-stderr "$DLOCK" -u "$url" "$@" run -k k -- echo ran
  refute_output --partial ran
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ] && [[ $stderr == dlock:* ]]
  [[ $stderr == *"$words"* ]] || fail "stderr lacks '$words': $stderr"
}

@test "out of memory (OOM): 69 and nothing written" {
  start_server oom --maxmemory 1 --maxmemory-policy noeviction
  local url=redis://127.0.0.1:$SERVER_PORT
  unavailable "$url" "OOM command not allowed when used memory > 'maxmemory'"
  unavailable "$url" "OOM command not allowed" # the script is cached now: EVALSHA
  run -0 redis-cli -p "$SERVER_PORT" dbsize
  assert_output 0
}

@test "a replica whose master is down, with replica-serve-stale-data no (MASTERDOWN): 69" {
  start_server replica --replicaof 127.0.0.1 "$(free_port)" --replica-serve-stale-data no
  unavailable "redis://127.0.0.1:$SERVER_PORT" "MASTERDOWN Link with MASTER is down"
  run -69 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:$SERVER_PORT" status k
  [[ $stderr == *MASTERDOWN* ]]
}

@test "a cluster node without slots (CLUSTERDOWN): 69" {
  start_server cluster --cluster-enabled yes --cluster-config-file "$T/cluster/nodes.conf" \
    --cluster-port "$(free_port)"
  unavailable "redis://127.0.0.1:$SERVER_PORT" "CLUSTERDOWN Hash slot not served"
}

@test "a server loading its dataset (LOADING): 69" {
  start_server loading
  redis-cli -p "$SERVER_PORT" eval 'for i = 1, 3000 do redis.call("SET", "k" .. i, i) end' 0 >/dev/null
  redis-cli -p "$SERVER_PORT" save >/dev/null
  redis-cli -p "$SERVER_PORT" shutdown nosave >/dev/null 2>&1 || true
  wait_for "! redis-cli -p $SERVER_PORT ping >/dev/null 2>&1"
  # 1 ms per key: about 3 s of loading, with events processed every KB so it answers LOADING
  background "${REDIS_SERVER:-redis-server}" --port "$SERVER_PORT" --bind 127.0.0.1 --save '' \
    --appendonly no --dir "$T/loading" --logfile "$T/loading/log" --key-load-delay 1000 \
    --loading-process-events-interval-bytes 1024
  wait_for "redis-cli -p $SERVER_PORT ping 2>/dev/null | grep -q LOADING" 10
  unavailable "redis://127.0.0.1:$SERVER_PORT" "is loading the dataset in memory"
}
