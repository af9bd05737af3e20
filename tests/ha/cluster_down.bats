#!/usr/bin/env bats
# Redis Cluster down: a master dies and no replica takes over. With
# cluster-require-full-coverage yes (the default) the cluster refuses every key (CLUSTERDOWN
# The cluster is down); with it off, the slots of the dead master stay unserved (redirected to
# a node that is gone). dlock exits 69 with a diagnostic and runs nothing, and works again for
# the slots that are served. Each test starts its own cluster of 3 masters without replicas,
# since it kills one (cluster_helpers.bash; the teardown stops the rest).

load ../lib/cluster_helpers

setup_file() { :; }
teardown_file() { :; }
setup() {
  dlock_setup
  start_cluster 3 0
  export DLOCK_URL=$CLUSTER_URL
}
teardown() {
  stop_cluster
  dlock_teardown
}

url() { echo "redis://127.0.0.1:$1"; }

# down URL NAME WORDS: every subcommand on the lock NAME through URL exits 69 within 10 s with
# a diagnostic (containing WORDS, unless empty) and nothing on stdout; run never runs its
# command.
down() {
  local u=$1 name=$2 words=$3 start took
  start=$(now_ms)
  run -69 --separate-stderr "$DLOCK" -u "$u" --connect-timeout 1s run -k "$name" -n -t 3s -- touch "$T/ran"
  took=$(($(now_ms) - start))
  [ ! -e "$T/ran" ] || fail "the command ran"
  [ -z "$output" ]
  [[ $stderr == dlock:* ]] || fail "stderr: $stderr"
  [ -z "$words" ] || [[ $stderr == *"$words"* ]] || fail "stderr lacks '$words': $stderr"
  [ "$took" -lt 10000 ] || fail "took $took ms"
  # Without -n too (waiting does not wait for the cluster to come back).
  run -69 --separate-stderr "$DLOCK" -u "$u" --connect-timeout 1s run -k "$name" -w 2s -t 3s -- touch "$T/ran"
  [ ! -e "$T/ran" ] || fail "the command ran"
  [ -z "$words" ] || [[ $stderr == *"$words"* ]] || fail "stderr lacks '$words': $stderr"
  run -69 --separate-stderr "$DLOCK" -u "$u" --connect-timeout 1s acquire -k "$name" -t 3s
  [ -z "$output" ]
  [[ $stderr == dlock:* ]]
  run -69 --separate-stderr "$DLOCK" -u "$u" --connect-timeout 1s status "$name"
  [ -z "$output" ]
  [[ $stderr == dlock:* ]]
}

@test "a master dies with no replica: 69 (CLUSTERDOWN) for every lock; with partial coverage, only for its slots" {
  local via victim other dead live
  read -r via victim other <<<"$MASTER_PORTS"
  # The names first, while the map is whole: one on the master about to die, one on a master
  # that stays (not the one the URL names, so that dlock must go through the cluster).
  dead=$(name_on "$victim" dead-)
  live=$(name_on "$other" live-)
  run -0 "$DLOCK" -u "$(url "$via")" run -k "$dead" -n -- true
  run -0 "$DLOCK" -u "$(url "$via")" run -k "$live" -n -- true

  kill_node "$victim"
  wait_for "ncli $via cluster info | grep -q cluster_state:fail && ncli $other cluster info | grep -q cluster_state:fail" 15

  # Full coverage required: the surviving nodes refuse every key, whichever master serves it.
  down "$(url "$via")" "$live" "CLUSTERDOWN"
  down "$(url "$other")" "$live" "CLUSTERDOWN"
  down "$(url "$via")" "$dead" ""
  run -69 --separate-stderr "$DLOCK" -u "$(url "$via")" --connect-timeout 1s list
  [ -z "$output" ]
  [[ $stderr == dlock:* ]]

  # Partial coverage: the slots of the live masters are served again, the dead master's are
  # not (MOVED to a node that is gone).
  ncli "$via" config set cluster-require-full-coverage no >/dev/null
  ncli "$other" config set cluster-require-full-coverage no >/dev/null
  wait_for "ncli $via cluster info | grep -q cluster_state:ok && ncli $other cluster info | grep -q cluster_state:ok" 15
  run -0 --separate-stderr "$DLOCK" -u "$(url "$via")" --connect-timeout 1s run -k "$live" -n -- echo ran
  assert_output ran
  run -0 ncli "$other" exists "dlock:{$live}:fence"
  assert_output 1
  down "$(url "$via")" "$dead" ""
}
