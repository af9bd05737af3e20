# Shared by every bats file: a private redis-server per file, the dlock binary, assertions.
# Each file calls start_redis in setup_file and stop_redis in teardown_file; tests call
# reset_redis in setup. Servers listen on a unix socket and a free loopback port only.

bats_require_minimum_version 1.5.0
load /usr/lib/bats/bats-support/load.bash
load /usr/lib/bats/bats-assert/load.bash

: "${DLOCK_BIN:=$BATS_TEST_DIRNAME/../../build/src/dlock}"
DLOCK=$DLOCK_BIN

# A free TCP port on loopback (asks the kernel, then releases it).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# start_redis [redis-server args...]: starts a server for this file; exports REDIS_SOCK,
# REDIS_PORT, REDIS_PID, DLOCK_URL (the unix socket).
start_redis() {
  local dir=$BATS_FILE_TMPDIR/redis
  mkdir -p "$dir"
  REDIS_PORT=$(free_port)
  REDIS_SOCK=$dir/redis.sock
  "${REDIS_SERVER:-redis-server}" --port "$REDIS_PORT" --bind 127.0.0.1 --unixsocket "$REDIS_SOCK" \
    --unixsocketperm 700 --save '' --appendonly no --dir "$dir" --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@"
  local i
  for i in $(seq 100); do
    if [ -s "$dir/redis.pid" ] && redis-cli -s "$REDIS_SOCK" ${REDIS_AUTH:+--no-auth-warning -a "$REDIS_AUTH"} ping 2>/dev/null | grep -q PONG; then
      break
    fi
    sleep 0.05
  done
  REDIS_PID=$(cat "$dir/redis.pid")
  export REDIS_SOCK REDIS_PORT REDIS_PID
  export DLOCK_URL=unix://$REDIS_SOCK
}

stop_redis() {
  if [ -n "${REDIS_PID:-}" ]; then
    kill -CONT "$REDIS_PID" 2>/dev/null || true
    kill "$REDIS_PID" 2>/dev/null || true
    local i
    for i in $(seq 100); do
      kill -0 "$REDIS_PID" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "$REDIS_PID" 2>/dev/null || true
  fi
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

# kill_recorded [FILE]: SIGKILLs every pid listed in FILE (default: this test's bg.pid, where
# tests record their background processes), for teardown.
kill_recorded() {
  local file=${1:-$BATS_TEST_TMPDIR/bg.pid} pid
  [ -e "$file" ] || return 0
  while read -r pid; do
    kill -9 "$pid" 2>/dev/null || true
  done <"$file"
}

# start_bg NAME COMMAND...: runs COMMAND in the background with stdout and stderr in $T/NAME.out
# and $T/NAME.err, without bats' fd 3 (so a leftover cannot hang bats), its pid recorded in
# $T/bg.pid for kill_recorded; sets BG_PID.
start_bg() {
  local name=$1
  shift
  "$@" >"$T/$name.out" 2>"$T/$name.err" 3>&- &
  BG_PID=$!
  echo "$BG_PID" >>"$T/bg.pid"
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

# key_exists NAME: whether the lock NAME (default prefix) is held in Redis.
key_exists() { [ "$(rcli exists "dlock:{$1}")" = 1 ]; }

# Whether a process is alive (and not a zombie).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}
