#!/usr/bin/env bats
# What only the etcd:// store has: a lease revoked under a running command, interoperation
# with `etcdctl lock` on one name (dlock's PFX is --prefix followed by the name: `dlock run -k
# NAME` and `etcdctl lock dlock:NAME` are one lock), the FIFO queue of keys by create
# revision, fencing tokens that are those revisions, and a network partition (root).

load ../../lib/helpers
load ../../lib/etcd_helpers
load ../../lib/netns_helpers

setup_file() {
  netns_start etcd
  if [ -n "${STORE_SKIP:-}" ]; then
    export NETNS_SKIP=$STORE_SKIP STORE_SKIP=
  else
    ETCD_LISTEN="127.0.0.1 $SERVER_IP"
  fi
  start_etcd
  [ -z "${STORE_SKIP:-}" ] || return 0
  [ -n "${NETNS_SKIP:-}" ] || export NS_URL="etcd://$SERVER_IP:$ETCD_PORT"
}

teardown_file() {
  stop_etcd
  netns_stop
}

setup() {
  skip_if_file_skipped
  dlock_setup
  [ -n "${NETNS_SKIP:-}" ] || heal
}

teardown() {
  [ -n "${STORE_SKIP:-}" ] || [ -n "${NETNS_SKIP:-}" ] || heal
  dlock_teardown
}

# keys NAME: the lock keys of dlock's lock NAME, oldest first (etcdctl sorts by key: sort them
# by create revision here).
keys() {
  ectl get --prefix "dlock:$1/" -w json | python3 -c '
import base64, json, sys
d = json.load(sys.stdin)
for kv in sorted(d.get("kvs", []), key=lambda kv: kv["create_revision"]):
    print(base64.b64decode(kv["key"]).decode(), kv["create_revision"])'
}

@test "a lease revoked under a running command: the command (and its child) stopped with 76 at once, not at the TTL" {
  start_bg holder "$DLOCK" run -k revoke -t 60s -- sh -c 'sleep 60 & echo $! >"$T/child.pid"
    echo $$ >"$T/cmd.pid"; wait'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ] && [ -s '$T/child.pid' ]" 10
  local lease
  lease=$(ectl get --prefix dlock:revoke/ -w json | python3 -c 'import json,sys; print("%x" % json.load(sys.stdin)["kvs"][0]["lease"])')
  local start=$(now_ms)
  ectl lease revoke "$lease"
  local st=0
  wait "$holder" || st=$?
  local took=$(($(now_ms) - start))
  cat "$T/holder.err"
  echo "dlock exited $st $took ms after the revoke"
  [ "$st" -eq 76 ]
  grep -qF "lost lock 'revoke': its etcd lease" "$T/holder.err"
  # the watch of its own key saw the deletion: well before the next renewal (20 s)
  [ "$took" -lt 2000 ]
  wait_for "gone $(cat "$T/cmd.pid") && gone $(cat "$T/child.pid")" 5
}

@test "interop: etcdctl lock holds the name, dlock -n exits 75; etcdctl lock waits while dlock holds it" {
  # etcdctl holds dlock:inter (dlock's key for the lock inter)
  ectl lock dlock:inter -- sh -c 'echo $$ >"$0"; until [ -e "$1" ]; do sleep 0.02; done' \
    "$T/ectl.pid" "$T/ectl.release" >"$T/ectl.out" 2>&1 3>&- &
  echo $! >>"$T/bg.pid"
  local ectl_pid=$!
  wait_for "[ -s '$T/ectl.pid' ]" 10
  run -75 --separate-stderr "$DLOCK" -v run -k inter -n -- touch "$T/ran"
  echo "$stderr"
  [ ! -e "$T/ran" ]
  [[ $stderr == *"etcdctl lock"* ]]
  run -0 "$DLOCK" status inter
  touch "$T/ectl.release"
  wait "$ectl_pid"
  run -0 "$DLOCK" run -k inter -n -- true
  # dlock holds it: etcdctl lock waits until dlock lets go
  rm -f "$T/release"
  start_bg holder "$DLOCK" run -k inter -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done; date +%s%3N >"$1"' \
    "$T/release" "$T/dlock.done"
  local holder=$BG_PID
  wait_for "[ -n \"\$(keys inter)\" ]" 10
  ectl lock dlock:inter -- sh -c 'date +%s%3N >"$0"' "$T/ectl.got" >/dev/null 2>&1 3>&- &
  local waiter=$!
  echo "$waiter" >>"$T/bg.pid"
  wait_for '[ "$(keys inter | wc -l)" = 2 ]' 10
  sleep 0.5
  [ ! -e "$T/ectl.got" ]
  touch "$T/release"
  wait "$holder"
  wait "$waiter"
  echo "etcdctl got it $(($(cat "$T/ectl.got") - $(cat "$T/dlock.done"))) ms after dlock's command ended"
  [ "$(cat "$T/ectl.got")" -ge "$(cat "$T/dlock.done")" ]
}

@test "interop: --prefix '' makes dlock's lock NAME etcdctl's lock NAME" {
  ectl lock plain -- sh -c 'echo $$ >"$0"; until [ -e "$1" ]; do sleep 0.02; done' \
    "$T/ectl.pid" "$T/ectl.release" >/dev/null 2>&1 3>&- &
  echo $! >>"$T/bg.pid"
  local ectl_pid=$!
  wait_for "[ -s '$T/ectl.pid' ]" 10
  run -75 "$DLOCK" --prefix '' run -k plain -n -- true
  run -0 "$DLOCK" run -k plain -n -- true # another name: dlock:plain
  touch "$T/ectl.release"
  wait "$ectl_pid"
  run -0 "$DLOCK" --prefix '' run -k plain -n -- true
}

@test "a waiter wakes within a few hundred ms of the release, and --fair waiters go in the order they came" {
  local i slow=0
  for i in 1 2 3; do
    rm -f "$T/release" "$T/done" "$T/got"
    start_bg holder "$DLOCK" run -k wake -- sh -c 'until [ -e "$0" ]; do sleep 0.01; done; date +%s%3N >"$1"' \
      "$T/release" "$T/done"
    wait_for "[ -n \"\$(keys wake)\" ]" 10
    start_bg waiter "$DLOCK" run -k wake -- sh -c 'date +%s%3N >"$0"' "$T/got"
    wait_for '[ "$(keys wake | wc -l)" = 2 ]' 10
    touch "$T/release"
    wait_for "[ -s '$T/got' ]" 10
    local gap=$(($(cat "$T/got") - $(cat "$T/done")))
    echo "woken $gap ms after the holder's command ended"
    [ "$gap" -lt 500 ] || slow=$((slow + 1))
  done
  [ "$slow" -le 1 ]
  # FIFO: five --fair waiters queued one after another take it in that order
  rm -f "$T/release" "$T/order"
  start_bg holder "$DLOCK" run -k fifo -- sh -c 'until [ -e "$0" ]; do sleep 0.01; done' "$T/release"
  wait_for "[ -n \"\$(keys fifo)\" ]" 10
  for i in 1 2 3 4 5; do
    start_bg "w$i" "$DLOCK" run -k fifo --fair -- sh -c 'echo "$0" >>"$1"' "$i" "$T/order"
    wait_for "[ \"\$(keys fifo | wc -l)\" = $((i + 1)) ]" 10
  done
  touch "$T/release"
  wait_for '[ "$(wc -l <"$T/order" 2>/dev/null)" = 5 ]' 10
  [ "$(tr '\n' ' ' <"$T/order")" = "1 2 3 4 5 " ]
}

@test "fencing: DLOCK_FENCING_TOKEN is the key's create revision, strictly increasing, etcdctl's locks between" {
  local i prev=0 fence rev
  for i in 1 2 3; do
    run -0 "$DLOCK" run -k fence -- sh -c 'echo "$DLOCK_FENCING_TOKEN"
      ETCDCTL_API=3 "$0" --endpoints "$1" get --prefix dlock:fence/ -w json' "$ETCDCTL" "$ETCD_ENDPOINT"
    fence=${lines[0]}
    rev=$(printf '%s' "${lines[1]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["kvs"][0]["create_revision"])')
    echo "run $i: token $fence, key's create revision $rev"
    [ "$fence" = "$rev" ]
    [ "$fence" -gt "$prev" ]
    prev=$fence
    ectl lock dlock:fence true >/dev/null
  done
}

# leases: the IDs of the server's leases, sorted, but the history logs' (kept on purpose).
leases() {
  local lease
  for lease in $(ectl lease list | grep '^[0-9a-f]\{4,\}$'); do
    ectl lease timetolive --keys "$lease" | grep -q '#history:' || echo "$lease"
  done | sort || true
}

# new_leases BEFORE: the leases that are not in BEFORE (an output of leases).
new_leases() { comm -13 <(printf '%s\n' "$1") <(leases); }

@test "a waiter that gives up (-w) leaves no key and no lease behind; -n and Ctrl-C likewise" {
  start_bg holder "$DLOCK" run -k giveup -- sleep 30
  wait_for "[ -n \"\$(keys giveup)\" ]" 10
  local before holder_key
  holder_key=$(keys giveup)
  # A set, not a count: etcdctl lock (the tests before) leaves its session's lease to expire
  # 10 s after it exits, which may happen while this waiter waits.
  before=$(leases)
  # run waits for dlock to exit: after that, nothing of its own may be left
  run -75 "$DLOCK" -v run -k giveup -w 500ms -- true
  echo "$output"
  [[ $output == *"gave up waiting"* ]] # it waited (each attempt of an etcd waiter queues a key)
  [ "$(keys giveup)" = "$holder_key" ]
  [ -z "$(new_leases "$before")" ]
  # -n too
  run -75 "$DLOCK" run -k giveup -n -- true
  [ "$(keys giveup)" = "$holder_key" ]
  [ -z "$(new_leases "$before")" ]
  # and a waiter's Ctrl-C, once its key is queued behind the holder's
  start_bg waiter "$DLOCK" run -k giveup -- touch "$T/ran"
  wait_for '[ "$(keys giveup | wc -l)" = 2 ]' 10
  kill -INT "$BG_PID"
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 130 ]
  [ "$(keys giveup)" = "$holder_key" ]
  [ -z "$(new_leases "$before")" ]
  [ ! -e "$T/ran" ]
}

@test "partition: the holder's command is stopped (76) before its lease ends; a waiter gets it after" {
  [ -z "${NETNS_SKIP:-}" ] || skip "$NETNS_SKIP"
  ns_holder part 4s
  outside_waiter part 4s
  wait_for '[ "$(keys part | wc -l)" = 2 ]' 10
  cut_holder
  # the waiter gets the lock once the lease ran out
  waiter_took
  # stopped before the 4 s lease could end
  [ $((LAST - CUT)) -lt 4000 ]
}

@test "partition of the leader: dlock elect's command in the namespace stops (76) before the standby's starts" {
  [ -z "${NETNS_SKIP:-}" ] || skip "$NETNS_SKIP"
  elect_witness
  touch "$T/root.go" # the standby's command ends once it has started
  in_ns "$DLOCK" -u "$NS_URL" elect -k lead -t 4s --value in-ns -- sh "$T/witness.sh" ns \
    2>"$T/leader.err" 3>&- &
  local leader=$!
  echo "$leader" >>"$T/bg.pid"
  wait_for "grep -q 'start ns' '$T/witness'" 10
  start_bg standby "$DLOCK" elect -k lead -t 4s --value in-root -w 30s -- sh "$T/witness.sh" root
  local standby=$BG_PID
  wait_for '[ "$(keys lead | wc -l)" = 2 ]' 10
  local cut
  cut=$(date +%s%N)
  partition
  local st=0
  wait "$leader" || st=$?
  cat "$T/leader.err"
  echo "the old leader's dlock exited $st"
  [ "$st" -eq 76 ]
  wait "$standby"
  cat "$T/witness"
  local stopped started
  stopped=$(witness_at stop ns)
  started=$(witness_at start root)
  echo "old leader's command stopped at +$(((stopped - cut) / 1000000)) ms, the standby's started at +$(((started - cut) / 1000000)) ms"
  [ -n "$stopped" ] && [ -n "$started" ]
  [ "$stopped" -lt "$started" ]
  [ "$(witness_order)" = "start ns,stop ns,start root,stop root," ]
}

# tenant_key NAME VALUE: another tenant of the store puts a key in dlock's lock NAME's queue
# (under a lease of its own, as etcdctl lock does) with VALUE (read from stdin if VALUE is -).
tenant_key() {
  local lease
  lease=$(ectl lease grant 120 | awk '{print $2}')
  if [ "$2" = - ]; then
    ectl put --lease="$lease" "dlock:$1/$lease" >/dev/null
  else
    ectl put --lease="$lease" "dlock:$1/$lease" "$2" >/dev/null
  fi
}

@test "another tenant's holder value with fields of other types: status, list and a waiter read it as not dlock's, list shows the other locks" {
  tenant_key badtype '{"host":5,"user":["x"],"command":{"a":1},"pid":"abc","token":7,"acquired_ms":[]}'
  tenant_key badarray '[1,2,3]'
  ectl put dlock:nolease/abc 'no lease' >/dev/null
  start_bg holder "$DLOCK" run -k good -- sleep 30
  wait_for "[ -n \"\$(keys good)\" ]" 10
  run -0 "$DLOCK" status badtype
  [[ $output == *held* ]]
  run -0 "$DLOCK" status badarray
  run -0 "$DLOCK" status nolease
  run -0 "$DLOCK" list
  [[ $output == *badtype* ]]
  [[ $output == *badarray* ]]
  [[ $output == *nolease* ]]
  [[ $output == *good* ]]
  run -0 "$DLOCK" list --json
  printf '%s' "$output" | python3 -c 'import json,sys; json.load(sys.stdin)'
  # a waiter keeps waiting until --wait runs out, then says who holds it
  run -75 "$DLOCK" -v run -k badtype -w 1s -- true
  [ "$(grep -c '^dlock: ' <<<"$output")" -ge 1 ]
}

@test "another tenant's 1 MB value under a lock: status shows 'not dlock', not the value; a waiter gives up at --wait" {
  python3 -c 'import json; print(json.dumps({"host": "h", "pid": 1, "user": "u", "command": "x" * 1000000}))' |
    tenant_key big -
  run -0 "$DLOCK" status big
  [[ $output == *"not dlock"* ]]
  [ "${#output}" -lt 4000 ]
  run -0 "$DLOCK" list
  [ "${#output}" -lt 4000 ]
  run -75 "$DLOCK" run -k big -w 1s -- true
  [ "${#output}" -lt 4000 ]
}

@test "more than 8 MiB of other tenants' keys under one lock: status and a waiter stop reading, one line, 69" {
  local i
  for i in 1 2 3 4 5 6 7; do
    python3 -c 'print("x" * 1400000)' | tenant_key flood -
  done
  run -69 "$DLOCK" status flood
  [ "${#lines[@]}" = 1 ]
  [[ $output == "dlock: "*"MiB"* ]]
  run -69 "$DLOCK" run -k flood -w 2s -- true
  [[ $output == "dlock: "*"MiB"* ]]
}

# history_count NAME: how many keys lie under the name's history prefix.
history_count() { ectl get --prefix "dlock:$1#history:" --keys-only | grep -c . || true; }

@test "history: dlock:NAME#history:<16 hex> on one lease, outside etcdctl lock's prefix; capped at 100, oldest first; foreign keys, junk and huge values passed over" {
  run -0 "$DLOCK" run -k cap -- true
  local first
  first=$(ectl get --prefix 'dlock:cap#history:' --print-value-only | head -1)
  [[ $first == "v1 "* ]]
  # the events' keys: beside the side keys, never under dlock:cap/ (etcdctl lock takes it at once)
  run -0 ectl get --prefix 'dlock:cap' --keys-only
  echo "$output"
  [ -z "$(grep -v '^dlock:cap#history:[0-9a-f]\{16\}$' <<<"$output" | grep .)" ]
  run -0 timeout 5 "$ETCDCTL" --endpoints "$ETCD_ENDPOINT" lock dlock:cap true
  # all on one lease, kept alive to 7 days by each event
  local key lease
  key=$(ectl get --prefix 'dlock:cap#history:' --keys-only | head -1)
  lease=$(ectl get "$key" -w json | python3 -c 'import json,sys; print("%x" % json.load(sys.stdin)["kvs"][0]["lease"])')
  run -0 ectl lease timetolive "$lease" --keys
  echo "$output"
  [[ $output =~ remaining\(60[0-9]{4}s\) ]]
  [ "$(grep -o 'dlock:cap#history:' <<<"$output" | wc -l)" -eq 2 ]
  # 101 more events from etcdctl in one transaction, then a run: the oldest go, 100 stay
  {
    echo # no comparisons
    for i in $(seq 101); do printf 'put dlock:cap#history:%016x "%s" --lease=%s\n' "$((0x7000 + i))" "$first" "$lease"; done
    echo
    echo # no failure branch
  } | ectl txn >/dev/null
  [ "$(history_count cap)" -eq 103 ]
  run -0 "$DLOCK" run -k cap --note last -- true
  [ "$(history_count cap)" -eq 100 ]
  run -0 "$DLOCK" history cap --limit 100 --json
  python3 -c '
import json, sys
ev = json.loads(sys.argv[1])["events"]
assert len(ev) == 100, len(ev)
assert ev[0]["event"] == "released" and ev[0]["note"] == "last", ev[0]
assert ev[1]["event"] == "acquired" and ev[1]["note"] == "last", ev[1]
assert all(e["fencing_token"] == ev[2]["fencing_token"] for e in ev[2:]), "the first run s two events went first"
' "$output"
  # another tenant's keys under the log's prefix: junk, a huge value, another shape
  ectl put 'dlock:cap#history:00000000000000ff' 'not an event' >/dev/null
  head -c 200000 /dev/zero | tr '\0' x | ectl put 'dlock:cap#history:00000000000000fe' >/dev/null
  ectl put 'dlock:cap#history:zz' "$first" >/dev/null
  run -0 --separate-stderr "$DLOCK" history cap --json
  python3 -c '
import json, sys
ev = json.loads(sys.argv[1])["events"]
assert 0 < len(ev) <= 20 and ev[0]["event"] == "released", ev
' "$output"
  [ "${#output}" -lt 20000 ]
  # and the next run still trims to 100 (the junk counts, but only dlock's shape is deleted)
  run -0 "$DLOCK" run -k cap -- true
  [ "$(history_count cap)" -eq 100 ]
}
