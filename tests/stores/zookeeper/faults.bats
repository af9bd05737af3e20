#!/usr/bin/env bats
# What only the ZooKeeper store (zk://) has: Curator's node layout seen with zkCli, a lock lost
# when its node is deleted or its session cannot be kept (server frozen or killed, the session
# expired while dlock was frozen), the session
# timeout as the lease, the queue without a herd, czxid fencing, digest ACLs. A private server
# per file (zookeeper_helpers.bash: tickTime 500 ms, sessions of 1 s to 60 s).

load ../../lib/helpers
load ../../lib/zookeeper_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() {
  [ -z "${ZK_PID:-}" ] || kill -CONT "$ZK_PID" 2>/dev/null || true
  dlock_teardown
}

# holder KEY [dlock run options...]: a background dlock run (start_bg holder: BG_PID) whose
# command starts a child (its pid in $T/child.pid), writes its own pid to $T/cmd.pid and the
# time it got SIGTERM to $T/termed; returns once it runs.
holder() {
  local key=$1
  shift
  rm -f "$T/cmd.pid" "$T/child.pid" "$T/termed"
  start_bg holder "$DLOCK" run -k "$key" "$@" -- sh -c 'sleep 600 & echo $! >"$T/child.pid"
    trap "date +%s%3N >\"\$T/termed\"; kill \$!; exit 143" TERM
    echo $$ >"$T/cmd.pid.tmp"; mv "$T/cmd.pid.tmp" "$T/cmd.pid"; while :; do sleep 0.01; done'
  wait_for "[ -s '$T/cmd.pid' ] && [ -s '$T/child.pid' ]" 10
}

@test "zookeeper: Curator's layout: _c_<uuid>-lock-<sequence> under CHROOT/PREFIXNAME, data = the holder record" {
  holder layout
  local dlock_pid=$BG_PID
  run -0 zk_cli ls /dlock-test/dlock:layout
  echo "$output"
  # a pair made in one transaction: -lock- for Curator's mutex, -__WRIT__ (the next sequence,
  # the same uuid) for its read/write lock
  assert_output --regexp '_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-lock-[0-9]{10}'
  local node partner
  node=$(zk_contenders | grep 'dlock:layout/' | grep -- -lock-)
  partner=$(zk_contenders | grep 'dlock:layout/' | grep -- -__WRIT__)
  [ "${partner%-__WRIT__*}" = "${node%-lock-*}" ]
  [ "$((10#${partner##*__WRIT__}))" -eq "$((10#${node##*-lock-} + 1))" ]
  run -0 zk_cli get "$node"
  echo "$output"
  assert_line "user=$(id -un)"
  assert_line "host=$(uname -n)"
  assert_line "pid=$dlock_pid"
  # the token itself is not there, only its fingerprint
  refute_output --partial "$(tr '\0' '\n' <"/proc/$(cat "$T/cmd.pid")/environ" | sed -n 's/^DLOCK_TOKEN=//p')"
  # an ephemeral node of dlock's session; fencing token = its czxid
  run -0 zk_cli stat "$node"
  echo "$output"
  local owner czxid fence
  owner=$(printf '%s\n' "$output" | sed -n 's/^ephemeralOwner = //p')
  czxid=$(printf '%s\n' "$output" | sed -n 's/^cZxid = //p')
  [ "$owner" != 0x0 ]
  fence=$(tr '\0' '\n' <"/proc/$(cat "$T/cmd.pid")/environ" | sed -n 's/^DLOCK_FENCING_TOKEN=//p')
  [ "$((czxid))" = "$fence" ]
  # a name with '/' is one node, escaped; --prefix '' is the name alone
  run -0 "$DLOCK" --prefix '' run -k 'a/b' -- sh -c 'sleep 0.1'
  run -0 zk_cli ls /dlock-test
  echo "$output"
  assert_output --partial 'a%2Fb'
  refute_output --regexp '(^|[ ,\[])a,'
}

@test "zookeeper: the holder's node deleted: 76 and the command's tree stopped within 500 ms" {
  holder gone -t 30s
  local dlock_pid=$BG_PID child node
  child=$(cat "$T/child.pid")
  node=$(zk_contenders | grep 'dlock:gone/' | grep -- -lock-)
  run -0 zk_cli delete "$node"
  local deleted=$(now_ms) st=0
  wait "$dlock_pid" || st=$?
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  wait_for "[ -s '$T/termed' ]" 1
  local took=$(($(cat "$T/termed") - deleted))
  echo "SIGTERM came $took ms after zkCli returned"
  [ "$took" -lt 500 ]
  wait_for "gone $child" 2
  grep -q "lost lock 'gone': its ZooKeeper session expired or its node was deleted" "$T/holder.err"
}

@test "zookeeper: the server frozen (SIGSTOP) under a holder: the command is stopped before the session could expire" {
  holder frozen -t 3s
  local dlock_pid=$BG_PID
  sleep 1.2 # some renewals went through
  local stopped=$(now_ms)
  kill -STOP "$ZK_PID"
  local st=0
  wait "$dlock_pid" || st=$?
  kill -CONT "$ZK_PID"
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  local took=$(($(cat "$T/termed") - stopped))
  echo "SIGTERM came $took ms after the server froze (session timeout 3000 ms)"
  # the server expires the session 3 s after it last heard from dlock, which is before it froze
  [ "$took" -lt 3000 ]
  # the lock comes free once the server expires the old session
  run -0 "$DLOCK" run -k frozen -w 10s -- true
}

@test "zookeeper: the session expired while dlock was frozen: the command stopped before the lock moved on; dlock exits 76" {
  holder expire -t 2s
  local dlock_pid=$BG_PID cmd
  cmd=$(cat "$T/cmd.pid")
  start_bg waiter "$DLOCK" run -k expire -w 20s -- sh -c 'date +%s%3N >"$T/taken"'
  local waiter=$BG_PID
  sleep 1 # the waiter queued, and a renewal or two went through
  local frozen
  frozen=$(now_ms)
  kill -STOP "$dlock_pid"
  # the server expires the frozen client's session (2 s) and the waiter gets the lock
  wait_for "[ -s '$T/taken' ]" 15
  local taken termed
  taken=$(cat "$T/taken")
  wait_for "[ -s '$T/termed' ]" 2 || true
  termed=$(cat "$T/termed" 2>/dev/null || echo never)
  echo "frozen at 0, the command's SIGTERM at +$((${termed/never/0} - frozen)) ms, the waiter took the lock at +$((taken - frozen)) ms"
  # dlock's guard stopped the command at the lease's end, before the lock moved on
  [ "$termed" != never ] && [ "$termed" -le "$taken" ]
  gone "$cmd"
  kill -CONT "$dlock_pid"
  local st=0
  wait "$dlock_pid" || st=$?
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  wait "$waiter"
}

@test "zookeeper: dlock SIGKILLed: the lock is free within the session timeout" {
  holder crash -t 2s
  local start
  start=$(now_ms)
  kill -KILL "$BG_PID"
  run -0 "$DLOCK" run -k crash -t 2s -w 10s -- true
  local took=$(($(now_ms) - start))
  echo "free after $took ms (session timeout 2000 ms)"
  [ "$took" -lt 3000 ]
  wait_for "gone $(cat "$T/cmd.pid")" 5
}

@test "zookeeper: waiters wake in FIFO order, each watching only the node before it (no herd)" {
  holder fifo
  local first=$BG_PID w pids=()
  for w in 1 2 3 4; do
    "$DLOCK" run -k fifo -w 60s -- sh -c "echo $w >>'$T/order'" 3>&- &
    pids+=($!)
    echo "$!" >>"$T/bg.pid"
    wait_for "[ \$(zk_contenders | grep 'dlock:fifo/' | grep -c -- -lock-) -eq $((w + 1)) ]" 10
  done
  # wchp: the watches by path: the holder watches its own node, each waiter the one before it
  run -0 zk_4lw wchp
  echo "$output"
  local nodes n watchers
  mapfile -t nodes < <(zk_contenders | grep 'dlock:fifo/' | grep -- -lock- | sort -t- -k7)
  [ "${#nodes[@]}" -eq 5 ]
  for n in 0 1 2 3 4; do
    watchers=$(printf '%s\n' "$output" | awk -v p="${nodes[$n]}" '$0 == p { on = 1; next } /^\// { on = 0 } on && /0x/ { c++ } END { print c + 0 }')
    echo "${nodes[$n]}: $watchers watchers"
    if [ "$n" -eq 0 ]; then [ "$watchers" -eq 2 ]; elif [ "$n" -lt 4 ]; then [ "$watchers" -eq 1 ]; else [ "$watchers" -eq 0 ]; fi
  done
  kill -TERM "$first"
  wait "$first" || true
  for w in "${pids[@]}"; do wait "$w"; done
  run -0 cat "$T/order"
  assert_output "$(printf '1\n2\n3\n4')"
}

@test "zookeeper: fencing tokens (czxid) increase across runs, even when the lock's node is deleted in between" {
  "$DLOCK" run -k fz -- sh -c 'echo "$DLOCK_FENCING_TOKEN" >>"$T/tokens"'
  "$DLOCK" run -k fz -- sh -c 'echo "$DLOCK_FENCING_TOKEN" >>"$T/tokens"'
  run -0 zk_cli deleteall /dlock-test/dlock:fz
  "$DLOCK" run -k fz -- sh -c 'echo "$DLOCK_FENCING_TOKEN" >>"$T/tokens"'
  cat "$T/tokens"
  run -0 python3 -c '
import sys
t = [int(x) for x in open(sys.argv[1]).read().split()]
assert len(t) == 3 and t[0] >= 1 and t[0] < t[1] < t[2], t
' "$T/tokens"
}

@test "zookeeper: a --ttl the server would not grant as the session timeout is refused with 64" {
  run -64 --separate-stderr "$DLOCK" run -k ttl -t 2m -- touch "$T/ran"
  echo "$stderr"
  [ "${#stderr_lines[@]}" -eq 1 ]
  [[ $stderr == *maxSessionTimeout* && $stderr == *"--ttl 1m or less"* ]]
  [ ! -e "$T/ran" ]
  run -0 zk_contenders
  refute_output --partial 'dlock:ttl/'
}

@test "zookeeper: unreachable: 69 within the connect timeout; malformed URL: 64; several zk:// URLs: 64" {
  local start took
  start=$(now_ms)
  run -69 --separate-stderr "$DLOCK" -u "zk://127.0.0.1:$CLOSED_PORT/x" --connect-timeout 1s run -k u -- touch "$T/ran"
  took=$(($(now_ms) - start))
  echo "$stderr ($took ms)"
  [ "$took" -lt 3000 ]
  [ ! -e "$T/ran" ]
  for url in zk://h:0 zk://h:port zk:///x zk://h/a//b zk://h/a/../b 'zk://h?x=1'; do
    run -64 --separate-stderr "$DLOCK" -u "$url" run -k u -- touch "$T/ran"
    echo "$url: $stderr"
    [ "${#stderr_lines[@]}" -eq 1 ]
  done
  run -64 "$DLOCK" -u "$DLOCK_URL" -u "$DLOCK_URL" run -k u -- true
  [ ! -e "$T/ran" ]
}

@test "zookeeper: digest authentication: the owner of an ACL'd chroot locks in it; anyone else gets 77" {
  local digest
  digest=$(python3 -c 'import base64, hashlib; print(base64.b64encode(hashlib.sha1(b"alice:s3cret").digest()).decode())')
  run -0 zk_cli create /secure "" "digest:alice:$digest:cdrwa"
  echo s3cret >"$T/pw"
  run -0 --separate-stderr "$DLOCK" -u "zk://alice@127.0.0.1:$ZK_PORT/secure" --password-file "$T/pw" run -k a -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  echo "$stderr"
  [ "$output" -ge 1 ]
  echo wrong >"$T/bad"
  run -77 --separate-stderr "$DLOCK" -u "zk://alice@127.0.0.1:$ZK_PORT/secure" --password-file "$T/bad" run -k a -- touch "$T/ran"
  echo "$stderr"
  [ "${#stderr_lines[@]}" -eq 1 ]
  run -77 --separate-stderr "$DLOCK" -u "zk://127.0.0.1:$ZK_PORT/secure" run -k a -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"user:password@"* ]]
  [ ! -e "$T/ran" ]
  [[ $stderr != *s3cret* ]]
}

@test "zookeeper: another tenant's 100 kB holder record at the head of the queue: status and list show 'not a dlock holder', not the record; a waiter gives up at --wait" {
  run -0 "$DLOCK" run -k big -- true # makes CHROOT/dlock:big
  local data
  data=$(printf 'dlock=1\nuser=u\nhost=h\npid=1x\ncommand=%s\n' "$(head -c 100000 /dev/zero | tr '\0' x)")
  run -0 zk_cli create -s /dlock-test/dlock:big/_c_00000000-0000-4000-8000-000000000000-lock- "$data"
  run -0 "$DLOCK" status big
  echo "$output" | head -c 2000
  [[ $output == *"not a dlock holder"* ]]
  [ "${#output}" -lt 4000 ]
  run -0 "$DLOCK" list
  [[ $output == *big* ]]
  [ "${#output}" -lt 4000 ]
  run -75 "$DLOCK" -v run -k big -w 1s -- true
  [ "${#output}" -lt 4000 ]
}

# last: it kills this file's server
# zk_batch: zkCli commands from stdin, one JVM for all of them.
zk_batch() {
  java -cp "$ZK_CLASSPATH" -Dzookeeper.jmx.log4j.disable=true org.apache.zookeeper.ZooKeeperMain \
    -server "${ZK_ADDRESS:-127.0.0.1}:$ZK_PORT" 2>/dev/null | grep -v '^$\|^WATCHER::\|^WatchedEvent'
}

# history_nodes NAME: the event nodes of the name's history, one a line.
history_nodes() { zk_cli ls "/dlock-test/dlock:$1%history" | tail -1 | tr -d '[] ' | tr , '\n' | grep . || true; }

@test "zookeeper: history: CHROOT/PREFIXNAME%history/e-<ms>-<sequence> beside the lock's node; capped at 100, oldest first; expired and foreign nodes" {
  run -0 "$DLOCK" run -k cap -- true
  run -0 history_nodes cap
  echo "$output"
  [ "${#lines[@]}" -eq 2 ]
  [[ ${lines[0]} =~ ^e-[0-9]{16}-[0-9]{10}$ ]]
  local first
  first=$(zk_cli get "/dlock-test/dlock:cap%history/${lines[0]}" | tail -1)
  [[ $first == "v1 "* ]]
  # 101 more events, from zkCli, then a run: the oldest go, 100 stay
  local now=$(now_ms)
  for i in $(seq 101); do printf 'create -s /dlock-test/dlock:cap%%history/e-%016d- "%s"\n' "$now" "$first"; done | zk_batch >/dev/null
  [ "$(history_nodes cap | wc -l)" -eq 103 ]
  run -0 "$DLOCK" run -k cap --note last -- true
  [ "$(history_nodes cap | wc -l)" -eq 100 ]
  run -0 "$DLOCK" history cap --limit 100 --json
  python3 -c '
import json, sys
ev = json.loads(sys.argv[1])["events"]
assert len(ev) == 100, len(ev)
assert ev[0]["event"] == "released" and ev[0]["note"] == "last", ev[0]
assert ev[1]["event"] == "acquired" and ev[1]["note"] == "last", ev[1]
assert all(e["fencing_token"] == ev[2]["fencing_token"] for e in ev[2:]), "the first run s two events went first"
' "$output"
  # another tenant's nodes in the log: junk, a huge one, another name; an event past 7 days
  local huge ms
  huge=$(head -c 100000 /dev/zero | tr '\0' x)
  ms=$(printf %016d "$now")
  printf '%s\n' "create -s /dlock-test/dlock:cap%history/e-$ms- \"not an event\"" \
    "create -s /dlock-test/dlock:cap%history/e-$ms- $huge" \
    "create /dlock-test/dlock:cap%history/junk \"$first\"" \
    "create -s /dlock-test/dlock:cap%history/e-0000000000000001- \"$first\"" | zk_batch >/dev/null
  run -0 --separate-stderr "$DLOCK" history cap --json
  python3 -c '
import json, sys
ev = json.loads(sys.argv[1])["events"]
assert 0 < len(ev) <= 20 and ev[0]["event"] == "acquired" and ev[0]["note"] == "", ev[:2]
' "$output"
  [ "${#output}" -lt 20000 ]
  # the next write deletes the expired one (by its name), and the oldest past 100
  run -0 "$DLOCK" run -k cap -- true
  run -0 history_nodes cap
  [[ $output != *e-0000000000000001-* ]] && [[ $output == *junk* ]]
  [ "$(grep -c "^e-" <<<"$output")" -eq 100 ]
  # no contender there for dlock (nor Curator, which never looks there): the lock is free
  run -0 "$DLOCK" run -k cap -n -- true
}

@test "zookeeper: the server killed under a holder: 76 before the session timeout" {
  holder killed -t 3s
  local dlock_pid=$BG_PID
  sleep 1.2
  local killed=$(now_ms)
  kill -KILL "$ZK_PID"
  local st=0
  wait "$dlock_pid" || st=$?
  cat "$T/holder.err"
  [ "$st" -eq 76 ]
  local took=$(($(cat "$T/termed") - killed))
  echo "SIGTERM came $took ms after the server died (session timeout 3000 ms)"
  [ "$took" -lt 3000 ]
}
