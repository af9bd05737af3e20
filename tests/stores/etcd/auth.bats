#!/usr/bin/env bats
# etcd:// URLs: users and passwords (etcd's auth), several endpoints (fail over to the next one
# that can be reached), an unreachable server, malformed URLs.

load ../../lib/helpers
load ../../lib/etcd_helpers

setup_file() {
  start_etcd
  [ -z "${STORE_SKIP:-}" ] || return 0
  ectl user add root:rootpw >/dev/null
  ectl user grant-role root root >/dev/null
  ectl user add alice:alicepw >/dev/null
  ectl role add dlock-rw >/dev/null
  ectl role grant-permission dlock-rw --prefix=true readwrite dlock: >/dev/null
  ectl user grant-role alice dlock-rw >/dev/null
  ectl auth enable >/dev/null
}

teardown_file() { stop_etcd; }

setup() {
  skip_if_file_skipped
  dlock_setup
  export ALICE="etcd://alice@127.0.0.1:$ETCD_PORT"
  echo alicepw >"$T/password"
}

@test "auth: the user's password (file, environment or URL) works; a wrong one or none is 77" {
  run -0 "$DLOCK" -u "$ALICE" --password-file "$T/password" run -k auth -- true
  DLOCK_PASSWORD=alicepw run -0 "$DLOCK" -u "$ALICE" run -k auth -- true
  run -0 --separate-stderr "$DLOCK" -u "etcd://alice:alicepw@127.0.0.1:$ETCD_PORT" run -k auth -- true
  [[ $stderr == *"visible to other users"* ]]
  run -77 --separate-stderr "$DLOCK" -u "etcd://alice:wrong@127.0.0.1:$ETCD_PORT" run -k auth -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"authentication failed"* ]]
  [[ $stderr != *wrong* ]]
  run -77 --separate-stderr "$DLOCK" run -k auth -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  # a prefix the user may not write: 77 too
  run -77 "$DLOCK" -u "$ALICE" --password-file "$T/password" --prefix other: run -k auth -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  # status and list with the user
  run -1 "$DLOCK" -u "$ALICE" --password-file "$T/password" status auth
}

@test "several endpoints: an unreachable one is passed over; none reachable is 69" {
  run -0 --separate-stderr "$DLOCK" -v -u "etcd://alice@127.0.0.1:$CLOSED_PORT,127.0.0.1:$ETCD_PORT" \
    --password-file "$T/password" run -k many -- true
  [[ $stderr == *"trying the next endpoint"* ]]
  run -69 --separate-stderr "$DLOCK" -u "etcd://127.0.0.1:$CLOSED_PORT" run -k many -- touch "$T/ran"
  echo "$stderr"
  [ "${#stderr_lines[@]}" -eq 1 ]
  [ ! -e "$T/ran" ]
}

@test "a malformed etcd URL is a usage error (64), one line, no password shown" {
  local url
  for url in "etcd://" "etcd://h:99999" "etcd://h:x" "etcd://[::1" "etcd://u:secret@h:1/path" \
    "etcd://a:1,,b:2"; do
    run -64 --separate-stderr "$DLOCK" -u "$url" run -k bad -- true
    echo "$url: $stderr"
    [ "${#stderr_lines[@]}" -le 2 ]
    [[ $stderr != *secret* ]]
  done
  run -64 --separate-stderr "$DLOCK" -u "etcd://127.0.0.1:$ETCD_PORT" -u "etcd://127.0.0.1:$ETCD_PORT" run -k bad -- true
}
