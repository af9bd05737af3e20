#!/usr/bin/env bats
# A server that cannot serve now (OOM, MASTERDOWN, CLUSTERDOWN, LOADING) or a peer that is not
# a Redis server at all: exit 69 with the server's own words (or what the peer sent), never 70,
# and the command does not run.
# Each test starts its own server on a free port, in its own directory, and stops it by pid.

load helpers

setup() { export T=$BATS_TEST_TMPDIR; }
teardown() { kill_recorded; }

# background COMMAND...: runs COMMAND in the background, outside this shell's job table (no
# "Killed" notice when teardown kills it), without bats' fd 3; its pid goes to bg.pid.
background() {
  ("$@" 3>&- & echo $! >>"$T/bg.pid")
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

# fake_peer GREETING ANSWER: a TCP server on a free loopback port (PEER_PORT) that is not
# Redis: to every connection it sends GREETING, reads a request, sends ANSWER, and closes a
# moment later. Both may hold escapes such as \r\n and \xff.
fake_peer() {
  background python3 -c '
import codecs, socket, sys, time
greeting, answer = (codecs.decode(a, "unicode_escape").encode("latin-1") for a in sys.argv[1:3])
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[3], "w").write(str(s.getsockname()[1]))
while True:
    c, _ = s.accept()
    c.settimeout(2)
    try:
        c.sendall(greeting)
        c.recv(65536)
        c.sendall(answer)
        time.sleep(0.2)
    except OSError:
        pass
    c.close()
' "$1" "$2" "$T/peer.port"
  wait_for "[ -s '$T/peer.port' ]"
  PEER_PORT=$(cat "$T/peer.port")
  rm "$T/peer.port"
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

@test "an HTTP server: 69, 'does not speak the Redis protocol', and what it sent" {
  fake_peer '' 'HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
  local url=redis://127.0.0.1:$PEER_PORT
  unavailable "$url" "$url: the server does not speak the Redis protocol"
  [[ $stderr == *'(it sent "HTTP/1.1 400 Bad Request")'* ]]
  # with a handshake (AUTH, SELECT) too, and for status
  DLOCK_PASSWORD=secret-pw unavailable "$url/2" "HTTP/1.1 400 Bad Request"
  [[ $stderr != *secret-pw* ]]
  run -69 --separate-stderr "$DLOCK" -u "$url" status k
  [[ $stderr == *"does not speak the Redis protocol"* ]]
}

@test "an SSH server: 69, and its banner" {
  fake_peer 'SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n' 'Invalid SSH identification string.\r\n'
  unavailable "redis://127.0.0.1:$PEER_PORT" \
    'does not speak the Redis protocol (it sent "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3")'
}

@test "a peer that sends binary garbage: 69, shown printable" {
  fake_peer '' '\x00\x01\xff\xfe garbage\n'
  unavailable "redis://127.0.0.1:$PEER_PORT" 'does not speak the Redis protocol (it sent "\x00\x01\xff\xfe garbage")'
}
