# Shared by every bats file: a private redis-server per file, the dlock binary, assertions,
# and the default setup and teardown below, which a file redefines only where it differs.
#
# Defaults: setup_file starts this file's server (start_redis), teardown_file stops it; setup
# empties the server and sets T (this test's directory), teardown stops every process the test
# recorded (start_bg, start_server, or a pid written to any $T/*.pid) and its tmux server
# ($T/tmux.sock). A file that needs more calls the default by name, e.g.
#   setup() { dlock_setup; unset DLOCK_PASSWORD; }
#
# Ports: every server listens on a unix socket and on a loopback port the kernel hands out
# (free_port); a server that loses the race for its port to another process (another bats
# file running in parallel) is started again on another one.

bats_require_minimum_version 1.5.0
load /usr/lib/bats/bats-support/load.bash
load /usr/lib/bats/bats-assert/load.bash

: "${DLOCK_BIN:=${BASH_SOURCE[0]%/*}/../../build/src/dlock}"
DLOCK=$DLOCK_BIN

dlock_setup_file() { start_redis; }
dlock_teardown_file() { stop_redis; }

dlock_setup() {
  export T=$BATS_TEST_TMPDIR DLOCK
  [ -z "${REDIS_PID:-}" ] || reset_redis
}

dlock_teardown() {
  [ -z "${REDIS_PID:-}" ] || kill -CONT "$REDIS_PID" 2>/dev/null || true
  stop_recorded
  [ -n "${BATS_TEST_COMPLETED:-}" ] || show_bg_stderr
  if [ -f "$BATS_TEST_TMPDIR/nobody.dirs" ]; then
    xargs rm -rf -- <"$BATS_TEST_TMPDIR/nobody.dirs"
  fi
  if [ -S "$BATS_TEST_TMPDIR/tmux.sock" ]; then
    tmux -S "$BATS_TEST_TMPDIR/tmux.sock" kill-server 2>/dev/null || true
  fi
}

# show_bg_stderr: for a failed test, the last lines of what each start_bg process wrote on
# stderr, so that a failure seen once in CI shows what the background parties said.
show_bg_stderr() {
  local f
  for f in "$BATS_TEST_TMPDIR"/*.err; do
    [ -s "$f" ] || continue
    echo "--- stderr of ${f##*/}:"
    tail -n 15 "$f"
  done
}

setup_file() { dlock_setup_file; }
teardown_file() { dlock_teardown_file; }
setup() { dlock_setup; }
teardown() { dlock_teardown; }

# A free TCP port on loopback (asks the kernel, then releases it: see start_redis for the race).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# A loopback port that refuses connections: below the range free_port draws from, so no
# server of the tests can be listening there.
CLOSED_PORT=1

# server_args DIR PORT [redis-server args...]: the arguments for redis-server (or $REDIS_SERVER)
# as the tests want it, into the array SERVER_ARGS: loopback and the unix socket DIR/redis.sock
# only, no persistence, log in DIR/redis.log; an argument FREE_PORT becomes a new free port (for
# --tls-port or --cluster-port), which is also put in OTHER_PORT.
server_args() {
  local dir=$1 port=$2 arg
  shift 2
  SERVER_ARGS=(--port "$port" --bind 127.0.0.1 --unixsocket "$dir/redis.sock" --unixsocketperm 700
    --save '' --appendonly no --dir "$dir" --logfile "$dir/redis.log")
  for arg in "$@"; do
    if [ "$arg" = FREE_PORT ]; then
      OTHER_PORT=$(free_port)
      arg=$OTHER_PORT
    fi
    SERVER_ARGS+=("$arg")
  done
}

# lost_port_race DIR: whether the server in DIR exited because its port was taken meanwhile.
lost_port_race() { grep -qs 'Address already in use' "$1/redis.log"; }

# start_redis [redis-server args...]: starts the server of this file (an argument FREE_PORT:
# see server_args); exports REDIS_SOCK, REDIS_PORT, REDIS_PID, OTHER_PORT, and DLOCK_URL (the
# unix socket).
start_redis() {
  local dir=$BATS_FILE_TMPDIR/redis try i
  mkdir -p "$dir"
  REDIS_SOCK=$dir/redis.sock
  for try in 1 2 3 4 5; do
    REDIS_PORT=$(free_port)
    server_args "$dir" "$REDIS_PORT" --daemonize yes --pidfile "$dir/redis.pid" "$@"
    rm -f "$dir/redis.log" "$dir/redis.pid"
    "${REDIS_SERVER:-redis-server}" "${SERVER_ARGS[@]}"
    for i in $(seq 200); do
      if [ -s "$dir/redis.pid" ] && rcli ping 2>/dev/null | grep -q PONG; then
        REDIS_PID=$(cat "$dir/redis.pid")
        export REDIS_SOCK REDIS_PORT REDIS_PID OTHER_PORT
        export DLOCK_URL=unix://$REDIS_SOCK
        return 0
      fi
      lost_port_race "$dir" && break
      sleep 0.05
    done
    lost_port_race "$dir" || break
  done
  echo "redis-server did not start:" >&2
  cat "$dir/redis.log" >&2
  return 1
}

# stop_redis: stops the server of this file (SIGTERM, SIGKILL after 5 s). A zombie counts as
# gone: a daemon's zombie waits for whatever reaps orphans here, up to a second in a container.
stop_redis() {
  if [ -n "${REDIS_PID:-}" ]; then
    kill -CONT "$REDIS_PID" 2>/dev/null || true
    kill "$REDIS_PID" 2>/dev/null || true
    local i
    for i in $(seq 100); do
      alive "$REDIS_PID" || break
      sleep 0.05
    done
    kill -9 "$REDIS_PID" 2>/dev/null || true
  fi
}

# start_server NAME [redis-server args...]: another server, for this test only, in $T/NAME (an
# argument FREE_PORT: see server_args); sets SERVER_PORT, SERVER_SOCK, SERVER_PID and waits until
# it answers PING with anything (PONG, LOADING, NOAUTH...). The teardown stops it.
start_server() {
  local dir=$T/$1 try i
  shift
  mkdir -p "$dir"
  SERVER_SOCK=$dir/redis.sock
  for try in 1 2 3 4 5; do
    SERVER_PORT=$(free_port)
    server_args "$dir" "$SERVER_PORT" "$@"
    rm -f "$dir/redis.log"
    # a subshell: outside this shell's job table, so no "Killed" notice when teardown kills it
    ("${REDIS_SERVER:-redis-server}" "${SERVER_ARGS[@]}" 3>&- & echo $! >>"$T/bg.pid")
    SERVER_PID=$(tail -n 1 "$T/bg.pid")
    for i in $(seq 200); do
      if [ -n "$(redis-cli -p "$SERVER_PORT" ping 2>/dev/null)" ]; then
        return 0
      fi
      alive "$SERVER_PID" || break
      sleep 0.05
    done
    lost_port_race "$dir" || break
  done
  echo "redis-server $* did not start:" >&2
  cat "$dir/redis.log" >&2
  return 1
}

# start_replica: a replica of this file's server, for this test only (start_server: SERVER_PID,
# SERVER_SOCK, SERVER_PORT), once it is the server's only replica and acknowledges writes: a
# write and a WAIT for one replica on one connection answer 1. (The server lists a replica
# online before it has loaded the first copy, and may list the previous test's for a while.)
start_replica() {
  start_server replica --replicaof 127.0.0.1 "$REDIS_PORT"
  wait_for "rcli info replication | tr -d '\\r' | grep -qx 'connected_slaves:1' &&
    rcli info replication | grep -q 'port=$SERVER_PORT,state=online'" 10
  wait_for "[ \"\$(printf 'SET test:replica-ready 1\nWAIT 1 200\n' | rcli | tail -n 1)\" = 1 ]" 10
  rcli del test:replica-ready >/dev/null
}

# redis-cli against this file's server.
rcli() {
  redis-cli -s "$REDIS_SOCK" ${REDIS_AUTH:+--no-auth-warning -a "$REDIS_AUTH"} "$@"
}

reset_redis() {
  kill -CONT "$REDIS_PID" 2>/dev/null || true
  rcli flushall >/dev/null
  rcli script flush >/dev/null
}

# Milliseconds since the epoch.
now_ms() { date +%s%3N; }

# wait_for CONDITION-COMMAND [TIMEOUT_S]: polls until the command succeeds.
wait_for() {
  local deadline=$(( $(now_ms) + ${2:-5} * 1000 ))
  until eval "$1"; do
    if [ "$(now_ms)" -ge "$deadline" ]; then
      echo "timed out waiting for: $1" >&2
      return 1
    fi
    sleep 0.02
  done
}

# stop_recorded: stops every process whose pid this test wrote to a $T/*.pid file (start_bg
# and start_server record theirs in $T/bg.pid; commands write their own): SIGTERM first (dlock
# passes it on to its command, which lets it release its lock), SIGCONT for the stopped ones,
# SIGKILL for whatever is still there 2 s later. For the teardown.
stop_recorded() {
  local file pid pids=() i any
  for file in "$BATS_TEST_TMPDIR"/*.pid; do
    [ -e "$file" ] || continue
    while read -r pid || [ -n "$pid" ]; do
      [[ $pid =~ ^[0-9]+$ ]] && pids+=("$pid")
    done <"$file"
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null && kill -CONT "$pid" 2>/dev/null
  done
  for i in $(seq 40); do
    any=0
    for pid in "${pids[@]}"; do alive "$pid" && any=1 && break; done
    [ "$any" = 0 ] && break
    sleep 0.05
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

# need_root: skips the test, saying why, unless it runs as root (which a test of a hostile
# second local user needs: dlock as root, the attacker as nobody).
need_root() {
  [ "$(id -u)" -eq 0 ] || skip "needs root: dlock runs as root and the attacker as nobody"
}

# as_nobody COMMAND...: runs COMMAND as the unprivileged user nobody, a hostile neighbour.
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"; }

# nobody_dir: a new directory under /tmp owned by nobody (mode 755), removed by the teardown;
# sets NOBODY_DIR.
nobody_dir() {
  NOBODY_DIR=$(mktemp -d /tmp/dlock-nobody.XXXXXX)
  echo "$NOBODY_DIR" >>"$BATS_TEST_TMPDIR/nobody.dirs"
  chown nobody:nogroup "$NOBODY_DIR"
  chmod 755 "$NOBODY_DIR"
}

# start_bg NAME COMMAND...: runs COMMAND in the background with stdout and stderr in $T/NAME.out
# and $T/NAME.err, without bats' fd 3 (so a leftover cannot hang bats), its pid recorded in
# $T/bg.pid for the teardown; sets BG_PID.
start_bg() {
  local name=$1
  shift
  "$@" >"$T/$name.out" 2>"$T/$name.err" 3>&- &
  BG_PID=$!
  echo "$BG_PID" >>"$T/bg.pid"
}

# started NAME CONDITION [PID [TIMEOUT_S]]: waits (default 10 s) until CONDITION holds while
# the process start_bg started as NAME (PID, default BG_PID) runs; fails at once, showing its
# stderr, if it exits first.
started() {
  local name=$1 condition=$2 pid=${3:-$BG_PID}
  wait_for "$condition || ! alive $pid" "${4:-10}" || true
  eval "$condition" && return 0
  echo "$name exited, or timed out, before: $condition" >&2
  cat "$T/$name.err" >&2
  return 1
}

# hold KEY SECONDS [dlock run options...]: a background `dlock run -k KEY -- sleep SECONDS`
# (start_bg hold: BG_PID); returns once it holds the lock.
hold() {
  local key=$1 seconds=$2
  shift 2
  start_bg hold "$DLOCK" run -k "$key" "$@" -- sleep "$seconds"
  wait_for "key_exists '$key'" 10
}

# hold_until KEY FILE [dlock run options...]: like hold, but the holder lets go once FILE exists.
hold_until() {
  local key=$1 file=$2
  shift 2
  start_bg hold "$DLOCK" run -k "$key" "$@" -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$file"
  wait_for "key_exists '$key'" 10
}

# waiters KEY: how many waiters dlock status counts for the lock KEY.
waiters() {
  "$DLOCK" status "$1" --json | sed -n 's/.*"waiters":\([0-9]*\).*/\1/p'
}

# Milliseconds since the epoch, into the variable named $1 (no fork, for tight polling).
ms_into() {
  local us=${EPOCHREALTIME/[.,]/}
  printf -v "$1" '%d' $((us / 1000))
}

# just_renewed NAME MIN_PTTL_MS: waits (5 s at most) until the lock NAME's PTTL is at least
# MIN_PTTL_MS, i.e. right after a renewal, so that no renewal is in flight; sets PTTL and
# READ_AT (ms): the lease, as Redis keeps it, ends at READ_AT + PTTL at the latest.
just_renewed() {
  local deadline=$(($(now_ms) + 5000))
  while :; do
    PTTL=$(rcli pttl "dlock:{$1}")
    ms_into READ_AT
    [ "$PTTL" -lt "$2" ] || return 0
    [ "$READ_AT" -lt "$deadline" ] || { echo "no renewal seen (pttl $PTTL)"; return 1; }
    sleep 0.005
  done
}

# json_ok PYTHON [ARG...]: parses $output as exactly one JSON document into `d` and runs the
# python statements (asserts) with A = the extra arguments. Fails with python's message.
json_ok() {
  local code=$1
  shift
  printf '%s' "$output" | python3 -c "
import json, re, sys, time, datetime
A = sys.argv[1:]
d = json.loads(sys.stdin.buffer.read().decode('utf-8'))  # strict: JSON is UTF-8
RFC3339 = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$')
def is_int(v):
    return type(v) is int
def epoch_ms(text):
    t = datetime.datetime.strptime(text, '%Y-%m-%dT%H:%M:%S.%fZ').replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() * 1000
def held_status(s):
    assert s['held'] is True, s
    h = s['holder']
    assert set(h) == {'host', 'pid', 'user', 'command', 'note', 'value'}, h
    assert all(type(h[f]) is str for f in ('host', 'user', 'command', 'note', 'value')), h
    assert is_int(h['pid']) and h['pid'] > 0, h
    assert RFC3339.match(s['acquired_at']), s['acquired_at']
    assert abs(epoch_ms(s['acquired_at']) - time.time() * 1000) < 120000, s['acquired_at']
    assert is_int(s['held_ms']) and s['held_ms'] >= 0, s
    assert is_int(s['ttl_ms']) and s['ttl_ms'] > 0, s
    assert is_int(s['fencing_token']) and s['fencing_token'] >= 1, s
    assert is_int(s['last_fencing_token']) and s['last_fencing_token'] >= s['fencing_token'], s
    assert is_int(s['waiters']) and s['waiters'] >= 0, s
STATUS_FIELDS = {'key', 'held', 'holder', 'acquired_at', 'held_ms', 'ttl_ms', 'fencing_token',
                 'last_fencing_token', 'waiters', 'kind', 'command_ended', 'delay_ms'}
$code
" "$@"
}

# key_exists NAME: whether the lock NAME (default prefix) is held in Redis.
key_exists() { [ "$(rcli exists "dlock:{$1}")" = 1 ]; }

# Whether a process is alive (and not a zombie).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}

# Whether a process is dead (or a zombie).
gone() { ! alive "$1"; }
