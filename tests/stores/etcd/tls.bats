#!/usr/bin/env bats
# etcds://: TLS to etcd with --tls-ca (and a client certificate with --tls-cert/--tls-key when
# the server asks for one), against an etcd of this file's own serving HTTPS only.

load ../../lib/helpers
load ../../lib/etcd_helpers

setup_file() {
  if ! command -v openssl >/dev/null; then
    skip_file "needs openssl to make certificates"
    return 0
  fi
  local d=$BATS_FILE_TMPDIR/pki
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=dlock-test-ca -keyout ca.key -out ca.crt
    printf 'subjectAltName=IP:127.0.0.1,DNS:etcd.test\nextendedKeyUsage=serverAuth,clientAuth\n' >ext
    for who in server client; do
      openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout "$who.key" -out "$who.csr"
      openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile ext -out "$who.crt"
    done
  ) >/dev/null 2>&1 || { skip_file "openssl could not make the certificates"; return 0; }
  export PKI=$d ETCDCTL_CACERT=$d/ca.crt ETCDCTL_CERT=$d/client.crt ETCDCTL_KEY=$d/client.key
  ETCD_SCHEME=https start_etcd --cert-file "$d/server.crt" --key-file "$d/server.key" \
    --trusted-ca-file "$d/ca.crt" --client-cert-auth
}

teardown_file() { stop_etcd; }

setup() {
  skip_if_file_skipped
  dlock_setup
  export DLOCK_URL=etcds://127.0.0.1:$ETCD_PORT
}

@test "etcds:// with the CA and a client certificate takes the lock; without them it is refused" {
  run -0 "$DLOCK" --tls-ca "$PKI/ca.crt" --tls-cert "$PKI/client.crt" --tls-key "$PKI/client.key" \
    run -k tls -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  [ "$output" -gt 0 ]
  # --tls-server-name: the certificate's other name, checked instead of the address
  run -0 "$DLOCK" --tls-ca "$PKI/ca.crt" --tls-cert "$PKI/client.crt" --tls-key "$PKI/client.key" \
    --tls-server-name etcd.test run -k tls -- true
  # the server's certificate is not trusted without its CA: 69, one line
  run -69 --separate-stderr "$DLOCK" --tls-cert "$PKI/client.crt" --tls-key "$PKI/client.key" \
    run -k tls -- touch "$T/ran"
  echo "$stderr"
  [ ! -e "$T/ran" ]
  # no client certificate: the server refuses the handshake
  run -69 --separate-stderr "$DLOCK" --tls-ca "$PKI/ca.crt" run -k tls -- touch "$T/ran"
  echo "$stderr"
  [ ! -e "$T/ran" ]
  # plain http to a TLS port is not etcd: 69
  run -69 "$DLOCK" -u "etcd://127.0.0.1:$ETCD_PORT" run -k tls -- touch "$T/ran"
  [ ! -e "$T/ran" ]
}
