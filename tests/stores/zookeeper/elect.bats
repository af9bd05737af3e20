#!/usr/bin/env bats
# dlock elect and dlock leader on ZooKeeper, beside Apache Curator's LeaderSelector and
# LeaderLatch on the same path (/dlock-test/dlock:KEY): Curator's selector is an
# InterProcessMutex whose "lock-" node has the participant's id as its data, its latch a "latch-"
# node with the id; dlock's candidate is its exclusive pair whose "lock-" node has the --value
# (its "__WRIT__" partner has dlock's holder record), and a "latch-" node with the --value, made
# in the same transaction. Each waits for the other in queue order; Curator's getLeader().getId()
# shows dlock's --value, and `dlock leader` Curator's id, with the node's czxid as the term.
# (Curator's selector and latch do not see each other: each test has one of them.) And what
# another tenant leaves at the head of the queue: shown as "not a dlock holder", never a crash.
#
# Curator runs in our client (curator/CuratorClient.java, zookeeper_helpers.bash builds it), its
# events and the dlock commands' ("NAME acquired", "NAME releasing") in one log, $T/events, in
# the order they happened; the tests check that order, not times. Skips when java, javac or
# Curator's jars are missing, unless CI is set.

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
  if [ -z "${BATS_TEST_COMPLETED:-}" ] && [ -s "$T/events" ]; then
    { echo "# events:"; sed 's/^/#   /' "$T/events"; } >&3
  fi
  dlock_teardown
}

# candidate NAME HOLD [dlock elect options...]: a background dlock elect (BG_PID) whose command
# logs "NAME acquired" (with its DLOCK_FENCING_TOKEN in $T/NAME.fence), holds (HOLD: seconds,
# or "go": until $T/NAME.go exists) and logs "NAME releasing".
candidate() {
  local name=$1 hold=$2
  shift 2
  start_bg "$name" "$DLOCK" elect "$@" -- sh -c '
    echo "$DLOCK_FENCING_TOKEN" >"$T/$1.fence"
    echo "$1 acquired" >>"$T/events"
    if [ "$2" = go ]; then until [ -e "$T/$1.go" ]; do sleep 0.02; done; else sleep "$2"; fi
    echo "$1 releasing" >>"$T/events"' sh "$name" "$hold"
}

# curator_leader_of KEY: Curator's view of the election on KEY (CuratorClient leader-of), in
# $output: "q leader ID" or "q no-leader", then "q participant ID" for each of its nodes; LEADER:
# the first line of the two.
curator_leader_of() {
  curator_args q leader-of "$(zpath "$1")"
  run -0 "${JAVA_ARGS[@]}"
  echo "$output"
  LEADER=$(grep -m1 '^q leader \|^q no-leader$' <<<"$output")
}

@test "Curator's LeaderSelector leads: dlock leader shows its id and czxid; dlock elect waits, runs once Curator relinquishes" {
  curator c leader "$(zpath e1)" "curator-1 at 10.0.0.9" "$T/c.go"
  local c=$BG_PID
  wait_event "c acquired" "$c"
  run -0 "$DLOCK" leader e1
  [[ $output == *"curator-1 at 10.0.0.9"* ]]
  run -0 "$DLOCK" leader e1 --json
  [ "$(jq -r '.. | .value? // empty' <<<"$output" | head -1)" = "curator-1 at 10.0.0.9" ]
  # the term is the node's czxid, which status shows as the fencing token
  local fence
  fence=$("$DLOCK" status e1 --json | jq -r .fencing_token)
  [ "$fence" -gt 0 ]
  [[ $output == *"$fence"* ]]
  candidate d 0 -k e1 --value dlock-1
  local d=$BG_PID
  queued e1 1 "$d"
  not_logged "d acquired"
  touch "$T/c.go"
  wait "$d"
  wait "$c"
  in_order "c acquired" "c releasing" "d acquired" "d releasing"
  [ "$(most_held)" = 1 ]
  [ "$(cat "$T/d.fence")" -gt "$fence" ]
}

@test "dlock elect leads: Curator's getLeader() shows its --value; Curator's selector leads only once dlock's command ended" {
  candidate d go -k e2 --value "dlock-2 at 10.0.0.2:8080"
  local d=$BG_PID
  wait_event "d acquired" "$d"
  curator_leader_of e2
  [ "$LEADER" = "q leader dlock-2 at 10.0.0.2:8080" ]
  [[ $output == *"q participant dlock-2 at 10.0.0.2:8080"* ]]
  run -0 "$DLOCK" leader e2
  [[ $output == *"dlock-2 at 10.0.0.2:8080"* ]]
  curator c leader "$(zpath e2)" curator-2 0
  local c=$BG_PID
  queued e2 1 "$c"
  not_logged "c acquired"
  touch "$T/d.go"
  wait "$d"
  wait "$c"
  in_order "d acquired" "d releasing" "c acquired" "c releasing"
  [ "$(most_held)" = 1 ]
  curator_leader_of e2
  [ "$LEADER" = "q no-leader" ]
  run -1 "$DLOCK" leader e2
}

@test "leader --watch follows the leadership from Curator's selector to dlock's candidate and back, each once" {
  curator c1 leader "$(zpath e3)" curator-a "$T/c1.go"
  wait_event "c1 acquired" "$BG_PID"
  start_bg watch "$DLOCK" leader e3 --watch
  local watch=$BG_PID
  wait_for "grep -q curator-a '$T/watch.out'" 30
  candidate d go -k e3 --value dlock-b
  queued e3 1 "$BG_PID"
  # c2 holds until told: a leadership of a few milliseconds may end before any watcher reads it
  curator c2 leader "$(zpath e3)" curator-c "$T/c2.go"
  queued e3 2 "$BG_PID"
  touch "$T/c1.go"
  wait_event "d acquired"
  wait_for "grep -q dlock-b '$T/watch.out'" 30
  touch "$T/d.go"
  wait_event "c2 acquired"
  wait_for "grep -q curator-c '$T/watch.out'" 30
  touch "$T/c2.go"
  wait_event "c2 released"
  wait_for "tail -n1 '$T/watch.out' | grep -q 'no leader'" 30
  kill -INT "$watch"
  cat "$T/watch.out"
  [ "$(grep -c curator-a "$T/watch.out")" = 1 ]
  [ "$(grep -c dlock-b "$T/watch.out")" = 1 ]
  [ "$(grep -c curator-c "$T/watch.out")" = 1 ]
  [ "$(grep -n curator-a "$T/watch.out" | cut -d: -f1)" -lt "$(grep -n dlock-b "$T/watch.out" | cut -d: -f1)" ]
  [ "$(grep -n dlock-b "$T/watch.out" | cut -d: -f1)" -lt "$(grep -n curator-c "$T/watch.out" | cut -d: -f1)" ]
}

@test "Curator's LeaderLatch leads: dlock elect waits; then dlock leads, the next LeaderLatch awaits it and its getLeader() shows dlock's --value" {
  curator c1 latch "$(zpath l1)" latch-1 "$T/c1.go"
  wait_event "c1 acquired" "$BG_PID"
  run -0 "$DLOCK" leader l1
  [[ $output == "latch-1 (not dlock"* ]]
  candidate d go -k l1 --value dlock-l
  local d=$BG_PID
  queued l1 1 "$d"
  curator c2 latch "$(zpath l1)" latch-2 0
  local c2=$BG_PID
  queued l1 2 "$c2"
  touch "$T/c1.go"
  wait_event "d acquired" "$d"
  curator_args q latch-of "$(zpath l1)"
  run -0 "${JAVA_ARGS[@]}"
  echo "$output"
  [ "$(grep -m1 '^q leader \|^q no-leader$' <<<"$output")" = "q leader dlock-l" ]
  not_logged "c2 acquired"
  touch "$T/d.go"
  wait "$d"
  wait "$c2"
  in_order "c1 acquired" "c1 releasing" "d acquired" "d releasing" "c2 acquired" "c2 releasing"
  [ "$(most_held)" = 1 ]
}

# mixed_election KEY RECIPE N: N Curator RECIPE (leader: LeaderSelector, latch: LeaderLatch)
# clients and N dlock candidates of 3 terms each contend for KEY at once; every leadership is
# logged to $T/events, and none may overlap another.
mixed_election() {
  local key=$1 recipe=$2 n=$3 p i pids=()
  p=$(zpath "$key")
  for ((i = 1; i <= n; i++)); do
    curator "xc$i" "$recipe" "$p" "curator-$i" 50
    pids+=("$BG_PID")
    start_bg "xd$i" sh -c '
      for _ in 1 2 3; do
        "$DLOCK" elect -k "$2" --value "dlock-$1" -w 60s -- sh -c '\''
          echo "$1 acquired" >>"$T/events"; sleep 0.05; echo "$1 releasing" >>"$T/events"'\'' \
          sh "xd$1" || exit
      done' sh "$i" "$key"
    pids+=("$BG_PID")
  done
  for i in "${pids[@]}"; do wait "$i"; done
  exclusion_ok
  [ "$(most_held)" = 1 ]
}

@test "2 Curator LeaderLatches and 2 dlock candidates of 3 terms on one election at once: never two leaders" {
  mixed_election l2 latch 2
  [ "$(grep -c ' acquired$' "$T/events")" = 8 ]
}

@test "3 Curator selectors and 3 dlock candidates of 3 terms on one election at once: never two leaders" {
  mixed_election e4 leader 3
  [ "$(grep -c ' acquired$' "$T/events")" = 12 ]
}

@test "another tenant's node at the head of the election: an oversized or unprintable one has no value and is 'not a dlock holder'; leader exits 0, and 1 once it is gone" {
  run -0 "$DLOCK" run -k j1 -- true # makes CHROOT/dlock:j1
  local node big
  big=$(head -c 100000 /dev/zero | tr '\0' v)
  run -0 zk_cli create -s /dlock-test/dlock:j1/_c_00000000-0000-4000-8000-000000000000-lock- "$big"
  run -0 "$DLOCK" leader j1 --json
  echo "$output" | head -c 2000
  [ "${#output}" -lt 4000 ]
  [[ $output == *"not a dlock holder"* ]]
  [ -z "$(jq -r '.. | .value? // empty' <<<"$output")" ]
  run -0 "$DLOCK" leader j1
  [ "${#output}" -lt 4000 ]
  node=$(zk_contenders | grep dlock:j1/)
  run -0 zk_cli delete "$node"
  run -1 "$DLOCK" leader j1
  # a value with a terminal escape is not shown as one
  run -0 zk_cli create -s /dlock-test/dlock:j1/x-lock- "$(printf 'evil\033[2Jid')"
  run -0 "$DLOCK" leader j1 --json
  [[ $output == *"not a dlock holder"* ]]
  [ -z "$(jq -r '.. | .value? // empty' <<<"$output")" ]
  run -0 "$DLOCK" leader j1
  [[ $output != *$'\033'* ]]
  # a candidate waits behind it, and leads once it is gone
  candidate d 0 -k j1 --value dlock-j
  queued j1 1 "$BG_PID"
  run -0 zk_cli delete "$(zk_cli ls /dlock-test/dlock:j1 | tr -d '[],' | tr ' ' '\n' | grep '^x-lock-' | sed 's|^|/dlock-test/dlock:j1/|')"
  wait "$BG_PID"
  logged "d acquired"
}
