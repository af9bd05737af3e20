#!/usr/bin/env bats
# rediss:// against a real redis-server with --tls-port and certificates made by openssl here.

load ../lib/helpers

tls_built() { "$DLOCK" --version | grep -qv 'TLS: no'; }

make_certs() {
  local d=$1
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 2 \
    -subj "/CN=dlock test CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/server.key" -out "$d/server.csr" \
    -subj "/CN=localhost" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$d/san.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -out "$d/server.crt" -days 2 -extfile "$d/san.ext" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/client.key" -out "$d/client.csr" \
    -subj "/CN=dlock client" 2>/dev/null
  openssl x509 -req -in "$d/client.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -out "$d/client.crt" -days 2 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/other.key" -out "$d/other.crt" -days 2 \
    -subj "/CN=some other CA" 2>/dev/null
}

setup_file() {
  CERTS=$BATS_FILE_TMPDIR/certs
  mkdir -p "$CERTS"
  make_certs "$CERTS"
  export CERTS
  start_redis --tls-port FREE_PORT --tls-cert-file "$CERTS/server.crt" \
    --tls-key-file "$CERTS/server.key" --tls-ca-cert-file "$CERTS/ca.crt" \
    --tls-auth-clients optional
  export TLS_PORT=$OTHER_PORT
}

setup() {
  dlock_setup
  rcli config set tls-auth-clients optional >/dev/null
  if ! tls_built; then
    # CI builds with TLS; a local build without it must still refuse rediss:// clearly.
    [ -z "${CI:-}" ] || { echo "CI build lacks TLS: $("$DLOCK" --version)" >&2; return 1; }
    skip "this dlock was built without TLS"
  fi
  export TLS_URL="rediss://localhost:$TLS_PORT"
}

@test "run over rediss:// with --tls-ca; status and list over TLS" {
  run -0 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k t -- sh -c 'echo "ran $DLOCK_FENCING_TOKEN"'
  assert_output --regexp '^ran [1-9][0-9]*$'
  "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k t -- sleep 2 &
  wait_for "[ \"\$(rcli exists 'dlock:{t}')\" = 1 ]"
  DLOCK_TLS_CA=$CERTS/ca.crt run -0 "$DLOCK" -u "$TLS_URL" status t
  assert_line --regexp "^command: +sleep\$"
  DLOCK_TLS_CA=$CERTS/ca.crt run -0 "$DLOCK" -u "$TLS_URL" list
  assert_line --regexp " sleep\$"
  wait
}

@test "wait, barrier and latch over TLS" {
  export DLOCK_TLS_CA=$CERTS/ca.crt
  "$DLOCK" -u "$TLS_URL" barrier -k b --parties 2 -w 10s 3>&- &
  local party=$!
  run -0 "$DLOCK" -u "$TLS_URL" barrier -k b --parties 2 -w 10s
  wait "$party"
  run -0 "$DLOCK" -u "$TLS_URL" latch -k l --count 1 --json
  assert_output '{"version":1,"key":"l","count":1}'
  run -0 "$DLOCK" -u "$TLS_URL" latch -k l --down
  run -0 "$DLOCK" -u "$TLS_URL" latch -k l --wait 5s
  "$DLOCK" -u "$TLS_URL" run -k w -- sleep 1 3>&- &
  wait_for "[ \"\$(rcli exists 'dlock:{w}')\" = 1 ]"
  run -0 "$DLOCK" -u "$TLS_URL" wait -k w -w 10s
  wait
}

@test "the lease is renewed over TLS (command runs 3x its TTL)" {
  run -0 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k r -t 1s -- sleep 3
}

@test "mutual TLS: a client certificate when the server demands one" {
  rcli config set tls-auth-clients yes >/dev/null
  run -69 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k m -- echo ran
  refute_output --partial ran
  run -0 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" --tls-cert "$CERTS/client.crt" \
    --tls-key "$CERTS/client.key" run -k m -- echo ran
  assert_output ran
  DLOCK_TLS_CA=$CERTS/ca.crt DLOCK_TLS_CERT=$CERTS/client.crt DLOCK_TLS_KEY=$CERTS/client.key \
    run -0 "$DLOCK" -u "$TLS_URL" run -k m -- true
}

@test "a wrong host name is refused (69); --tls-server-name fixes an IP URL" {
  run -69 --separate-stderr "$DLOCK" -u "rediss://127.0.0.1:$TLS_PORT" --tls-ca "$CERTS/ca.crt" \
    --tls-server-name wrong.example run -k h -- echo ran
  [[ $stderr == *"hostname mismatch"* ]]
  refute_output --partial ran
  run -0 "$DLOCK" -u "rediss://127.0.0.1:$TLS_PORT" --tls-ca "$CERTS/ca.crt" run -k h -- true
  run -0 "$DLOCK" -u "rediss://127.0.0.1:$TLS_PORT" --tls-ca "$CERTS/ca.crt" \
    --tls-server-name localhost run -k h -- true
}

@test "an untrusted certificate is refused (69), also with the system CAs" {
  run -69 --separate-stderr "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/other.crt" run -k u -- echo ran
  [[ $stderr == *"certificate verification failed"* ]]
  run -69 "$DLOCK" -u "$TLS_URL" run -k u -- echo ran
  refute_output --partial ran
}

@test "unreadable or mismatched TLS files are configuration errors (78)" {
  run -78 --separate-stderr "$DLOCK" -u "$TLS_URL" --tls-ca "$BATS_TEST_TMPDIR/none.crt" run -k f -- true
  [[ $stderr == *"--tls-ca"* ]]
  run -78 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" --tls-cert "$CERTS/client.crt" run -k f -- true
  run -78 "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" --tls-cert "$CERTS/client.crt" \
    --tls-key "$CERTS/other.key" run -k f -- true
  printf 'not a certificate\n' >"$BATS_TEST_TMPDIR/junk.crt"
  run -78 "$DLOCK" -u "$TLS_URL" --tls-ca "$BATS_TEST_TMPDIR/junk.crt" run -k f -- true
}

@test "a frozen TLS server: the command is stopped before the lease can expire (76)" {
  "$DLOCK" -u "$TLS_URL" --tls-ca "$CERTS/ca.crt" run -k z -t 2s -- \
    sh -c "echo \$\$ > '$BATS_TEST_TMPDIR/pid'; exec sleep 30" &
  local pid=$!
  wait_for "[ -s '$BATS_TEST_TMPDIR/pid' ]"
  local child
  child=$(cat "$BATS_TEST_TMPDIR/pid")
  # Freeze right after a renewal, so that none is in flight: the lease ends at READ_AT + PTTL.
  just_renewed z 1900
  kill -STOP "$REDIS_PID"
  wait_for "! alive $child" 10
  local died=$(now_ms)
  local rc=0
  wait "$pid" || rc=$?
  kill -CONT "$REDIS_PID"
  [ "$rc" -eq 76 ]
  echo "command found dead $(( died - READ_AT )) ms after the lease was read with ${PTTL} ms left"
  [ "$died" -lt $(( READ_AT + PTTL )) ]
}
