#!/usr/bin/env bats
# A server that cannot serve now (OOM, MASTERDOWN, CLUSTERDOWN, LOADING) or a peer that is not
# a Redis server at all: exit 69 with the server's own words (or what the peer sent), never 70,
# and the command does not run. A peer that never answers: status and list give up after
# --connect-timeout.
# Each test starts its own server on a free port, in its own directory; the teardown stops it.

load ../lib/helpers

# No server for the whole file: each test starts the one it needs (start_server).
setup_file() { :; }

# fake_peer GREETING ANSWER: a TCP server on a free loopback port (PEER_PORT) that is not
# Redis: to every connection it sends GREETING, reads a request, sends ANSWER, and closes a
# moment later. Both may hold escapes such as \r\n and \xff.
fake_peer() {
  start_bg peer python3 -c '
import codecs, socket, sys, time
greeting, answer = (codecs.decode(a, "unicode_escape").encode("latin-1") for a in sys.argv[1:3])
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
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
' "$1" "$2"
  wait_for "[ -s '$T/peer.out' ]"
  PEER_PORT=$(cat "$T/peer.out")
}

# unavailable URL WORDS [GLOBAL-ARGS...]: dlock run against URL exits 69 with one diagnostic
# line that contains WORDS, and the command does not run.
unavailable() {
  local url=$1 words=$2
  shift 2
  run -69 --separate-stderr "$DLOCK" -u "$url" "$@" run -k k -- echo ran
  refute_output --partial ran
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
  [[ $stderr == dlock:* ]]
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
  start_server replica --replicaof 127.0.0.1 "$CLOSED_PORT" --replica-serve-stale-data no
  unavailable "redis://127.0.0.1:$SERVER_PORT" "MASTERDOWN Link with MASTER is down"
  run -69 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:$SERVER_PORT" status k
  [[ $stderr == *MASTERDOWN* ]]
}

@test "a cluster node without slots (CLUSTERDOWN): 69" {
  start_server cluster --cluster-enabled yes --cluster-config-file "$T/cluster/nodes.conf" \
    --cluster-port FREE_PORT
  unavailable "redis://127.0.0.1:$SERVER_PORT" "CLUSTERDOWN Hash slot not served"
}

@test "a server loading its dataset (LOADING): 69" {
  start_server loading
  redis-cli -p "$SERVER_PORT" eval 'for i = 1, 10000 do redis.call("SET", "k" .. i, i) end' 0 >/dev/null
  redis-cli -p "$SERVER_PORT" save >/dev/null
  redis-cli -p "$SERVER_PORT" shutdown nosave >/dev/null 2>&1 || true
  wait_for "! alive $SERVER_PID"
  # The same directory, so its dump: 1 ms per key, about 10 s of loading (the test needs less
  # than a second of it, a loaded machine more), with events processed every KB so that it
  # answers LOADING meanwhile.
  start_server loading --key-load-delay 1000 --loading-process-events-interval-bytes 1024
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

# ---------------------------------------------------------------------------------------------
# a peer that never answers: --connect-timeout for status and list

# silent_peer: a TCP server that accepts connections and never answers; sets SILENT_PORT.
silent_peer() {
  start_bg silent python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept()[0])
'
  wait_for '[ -s "$T/silent.out" ]'
  SILENT_PORT=$(cat "$T/silent.out")
}

@test "status and list give up after --connect-timeout on a peer that never answers" {
  silent_peer
  local cmd start took
  for cmd in list "list --json" "list 'a*'" "status k" "status k --json"; do
    start=$(now_ms)
    # shellcheck disable=SC2086
    run -69 --separate-stderr "$DLOCK" -u "redis://127.0.0.1:$SILENT_PORT" --connect-timeout 500ms $cmd
    took=$(( $(now_ms) - start ))
    echo "$cmd: $took ms: $stderr"
    [ "$took" -ge 450 ] && [ "$took" -lt 1500 ] || fail "$cmd took $took ms"
    [ -z "$output" ]
    [[ $stderr == *"timed out"* ]] || fail "$stderr"
  done
  start=$(now_ms)
  DLOCK_CONNECT_TIMEOUT=500ms run -69 "$DLOCK" -u "redis://127.0.0.1:$SILENT_PORT" list
  took=$(( $(now_ms) - start ))
  [ "$took" -ge 450 ] && [ "$took" -lt 1500 ] || fail "DLOCK_CONNECT_TIMEOUT: list took $took ms"
}

@test "elect --keep-campaigning at a store that is not there: one warning per attempt, each pause twice the last; SIGTERM ends it (143)" {
  local port
  port=$(free_port)
  start_bg keeper "$DLOCK" -u "redis://127.0.0.1:$port" elect -k k --keep-campaigning -- touch "$T/ran"
  local keeper=$BG_PID
  wait_for "[ \"\$(grep -c 'campaigning again' '$T/keeper.err')\" -ge 2 ]" 20
  kill -TERM "$keeper"
  local st=0
  wait "$keeper" || st=$?
  cat "$T/keeper.err"
  [ "$st" -eq 143 ]
  [ ! -e "$T/ran" ]
  [ "$(grep -o "campaigning again for 'k' in [0-9]*s$" "$T/keeper.err" | head -n 2 | cut -d' ' -f6 | paste -sd' ')" = "1s 2s" ]
}
