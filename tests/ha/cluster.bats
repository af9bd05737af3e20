#!/usr/bin/env bats
# Redis Cluster: dlock given any one node of a cluster of 3 masters with a replica each
# (cluster_helpers.bash starts it once for the file) follows MOVED to the master serving the
# lock's slot, for run, acquire, renew, release and status; waiters are woken through the
# cluster; list gathers the locks of every master. Each test picks lock names whose slot lives
# where it wants it (name_on, name_not_on) and checks the keys on the masters directly (ncli,
# which follows no redirect). Migration and failover: cluster_migration.bats; a cluster that
# is down: cluster_down.bats.

load ../lib/cluster_helpers

# url PORT: the URL of one node.
url() { echo "redis://127.0.0.1:$1"; }

@test "run through a master that does not serve the lock's slot: the lock is on the right master, renewed, released" {
  local via=${MASTER_PORTS%% *} name owner m
  name=$(name_not_on "$via" run-)
  owner=$(lock_node "$name")
  [ "$owner" != "$via" ]
  start_bg runner "$DLOCK" -u "$(url "$via")" run -k "$name" -t 1s -- sh -c '
    echo "$DLOCK_TOKEN" >"$1.tmp"; mv "$1.tmp" "$1"
    until [ -e "$2" ]; do sleep 0.02; done
    exit 7' sh "$T/token" "$T/go"
  local runner=$BG_PID
  started runner '[ -s "$T/token" ]'

  # The lock and its siblings are on the master serving the slot, with the command's token,
  # and on no other master.
  run -0 ncli "$owner" get "dlock:{$name}"
  assert_output "$(cat "$T/token")"
  run -0 ncli "$owner" exists "dlock:{$name}:holder" "dlock:{$name}:fence"
  assert_output 2
  for m in $MASTER_PORTS; do
    [ "$m" = "$owner" ] || [ -z "$(keys_on "$m")" ] || fail "keys on master $m: $(keys_on "$m")"
  done

  # A 1 s lease, renewed through the cluster every third of it: three renewals reach the
  # master, and the command outlives its first lease several times over.
  wait_renewal "$owner" "$name"
  wait_renewal "$owner" "$name"
  wait_renewal "$owner" "$name"
  alive "$runner" || { cat "$T/runner.err" >&2; fail "dlock stopped"; }
  run -0 ncli "$owner" get "dlock:{$name}"
  assert_output "$(cat "$T/token")"

  # The command's exit status passes through; the lock is gone, the fencing counter stays.
  touch "$T/go"
  wait_for "! alive $runner" 10
  local rc=0
  wait "$runner" || rc=$?
  [ "$rc" -eq 7 ] || { cat "$T/runner.err" >&2; fail "exit $rc"; }
  [ ! -s "$T/runner.err" ] || { cat "$T/runner.err" >&2; fail "diagnostics on a clean run"; }
  run -0 ncli "$owner" exists "dlock:{$name}" "dlock:{$name}:holder"
  assert_output 0
  run -0 ncli "$owner" exists "dlock:{$name}:fence"
  assert_output 1
  # Its history is there too, written through the redirect (the acquired event pipelined with
  # the renewals), and read through it.
  run -0 ncli "$owner" xlen "dlock:{$name}:history"
  assert_output 2
  run -0 --separate-stderr "$DLOCK" -u "$(url "$via")" history --json "$name"
  [ "$(jq -r '[.events[] | .event + ":" + (.exit_status | tostring)] | join(",")' <<<"$output")" = released:7,acquired:null ]
}

@test "run through a replica: its master's slot and another master's slot" {
  local replica=${REPLICA_PORTS%% *} master mine other
  # The replica's own master serves this one; another master the other.
  master=$(ncli "$replica" info replication | tr -d '\r' | sed -n 's/^master_port://p')
  mine=$(name_on "$master" rep-)
  other=$(name_not_on "$master" rep-)
  run -3 --separate-stderr "$DLOCK" -u "$(url "$replica")" run -k "$mine" -- sh -c 'echo "$DLOCK_KEY"; exit 3'
  assert_output "$mine"
  [ -z "$stderr" ]
  run -0 --separate-stderr "$DLOCK" -u "$(url "$replica")" run -k "$other" -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  [[ $output =~ ^[1-9][0-9]*$ ]]
  [ -z "$stderr" ]
  local fence=$output
  # Each lock was taken on its own master: its fencing counter is there.
  run -0 ncli "$master" exists "dlock:{$mine}:fence"
  assert_output 1
  run -0 ncli "$(lock_node "$other")" get "dlock:{$other}:fence"
  assert_output "$fence"
  run -0 ccli exists "dlock:{$mine}"
  assert_output 0
  run -0 ccli exists "dlock:{$other}"
  assert_output 0
}

@test "acquire, renew, status and release through a node that does not serve the lock's slot" {
  local via=${MASTER_PORTS%% *} name owner tok wrong=0123456789abcdef0123456789abcdef
  name=$(name_not_on "$via" ar-)
  owner=$(lock_node "$name")
  local u
  u=$(url "$via")

  run -0 --separate-stderr "$DLOCK" -u "$u" acquire -k "$name" -t 4s
  [ -z "$stderr" ]
  [[ $output =~ ^[0-9a-f]{32}$ ]]
  tok=$output
  run -0 ncli "$owner" get "dlock:{$name}"
  assert_output "$tok"
  run -0 ncli "$owner" exists "dlock:{$name}:holder" "dlock:{$name}:fence"
  assert_output 2

  # renew --ttl, on the master serving the slot.
  run -0 --separate-stderr "$DLOCK" -u "$u" renew -k "$name" --token "$tok" --ttl 20s
  [ -z "$output" ]
  [ -z "$stderr" ]
  run -0 ncli "$owner" pttl "dlock:{$name}"
  [ "$output" -gt 19000 ]
  [ "$output" -le 20000 ]
  run -76 "$DLOCK" -u "$u" renew -k "$name" --token "$wrong"

  # status, human and JSON, through the same node and through a replica.
  run -0 --separate-stderr "$DLOCK" -u "$u" status "$name"
  assert_line --regexp "^lock: +$name\$"
  assert_line --regexp '^state: +held$'
  run -0 --separate-stderr "$DLOCK" -u "$(url "${REPLICA_PORTS%% *}")" status "$name" --json
  json_ok '
assert d["key"] == A[0], d
held_status(d)
assert 19000 < d["ttl_ms"] <= 20000, d
assert d["fencing_token"] == d["last_fencing_token"], d
' "$name"

  # Held: another acquire through another node is refused.
  run -75 "$DLOCK" -u "$(url "$owner")" acquire -k "$name" -t 5s -n
  run -0 ncli "$owner" get "dlock:{$name}"
  assert_output "$tok"

  # release: a wrong token changes nothing; the right one releases, once.
  run -76 "$DLOCK" -u "$u" release -k "$name" --token "$wrong"
  run -0 --separate-stderr "$DLOCK" -u "$u" release -k "$name" --token "$tok"
  [ -z "$output" ]
  [ -z "$stderr" ]
  run -0 ncli "$owner" exists "dlock:{$name}" "dlock:{$name}:holder"
  assert_output 0
  run -1 "$DLOCK" -u "$u" status "$name"
  run -76 "$DLOCK" -u "$u" release -k "$name" --token "$tok"

  # release --force through a replica names the evicted holder.
  bash -c 'echo $$ >"$1"; "$DLOCK" -u "$2" acquire -k "$3" -t 60s >/dev/null' sh "$T/script.pid" "$u" "$name"
  run -0 ncli "$owner" exists "dlock:{$name}"
  assert_output 1
  run -0 --separate-stderr "$DLOCK" -u "$(url "${REPLICA_PORTS##* }")" release -k "$name" --force
  [[ $stderr == *evicted*"pid $(cat "$T/script.pid")"* ]] || fail "stderr: $stderr"
  run -0 ncli "$owner" exists "dlock:{$name}"
  assert_output 0
}

@test "held: run -n through another node gets 75; a waiting run through a third is woken by the release" {
  local m1 m2 m3 name owner other
  read -r m1 m2 m3 <<<"$MASTER_PORTS"
  name=$(name_on "$m2" wake-)
  owner=$m2

  start_bg holder "$DLOCK" -u "$(url "$m1")" run -k "$name" -t 20s -- sh -c '
    touch "$1"; until [ -e "$2" ]; do sleep 0.02; done' sh "$T/started" "$T/go"
  local holder=$BG_PID
  started holder '[ -e "$T/started" ]'

  run -75 "$DLOCK" -u "$(url "$m3")" run -k "$name" -n -- touch "$T/second-ran"
  [ ! -e "$T/second-ran" ]
  run -75 "$DLOCK" -u "$(url "$owner")" run -k "$name" -n -- touch "$T/second-ran"
  [ ! -e "$T/second-ran" ]

  # A waiter through a replica: registered, then woken by the release, long before the 20 s
  # lease or its own 10 s would end.
  start_bg waiter "$DLOCK" -u "$(url "${REPLICA_PORTS%% *}")" run -k "$name" -w 10s -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  local waiter=$BG_PID
  started waiter "[ \"\$(waiters '$name')\" = 1 ]"
  alive "$waiter"
  [ ! -s "$T/waiter.out" ]
  local released
  touch "$T/go"
  wait_for "! alive $holder" 10
  released=$(now_ms)
  local rc=0
  wait "$holder" || rc=$?
  [ "$rc" -eq 0 ] || { cat "$T/holder.err" >&2; fail "holder exit $rc"; }
  wait_for "! alive $waiter" 10
  local took=$(($(now_ms) - released))
  rc=0
  wait "$waiter" || rc=$?
  [ "$rc" -eq 0 ] || { cat "$T/waiter.err" >&2; fail "waiter exit $rc"; }
  [ "$took" -lt 2000 ] || fail "the waiter ran ${took} ms after the release"
  # It took the next fencing token on the same master.
  run -0 ncli "$owner" get "dlock:{$name}:fence"
  assert_output "$(cat "$T/waiter.out")"
  run -0 ccli exists "dlock:{$name}"
  assert_output 0
}

@test "several keys in different slots: all taken on their own masters, renewed together, released together" {
  local via=${MASTER_PORTS%% *} a b
  a=$(name_on "$via" multi-a-)
  b=$(name_not_on "$via" multi-b-)
  [ "$(lock_node "$a")" != "$(lock_node "$b")" ]
  start_bg multi "$DLOCK" -u "$(url "$via")" run -k "$b" -k "$a" -t 1s -- sh -c '
    echo "$DLOCK_KEYS" >"$1.tmp"; mv "$1.tmp" "$1"
    until [ -e "$2" ]; do sleep 0.02; done' sh "$T/keys" "$T/go"
  local runner=$BG_PID
  started multi '[ -s "$T/keys" ]'
  assert_equal "$(cat "$T/keys")" "$(printf '%s\n' "$a" "$b" | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')"
  run -0 ncli "$(lock_node "$a")" exists "dlock:{$a}"
  assert_output 1
  run -0 ncli "$(lock_node "$b")" exists "dlock:{$b}"
  assert_output 1
  # Both leases outlive their first second: one renewal round covers the two masters.
  wait_renewal "$(lock_node "$a")" "$a"
  wait_renewal "$(lock_node "$b")" "$b"
  run -75 "$DLOCK" -u "$(url "$via")" run -k "$b" -n -- true
  touch "$T/go"
  wait "$runner"
  run -0 ncli "$(lock_node "$a")" exists "dlock:{$a}"
  assert_output 0
  run -0 ncli "$(lock_node "$b")" exists "dlock:{$b}"
  assert_output 0
}

@test "a semaphore on a slot another master serves: --limit 2 lets two in, the third waits for a release" {
  local via=${MASTER_PORTS%% *} name
  name=$(name_not_on "$via" sem-)
  start_bg one "$DLOCK" -u "$(url "$via")" run -k "$name" --limit 2 -- sleep 30
  local first=$BG_PID
  start_bg two "$DLOCK" -u "$(url "$via")" run -k "$name" --limit 2 -- sleep 30
  wait_for '[ "$(ncli "$(lock_node "$name")" zcard "dlock:{$name}:holders")" = 2 ]'
  run -75 "$DLOCK" -u "$(url "$via")" run -k "$name" --limit 2 -n -- true
  run -64 "$DLOCK" -u "$(url "$via")" run -k "$name" -n -- true
  start_bg third "$DLOCK" -u "$(url "$via")" run -k "$name" --limit 2 -w 10s -- touch "$T/third"
  local third=$BG_PID
  kill -TERM "$first"
  wait "$third"
  [ -e "$T/third" ] || fail "the third holder did not run"
}

@test "wait, barrier and latch on a slot another master serves, through different nodes" {
  local via=${MASTER_PORTS%% *} name owner port i
  name=$(name_not_on "$via" coord-)
  owner=$(lock_node "$name")
  # a barrier of 3 parties, each through another node; the keys live on the slot's master
  i=0
  for port in $MASTER_PORTS; do
    i=$((i + 1))
    start_bg "b$i" "$DLOCK" -u "$(url "$port")" barrier -k "$name" --parties 3 -w 20s
    echo "$BG_PID" >"$T/b$i.pidof"
  done
  for i in 1 2 3; do
    local rc=0
    wait "$(cat "$T/b$i.pidof")" || rc=$?
    [ "$rc" -eq 0 ] || { cat "$T/b$i.err" >&2; fail "party $i: exit $rc"; }
  done
  run -0 ncli "$owner" exists "dlock:{$name}:barrier"
  assert_output 1
  # a latch set through one node, waited for through a replica, counted down through another
  run -0 "$DLOCK" -u "$(url "$via")" latch -k "$name" --count 2
  start_bg lw "$DLOCK" -u "$(url "${REPLICA_PORTS%% *}")" latch -k "$name" --wait 20s
  local waiter=$BG_PID
  run -0 ncli "$owner" get "dlock:{$name}:latch"
  assert_output 2
  for port in $MASTER_PORTS; do
    "$DLOCK" -u "$(url "$port")" latch -k "$name" --down || true
  done
  wait "$waiter" || fail "latch waiter: $(cat "$T/lw.err")"
  # wait: woken by a release made through another node
  start_bg holder "$DLOCK" -u "$(url "$via")" run -k "$name" -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/go"
  wait_for "[ \"\$(ncli $owner exists 'dlock:{$name}')\" = 1 ]"
  start_bg w "$DLOCK" -u "$(url "$owner")" wait -k "$name" -w 20s
  local watcher=$BG_PID
  wait_for "[ \"\$(ncli $owner zcard 'dlock:{$name}:watchers')\" = 1 ]"
  touch "$T/go"
  wait "$watcher" || fail "wait: $(cat "$T/w.err")"
}

@test "elect and leader --watch on a slot another master serves: the value kept there, each change woken through other nodes" {
  local via=${MASTER_PORTS%% *} name owner
  name=$(name_not_on "$via" elect-)
  owner=$(lock_node "$name")
  # A watcher through a replica, a candidate through a master that does not serve the slot.
  start_bg w "$DLOCK" -u "$(url "${REPLICA_PORTS%% *}")" leader "$name" --watch
  local watcher=$BG_PID
  started w "[ -s '$T/w.out' ]" "$watcher"
  wait_for "[ \"\$(ncli $owner zcard 'dlock:{$name}:leader:watchers')\" = 1 ]"
  start_bg cand "$DLOCK" -u "$(url "$via")" elect -k "$name" --value 'via-other' -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$T/go"
  local cand=$BG_PID
  wait_for "[ \"\$(ncli $owner hget 'dlock:{$name}:holder' value)\" = via-other ]" 10
  # Woken well within leader's own 30 s re-check: by the candidate's acquisition, then the release.
  started w "grep -q '^via-other (' '$T/w.out'" "$watcher" 15
  touch "$T/go"
  wait "$cand"
  started w "[ \"\$(tail -n 1 '$T/w.out')\" = 'no leader' ]" "$watcher" 15
  [ "$(wc -l <"$T/w.out")" = 3 ]
}

@test "list gathers the locks of every master, sorted by name, human and JSON, through any node" {
  local m1 m2 m3 a b c d e
  read -r m1 m2 m3 <<<"$MASTER_PORTS"
  # Sorted names whose slots are spread over the masters, not in master order.
  a=$(name_on "$m2" alpha-)
  b=$(name_on "$m3" bravo-)
  c=$(name_on "$m1" charlie-)
  d=$(name_on "$m2" delta-)
  e=$(name_on "$m3" echo-)

  start_bg holder "$DLOCK" run -k "$c" -t 20s -- sleep 30
  local holder=$BG_PID
  started holder "key_exists '$c'"
  "$DLOCK" acquire -k "$a" -t 60s >/dev/null
  "$DLOCK" acquire -k "$b" -t 60s >/dev/null
  "$DLOCK" acquire -k "$d" -t 60s >/dev/null
  # Released (only its fencing counter is left), and a key that is not dlock's.
  "$DLOCK" run -k "$e" -- true
  ccli set unrelated x >/dev/null
  for n in "$a:$m2" "$b:$m3" "$c:$m1" "$d:$m2"; do
    run -0 ncli "${n#*:}" exists "dlock:{${n%%:*}}"
    assert_output 1
  done

  local via
  for via in "$m1" "$m3" ${REPLICA_PORTS%% *}; do
    run -0 --separate-stderr "$DLOCK" -u "$(url "$via")" list
    [ -z "$stderr" ] || fail "through $via: $stderr"
    [ "${#lines[@]}" -eq 5 ] || fail "through $via: $output"
    [[ ${lines[0]} =~ ^KEY\ +HOLDER\ +PID ]]
    [ "$(printf '%s\n' "$output" | awk 'NR > 1 { print $1 }' | tr '\n' ' ')" = "$a $b $c $d " ] ||
      fail "through $via: $output"
    assert_line --regexp "^$c +$(id -un)@$(uname -n) +$holder +.* sleep\$"

    run -0 --separate-stderr "$DLOCK" -u "$(url "$via")" list --json
    [ "${#lines[@]}" -eq 1 ]
    json_ok '
assert set(d) == {"version", "locks"} and d["version"] == 1, d
keys = [s["key"] for s in d["locks"]]
assert keys == A[0:4], (keys, A)
for s in d["locks"]:
    assert set(s) == STATUS_FIELDS, sorted(s)
    held_status(s)
assert d["locks"][2]["holder"]["pid"] == int(A[4]), d["locks"][2]
' "$a" "$b" "$c" "$d" "$holder"
  done

  # PATTERN still filters by name, across masters.
  run -0 "$DLOCK" -u "$(url "$m1")" list 'bravo-*' --json
  json_ok 'assert [s["key"] for s in d["locks"]] == [A[0]], d' "$b"
  run -0 "$DLOCK" -u "$(url "$m1")" list '*a-*' --json
  json_ok 'assert [s["key"] for s in d["locks"]] == A, d' "$a" "$d"
  run -0 --separate-stderr "$DLOCK" -u "$(url "$m2")" list 'nothing-*'
  [ -z "$output" ]
}

@test "the policies through a node that does not serve the lock's slot: --note, --min-hold, --lock-delay, --supersede" {
  local via=${MASTER_PORTS%% *} name owner tok u
  name=$(name_not_on "$via" pol-)
  owner=$(lock_node "$name")
  u=$(url "$via")
  # --min-hold: released by token, kept (marked ended) on the slot's master, with the note
  tok=$("$DLOCK" -u "$u" acquire -k "$name" -t 4s --min-hold 30s --note 'cluster job')
  run -0 ncli "$owner" hget "dlock:{$name}:holder" note
  assert_output 'cluster job'
  run -0 "$DLOCK" -u "$u" release -k "$name" --token "$tok"
  run -0 --separate-stderr "$DLOCK" -u "$u" status "$name" --json
  json_ok 'assert d["held"] is True and d["command_ended"] is True and d["holder"]["note"] == "cluster job", d'
  run -75 "$DLOCK" -u "$u" run -n -k "$name" -- true
  run -0 "$DLOCK" -u "$u" release --force -k "$name"
  # --lock-delay: started by release --force, on the slot's master
  tok=$("$DLOCK" -u "$u" acquire -k "$name" -t 4s --lock-delay 30s)
  run -0 "$DLOCK" -u "$u" release --force -k "$name"
  run -0 ncli "$owner" pttl "dlock:{$name}:holder"
  [ "$output" -gt 25000 ]
  run -1 --separate-stderr "$DLOCK" -u "$u" status "$name" --json
  json_ok 'assert d["held"] is False and 25000 < d["delay_ms"] <= 30000, d'
  run -75 "$DLOCK" -u "$u" run -n -k "$name" -- true
  # (a second release --force clears a pending delay)
  run -0 "$DLOCK" -u "$u" release --force -k "$name"
  # --supersede: the newest waiter's record shares the slot
  tok=$("$DLOCK" -u "$u" acquire -k "$name" -t 10s)
  start_bg older "$DLOCK" -u "$u" run -k "$name" --supersede -w 20s -- true
  local older=$BG_PID
  wait_for "ncli $owner hget 'dlock:{$name}:newest' id | grep -q ." 10
  start_bg newer "$DLOCK" -u "$u" run -k "$name" --supersede -w 20s -- touch "$T/newer"
  local newer=$BG_PID st=0
  wait "$older" || st=$?
  [ "$st" -eq 75 ]
  run -0 "$DLOCK" -u "$u" release -k "$name" --token "$tok"
  wait "$newer"
  [ -e "$T/newer" ]
}
