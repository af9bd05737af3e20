#!/usr/bin/env bats
# The lock kinds of the ZooKeeper store (zk://) in Curator's layouts, seen with zkCli: the
# exclusive pair (-lock- for InterProcessMutex, -__WRIT__ for InterProcessReadWriteLock) that
# every Curator lock recipe on the path waits for, readers included; --limit N as
# InterProcessSemaphoreV2 (PATH/locks, PATH/leases/_c_<uuid>-lease-N); another tenant's junk
# nodes; a holder killed with SIGKILL. Curator itself runs in tests/interop (wip/curator).

load ../../lib/helpers
load ../../lib/zookeeper_helpers

setup_file() { store_start; }
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# inside NAME KEY [dlock run options...]: a background holder (start_bg NAME) that creates
# $T/NAME.in while inside and leaves once $T/NAME.go exists; returns once it is inside.
inside() {
  local name=$1 key=$2
  shift 2
  start_bg "$name" "$DLOCK" run -k "$key" "$@" -- sh -c 'touch "$0.in"; until [ -e "$0.go" ]; do sleep 0.02; done' "$T/$name"
  started "$name" "[ -e '$T/$name.in' ]"
}

# zk_create_seq PATH DATA: creates a persistent sequential node (another client's), prints its path.
zk_create_seq() {
  local before
  before=$(zk_cli ls "${1%/*}")
  zk_cli create -s "$1" "$2" >/dev/null
  zk_cli ls "${1%/*}" | tr -d '[],' | tr ' ' '\n' | grep -F -- "${1##*/}" | while read -r n; do
    [[ $before == *"$n"* ]] || echo "${1%/*}/$n"
  done
}

# seq_of NODE: a node's sequence number (its last 10 digits), in base 10.
seq_of() { echo $((10#${1: -10})); }

@test "zookeeper: an exclusive lock waits for a Curator read lock's node before it, and one made after it sees its __WRIT__ first" {
  run -0 "$DLOCK" run -k rw -- true # makes CHROOT/dlock:rw
  local reader
  reader=$(zk_create_seq "/dlock-test/dlock:rw/_c_00000000-0000-4000-8000-000000000001-__READ__" "")
  [ -n "$reader" ]
  # a reader holds: dlock's exclusive lock does not get in, and waits
  run -75 "$DLOCK" run -k rw -n -- true
  start_bg writer "$DLOCK" run -k rw -w 20s -- touch "$T/writer.in"
  sleep 1
  [ ! -e "$T/writer.in" ]
  run -0 zk_cli delete "$reader"
  wait "$BG_PID"
  [ -e "$T/writer.in" ]
  # dlock holds: a Curator reader arriving now finds a __WRIT__ before its own node (Curator's
  # readLockPredicate: it holds only when no writer is before it), and so does its mutex a -lock-
  inside holder rw
  local nodes writ lock late
  nodes=$(zk_contenders | grep 'dlock:rw/')
  echo "$nodes"
  writ=$(grep -- -__WRIT__ <<<"$nodes")
  lock=$(grep -- -lock- <<<"$nodes")
  late=$(zk_create_seq "/dlock-test/dlock:rw/_c_00000000-0000-4000-8000-000000000002-__READ__" "")
  [ "$(seq_of "$writ")" -lt "$(seq_of "$late")" ]
  [ "$(seq_of "$lock")" -lt "$(seq_of "$late")" ]
  run -0 zk_cli delete "$late"
  # deleting the __WRIT__ half is a lost lock too: Curator's readers would no longer wait
  run -0 zk_cli delete "$writ"
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
  run -0 "$DLOCK" run -k rw -n -- true
}

@test "zookeeper: --limit 2 in InterProcessSemaphoreV2's layout: leases under PATH/leases, the mutex under PATH/locks given back; status shows both" {
  inside one sem --limit 2
  inside two sem --limit 2 --note second
  run -0 zk_cli ls /dlock-test/dlock:sem
  echo "$output"
  assert_output --partial leases
  assert_output --partial locks
  run -0 zk_cli ls /dlock-test/dlock:sem/leases
  echo "$output"
  assert_output --regexp '_c_[0-9a-f-]{36}-lease-[0-9]{10}.*_c_[0-9a-f-]{36}-lease-[0-9]{10}'
  # no one waits: the mutex is free
  run -0 zk_cli ls /dlock-test/dlock:sem/locks
  refute_output --partial 'lock-'
  local lease
  lease=$(zk_cli ls -R /dlock-test/dlock:sem/leases | grep -- -lease- | head -1)
  run -0 zk_cli get "$lease"
  assert_line "kind=limit:2"
  assert_line "user=$(id -un)"
  run -0 "$DLOCK" status sem --json
  echo "$output"
  json_ok 'assert d["held"] and d["kind"] == "limit" and d["limit"] == 2 and len(d["holders"]) == 2, d'
  run -75 "$DLOCK" run -k sem --limit 2 -n -- true
  # a third waits under the mutex, its lease made; it is in once one leaves
  start_bg three "$DLOCK" run -k sem --limit 2 -w 20s -- touch "$T/three.in"
  local three=$BG_PID
  wait_for "[ \$(zk_cli ls /dlock-test/dlock:sem/leases | grep -o 'lease-' | wc -l) -eq 3 ]" 10
  run -0 "$DLOCK" status sem --json
  json_ok 'assert len(d["holders"]) == 2 and d["waiters"] >= 1, d'
  sleep 0.5
  [ ! -e "$T/three.in" ]
  touch "$T/one.go"
  wait "$three"
  [ -e "$T/three.in" ]
  touch "$T/two.go"
}

@test "zookeeper: --limit 2: another tenant's junk under leases and locks is not counted as a holder" {
  run -0 "$DLOCK" run -k junk --limit 2 -- true
  run -0 zk_cli create /dlock-test/dlock:junk ""
  run -0 zk_cli create /dlock-test/dlock:junk/leases ""
  local i
  for i in 1 2 3; do
    run -0 zk_cli create "/dlock-test/dlock:junk/leases/junk-$i" "$(head -c 5000 /dev/zero | tr '\0' x)"
  done
  run -0 zk_cli create /dlock-test/dlock:junk/leases/lease-x ""
  inside a junk --limit 2
  inside b junk --limit 2
  run -75 "$DLOCK" run -k junk --limit 2 -n -- true
  run -0 "$DLOCK" status junk
  echo "$output"
  touch "$T/a.go" "$T/b.go"
  wait
  run -1 "$DLOCK" status junk
}

@test "zookeeper: --limit 2: a Curator lease (a plain lease- node) takes a slot" {
  inside a curator --limit 2
  local lease
  lease=$(zk_create_seq /dlock-test/dlock:curator/leases/_c_00000000-0000-4000-8000-000000000003-lease- "10.0.0.1")
  [ -n "$lease" ]
  run -75 "$DLOCK" run -k curator --limit 2 -n -- true
  run -0 "$DLOCK" status curator --json
  json_ok 'assert len(d["holders"]) == 2, d'
  start_bg waiter "$DLOCK" run -k curator --limit 2 -w 20s -- touch "$T/waiter.in"
  local waiter=$BG_PID
  sleep 1
  [ ! -e "$T/waiter.in" ]
  run -0 zk_cli delete "$lease" # the Curator holder closes its lease: the waiter's watch wakes it
  wait "$waiter"
  [ -e "$T/waiter.in" ]
  touch "$T/a.go"
}

@test "zookeeper: --limit 2: a holder killed with SIGKILL frees its lease when its session times out" {
  inside a dead --limit 2 -t 2s
  inside b dead --limit 2 -t 2s
  local dlock_a
  dlock_a=$(head -1 "$T/bg.pid")
  start_bg c "$DLOCK" run -k dead --limit 2 -t 2s -w 20s -- touch "$T/c.in"
  local c=$BG_PID
  sleep 0.5
  kill -KILL "$dlock_a"
  wait_for "[ -e '$T/c.in' ]" 10
  wait "$c"
  touch "$T/b.go"
}

@test "zookeeper: a key held as another kind is 64 naming it: exclusive vs --limit, --limit 2 vs --limit 3" {
  inside ex mix
  run -64 --separate-stderr "$DLOCK" run -k mix --limit 2 -n -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"held as an exclusive lock, which a semaphore of 2 (--limit 2) cannot share"* ]]
  touch "$T/ex.go"
  wait
  inside sem mix --limit 2
  run -64 --separate-stderr "$DLOCK" run -k mix -n -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"held as a semaphore of 2 (--limit 2), which an exclusive lock cannot share"* ]]
  run -64 --separate-stderr "$DLOCK" run -k mix --shared -n -- touch "$T/ran"
  run -64 --separate-stderr "$DLOCK" run -k mix --limit 3 -n -- touch "$T/ran"
  echo "$stderr"
  [[ $stderr == *"held as a semaphore of 2 (--limit 2), which a semaphore of 3 (--limit 3) cannot share"* ]]
  [ ! -e "$T/ran" ]
  # nothing of the refused ones is left behind
  run -0 zk_contenders
  refute_output --partial 'dlock:mix/_c_'
  run -0 zk_cli ls /dlock-test/dlock:mix/leases
  [ "$(grep -o 'lease-' <<<"$output" | wc -l)" -eq 1 ]
  touch "$T/sem.go"
}
