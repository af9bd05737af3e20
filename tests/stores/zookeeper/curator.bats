#!/usr/bin/env bats
# dlock and Apache Curator itself on one ZooKeeper: its InterProcessMutex, the read and write
# locks of its InterProcessReadWriteLock, its InterProcessSemaphoreV2 (dlock --limit N) and its
# DistributedDoubleBarrier (dlock barrier --parties N), each way round: Curator holds, dlock
# gets 75 or waits its turn; dlock holds, Curator's timed acquire gives up or waits its turn;
# hand-overs both ways in queue order. Curator's recipe and dlock's key name one node:
# /dlock-test (the URL's chroot) + / + dlock's prefix and the key ("dlock:KEY").
#
# Curator runs in a small client of ours (curator/CuratorClient.java), compiled here with javac
# against Debian's libcurator-recipes-java. It and each dlock command append their events,
# "NAME acquired", "NAME releasing" (about to let go), "NAME entered", "NAME timed-out", to
# one log, $T/events, with O_APPEND: the log is the order in which they happened, which is what
# the tests check (no wall-clock bounds). A waiter is seen queued in the store itself before its
# holder lets go: dlock status's waiter count (Curator's contenders are dlock's), or the
# semaphore's mutex and the barrier's nodes with zkCli. A JVM takes about half a second to start
# and connect (a second or more on a loaded machine): nothing here waits a fixed time for it.
#
# Skips when java, javac or Curator's jars are missing, unless CI is set (CI installs them:
# packaging/install-deps.sh test).

load ../../lib/helpers
load ../../lib/zookeeper_helpers

setup_file() {
  store_start || return 1
  [ -z "${STORE_SKIP:-}" ] || return 0
  build_curator_client
}
teardown_file() { store_stop; true; }
setup() {
  skip_if_file_skipped
  dlock_setup
  : >"$T/events"
}
teardown() {
  # a failed test shows its events
  if [ -z "${BATS_TEST_COMPLETED:-}" ] && [ -s "$T/events" ]; then
    { echo "# events:"; sed 's/^/#   /' "$T/events"; } >&3
  fi
  dlock_teardown
}

# dlock_holder NAME HOLD [dlock run options...]: a background dlock run (BG_PID) whose command
# logs "NAME acquired", holds (HOLD: seconds, or "go": until $T/NAME.go exists) and logs
# "NAME releasing".
dlock_holder() {
  local name=$1 hold=$2
  shift 2
  start_bg "$name" "$DLOCK" run "$@" -- sh -c '
    echo "$1 acquired" >>"$T/events"
    if [ "$2" = go ]; then until [ -e "$T/$1.go" ]; do sleep 0.02; done; else sleep "$2"; fi
    echo "$1 releasing" >>"$T/events"' sh "$name" "$hold"
}

# dlock_jobs NAME ROUNDS HOLD [dlock run options...]: a background job (BG_PID) of ROUNDS
# dlock runs one after the other, each logging "NAME acquired", sleeping HOLD seconds and logging
# "NAME releasing"; it stops at the first run that fails.
dlock_jobs() {
  local name=$1 rounds=$2 hold=$3
  shift 3
  start_bg "$name" sh -c '
    name=$1 rounds=$2 hold=$3
    shift 3
    for _ in $(seq "$rounds"); do
      "$DLOCK" run "$@" -- sh -c '\''
        echo "$1 acquired" >>"$T/events"; sleep "$2"; echo "$1 releasing" >>"$T/events"'\'' \
        sh "$name" "$hold" || exit
    done' sh "$name" "$rounds" "$hold" "$@"
}

# dlock_party NAME [dlock barrier options...]: a background dlock barrier (its pid recorded) that
# logs "NAME arriving" before it starts and "NAME passed STATUS" once it returned; BG_PID: the
# subshell that waits for it.
dlock_party() {
  local name=$1
  shift
  echo "$name arriving" >>"$T/events"
  ("$DLOCK" barrier "$@" >"$T/$name.out" 2>"$T/$name.err" 3>&- &
    echo $! >>"$T/bg.pid"
    wait $!
    echo "$name passed $?" >>"$T/events") 3>&- &
  BG_PID=$!
}

# passed NAME: until dlock_party NAME returned; fails unless it returned 0.
passed() {
  wait_for "grep -q '^$1 passed ' '$T/events'" 30 || true
  logged "$1 passed 0" || { grep "^$1 passed " "$T/events"; cat "$T/$1.err"; return 1; }
}

# zk_children PATH: the names of PATH's children, one a line (none if it does not exist).
zk_children() {
  zk_cli ls "$1" | sed -n 's/^\[\(.*\)\]$/\1/p' | tr -d ' ' | tr ',' '\n' | grep . || true
}
# children_are PATH N [PID]: until PATH has N children ("ready", a barrier's mark, not
# counted); fails at once if the process PID (the last one to arrive) exits first.
children_are() {
  local count="[ \"\$(zk_children '$1' | grep -cvx ready)\" = '$2' ]"
  wait_for "$count${3:+ || ! alive $3}" 30 || true
  eval "$count" || { echo "$1 has not $2 children: $(zk_children "$1" | tr '\n' ' ')"; return 1; }
}

# ---------------------------------------------------------------------------------------------
# InterProcessMutex

@test "Curator's mutex held: dlock -n exits 75 (exclusive and --shared); dlock waits, runs once Curator lets go" {
  curator c mutex "$(zpath m1)" "$T/c.go"
  local c=$BG_PID
  wait_event "c acquired" "$BG_PID"
  run -75 "$DLOCK" run -k m1 -n -- touch "$T/ran"
  run -75 "$DLOCK" run -k m1 --shared -n -- touch "$T/ran"
  run -75 "$DLOCK" run -k m1 -w 500ms -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  dlock_holder d 0 -k m1
  local d=$BG_PID
  queued m1 1 "$BG_PID"
  touch "$T/c.go"
  wait "$d"
  wait "$c"
  in_order "c acquired" "c releasing" "d acquired" "d releasing"
  [ "$(most_held)" = 1 ]
}

@test "dlock holds: Curator's try-mutex times out; Curator's mutex waits, holds once dlock lets go" {
  dlock_holder d go -k m2
  local d=$BG_PID
  wait_event "d acquired" "$BG_PID"
  run -1 curator_fg c1 try-mutex "$(zpath m2)" 1000
  curator c2 mutex "$(zpath m2)" 0
  local c2=$BG_PID
  queued m2 1 "$BG_PID"
  touch "$T/d.go"
  wait "$c2"
  wait "$d"
  in_order "d acquired" "c1 timed-out" "d releasing" "c2 acquired" "c2 releasing"
  not_logged "c1 acquired"
  [ "$(most_held)" = 1 ]
}

@test "mutex hand-over both ways, in queue order: Curator, dlock, Curator, dlock" {
  curator c1 mutex "$(zpath m3)" "$T/c1.go"
  wait_event "c1 acquired" "$BG_PID"
  dlock_holder d1 0.2 -k m3
  queued m3 1 "$BG_PID"
  curator c2 mutex "$(zpath m3)" 200
  queued m3 2 "$BG_PID"
  dlock_holder d2 0.2 -k m3
  local d2=$BG_PID
  queued m3 3 "$BG_PID"
  touch "$T/c1.go"
  wait "$d2"
  wait_event "c2 releasing"
  in_order "c1 acquired" "c1 releasing" "d1 acquired" "d1 releasing" "c2 acquired" "c2 releasing" \
    "d2 acquired" "d2 releasing"
  [ "$(most_held)" = 1 ]
}

@test "3 Curator clients and 3 dlock jobs of 3 runs on one mutex at once: never two holders" {
  local p i pids=()
  p=$(zpath m4)
  for i in 1 2 3; do
    curator "xc$i" mutex "$p" 50
    pids+=("$BG_PID")
    dlock_jobs "xd$i" 3 0.05 -k m4 -w 60s
    pids+=("$BG_PID")
  done
  for i in "${pids[@]}"; do wait "$i"; done
  [ "$(grep -c ' acquired$' "$T/events")" = 12 ]
  exclusion_ok
  [ "$(most_held)" = 1 ]
}

# ---------------------------------------------------------------------------------------------
# InterProcessReadWriteLock

@test "Curator's read lock held: dlock's exclusive lock gets 75 and waits for it; dlock --shared holds beside it" {
  curator c read "$(zpath rw1)" "$T/c.go"
  local c=$BG_PID
  wait_event "c acquired" "$BG_PID"
  run -75 "$DLOCK" run -k rw1 -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  run -0 "$DLOCK" run -k rw1 --shared -n -- touch "$T/ran"
  [ -e "$T/ran" ]
  dlock_holder d 0 -k rw1
  local d=$BG_PID
  queued rw1 1 "$BG_PID"
  touch "$T/c.go"
  wait "$d"
  wait "$c"
  in_order "c acquired" "c releasing" "d acquired" "d releasing"
}

@test "dlock's exclusive lock held: Curator's read lock, write lock and mutex time out; its reader holds once dlock lets go" {
  dlock_holder d go -k rw2
  local d=$BG_PID
  wait_event "d acquired" "$BG_PID"
  run -1 curator_fg r1 try-read "$(zpath rw2)" 1000
  run -1 curator_fg w1 try-write "$(zpath rw2)" 1000
  run -1 curator_fg m1 try-mutex "$(zpath rw2)" 1000
  curator r2 read "$(zpath rw2)" 0
  local r2=$BG_PID
  queued rw2 1 "$BG_PID"
  touch "$T/d.go"
  wait "$r2"
  wait "$d"
  in_order "d acquired" "r1 timed-out" "w1 timed-out" "m1 timed-out" "d releasing" "r2 acquired"
  [ "$(most_held)" = 1 ]
}

@test "Curator's write lock held: dlock --shared and exclusive get 75; dlock --shared runs once it lets go" {
  curator c write "$(zpath rw3)" "$T/c.go"
  local c=$BG_PID
  wait_event "c acquired" "$BG_PID"
  run -75 "$DLOCK" run -k rw3 -n -- touch "$T/ran"
  run -75 "$DLOCK" run -k rw3 --shared -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  dlock_holder d 0 -k rw3 --shared
  local d=$BG_PID
  queued rw3 1 "$BG_PID"
  touch "$T/c.go"
  wait "$d"
  wait "$c"
  in_order "c acquired" "c releasing" "d acquired" "d releasing"
}

@test "dlock --shared held: Curator's write lock times out, its read lock holds beside it; its writer follows both readers" {
  dlock_holder d go -k rw4 --shared
  local d=$BG_PID
  wait_event "d acquired" "$BG_PID"
  run -1 curator_fg w1 try-write "$(zpath rw4)" 1000
  curator r read "$(zpath rw4)" "$T/r.go"
  wait_event "r acquired" "$BG_PID"
  curator w2 write "$(zpath rw4)" 0
  local w2=$BG_PID
  queued rw4 1 "$BG_PID"
  touch "$T/d.go"
  wait "$d"
  touch "$T/r.go"
  wait "$w2"
  # both readers held at once, the writer after both
  in_order "d acquired" "w1 timed-out" "r acquired" "d releasing" "r releasing" "w2 acquired"
  [ "$(most_held)" = 2 ]
}

@test "read/write hand-over both ways, in queue order: readers together, each writer alone" {
  curator c1 write "$(zpath rw5)" "$T/c1.go"
  wait_event "c1 acquired" "$BG_PID"
  dlock_holder d1 go -k rw5 --shared
  queued rw5 1 "$BG_PID"
  curator c2 read "$(zpath rw5)" "$T/c2.go"
  queued rw5 2 "$BG_PID"
  dlock_holder d3 0.2 -k rw5
  queued rw5 3 "$BG_PID"
  curator c4 write "$(zpath rw5)" 200
  queued rw5 4 "$BG_PID"
  dlock_holder d5 0.2 -k rw5 --shared
  local d5=$BG_PID
  queued rw5 5 "$BG_PID"
  touch "$T/c1.go"
  # the two readers hold at once, the writer behind them waits
  wait_event "d1 acquired"
  wait_event "c2 acquired"
  not_logged "d3 acquired"
  touch "$T/d1.go" "$T/c2.go"
  wait "$d5"
  in_order "c1 releasing" "d1 acquired" "d1 releasing" "d3 acquired" "d3 releasing" "c4 acquired" \
    "c4 releasing" "d5 acquired"
  in_order "c1 releasing" "c2 acquired" "c2 releasing" "d3 acquired"
  # the two readers held at once
  [ "$(most_held)" = 2 ]
}

@test "2 Curator readers, 2 Curator writers, 2 dlock --shared and 2 exclusive jobs of 3 runs at once: no writer beside anyone" {
  local p i pids=()
  p=$(zpath rw6)
  for i in 1 2; do
    curator "cr$i" read "$p" 100
    pids+=("$BG_PID")
    curator "xcw$i" write "$p" 100
    pids+=("$BG_PID")
  done
  for i in 1 2; do
    dlock_jobs "ds$i" 3 0.1 -k rw6 --shared -w 60s
    pids+=("$BG_PID")
    dlock_jobs "xd$i" 3 0.1 -k rw6 -w 60s
    pids+=("$BG_PID")
  done
  for i in "${pids[@]}"; do wait "$i"; done
  [ "$(grep -c ' acquired$' "$T/events")" = 16 ]
  exclusion_ok
}

# ---------------------------------------------------------------------------------------------
# InterProcessSemaphoreV2: its leases under PATH/leases, taken under its mutex PATH/locks (the
# one waiter at the head of the queue holds the mutex while it waits for a lease)

@test "Curator's semaphore full (2 of 2): dlock --limit 2 -n exits 75 and waits; runs once a lease comes back" {
  local p
  p=$(zpath s1)
  curator c1 semaphore "$p" 2 "$T/c1.go"
  local c1=$BG_PID
  curator c2 semaphore "$p" 2 "$T/c2.go"
  local c2=$BG_PID
  wait_event "c1 acquired" "$c1"
  wait_event "c2 acquired" "$c2"
  run -75 "$DLOCK" run -k s1 --limit 2 -n -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  dlock_holder d go -k s1 --limit 2
  local d=$BG_PID
  children_are "$p/locks" 1 "$BG_PID"
  touch "$T/c1.go"
  wait_event "d acquired" "$d"
  # c2 still holds: dlock took the lease c1 gave back
  not_logged "c2 releasing"
  touch "$T/c2.go" "$T/d.go"
  wait "$d"
  in_order "c1 acquired" "c1 releasing" "d acquired" "d releasing"
  [ "$(most_held)" = 2 ]
}

@test "dlock --limit 2 full: Curator's try-semaphore times out; Curator's semaphore holds once a slot frees" {
  local p
  p=$(zpath s2)
  dlock_holder d1 go -k s2 --limit 2
  local d1=$BG_PID
  dlock_holder d2 go -k s2 --limit 2
  local d2=$BG_PID
  wait_event "d1 acquired" "$d1"
  wait_event "d2 acquired" "$d2"
  run -1 curator_fg c1 try-semaphore "$p" 2 1000
  curator c2 semaphore "$p" 2 "$T/c2.go"
  local c2=$BG_PID
  children_are "$p/locks" 1 "$c2"
  touch "$T/d1.go"
  wait_event "c2 acquired" "$c2"
  not_logged "d2 releasing"
  touch "$T/d2.go" "$T/c2.go"
  wait "$d1"
  wait "$d2"
  in_order "d1 acquired" "c1 timed-out" "d1 releasing" "c2 acquired"
  in_order "d2 acquired" "c1 timed-out"
  not_logged "c1 acquired"
  [ "$(most_held)" = 2 ]
}

@test "a semaphore of 3 shared by Curator and dlock: never more than 3, hand-over both ways in queue order" {
  local p
  p=$(zpath s3)
  curator c1 semaphore "$p" 3 "$T/c1.go"
  wait_event "c1 acquired" "$BG_PID"
  dlock_holder d1 go -k s3 --limit 3
  local d1=$BG_PID
  wait_event "d1 acquired" "$BG_PID"
  curator c2 semaphore "$p" 3 "$T/c2.go"
  wait_event "c2 acquired" "$BG_PID"
  # full: a dlock waiter, then a Curator one, queue on the semaphore's mutex
  dlock_holder d2 go -k s3 --limit 3
  local d2=$BG_PID
  children_are "$p/locks" 1 "$BG_PID"
  curator c3 semaphore "$p" 3 "$T/c3.go"
  local c3=$BG_PID
  children_are "$p/locks" 2 "$c3"
  touch "$T/c1.go"
  wait_event "d2 acquired" "$d2"
  not_logged "c3 acquired"
  touch "$T/d1.go"
  wait_event "c3 acquired" "$c3"
  touch "$T/c2.go" "$T/d2.go" "$T/c3.go"
  wait "$d1"
  wait "$d2"
  in_order "c1 releasing" "d2 acquired" "d1 releasing" "c3 acquired"
  [ "$(most_held)" = 3 ]
}

@test "a semaphore of 2, 3 Curator clients and 3 dlock jobs of 3 runs at once: never more than 2" {
  local p i pids=()
  p=$(zpath s4)
  for i in 1 2 3; do
    curator "c$i" semaphore "$p" 2 100
    pids+=("$BG_PID")
    dlock_jobs "d$i" 3 0.1 -k s4 --limit 2 -w 60s
    pids+=("$BG_PID")
  done
  for i in "${pids[@]}"; do wait "$i"; done
  [ "$(grep -c ' acquired$' "$T/events")" = 12 ]
  exclusion_ok 2
  [ "$(most_held)" -le 2 ]
}

# ---------------------------------------------------------------------------------------------
# DistributedDoubleBarrier: each party an ephemeral node under PATH, "ready" made by the one
# that completes it; leave waits until every party's node is gone

# parties_at KEY N: until the barrier KEY has N parties' nodes (not counting "ready").
parties_at() { children_are "$(zpath "$1")" "$2" "${3:-}"; }

@test "Curator's parties wait in the double barrier until dlock's party completes it; all pass" {
  curator c1 barrier "$(zpath b1)" 3
  local c1=$BG_PID
  curator c2 barrier "$(zpath b1)" 3
  local c2=$BG_PID
  parties_at b1 2 "$BG_PID"
  not_logged "c1 entered"
  echo "d arriving" >>"$T/events"
  run -0 "$DLOCK" barrier -k b1 --parties 3 -w 30s
  wait "$c1"
  wait "$c2"
  in_order "d arriving" "c1 entered" "c1 left"
  in_order "d arriving" "c2 entered" "c2 left"
}

@test "dlock's party waits in the barrier until Curator's parties arrive; all pass" {
  dlock_party d1 -k b2 --parties 3 -w 30s
  parties_at b2 1 "$BG_PID"
  curator c1 barrier "$(zpath b2)" 3
  local c1=$BG_PID
  parties_at b2 2 "$BG_PID"
  not_logged "d1 passed 0"
  not_logged "c1 entered"
  curator c2 barrier "$(zpath b2)" 3
  local c2=$BG_PID
  passed d1
  wait "$c1"
  wait "$c2"
  in_order "d1 arriving" "c1 connected" "c2 connected" "c1 entered"
  in_order "c2 connected" "d1 passed 0"
}

@test "a party that times out is withdrawn on both sides; then dlock and Curator pass together" {
  run -75 "$DLOCK" barrier -k b3 --parties 2 -w 1s
  # dlock's withdrawn arrival does not complete Curator's
  run -1 curator_fg c1 try-barrier "$(zpath b3)" 2 1500
  # nor Curator's (gone with its session) dlock's
  run -75 "$DLOCK" barrier -k b3 --parties 2 -w 1s
  curator c2 barrier "$(zpath b3)" 2
  local c2=$BG_PID
  parties_at b3 1 "$BG_PID"
  run -0 "$DLOCK" barrier -k b3 --parties 2 -w 30s
  wait "$c2"
  logged "c1 timed-out"
  not_logged "c1 entered"
  in_order "c2 connected" "c2 entered" "c2 left"
}

@test "two rounds in a row of 2 Curator and 2 dlock parties (Curator's leave clears the barrier)" {
  local round c1 c2
  for round in 1 2; do
    curator "c1.$round" barrier "$(zpath b4)" 4
    c1=$BG_PID
    dlock_party "d1.$round" -k b4 --parties 4 -w 30s
    curator "c2.$round" barrier "$(zpath b4)" 4
    c2=$BG_PID
    parties_at b4 3 "$c2"
    not_logged "c1.$round entered"
    dlock_party "d2.$round" -k b4 --parties 4 -w 30s
    passed "d1.$round"
    passed "d2.$round"
    wait "$c1"
    wait "$c2"
    in_order "d2.$round arriving" "c1.$round entered" "c1.$round left"
    in_order "d2.$round arriving" "c2.$round entered" "c2.$round left"
  done
  # nothing left but the barrier's node: the next round starts afresh
  [ -z "$(zk_children "$(zpath b4)")" ]
}

@test "a round of dlock's parties alone, then of Curator's alone: neither lets the next one through early" {
  dlock_party d1 -k b5 --parties 2 -w 30s
  dlock_party d2 -k b5 --parties 2 -w 30s
  passed d1
  passed d2
  # a Curator party alone waits for a second one (no "ready" left from dlock's round)
  run -1 curator_fg c1 try-barrier "$(zpath b5)" 2 1500
  not_logged "c1 entered"
  curator c2 barrier "$(zpath b5)" 2
  local c2=$BG_PID
  curator c3 barrier "$(zpath b5)" 2
  local c3=$BG_PID
  wait "$c2"
  wait "$c3"
  # and dlock's next party waits for a second one too
  run -75 "$DLOCK" barrier -k b5 --parties 2 -w 1s
  in_order "c1 timed-out" "c2 entered" "c2 left"
  in_order "c1 timed-out" "c3 entered" "c3 left"
}
