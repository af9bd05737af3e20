#!/usr/bin/env bats
# rediss-sentinel://: TLS to the Sentinels and to the data nodes they name, with the options of
# rediss:// (--tls-ca, --tls-cert/--tls-key, --tls-server-name, DLOCK_TLS_*), against a group in
# which every node speaks TLS only: a master and a replica with --port 0 --tls-port P and
# --tls-replication yes (the replica replicates over TLS), three Sentinels with port 0 and
# tls-port, which talk TLS to the data nodes and to each other (tls-replication yes). Clients
# need no certificate of their own (tls-auth-clients no) unless a test asks for one. One CA and
# one server certificate (DNS:localhost, IP:127.0.0.1) for every node, made by openssl here as
# in tests/e2e/tls.bats. (The data nodes keep the unix socket every test server has, which
# neither dlock nor these tests use: the Sentinels name TCP addresses.)
#
# start_sentinel_group (sentinel_helpers.bash) starts its nodes with GROUP_TLS and
# group_node_args and talks to them with ncli and scli: this file sets those for TLS-only nodes
# and reuses the rest as it is. The group is the file's, but for the failover test, which
# starts its own.

load ../lib/sentinel_helpers

# tls_missing: whether this dlock cannot do TLS, and why, in TLS_MISSING. Its --version says
# "TLS: no" (built without), "TLS: built in, but TLS support is not installed: cannot load
# dlock-tls.so (...)", or the OpenSSL version.
tls_missing() {
  local version
  version=$("$DLOCK" --version)
  case $version in
    *"TLS: no"*) TLS_MISSING="this dlock was built without TLS ($version)" ;;
    *"TLS support is not installed"*)
      TLS_MISSING="TLS support is not installed: this dlock cannot load dlock-tls.so (see $DLOCK --version)" ;;
    *"TLS: "*) return 1 ;;
    *) TLS_MISSING="$DLOCK --version says nothing of TLS: $version" ;;
  esac
}

# make_certs DIR: a CA (ca.crt), the nodes' certificate (server.crt, for localhost and
# 127.0.0.1), one for localhost only (named.crt) and a client certificate (client.crt), all
# signed by the CA.
make_certs() {
  local d=$1
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 2 \
    -subj "/CN=dlock test CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/server.key" -out "$d/server.csr" \
    -subj "/CN=localhost" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$d/san.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -out "$d/server.crt" -days 2 -extfile "$d/san.ext" 2>/dev/null
  printf 'subjectAltName=DNS:localhost\n' >"$d/named.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -out "$d/named.crt" -days 2 -extfile "$d/named.ext" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/client.key" -out "$d/client.csr" \
    -subj "/CN=dlock client" 2>/dev/null
  openssl x509 -req -in "$d/client.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -out "$d/client.crt" -days 2 2>/dev/null
}

# The TLS-only versions of the helpers start_sentinel_group uses. The tests' own redis-cli
# always shows the client certificate, so that it gets in when a test makes the nodes demand one.
tcli() {
  redis-cli --tls --cacert "$CERTS/ca.crt" --cert "$CERTS/client.crt" --key "$CERTS/client.key" "$@"
}
scli() {
  local port=$1
  shift
  tcli -p "$port" ${SENTINEL_AUTH:+--no-auth-warning -a "$SENTINEL_AUTH"} "$@"
}
ncli() {
  local port=$1
  shift
  tcli -p "$port" ${DATA_AUTH:+--no-auth-warning -a "$DATA_AUTH"} "$@"
}

# Every node, data node and Sentinel, listens on a TLS port only (--port 0, --tls-port), with
# the nodes' certificate, asks clients for none, and talks TLS to the others.
GROUP_TLS=1
group_node_args() {
  NODE_ARGS=(--tls-cert-file "$CERTS/server.crt" --tls-key-file "$CERTS/server.key"
    --tls-ca-cert-file "$CERTS/ca.crt" --tls-auth-clients no --tls-replication yes)
}

# start_tls_group: start_sentinel_group with the TLS-only nodes above; exports TLS_URL, the
# group's rediss-sentinel:// URL (SENTINEL_URL is its redis-sentinel:// one).
start_tls_group() {
  start_sentinel_group "$@" || return 1
  export TLS_URL="rediss-sentinel://$SENTINEL_ADDRS#$SENTINEL_MASTER"
}

setup_file() {
  export CERTS=$BATS_FILE_TMPDIR/certs
  TLS_MISSING=""
  if tls_missing; then
    export TLS_MISSING
    return 0
  fi
  mkdir -p "$CERTS"
  make_certs "$CERTS"
  start_tls_group
}
teardown_file() { stop_sentinel_group; }
setup() {
  dlock_setup
  unset DLOCK_URL DLOCK_PASSWORD DLOCK_SENTINEL_PASSWORD \
    DLOCK_TLS_CA DLOCK_TLS_CERT DLOCK_TLS_KEY DLOCK_TLS_SERVER_NAME
  if [ -n "${TLS_MISSING:-}" ]; then
    # CI builds with TLS (as in tests/e2e/tls.bats); a local build without it skips.
    [ -z "${CI:-}" ] || { echo "CI build lacks TLS: $TLS_MISSING" >&2; return 1; }
    skip "$TLS_MISSING"
  fi
  mcli flushall >/dev/null
}
teardown() {
  # what tests change on the master, even if they failed half-way
  if [ -z "${TLS_MISSING:-}" ]; then
    ncli "$MASTER_PORT" config set tls-auth-clients no >/dev/null 2>&1 || true
    ncli "$MASTER_PORT" config set tls-cert-file "$CERTS/server.crt" >/dev/null 2>&1 || true
  fi
  dlock_teardown
}

@test "run through TLS-only Sentinels with --tls-ca: the lock is on the master while the command runs" {
  # The command reads its lock on the master over TLS (the key's value is its token) and passes
  # its status through.
  run -7 --separate-stderr "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k x -t 3s -- sh -c '
    redis-cli --tls --cacert "$1" -p "$2" get "dlock:{x}" >"$3"; echo "$DLOCK_TOKEN" >"$4"; echo ran
    exit 7' sh "$CERTS/ca.crt" "$MASTER_PORT" "$T/seen" "$T/token"
  assert_output ran
  [ -z "$stderr" ] || fail "stderr: $stderr"
  [[ $(cat "$T/token") =~ ^[0-9a-f]{32}$ ]] || fail "token: '$(cat "$T/token")'"
  [ "$(cat "$T/seen")" = "$(cat "$T/token")" ] || fail "the master has '$(cat "$T/seen")'"
  refute master_key_exists x

  # A command that outlives its ttl (1s, renewed every ~333ms over TLS) still holds the lock at
  # the end; DLOCK_TLS_CA works like --tls-ca.
  DLOCK_TLS_CA=$CERTS/ca.crt run -0 --separate-stderr "$DLOCK" -u "$TLS_URL" run -k x -t 1s -- sh -c '
    sleep 2; [ "$(redis-cli --tls --cacert "$1" -p "$2" get "dlock:{x}")" = "$DLOCK_TOKEN" ] &&
    echo still-held' sh "$CERTS/ca.crt" "$MASTER_PORT"
  assert_output still-held
  [ -z "$stderr" ] || fail "stderr: $stderr"
  refute master_key_exists x

  # The certificate names localhost too: --tls-server-name localhost verifies the Sentinels and
  # the master against that name instead of the addresses' 127.0.0.1.
  run -0 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" --tls-server-name localhost run -k x -- echo ran
  assert_output ran
}

@test "without --tls-ca the test CA is not trusted: 69, certificate verification, nothing runs" {
  run -69 --separate-stderr "$DLOCK" -u "$TLS_URL" run -k x -- touch "$T/ran"
  [[ $stderr == *"certificate verification failed"* ]] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ] || fail "the command ran"
  # a name the certificate does not have
  run -69 --separate-stderr "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" \
    --tls-server-name wrong.example run -k x -- touch "$T/ran"
  [[ $stderr == *"hostname mismatch"* ]] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ] || fail "the command ran"
  refute master_key_exists x
}

@test "the master's certificate is verified for the address the Sentinels give (127.0.0.1)" {
  # The master now shows a certificate of the CA for localhost only; the Sentinels still show
  # theirs (localhost and 127.0.0.1), and verify the master's chain only, not its name.
  run -0 ncli "$MASTER_PORT" config set tls-cert-file "$CERTS/named.crt"
  assert_output OK
  run -69 --separate-stderr "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k n -- touch "$T/ran"
  [[ $stderr == *"master '$SENTINEL_MASTER' at rediss://127.0.0.1:$MASTER_PORT: certificate verification failed: IP address mismatch"* ]] ||
    fail "stderr: $stderr"
  [ ! -e "$T/ran" ] || fail "the command ran"
  refute master_key_exists n
  # --tls-server-name localhost fits every node's certificate
  run -0 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" --tls-server-name localhost run -k n -- echo ran
  assert_output ran
}

@test "redis-sentinel:// (no TLS) against the TLS-only Sentinels: 69 at once, nothing runs" {
  local start took
  start=$(now_ms)
  # timeout: a hang fails the test (124) instead of hanging it
  run -69 --separate-stderr timeout -k 1 20 "$DLOCK" -u "$SENTINEL_URL" --connect-timeout 1s \
    run -k x -- touch "$T/ran"
  took=$(($(now_ms) - start))
  [[ $stderr == *"no Sentinel gave the address of master '$SENTINEL_MASTER'"* ]] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ] || fail "the command ran"
  [ "$took" -lt 4000 ] || fail "took $took ms"
  refute master_key_exists x
}

@test "mutual TLS: a master that demands a client certificate gets the one of --tls-cert or DLOCK_TLS_CERT" {
  ncli "$MASTER_PORT" config set tls-auth-clients yes >/dev/null
  # the Sentinels still answer without one; the master refuses the connection
  run -69 --separate-stderr "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k m -- touch "$T/ran"
  [[ $stderr == *"master '$SENTINEL_MASTER' at rediss://127.0.0.1:$MASTER_PORT"* ]] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ] || fail "the command ran"
  run -0 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" --tls-cert "$CERTS/client.crt" \
    --tls-key "$CERTS/client.key" run -k m -- sh -c '
    [ "$(redis-cli --tls --cacert "$1" --cert "$2" --key "$3" -p "$4" get "dlock:{m}")" = "$DLOCK_TOKEN" ] &&
    echo on-master' sh "$CERTS/ca.crt" "$CERTS/client.crt" "$CERTS/client.key" "$MASTER_PORT"
  assert_output on-master
  DLOCK_TLS_CA=$CERTS/ca.crt DLOCK_TLS_CERT=$CERTS/client.crt DLOCK_TLS_KEY=$CERTS/client.key \
    run -0 "$DLOCK" -u "$TLS_URL" run -k m -- echo ran
  assert_output ran
}

@test "SENTINEL FAILOVER over TLS: the running command goes on, its lease renewed on the new master" {
  # a group of this test's own (in $T, stopped by the teardown): the failover changes the master
  start_tls_group
  start_bg hold "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k fo -t 3s -- \
    sh -c 'echo "$DLOCK_TOKEN" >"$0.tmp"; mv "$0.tmp" "$0"; until [ -e "$1" ]; do sleep 0.05; done' \
    "$T/token" "$T/stop"
  local holder=$BG_PID
  wait_for "[ -s '$T/token' ]" 10 || fail "the command did not start: $(cat "$T/hold.err")"
  local token
  token=$(cat "$T/token")
  # the replica has the lock before the switch
  wait_for "node_key_exists $REPLICA_PORT fo" 5
  run -0 scli "${SENTINEL_PORTS%% *}" sentinel failover "$SENTINEL_MASTER"
  assert_output OK
  wait_for_new_master "$MASTER_PORT"
  local new=$NEW_MASTER_PORT
  run -0 ncli "$new" get 'dlock:{fo}'
  [ "$output" = "$token" ] || fail "the new master has '$output'; dlock said: $(cat "$T/hold.err")"
  # dlock renews there (over TLS, verified): its end moves on by a renewal's worth (ttl/3)
  local first_end end=''
  first_end=$(lease_end_on "$new" fo) || fail "the lock is gone from the new master: $(cat "$T/hold.err")"
  wait_for "end=\$(lease_end_on $new fo) && [ \$end -gt $((first_end + 500)) ]" 4 ||
    fail "no renewal on the new master (end ${end:-gone}, was $first_end): $(cat "$T/hold.err")"
  alive "$holder" || fail "dlock exited: $(cat "$T/hold.err")"
  touch "$T/stop"
  local st=0
  wait "$holder" || st=$?
  [ "$st" = 0 ] || fail "dlock exited $st: $(cat "$T/hold.err")"
  [ "$(ncli "$new" exists 'dlock:{fo}')" = 0 ] || fail "the lock is still on the new master"
}
