#!/usr/bin/env bats
# The cron and CI policies on etcd:// (issue 27), as only this store keeps them: --note in the
# key's value, --min-hold's hold lease (the key moves onto it, keeping its create revision and
# its place, so `etcdctl lock` waits too), --lock-delay's side key dlock:NAME#delay, --replace's
# dlock:NAME#replace on the holder's lease, and other tenants writing those side keys.

load ../../lib/helpers
load ../../lib/etcd_helpers

setup_file() { start_etcd; }
teardown_file() { stop_etcd; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# keys NAME: the lock keys of dlock's lock NAME, oldest first.
keys() {
  ectl get --prefix "dlock:$1/" -w json | python3 -c '
import base64, json, sys
d = json.load(sys.stdin)
for kv in sorted(d.get("kvs", []), key=lambda kv: kv["create_revision"]):
    print(base64.b64decode(kv["key"]).decode(), kv["create_revision"])'
}

# value NAME: the value of the first lock key of NAME.
value() { ectl get --prefix "dlock:$1/" --print-value-only | head -n 1; }

# free_at NAME MAX_S: waits until `dlock run -n -k NAME` gets the lock (one attempt every
# 100 ms, each a new dlock: the test's poll, not dlock's) and prints when (ms since the epoch).
free_at() {
  local deadline=$(($(now_ms) + $2 * 1000))
  until "$DLOCK" run -n -k "$1" -- true 2>/dev/null; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "still held after $2 s" >&2; return 1; }
    sleep 0.1
  done
  now_ms
}

@test "--note: kept in the key's value, shown in the conflict message, read back capped" {
  local note='deploy #42 of "web" — ünïcode, <tags> & 100% ok'
  start_bg holder "$DLOCK" run -k noted --note "$note" -- sleep 30
  started holder '[ -n "$(keys noted)" ]'
  value noted | python3 -c 'import json, sys; assert json.load(sys.stdin)["note"] == sys.argv[1]' "$note"
  run -75 --separate-stderr "$DLOCK" -v run -n -k noted -- true
  echo "$stderr"
  [[ $stderr == *"$note"* ]]
  run -0 "$DLOCK" status noted
}

@test "--min-hold: the command's status comes back at once, the lock stays taken until the hold ends, then a waiter is woken" {
  local start end got
  start=$(now_ms)
  run -0 "$DLOCK" run -k mh --ttl 2s --min-hold 5s -- true
  end=$(now_ms)
  [ $((end - start)) -lt 2500 ]
  [ -n "$(keys mh)" ]
  value mh | python3 -c 'import json, sys; assert json.load(sys.stdin)["ended"] == 1'
  run -75 "$DLOCK" run -n -k mh -- true
  run -0 "$DLOCK" status mh
  [[ $output == *held* ]]
  # a waiter blocks on the key's deletion (woken, no polling) and gets it at the hold's end
  run -0 "$DLOCK" run -k mh -w 15s -- sh -c 'date +%s%3N'
  got=${lines[-1]}
  echo "got it $((got - start)) ms after the acquisition"
  [ $((got - start)) -ge 4000 ]
  [ $((got - start)) -lt 7500 ]
}

@test "--min-hold shorter than the TTL: free at the hold's end, not at the lease's" {
  local start free
  start=$(now_ms)
  run -0 "$DLOCK" run -k short --ttl 20s --min-hold 2s -- true
  free=$(free_at short 15)
  echo "free $((free - start)) ms after"
  [ $((free - start)) -ge 1000 ]
  [ $((free - start)) -lt 5000 ]
}

@test "--min-hold: a holder that runs past its hold keeps its lease renewed, and a release then frees at once" {
  run -0 "$DLOCK" run -k past --ttl 2s --min-hold 2s -- sleep 4
  run -0 "$DLOCK" run -n -k past -- true
}

@test "--min-hold: etcdctl lock waits until the hold ends" {
  local start got
  start=$(now_ms)
  run -0 "$DLOCK" run -k emh --ttl 2s --min-hold 4s -- true
  ectl lock dlock:emh -- sh -c 'date +%s%3N >"$0"' "$T/ectl.got" >/dev/null 2>&1 3>&- &
  local waiter=$!
  echo "$waiter" >>"$T/bg.pid"
  wait "$waiter"
  got=$(cat "$T/ectl.got")
  echo "etcdctl got it $((got - start)) ms after"
  [ $((got - start)) -ge 3000 ]
  [ $((got - start)) -lt 7000 ]
}

@test "--min-hold: kill -9 of the holder keeps it closed until the hold ends; release --force frees it at once" {
  local start free
  start=$(now_ms)
  start_bg holder "$DLOCK" run -k mk --ttl 2s --min-hold 6s -- sleep 30
  started holder '[ -n "$(keys mk)" ]'
  kill -KILL "$BG_PID"
  sleep 3.5 # past the TTL
  run -75 "$DLOCK" run -n -k mk -- true
  free=$(free_at mk 10)
  echo "free $((free - start)) ms after"
  [ $((free - start)) -ge 5000 ]
  # forced
  run -0 "$DLOCK" run -k mf --ttl 2s --min-hold 30s -- true
  run -75 "$DLOCK" run -n -k mf -- true
  run -0 "$DLOCK" release --force -k mf
  run -0 "$DLOCK" run -n -k mf -- true
}

@test "--lock-delay: after kill -9 of the holder, closed until the delay after its lease's end; a waiter is woken then" {
  local killed got
  start_bg holder "$DLOCK" run -k ld --ttl 2s --lock-delay 3s -- sleep 30
  started holder '[ -n "$(keys ld)" ]'
  kill -KILL "$BG_PID"
  killed=$(now_ms)
  run -0 "$DLOCK" run -k ld -w 15s -- sh -c 'date +%s%3N'
  got=${lines[-1]}
  echo "got it $((got - killed)) ms after the kill"
  [ $((got - killed)) -ge 3000 ]
  [ $((got - killed)) -lt 8000 ]
  [ -z "$(ectl get 'dlock:ld#delay' --print-value-only)" ]
}

@test "--lock-delay armed by a waiter that took over, then kill -9: the waiter behind it (watching the queue since before) honours the delay" {
  start_bg a "$DLOCK" run -k lq --ttl 10s -- sh -c 'until [ -e "$0" ]; do sleep 0.05; done' "$T/a.go"
  started a '[ "$(keys lq | grep -c .)" = 1 ]'
  start_bg b "$DLOCK" run -k lq --ttl 2s --lock-delay 3s -w 30s -- sh -c 'echo $$ >"$0"; exec sleep 30' "$T/b.pid"
  local b=$BG_PID
  started b '[ "$(keys lq | grep -c .)" = 2 ]' "$b"
  # c (TTL 30 s) reads the queue every 10 s: it sees #delay armed through its watch alone
  start_bg c "$DLOCK" run -k lq --ttl 30s -w 30s -- sh -c 'date +%s%3N >"$0"' "$T/c.start"
  local c=$BG_PID
  started c '[ "$(keys lq | grep -c .)" = 3 ]' "$c"
  touch "$T/a.go"
  wait_for "[ -s '$T/b.pid' ]" 10
  local killed
  kill -KILL "$b"
  killed=$(now_ms)
  wait_for "[ -s '$T/c.start' ]" 15
  echo "c started $(($(cat "$T/c.start") - killed)) ms after b's kill -9"
  [ $(($(cat "$T/c.start") - killed)) -ge 3000 ]
  wait "$c"
}

@test "--lock-delay: after release --force, closed for the delay; none after a clean release" {
  local forced free
  start_bg holder "$DLOCK" run -k lf --ttl 10s --lock-delay 3s -- sleep 30
  started holder '[ -n "$(keys lf)" ]'
  run -0 "$DLOCK" release --force -k lf
  forced=$(now_ms)
  run -75 --separate-stderr "$DLOCK" run -n -k lf -- true
  echo "$stderr"
  run "$DLOCK" status lf # free but delayed: it answers (held or not is the status command's)
  [ "$status" -le 1 ]
  free=$(free_at lf 10)
  echo "free $((free - forced)) ms after the forced release"
  [ $((free - forced)) -ge 2000 ]
  # a clean release: no delay
  run -0 "$DLOCK" run -k lc --ttl 10s --lock-delay 30s -- true
  run -0 "$DLOCK" run -n -k lc -- true
  [ -z "$(ectl get 'dlock:lc#delay' --print-value-only)" ]
  # --min-hold's release is clean too: free at the hold's end, no delay after
  run -0 "$DLOCK" run -k lm --ttl 2s --min-hold 2s --lock-delay 30s -- true
  free_at lm 6
}

@test "another tenant's #delay key: without a lease, oversized or malformed it is passed over; a far-future one is cleared by release --force" {
  ectl put 'dlock:t1#delay' '{"host":"h","pid":1,"user":"u","command":"c","token":"ab"}' >/dev/null
  run -0 "$DLOCK" run -n -k t1 -- true
  local lease
  lease=$(ectl lease grant 3600 | awk '{print $2}')
  python3 -c 'import json; print(json.dumps({"host": "h", "pid": 1, "token": "ab", "command": "x" * 100000}))' |
    ectl put --lease="$lease" 'dlock:t2#delay' >/dev/null
  run -0 "$DLOCK" run -n -k t2 -- true
  ectl put --lease="$lease" 'dlock:t3#delay' '[1, 2, {"token": 3}]' >/dev/null
  run -0 "$DLOCK" run -n -k t3 -- true
  ectl put --lease="$lease" 'dlock:t4#delay' '{"host":"h","pid":1,"user":"u","command":"c","token":"ab"}' >/dev/null
  run -75 "$DLOCK" run -n -k t4 -- true
  run "$DLOCK" status t4
  [ "$status" -le 1 ]
  run -75 "$DLOCK" run -k t4 -w 1s -- true
  run -0 "$DLOCK" release --force -k t4
  run -0 "$DLOCK" run -n -k t4 -- true
  ectl lease revoke "$lease" >/dev/null
}

@test "another tenant's #replace and #newest keys: passed over, the holder keeps its lock" {
  ectl put 'dlock:t5#replace' 'garbage' >/dev/null
  ectl put 'dlock:t5#newest' '{"waiter": 5}' >/dev/null
  run -0 "$DLOCK" run -k t5 --ttl 2s -- sleep 2.5
  run -0 "$DLOCK" run -n -k t5 -- true
}

@test "--replace: the holder's renewal is refused, its command stopped, and the replacer gets the lock" {
  local start got
  start_bg holder "$DLOCK" run -k rp --ttl 3s -- sleep 60
  local holder=$BG_PID
  started holder '[ -n "$(keys rp)" ]'
  start=$(now_ms)
  run -0 "$DLOCK" run -k rp --replace --note "hotfix" -w 20s -- sh -c 'date +%s%3N'
  got=${lines[-1]}
  echo "replaced in $((got - start)) ms"
  [ $((got - start)) -lt 10000 ]
  local rc=0
  wait "$holder" || rc=$?
  echo "holder exit $rc: $(cat "$T/holder.err")"
  [ "$rc" -eq 76 ]
  [[ $(cat "$T/holder.err") == *hotfix* ]]
  [ -z "$(ectl get 'dlock:rp#replace' --print-value-only)" ]
}

@test "the side keys of a name with '/' lie outside every queue: etcdctl lock on the shorter name does not wait for them" {
  # (a key of x/a's own queue lies under x/, as in etcdctl's layout: only the side keys are ours)
  start_bg holder "$DLOCK" run -k x/a --lock-delay 30s -- sleep 30
  started holder '[ -n "$(ectl get "dlock:x%2Fa#delay" --keys-only)" ]'
  run -0 "$DLOCK" release --force -k x/a
  [ -n "$(ectl get 'dlock:x%2Fa#delay' --keys-only)" ]
  [ -z "$(ectl get --prefix 'dlock:x/' --keys-only | grep .)" ]
  timeout 10 "$ETCDCTL" --endpoints "$ETCD_ENDPOINT" lock dlock:x -- true
  run -0 "$DLOCK" run -n -k x -- true
  run -75 "$DLOCK" run -n -k x/a -- true
  run -0 "$DLOCK" release --force -k x/a
  run -0 "$DLOCK" run -n -k x/a -- true
}

@test "--min-hold: a nested run on the same key (its renewal by token) does not stretch the hold" {
  local start free
  start=$(now_ms)
  run -0 "$DLOCK" run -k nest --ttl 2s --min-hold 4s -- "$DLOCK" run -k nest -- true
  free=$(free_at nest 10)
  echo "free $((free - start)) ms after"
  [ $((free - start)) -ge 3000 ]
  [ $((free - start)) -lt 6500 ]
}

@test "--supersede while the lock is free but delayed (--lock-delay): the older waiter gives up when the newer one comes" {
  start_bg holder "$DLOCK" run -k sd --ttl 2s --lock-delay 6s -- sleep 30
  started holder '[ -n "$(keys sd)" ]'
  kill -KILL "$BG_PID"
  sleep 2.5 # the lease ended: delayed
  start_bg older "$DLOCK" run -k sd --supersede -w 30s -- touch "$T/older.ran"
  local older=$BG_PID
  sleep 1
  start_bg newer "$DLOCK" run -k sd --supersede -w 30s -- touch "$T/newer.ran"
  local newer=$BG_PID
  local start
  start=$(now_ms)
  local rc=0
  wait "$older" || rc=$?
  echo "older: exit $rc after $(($(now_ms) - start)) ms: $(cat "$T/older.err")"
  [ "$rc" -eq 75 ]
  [ $(($(now_ms) - start)) -lt 2500 ]
  rc=0
  wait "$newer" || rc=$?
  [ "$rc" -eq 0 ]
  [ -e "$T/newer.ran" ]
  [ ! -e "$T/older.ran" ]
}
