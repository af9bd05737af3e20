#!/usr/bin/env bats
# dlock elect and dlock leader on etcd://, and their interop with `etcdctl elect`
# (clientv3/concurrency.Election): one queue of keys dlock:NAME/<lease hex> by create revision,
# whose oldest key leads; a candidate's key holds its plain --value (etcdctl's proposal), its
# holder record lies beside it on the same lease (dlock:NAME#elect:<lease hex>, outside the
# queue), and a leader's term is its key's create revision.

load ../../lib/helpers
load ../../lib/etcd_helpers

setup_file() { start_etcd; }
teardown_file() { stop_etcd; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# stamp: each line read, after the time it came (ns).
stamp() { while IFS= read -r line; do echo "$(date +%s%N) $line"; done; }

# ectl_elect NAME PROPOSAL: `etcdctl elect NAME PROPOSAL` in the background, its lines stamped
# (stamp) in $T/ectl.out as they come; sets ECTL (etcdctl's own pid: a TERM makes it resign).
ectl_elect() {
  ETCDCTL_API=3 "$ETCDCTL" --endpoints "$ETCD_ENDPOINT" elect "$1" "$2" \
    > >(stamp >"$T/ectl.out") 2>"$T/ectl.err" 3>&- &
  ECTL=$!
  echo "$ECTL" >>"$T/bg.pid"
}

# queued NAME: how many keys the election NAME has (dlock:NAME/…).
queued() { ectl get --prefix "dlock:$1/" --keys-only | grep -c . || true; }

# candidate NAME VALUE: dlock elect in the background whose command writes "start <ns>" to
# $T/witness, waits for $T/release, then writes "stop <ns>"; sets CANDIDATE.
candidate() {
  start_bg candidate "$DLOCK" elect -k "$1" --value "$2" -t 10s -- sh -c '
    echo "start $(date +%s%N)" >>"$0"; until [ -e "$1" ]; do sleep 0.02; done
    echo "stop $(date +%s%N)" >>"$0"' "$T/witness" "$T/release"
  CANDIDATE=$BG_PID
}

@test "etcdctl elect leads: dlock elect waits, and its command starts only after etcdctl resigned" {
  ectl_elect dlock:e1 from-etcdctl
  wait_for "grep -q from-etcdctl '$T/ectl.out'" 10 # elected: it printed its key and proposal
  candidate e1 from-dlock
  wait_for '[ "$(queued e1)" = 2 ]' 10
  sleep 1
  [ ! -e "$T/witness" ]
  run -0 "$DLOCK" leader e1
  [[ $output == *from-etcdctl* ]]
  [[ $output != *from-dlock* ]]
  local killed
  killed=$(date +%s%N)
  kill -TERM "$ECTL"
  wait "$ECTL" || true
  wait_for "grep -q start '$T/witness'" 10
  echo "dlock's command started $((($(awk '/start/ {print $2}' "$T/witness") - killed) / 1000000)) ms after etcdctl was told to resign"
  [ "$(awk '/start/ {print $2}' "$T/witness")" -gt "$killed" ]
  run -0 "$DLOCK" leader e1
  [[ $output == *from-dlock* ]]
  touch "$T/release"
  wait "$CANDIDATE"
}

@test "dlock elect leads: etcdctl elect waits, silent, until dlock's command ended; etcdctl elect -l shows dlock's --value" {
  candidate e2 "dlock leads e2"
  wait_for "grep -q start '$T/witness'" 10
  # the observer sees dlock's key and its value as etcdctl's proposal
  run -124 timeout 2 env ETCDCTL_API=3 "$ETCDCTL" --endpoints "$ETCD_ENDPOINT" elect -l dlock:e2
  [[ ${lines[0]} == dlock:e2/* ]]
  [ "${lines[1]}" = "dlock leads e2" ]
  ectl_elect dlock:e2 from-etcdctl
  wait_for '[ "$(queued e2)" = 2 ]' 10
  sleep 1
  [ ! -s "$T/ectl.out" ] # campaigning: it prints its proposal only once elected
  touch "$T/release"
  wait "$CANDIDATE"
  wait_for "grep -q from-etcdctl '$T/ectl.out'" 10
  local stop elected
  stop=$(awk '/stop/ {print $2}' "$T/witness")
  elected=$(awk '/from-etcdctl/ {print $1}' "$T/ectl.out")
  echo "etcdctl elected $(((elected - stop) / 1000000)) ms after dlock's command ended"
  [ "$elected" -gt "$stop" ]
  run -0 "$DLOCK" leader e2 --json
  printf '%s' "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d)
assert "from-etcdctl" in json.dumps(d)'
  kill -TERM "$ECTL"
}

@test "dlock leader of an election dlock never joined: --prefix '' reads etcdctl's name as it is" {
  ectl_elect plain-election "10.0.0.7:8080"
  wait_for "grep -q 10.0.0.7 '$T/ectl.out'" 10
  local rev
  rev=$(ectl get --prefix plain-election/ -w json | python3 -c 'import json,sys; print(json.load(sys.stdin)["kvs"][0]["create_revision"])')
  run -0 "$DLOCK" --prefix '' leader plain-election
  echo "$output"
  [[ $output == *"10.0.0.7:8080"* ]]
  [[ $output == *"not dlock"* ]]
  run -0 "$DLOCK" --prefix '' leader plain-election --json
  printf '%s' "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
text = json.dumps(d)
assert "10.0.0.7:8080" in text, text
assert sys.argv[1] in text, text  # the term: its key'"'"'s create revision' "$rev"
  run -1 "$DLOCK" leader plain-election # dlock:plain-election: nobody
  kill -TERM "$ECTL"
  wait "$ECTL" || true
  run -1 "$DLOCK" --prefix '' leader plain-election
}

@test "leader --watch sees etcdctl's leader, then dlock's, then none, each once" {
  start_bg watch "$DLOCK" leader e4 --watch
  local watcher=$BG_PID
  sleep 0.5
  ectl_elect dlock:e4 from-etcdctl
  wait_for "grep -q from-etcdctl '$T/watch.out'" 10
  candidate e4 from-dlock
  wait_for '[ "$(queued e4)" = 2 ]' 10
  kill -TERM "$ECTL"
  wait_for "grep -q from-dlock '$T/watch.out'" 10
  touch "$T/release"
  wait "$CANDIDATE"
  wait_for '[ "$(wc -l <"$T/watch.out")" -ge 4 ]' 10 || true
  sleep 0.5 # a fifth line would come now
  kill -TERM "$watcher"
  cat "$T/watch.out"
  # none, etcdctl's, dlock's, none: one line each
  [ "$(wc -l <"$T/watch.out")" = 4 ]
  [ "$(head -n 1 "$T/watch.out")" = "no leader" ]
  [ "$(tail -n 1 "$T/watch.out")" = "no leader" ]
  [ "$(grep -c from-etcdctl "$T/watch.out")" = 1 ]
  [ "$(grep -c from-dlock "$T/watch.out")" = 1 ]
  # in that order
  [ "$(grep -n from-etcdctl "$T/watch.out" | cut -d: -f1)" -lt "$(grep -n from-dlock "$T/watch.out" | cut -d: -f1)" ]
}

# tenant_key NAME VALUE: another tenant puts a key in the election NAME (dlock:NAME/<lease>)
# with VALUE (stdin if -) on a lease of its own; prints the lease (hex).
tenant_key() {
  local lease
  lease=$(ectl lease grant 120 | awk '{print $2}')
  if [ "$2" = - ]; then
    ectl put --lease="$lease" "dlock:$1/$lease" >/dev/null
  else
    ectl put --lease="$lease" "dlock:$1/$lease" "$2" >/dev/null
  fi
  echo "$lease"
}

@test "junk where the leader's value and record live: not a dlock holder, capped, no crash" {
  local lease
  # a 1 MB proposal: not dlock, its value cut to 256 bytes
  python3 -c 'print("v" * 1000000)' | tenant_key j1 - >/dev/null
  run -0 "$DLOCK" leader j1
  [[ $output == *"not dlock"* ]]
  [ "${#output}" -lt 2000 ]
  run -0 "$DLOCK" leader j1 --json
  printf '%s' "$output" | python3 -c 'import json,sys; json.load(sys.stdin)'
  [ "${#output}" -lt 2000 ]
  # a proposal of control characters: not shown
  printf 'x\033[2Jy' | tenant_key j2 - >/dev/null
  run -0 "$DLOCK" leader j2
  [[ $output != *$'\033'* ]]
  # a key with a value and beside it a record that is not its own (another lease, another
  # value, junk, oversized): the key's holder is not dlock, its value the proposal
  lease=$(tenant_key j3 v3)
  ectl put --lease="$lease" "dlock:j3#elect:$lease" '{"host":"evil","pid":"x"}' >/dev/null
  run -0 "$DLOCK" leader j3
  [[ $output == *"not dlock"* ]]
  [[ $output == *v3* ]]
  [[ $output != *evil* ]]
  python3 -c 'import json; print(json.dumps({"host": "evil", "pid": 1, "value": "v3", "command": "x" * 1000000}))' |
    ectl put --lease="$lease" "dlock:j3#elect:$lease" >/dev/null
  run -0 "$DLOCK" leader j3
  [[ $output == *"not dlock"* ]]
  [[ $output != *evil* ]]
  ectl put "dlock:j3#elect:$lease" '{"host":"evil","pid":1,"value":"v3"}' >/dev/null # no lease
  run -0 "$DLOCK" leader j3
  [[ $output != *evil* ]]
  # dlock's own record in the key with an oversized value: not a dlock holder
  python3 -c 'import json; print(json.dumps({"host": "evil", "pid": 1, "user": "u", "value": "v" * 300}))' |
    tenant_key j4 - >/dev/null
  run -0 "$DLOCK" leader j4
  [[ $output == *"not dlock"* ]]
  # its text is the proposal etcdctl elect -l shows, cut to 256 bytes; no holder's fields
  run -0 "$DLOCK" leader j4 --json
  printf '%s' "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["holder"]["host"] == "" and d["holder"]["pid"] == 0, d
assert len(d["value"].encode()) <= 256 and d["value"].startswith("{"), d'

  # a dlock candidate queued behind the junk waits, then gives up at --wait, one line at most
  run -75 "$DLOCK" elect -k j3 --value mine -w 1s -- true
  [ "${#output}" -lt 2000 ]
  # list and status read them too
  run -0 "$DLOCK" list
  [ "${#output}" -lt 4000 ]
  run -0 "$DLOCK" status j1
}

@test "a candidate's record goes with its key: nothing left once dlock elect exited (but its history)" {
  candidate e6 v6
  wait_for "grep -q start '$T/witness'" 10
  run -0 ectl get --prefix 'dlock:e6#elect:' --keys-only
  [[ $output == "dlock:e6#elect:"* ]]
  touch "$T/release"
  wait "$CANDIDATE"
  run -0 ectl get --prefix 'dlock:e6' --keys-only
  [ -z "$(grep -v '^dlock:e6#history:[0-9a-f]\{16\}$' <<<"$output" | grep .)" ]
  [[ $output == *"dlock:e6#history:"* ]]
}

@test "fail-over to etcdctl elect: dlock's leader SIGKILLed, etcdctl is elected once dlock's command is dead and its lease ended" {
  start_bg leader "$DLOCK" elect -k fo -t 3s --value old -- sh -c 'echo $$ >"$T/old.pid"; exec sleep 60'
  local leader=$BG_PID
  wait_for "[ -s '$T/old.pid' ]" 20
  local old
  old=$(cat "$T/old.pid")
  ectl_elect dlock:fo from-etcdctl
  wait_for '[ "$(queued fo)" = 2 ]' 10
  local killed
  killed=$(date +%s%N)
  kill -KILL "$leader"
  wait_for "gone $old" 10
  local dead
  dead=$(date +%s%N)
  wait_for "grep -q from-etcdctl '$T/ectl.out'" 15
  local elected
  elected=$(awk '/from-etcdctl/ {print $1}' "$T/ectl.out")
  echo "TTL 3 s: old command dead $(((dead - killed) / 1000000)) ms after the kill; etcdctl elected after $(((elected - killed) / 1000000)) ms"
  [ "$elected" -gt "$dead" ]
  [ $(((elected - killed) / 1000000)) -lt $((3750 + 3000)) ] # the lease (whole seconds) + room
  kill -TERM "$ECTL"
}

# grpc_started METHOD: how many gRPC calls or streams of METHOD etcd has started (its /metrics;
# each of dlock's gateway requests is one).
grpc_started() {
  local reply
  exec 9<>"/dev/tcp/127.0.0.1/$ETCD_PORT"
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&9
  reply=$(cat <&9)
  exec 9<&-
  awk -v m="grpc_method=\"$1\"" 'index($0, "grpc_server_started_total{") == 1 && index($0, m) { n += $2 } END { print n + 0 }' <<<"$reply"
}

@test "a queued candidate keeps one watch across the reads that renew its lease (a new watch starts in the past: etcd serves it up to 100 ms late)" {
  start_bg first "$DLOCK" elect -k kw -t 30s --value first -- sh -c 'echo $$ >"$T/first.pid"; exec sleep 60'
  local first=$BG_PID
  wait_for "[ -s '$T/first.pid' ]" 10
  start_bg second "$DLOCK" elect -k kw -t 1s --value second -- sh -c 'echo "start $(date +%s%N)" >"$T/second.start"'
  local second=$BG_PID
  wait_for '[ "$(queued kw)" = 2 ]' 10
  wait_for "[ \$(grpc_started Watch) -gt 0 ]" 5
  local watches keepalives
  watches=$(grpc_started Watch) keepalives=$(grpc_started LeaseKeepAlive)
  # The waiter (TTL 1 s) reads the queue and keeps its lease alive every third of a second; the
  # leader (TTL 30 s) every 10 s: four keepalives are at least three of the waiter's reads.
  wait_for "[ \$(grpc_started LeaseKeepAlive) -ge $((keepalives + 4)) ]" 10
  echo "watches started meanwhile: $(($(grpc_started Watch) - watches))"
  [ "$(grpc_started Watch)" -le $((watches + 1)) ]
  [ ! -e "$T/second.start" ]
  local ended
  ended=$(date +%s%N)
  kill -TERM "$first"
  wait "$first" || true
  wait_for "[ -s '$T/second.start' ]" 10
  [ "$(awk '{print $2}' "$T/second.start")" -gt "$ended" ]
  wait "$second"
}

# proposal NAME VALUE [LEASE]: a candidate's key in the election NAME as a Go client makes it
# (PFX/<lease hex> on a lease of its own); with the LEASE of an earlier one, a new value of that
# key under the same term (its Proclaim). Sets PROPOSAL_KEY and PROPOSAL_LEASE.
proposal() {
  PROPOSAL_LEASE=${3:-$(ectl lease grant 60 | awk '{print $2}')}
  PROPOSAL_KEY="dlock:$1/$PROPOSAL_LEASE"
  ectl put --lease="$PROPOSAL_LEASE" "$PROPOSAL_KEY" "$2" >/dev/null
}

@test "leader --watch keeps one watch across its reads, and prints a new value under the same term (a Go client's Proclaim)" {
  start_bg watch "$DLOCK" leader lk --watch
  local watch=$BG_PID
  wait_for "grep -qx 'no leader' '$T/watch.out'" 10
  sleep 0.5 # its watch is made
  local watches
  watches=$(grpc_started Watch)
  proposal lk va
  local a=$PROPOSAL_KEY
  wait_for "grep -q '^va ' '$T/watch.out'" 10
  proposal lk vb
  local b=$PROPOSAL_KEY b_lease=$PROPOSAL_LEASE
  ectl del "$a" >/dev/null
  wait_for "grep -q '^vb ' '$T/watch.out'" 10
  proposal lk vb2 "$b_lease"
  wait_for "grep -q '^vb2 ' '$T/watch.out'" 10
  ectl del "$b" >/dev/null
  wait_for "[ \"\$(grep -cx 'no leader' '$T/watch.out')\" = 2 ]" 10
  kill -TERM "$watch"
  wait "$watch" || true
  cat "$T/watch.out"
  echo "watches started meanwhile: $(($(grpc_started Watch) - watches))"
  [ "$(grpc_started Watch)" -le $((watches + 1)) ]
  [ "$(cut -d' ' -f1 "$T/watch.out" | paste -sd,)" = "no,va,vb,vb2,no" ]
}
