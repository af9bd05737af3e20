#!/usr/bin/env bats
# `dlock acquire` on etcd:// (Feature::detached): the holder's lease outlives the dlock process
# that took it (not revoked at its exit; it ends with its TTL unless renewed), and `dlock renew`
# and `release` from another process find the key by the token's fingerprint in its value.

load ../../lib/helpers
load ../../lib/etcd_helpers

setup_file() { start_etcd; }
teardown_file() { stop_etcd; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# keys NAME: every key under dlock:NAME/ (its queue).
keys() { ectl get --prefix "dlock:$1/" --keys-only | grep . || true; }

# lease_ttl NAME: the remaining TTL (s) of the lease of NAME's first key.
lease_ttl() {
  local lease
  lease=$(ectl get --prefix "dlock:$1/" -w json | python3 -c 'import json,sys; print("%x" % json.load(sys.stdin)["kvs"][0]["lease"])')
  ectl lease timetolive "$lease" | sed -n 's/.*remaining(\(-*[0-9]*\)s).*/\1/p'
}

@test "acquire prints the token; the lease outlives dlock; renew and release by token from other processes" {
  run -0 --separate-stderr "$DLOCK" acquire -k ar -t 4s
  [ -z "$stderr" ]
  [[ $output =~ ^[0-9a-f]{32}$ ]]
  local tok=$output
  # the key is there after dlock exited, on a lease still running
  run -0 keys ar
  [[ $output =~ ^dlock:ar/[0-9a-f]+$ ]]
  run -0 "$DLOCK" status ar
  run -75 "$DLOCK" run -k ar -n -- true
  # renew restores the lease's length
  sleep 1.5
  [ "$(lease_ttl ar)" -le 3 ]
  run -0 --separate-stderr "$DLOCK" renew -k ar --token "$tok"
  [ -z "$stderr" ]
  [ "$(lease_ttl ar)" -ge 3 ]
  # --ttl: a lease of the new length, the key keeps its place (create revision)
  local before
  before=$(ectl get dlock:ar/ --prefix -w json | python3 -c 'import json,sys; print(json.load(sys.stdin)["kvs"][0]["create_revision"])')
  run -0 "$DLOCK" renew -k ar --token "$tok" --ttl 20s
  [ "$(lease_ttl ar)" -gt 10 ]
  run -0 ectl get dlock:ar/ --prefix -w json
  [[ $output == *"\"create_revision\":$before"* ]]
  # a wrong token neither renews nor releases
  local wrong=0123456789abcdef0123456789abcdef
  run -76 "$DLOCK" renew -k ar --token "$wrong"
  run -76 "$DLOCK" release -k ar --token "$wrong"
  run -0 "$DLOCK" status ar
  DLOCK_TOKEN=$tok run -0 "$DLOCK" renew -k ar
  # the right token releases, once
  run -0 "$DLOCK" release -k ar --token "$tok"
  [ -z "$(keys ar)" ]
  run -1 "$DLOCK" status ar
  run -76 "$DLOCK" release -k ar --token "$tok"
  run -76 "$DLOCK" renew -k ar --token "$tok"
  tok=$("$DLOCK" acquire -k ar -t 5s)
  DLOCK_TOKEN=$tok run -0 "$DLOCK" release -k ar
  [ -z "$(keys ar)" ]
}

@test "acquire: not renewed, the lock ends with its TTL; -n conflicts 75; a waiter gets it when it expires" {
  "$DLOCK" acquire -k ex -t 2s >"$T/tok"
  run -75 "$DLOCK" acquire -k ex -t 5s -n
  run -75 "$DLOCK" run -k ex -n -- true
  start_bg waiter "$DLOCK" run -k ex -w 20s -- true
  local waiter=$BG_PID
  wait "$waiter"
  run -76 "$DLOCK" renew -k ex --token "$(cat "$T/tok")"
}

@test "acquire --shared and --limit: each holder's own key, released by its own token" {
  local a b c
  a=$("$DLOCK" acquire -k sh -t 20s --shared)
  b=$("$DLOCK" acquire -k sh -t 20s --shared)
  run -75 "$DLOCK" acquire -k sh -t 20s -n
  run -0 keys sh
  [ "${#lines[@]}" -eq 2 ]
  [[ ${lines[0]} == dlock:sh/read/* ]]
  run -0 "$DLOCK" release -k sh --token "$a"
  run -0 "$DLOCK" renew -k sh --token "$b"
  run -0 "$DLOCK" release -k sh --token "$b"
  [ -z "$(keys sh)" ]
  a=$("$DLOCK" acquire -k lim -t 20s --limit 2)
  b=$("$DLOCK" acquire -k lim -t 20s --limit 2)
  run -75 "$DLOCK" acquire -k lim -t 20s --limit 2 -n
  run -0 "$DLOCK" release -k lim --token "$a"
  c=$("$DLOCK" acquire -k lim -t 20s --limit 2 -n)
  run -0 "$DLOCK" release -k lim --force
  [ -z "$(keys lim)" ]
  run -76 "$DLOCK" renew -k lim --token "$c"
}

@test "another tenant's key carrying the holder's token fingerprint is not taken for the holder's" {
  local tok
  tok=$("$DLOCK" acquire -k fp -t 20s)
  local value
  value=$(ectl get --prefix dlock:fp/ --print-value-only | head -n 1)
  # the same record, copied with no lease, and under a name outside the layout
  ectl put dlock:fp/0 "$value" >/dev/null
  ectl put dlock:fp/read/zz "$value" >/dev/null
  run -0 "$DLOCK" release -k fp --token "$tok"
  run -0 ectl get --prefix dlock:fp/ --keys-only
  [[ $output == *dlock:fp/0* ]] # the tenant's key is left alone
  run -76 "$DLOCK" renew -k fp --token "$tok"
  ectl del --prefix dlock:fp/ >/dev/null
}

@test "a three-step CI script holds the lock across steps; competitors get 75 until it releases" {
  local tok
  tok=$("$DLOCK" acquire -k ci -t 10s)
  DLOCK_TOKEN=$tok "$DLOCK" run -k ci -- true # a nested run under the token
  run -75 "$DLOCK" run -k ci -n -- true
  run -0 "$DLOCK" renew -k ci --token "$tok"
  run -75 "$DLOCK" acquire -k ci -t 5s -n
  run -0 "$DLOCK" release -k ci --token "$tok"
  run -0 "$DLOCK" run -k ci -n -- true
}
