#!/usr/bin/env bats
# dlock run: the lease while the command runs. Renewal, loss of the lock (deleted, overwritten,
# Redis frozen), signals to dlock, dlock killed, leftovers in the process group, --on-lost and
# --kill-after. TTLs are 1s to 3s; every bound leaves room for a loaded 2-core machine.

load ../lib/helpers

# wait_dead MAX_MS PID...: polls (one ps per round) until every PID is gone or a zombie;
# sets DEAD_AT to the time that was first seen; fails after MAX_MS.
wait_dead() {
  local max=$1 now deadline
  shift
  local pids
  pids=$(IFS=,; echo "$*")
  ms_into now
  deadline=$((now + max))
  while ps -o stat= -p "$pids" | grep -qv '^Z'; do
    ms_into now
    if [ "$now" -ge "$deadline" ]; then
      echo "still alive after $max ms:" >&2
      ps -o pid=,stat=,args= -p "$pids" >&2
      return 1
    fi
    sleep 0.005
  done
  ms_into DEAD_AT
}

# wait_pidfiles NAME...: waits until the command wrote $T/NAME.pid for each NAME.
wait_pidfiles() {
  local name
  for name in "$@"; do
    wait_for "[ -s '$T/$name.pid' ]"
  done
}

pid_of() { cat "$T/$1.pid"; }

# watch_death: makes $T/alive.fifo and a background reader that writes to $T/dead_at the time
# (ms) at which the last process holding the fifo open for writing is gone: the kernel's EOF
# tells it at once, with none of the lag of polling ps on a loaded machine.
watch_death() {
  mkfifo "$T/alive.fifo"
  bash -c 'exec 8<"$T/alive.fifo"; cat <&8 >/dev/null; us=${EPOCHREALTIME/[.,]/}
           echo $((us / 1000)) >"$T/dead_at"' 3>&- &
  echo $! >>"$T/watch.pid"
}


# A command tree: the command ($T/cmd.pid), a child sleep ($T/child.pid), a child shell
# ($T/mid.pid) and its own sleep, a grandchild of the command ($T/gc.pid). All of them hold
# $T/alive.fifo open: see watch_death.
write_tree_script() {
  cat >"$T/tree.sh" <<'EOF'
exec 7>"$T/alive.fifo"
echo $$ >"$T/cmd.pid"
sleep 100 &
echo $! >"$T/child.pid"
sh -c 'sleep 100 & echo $! >"$T/gc.pid"; wait' &
echo $! >"$T/mid.pid"
wait
EOF
}

@test "a command running 3x its TTL keeps the lock with the same token, and the lock is gone after" {
  # samples the lock all along, and once more after 3 s (3 TTLs)
  run -0 --separate-stderr "$DLOCK" run -k long -t 1s -c '
    echo "$DLOCK_TOKEN" >"$T/token"
    end=$(( $(date +%s%3N) + 3000 ))
    while :; do
      redis-cli -s "$REDIS_SOCK" get "dlock:{long}" >>"$T/seen"
      redis-cli -s "$REDIS_SOCK" pttl "dlock:{long}" >>"$T/pttl"
      [ "$(date +%s%3N)" -lt "$end" ] || break
      sleep 0.1
    done'
  [ -z "$stderr" ]
  [ "$(wc -l <"$T/seen")" -ge 3 ]
  [ "$(sort -u "$T/seen")" = "$(cat "$T/token")" ]
  [ "$(wc -c <"$T/token")" -eq 33 ]
  # the lease never ran longer than the TTL, nor out
  while read -r pttl; do
    [ "$pttl" -gt 0 ]
    [ "$pttl" -le 1000 ]
  done <"$T/pttl"
  run -0 rcli exists 'dlock:{long}' 'dlock:{long}:holder'
  assert_output 0
}

@test "the lock key deleted under a running command: command stopped, exit 76, one line on stderr" {
  start_bg d "$DLOCK" run -k del -t 1s -c 'echo $$ >"$T/cmd.pid"; exec sleep 100'
  wait_pidfiles cmd
  sleep 0.2
  local start=$(now_ms) st=0
  rcli del 'dlock:{del}' >/dev/null
  wait "$BG_PID" || st=$?
  local took=$(($(now_ms) - start))
  [ "$st" -eq 76 ]
  # detection within ttl/3 (333 ms), SIGTERM at once (sleep dies of it), grace 250 ms, slack
  echo "took $took ms"
  [ "$took" -lt $((333 + 250 + 1200)) ]
  refute alive "$(pid_of cmd)"
  [ "$(wc -l <"$T/d.err")" -eq 1 ]
  grep -q "^dlock: lost lock 'del'" "$T/d.err"
  [ ! -s "$T/d.out" ]
}

@test "the lock key overwritten with another token: command stopped, exit 76, the other lock kept" {
  start_bg o "$DLOCK" run -k ow -t 1s -c 'echo $$ >"$T/cmd.pid"; exec sleep 100'
  wait_pidfiles cmd
  sleep 0.2
  local other=0123456789abcdef0123456789abcdef start=$(now_ms) st=0
  rcli set 'dlock:{ow}' "$other" px 20000 >/dev/null
  wait "$BG_PID" || st=$?
  local took=$(($(now_ms) - start))
  [ "$st" -eq 76 ]
  echo "took $took ms"
  [ "$took" -lt $((333 + 250 + 1200)) ]
  refute alive "$(pid_of cmd)"
  [ "$(wc -l <"$T/o.err")" -eq 1 ]
  grep -q "^dlock: lost lock 'ow'" "$T/o.err"
  # dlock neither released nor extended a lock it does not hold
  run -0 rcli get 'dlock:{ow}'
  assert_output "$other"
  run -0 rcli pttl 'dlock:{ow}'
  [ "$output" -le 20000 ] && [ "$output" -gt 15000 ]
}

@test "Redis frozen mid-run: the command and its grandchild are dead before the lease can expire" {
  write_tree_script
  watch_death
  start_bg f "$DLOCK" run -k frz -t 3s -- sh "$T/tree.sh"
  wait_pidfiles cmd child mid gc
  # Freeze right after a renewal (PTTL close to the TTL): no renewal can then be in flight
  # between reading the PTTL and the freeze, and the lease ends at read time + PTTL at most.
  just_renewed frz 2850
  local read_at=$READ_AT pttl=$PTTL frozen_at=0
  kill -STOP "$REDIS_PID"
  ms_into frozen_at
  local expires_at=$((read_at + pttl))
  wait_for "[ -s '$T/dead_at' ]" 6
  local dead_at
  dead_at=$(cat "$T/dead_at")
  kill -CONT "$REDIS_PID"
  echo "frozen at +0, pttl read at $((read_at - frozen_at)) with $pttl ms left," \
    "all dead at +$((dead_at - frozen_at))"
  [ "$dead_at" -lt "$expires_at" ]
  wait_dead 1000 "$(pid_of cmd)" "$(pid_of child)" "$(pid_of mid)" "$(pid_of gc)"
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
  grep -q "^dlock: could not confirm the lease on lock 'frz'" "$T/f.err"
  run -0 rcli exists 'dlock:{frz}'
  assert_output 0
}

@test "dlock killed with SIGKILL: the command, child and grandchild die; the lock is left to expire" {
  write_tree_script
  watch_death
  start_bg k "$DLOCK" run -k k9 -t 3s -- sh "$T/tree.sh"
  wait_pidfiles cmd child mid gc
  local token killed_at=0
  token=$(rcli get 'dlock:{k9}')
  [ ${#token} -eq 32 ]
  ms_into killed_at
  kill -KILL "$BG_PID"
  # not released (nobody could): still there, still ours, and expiring
  run -0 rcli get 'dlock:{k9}'
  assert_output "$token"
  run -0 rcli pttl 'dlock:{k9}'
  [ "$output" -gt 0 ]
  [ "$output" -le 3000 ]
  wait_for "[ -s '$T/dead_at' ]" 5
  echo "all dead $(($(cat "$T/dead_at") - killed_at)) ms after the SIGKILL"
  [ $(($(cat "$T/dead_at") - killed_at)) -lt 2000 ]
  wait_dead 1000 "$(pid_of cmd)" "$(pid_of child)" "$(pid_of mid)" "$(pid_of gc)"
  # gone within the TTL (plus slack), never renewed again
  wait_for "! key_exists k9" 5
  echo "lock gone $(($(now_ms) - killed_at)) ms after the SIGKILL"
  [ $(($(now_ms) - killed_at)) -le $((3000 + 1500)) ]
  run -0 rcli exists 'dlock:{k9}:holder'
  assert_output 0
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 137 ]
}

@test "a grandchild in the command's process group gets SIGTERM too on lease loss" {
  cat >"$T/gc.sh" <<'EOF'
echo $$ >"$T/gc.pid"
trap 'echo TERM >"$T/gc.got"; exit 0' TERM
while :; do sleep 0.05; done
EOF
  # the command waits for the grandchild's trap before it exits itself
  start_bg g "$DLOCK" run -k gc -t 2s -c '
    echo $$ >"$T/cmd.pid"
    trap "wait; exit 5" TERM
    sh "$T/gc.sh" &
    wait'
  wait_pidfiles cmd gc
  sleep 0.2
  local st=0
  rcli del 'dlock:{gc}' >/dev/null
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
  [ "$(cat "$T/gc.got")" = TERM ]
  wait_dead 500 "$(pid_of gc)"
  grep -q "^dlock: lost lock 'gc'" "$T/g.err"
}

@test "SIGTERM to dlock reaches the command; its status is passed through; the lock is released" {
  cat >"$T/trap.sh" <<'EOF'
trap 'echo TERM >"$T/got"; exit 3' TERM
echo $$ >"$T/cmd.pid"
while :; do sleep 0.05; done
EOF
  start_bg t "$DLOCK" run -k term -t 2s -- sh "$T/trap.sh"
  wait_pidfiles cmd
  local st=0
  kill -TERM "$BG_PID"
  wait "$BG_PID" || st=$?
  [ "$st" -eq 3 ]
  [ "$(cat "$T/got")" = TERM ]
  run -0 rcli exists 'dlock:{term}' 'dlock:{term}:holder'
  assert_output 0
  # (the shell itself may report its sleep "Terminated"; dlock says nothing)
  if grep -q '^dlock:' "$T/t.err"; then fail "dlock wrote: $(cat "$T/t.err")"; fi

  # without a trap the command dies of it: 143
  rm -f "$T/cmd.pid" "$T/bg.pid"
  start_bg t2 "$DLOCK" run -k term -t 2s -c 'echo $$ >"$T/cmd.pid"; exec sleep 100'
  wait_pidfiles cmd
  st=0
  kill -TERM "$BG_PID"
  wait "$BG_PID" || st=$?
  [ "$st" -eq 143 ]
  run -0 rcli exists 'dlock:{term}'
  assert_output 0
}

@test "SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 to dlock are forwarded to the command" {
  cat >"$T/traps.sh" <<'EOF'
for sig in INT HUP USR1 USR2; do
  trap "echo $sig >>\"\$T/got\"" $sig
done
echo $$ >"$T/cmd.pid"
while [ ! -e "$T/stop" ]; do sleep 0.05; done
exit 7
EOF
  # dlock runs as a background job here, where bash starts it with SIGINT ignored
  start_bg s "$DLOCK" run -k sig -t 2s -- sh "$T/traps.sh"
  wait_pidfiles cmd
  local sig
  for sig in INT HUP USR1 USR2; do
    kill -"$sig" "$BG_PID"
    wait_for "grep -qsx $sig '$T/got'" 3
  done
  run -0 rcli exists 'dlock:{sig}'
  assert_output 1
  touch "$T/stop"
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 7 ]
  [ "$(cat "$T/got")" = "$(printf 'INT\nHUP\nUSR1\nUSR2')" ]
  run -0 rcli exists 'dlock:{sig}'
  assert_output 0
}

@test "SCRIPT FLUSH mid-run: renewal falls back to EVAL and the command keeps the lock" {
  start_bg fl "$DLOCK" run -k fl -t 1s -c '
    echo $$ >"$T/cmd.pid"
    sleep 2.5
    [ "$(redis-cli -s "$REDIS_SOCK" get "dlock:{fl}")" = "$DLOCK_TOKEN" ]'
  wait_pidfiles cmd
  rcli config resetstat >/dev/null
  local i
  for i in 1 2 3 4; do
    sleep 0.4
    rcli script flush >/dev/null
  done
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 0 ]
  [ ! -s "$T/fl.err" ]
  # the fallback really ran
  run -0 rcli info commandstats
  [[ $output =~ cmdstat_eval:calls=([0-9]+) ]]
  [ "${BASH_REMATCH[1]}" -ge 1 ]
  run -0 rcli exists 'dlock:{fl}'
  assert_output 0
}

@test "--on-lost ignore: the command is not stopped when the lock is deleted, and the exit is 76" {
  start_bg i "$DLOCK" run -k ign -t 1s --on-lost ignore -c '
    echo $$ >"$T/cmd.pid"
    sleep 3
    echo finished >"$T/done"
    exit 0'
  wait_pidfiles cmd
  sleep 0.2
  rcli del 'dlock:{ign}' >/dev/null
  wait_for "grep -q 'lost lock' '$T/i.err'" 3
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
  # ran to its end: neither SIGTERM (the sleep would die of it) nor SIGKILL reached it
  [ "$(cat "$T/done")" = finished ]
  grep -q "^dlock: lost lock 'ign'.*--on-lost ignore" "$T/i.err"
  run -0 rcli exists 'dlock:{ign}'
  assert_output 0
}

@test "--on-lost ignore after a definite loss: no second diagnostic claiming Redis is unreachable" {
  start_bg i "$DLOCK" run -k ign -t 1s --on-lost ignore -c 'echo $$ >"$T/cmd.pid"; sleep 2'
  wait_pidfiles cmd
  sleep 0.2
  rcli del 'dlock:{ign}' >/dev/null
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
  cat "$T/i.err"
  [ "$(wc -l <"$T/i.err")" -eq 1 ]
  if grep -qi unreachable "$T/i.err"; then fail "a second diagnostic: $(cat "$T/i.err")"; fi
}

@test "a background process left in the group is killed before the lock is released" {
  # The leftover samples the lock as fast as it can until it is killed; if it outlived the
  # release, it would record an empty reply.
  run -0 --separate-stderr "$DLOCK" run -k lo -t 2s -c '
    echo "$DLOCK_TOKEN" >"$T/token"
    (while :; do redis-cli -s "$REDIS_SOCK" get "dlock:{lo}" >>"$T/seen"; done) </dev/null &
    echo $! >"$T/bg-left.pid"
    until [ -s "$T/seen" ]; do sleep 0.02; done
    sleep 0.1
    exit 0'
  [ -z "$stderr" ]
  wait_dead 300 "$(pid_of bg-left)"
  [ "$(sort -u "$T/seen")" = "$(cat "$T/token")" ]
  # and it stays dead: nothing samples any more
  local lines
  lines=$(wc -l <"$T/seen")
  sleep 0.2
  [ "$(wc -l <"$T/seen")" -eq "$lines" ]
  run -0 rcli exists 'dlock:{lo}'
  assert_output 0
}

@test "--kill-after: a command ignoring SIGTERM is SIGKILLed after the grace on lease loss" {
  # Notes when SIGTERM came and keeps going, writing a heartbeat until it is killed.
  cat >"$T/stubborn.sh" <<'EOF'
trap 'echo $(( ${EPOCHREALTIME/[.,]/} / 1000 )) >"$T/term_at"' TERM
echo $$ >"$T/cmd.pid"
while :; do
  echo $(( ${EPOCHREALTIME/[.,]/} / 1000 )) >>"$T/beat"
  sleep 0.05
done
EOF
  start_bg ka "$DLOCK" run -k ka -t 3s --kill-after 1500ms -- bash "$T/stubborn.sh"
  wait_pidfiles cmd
  sleep 0.2
  rcli del 'dlock:{ka}' >/dev/null
  local st=0
  wait "$BG_PID" || st=$?
  local exited_at=$(now_ms)
  [ "$st" -eq 76 ]
  grep -q "^dlock: lost lock 'ka'" "$T/ka.err"
  refute alive "$(pid_of cmd)"
  local term_at last_beat
  term_at=$(cat "$T/term_at")
  last_beat=$(tail -n 1 "$T/beat")
  echo "last heartbeat $((last_beat - term_at)) ms, dlock exit $((exited_at - term_at)) ms after SIGTERM"
  # alive well into the grace, killed at its end (SIGKILL is due 1500 ms after dlock's SIGTERM,
  # which the trap can only see later; 400 ms for a late timer on a loaded machine), and dlock
  # not long after
  [ $((last_beat - term_at)) -ge 700 ]
  [ $((last_beat - term_at)) -le 1900 ]
  [ $((exited_at - term_at)) -lt $((1500 + 1500)) ]
}
