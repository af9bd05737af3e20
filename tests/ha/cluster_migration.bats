#!/usr/bin/env bats
# Redis Cluster reshaped under a running holder: the lock's slot migrated to another master
# (the renewals meet ASK and TRYAGAIN on the way), and a master failed over to its replica. The
# command keeps running and the lease goes on being renewed where the slot went. One cluster
# of 3 masters with a replica each for the file (cluster_helpers.bash); the setup of each test
# waits until the previous test's changes have settled.

load ../lib/cluster_helpers

url() { echo "redis://127.0.0.1:$1"; }

# errorstat PORT ERROR: how many ERROR replies (TRYAGAIN, MOVED...) the node has sent.
errorstat() {
  ncli "$1" info errorstats | tr -d '\r' | sed -n "s/^errorstat_$2:count=//p" | grep . || echo 0
}

# lock_keys_on PORT NAME: the lock NAME's keys that the node on PORT has, one line.
lock_keys_on() { keys_on "$1" | grep -F "{$2}" | tr '\n' ' '; }

@test "the lock's slot migrates to another master while the command runs: renewals follow, the command finishes" {
  local src dst third name slot src_id dst_id
  read -r src dst third <<<"$MASTER_PORTS"
  name=$(name_on "$src" mig-)
  slot=$(lock_slot "$name")
  src_id=$(node_id "$src")
  dst_id=$(node_id "$dst")

  # Through the third master, which knows nothing of the migration until it is over: every
  # request goes by MOVED to the source, and from there by ASK to the destination.
  # A 6 s lease: the steps below run a dozen redis-cli processes while the renewal retries,
  # which took past 2 s (a 3 s lease's limit) on a slow VM.
  start_bg holder "$DLOCK" -u "$(url "$third")" run -k "$name" -t 6s -- sh -c '
    echo "$DLOCK_TOKEN" >"$1.tmp"; mv "$1.tmp" "$1"
    until [ -e "$2" ]; do sleep 0.02; done
    echo finished' sh "$T/token" "$T/go"
  local holder=$BG_PID tok
  started holder '[ -s "$T/token" ]'
  tok=$(cat "$T/token")
  run -0 ncli "$src" get "dlock:{$name}"
  assert_output "$tok"
  wait_renewal "$src" "$name"

  # 1. The slot is marked: importing on the destination, migrating on the source. Every key
  # is still on the source, which goes on serving them: a renewal lands there.
  run -0 ncli "$dst" cluster setslot "$slot" importing "$src_id"
  run -0 ncli "$src" cluster setslot "$slot" migrating "$dst_id"
  wait_renewal "$src" "$name"

  # 2. Right after that renewal, some of the lock's keys move: the holder record and the
  # fencing counter. The source now answers TRYAGAIN to the renewal script, which needs the
  # lock and its holder record together: the renewal that falls due (in a second) meets it and
  # retries. It is left retrying for a few tenths of a second, well within the lease (6 s).
  local tryagain_before
  tryagain_before=$(errorstat "$src" TRYAGAIN)
  run -0 ncli "$src" migrate 127.0.0.1 "$dst" "" 0 5000 KEYS "dlock:{$name}:holder" "dlock:{$name}:fence"
  assert_output OK
  run -0 ncli "$src" eval "return redis.call('EXISTS', KEYS[1], KEYS[2])" 2 "dlock:{$name}" "dlock:{$name}:holder"
  assert_output --partial TRYAGAIN
  # dlock's renewal meets TRYAGAIN too (ours above was the first).
  wait_for "[ \$(errorstat $src TRYAGAIN) -ge $((tryagain_before + 2)) ] || ! alive $holder" 5 ||
    fail "no renewal met TRYAGAIN: $(errorstat "$src" TRYAGAIN) after $tryagain_before"
  sleep 0.3
  alive "$holder" || { cat "$T/holder.err" >&2; fail "dlock stopped while the slot was half moved"; }
  [ "$(errorstat "$src" TRYAGAIN)" -ge $((tryagain_before + 2)) ]

  # 3. The rest of the slot's keys move. The source answers ASK for all of them, and only a
  # request preceded by ASKING reaches them on the destination: a renewal gets there.
  local rest
  rest=$(ncli "$src" cluster getkeysinslot "$slot" 100 | tr '\n' ' ')
  [[ $rest == *"dlock:{$name} "* ]] || fail "left on the source: $rest"
  # shellcheck disable=SC2086 # the keys are words without blanks
  run -0 ncli "$src" migrate 127.0.0.1 "$dst" "" 0 5000 KEYS $rest
  assert_output OK
  [ "$(ncli "$src" cluster countkeysinslot "$slot")" = 0 ]
  wait_renewal "$dst" "$name" asking
  alive "$holder" || { cat "$T/holder.err" >&2; fail "dlock stopped while the slot was being imported"; }

  # 4. The destination owns the slot, for every master: MOVED to it from anywhere else.
  local m
  for m in "$dst" "$src" "$third"; do
    run -0 ncli "$m" cluster setslot "$slot" node "$dst_id"
    assert_output OK
  done
  [ "$(lock_node "$name")" = "$dst" ]
  wait_renewal "$dst" "$name"
  wait_renewal "$dst" "$name"
  [ "$PTTL" -gt 4000 ]
  [ "$PTTL" -le 6000 ]
  run -0 ncli "$dst" get "dlock:{$name}"
  assert_output "$tok"
  run -0 ncli "$dst" exists "dlock:{$name}:holder" "dlock:{$name}:fence"
  assert_output 2
  [ -z "$(lock_keys_on "$src")" ] || fail "left on the source: $(lock_keys_on "$src")"
  run -0 "$DLOCK" -u "$(url "$src")" status "$name" --json
  json_ok 'held_status(d); assert d["key"] == A[0], d' "$name"
  run -75 "$DLOCK" -u "$(url "$src")" run -k "$name" -n -- touch "$T/second-ran"
  [ ! -e "$T/second-ran" ]

  # The command finishes on its own terms; the lock is released on the destination.
  touch "$T/go"
  wait_for "! alive $holder" 10
  local rc=0
  wait "$holder" || rc=$?
  [ "$rc" -eq 0 ] || { cat "$T/holder.err" >&2; fail "exit $rc"; }
  run -0 cat "$T/holder.out"
  assert_output finished
  run -0 ncli "$dst" exists "dlock:{$name}" "dlock:{$name}:holder"
  assert_output 0
  run -0 ncli "$dst" exists "dlock:{$name}:fence"
  assert_output 1
  [ -z "$(lock_keys_on "$src")" ]
  # The cluster is whole again (replicas included) for the next test.
  cluster_settled 20
}

@test "with --wait-replicas 1, a failover of the lock's master to its replica: the command keeps running, renewed on the new master" {
  local m1 old new name
  read -r m1 old _ <<<"$MASTER_PORTS"
  new=$(replica_of "$old")
  name=$(name_on "$old" fo-)

  start_bg holder "$DLOCK" -u "$(url "$m1")" run -k "$name" -t 3s --wait-replicas 1 -- sh -c '
    echo "$DLOCK_TOKEN" >"$1.tmp"; mv "$1.tmp" "$1"
    until [ -e "$2" ]; do sleep 0.02; done
    echo finished' sh "$T/token" "$T/go"
  local holder=$BG_PID tok
  started holder '[ -s "$T/token" ]'
  tok=$(cat "$T/token")
  wait_renewal "$old" "$name"

  # A manual failover (CLUSTER FAILOVER on the replica): the replica catches up, takes the
  # slots over, and the old master becomes its replica.
  run -0 ncli "$new" cluster failover
  assert_output OK
  wait_for "[ \"\$(role $new)\" = master ] && [ \"\$(role $old)\" = slave ]" 10
  local failed_over
  failed_over=$(now_ms)
  [ "$(lock_node "$name")" = "$new" ] || wait_for "[ \"\$(lock_node '$name')\" = $new ]" 10

  # Renewals reach the new master, and go on past a whole lease after the failover: the lease
  # there is the renewed one, not the copy the failover brought along.
  wait_renewal "$new" "$name"
  wait_for "[ \$(now_ms) -ge $((failed_over + 3500)) ]" 5
  wait_renewal "$new" "$name"
  alive "$holder" || { cat "$T/holder.err" >&2; fail "dlock stopped after the failover"; }
  run -0 ncli "$new" get "dlock:{$name}"
  assert_output "$tok"
  run -75 "$DLOCK" -u "$(url "$old")" run -k "$name" -n -- touch "$T/second-ran"
  [ ! -e "$T/second-ran" ]

  touch "$T/go"
  wait_for "! alive $holder" 10
  local rc=0
  wait "$holder" || rc=$?
  [ "$rc" -eq 0 ] || { cat "$T/holder.err" >&2; fail "exit $rc"; }
  run -0 cat "$T/holder.out"
  assert_output finished
  run -0 ncli "$new" exists "dlock:{$name}"
  assert_output 0
  cluster_settled 20
}
