#!/usr/bin/env bats
# dlock wait, barrier and latch on the file:// store (one host), ported from
# tests/e2e/coordinate.bats (Redis): a watcher reads /proc/locks (taking nothing) and is woken
# by the lock file's close (inotify on the directory); barrier parties are
# .dlock/NAME+party+GEN+ID files each party flocks while it waits, a generation that tripped
# is told by .dlock/NAME+tripped+GEN+ID; the latch is .dlock/NAME+latch, replaced whole under
# the flock of the one it replaces. Each party records its exit status and the moment it
# returned (µs) itself, so the timing checks measure dlock and not the test's polling.

load ../../lib/helpers

setup_file() { :; }
teardown_file() { :; }
setup() {
  dlock_setup
  local base=/dev/shm
  [ -d "$base" ] && [ -w "$base" ] || base=$T
  D=$(mktemp -d "$base/dlock-coord.XXXXXX")
  echo "$D" >>"$T/nobody.dirs" # removed by the teardown
  export DLOCK_URL=file://$D
}
teardown() { dlock_teardown; }

# party NAME SUBCOMMAND ARGS...: a background `dlock SUBCOMMAND ARGS...` that writes
# "STATUS MICROSECONDS" to $T/NAME.end when it returns (start_bg NAME: BG_PID).
party() {
  local name=$1
  shift
  start_bg "$name" bash -c '"$@"; rc=$?; echo "$rc ${EPOCHREALTIME/[.,]/}" >"$T/'"$name"'.end"' \
    _ "$DLOCK" "$@"
}

ended() { [ -s "$T/$1.end" ]; }
status_of() { cut -d' ' -f1 "$T/$1.end"; }
ended_at() { cut -d' ' -f2 "$T/$1.end"; }
now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

# watching PID: the dlock under the party PID has looked once (its inotify is set up before
# its first look, and it waits on it from then on).
watching() {
  local p
  p=$(pgrep -P "$1" | head -1)
  [ -n "$p" ] && ls -l "/proc/$p/fd" 2>/dev/null | grep -q inotify
}

# held_by_dlock KEY: a background holder of KEY (BG_PID) that lets go once $T/go exists.
held_until_go() {
  start_bg hold "$DLOCK" run -k "$1" "${@:2}" -- sh -c ': >"$0"; until [ -e "$1" ]; do sleep 0.01; done' "$T/holding" "$T/go"
  wait_for "[ -e '$T/holding' ]" 10
}

# arrivals KEY: the barrier parties of KEY waiting now.
arrivals() { find "$D/.dlock" -maxdepth 1 -name "$1+party+*" 2>/dev/null | wc -l; }

# ---------------------------------------------------------------------------------------------
# dlock wait

@test "wait on a free lock returns 0 at once and takes nothing" {
  run -0 "$DLOCK" wait -k free
  [ ! -e "$D/free" ]
  run -1 "$DLOCK" status free
  # a lock file nobody holds: free too, and still no one holds it
  mkdir -p "$D" && : >"$D/idle"
  run -0 "$DLOCK" wait -k idle
  run -0 flock -n "$D/idle" true
}

@test "wait returns within 100 ms of the release, and makes almost no system calls meanwhile" {
  held_until_go rel
  local holder=$BG_PID
  party w wait -k rel -w 20s
  wait_for "watching $BG_PID" 10
  if command -v strace >/dev/null; then
    run timeout -s INT 2 strace -f -c -p "$(pgrep -P "$BG_PID" | head -1)"
    local calls
    calls=$(printf '%s\n' "$output" | awk '$NF == "total" {print $4}')
    echo "system calls in 2 s of waiting: ${calls:-0}"
    [ "${calls:-0}" -lt 10 ]
  else
    sleep 1
  fi
  ended w && { echo "wait returned while the lock was held"; return 1; }
  # the holder's command ends: its end is the release
  local before
  before=$(now_us)
  touch "$T/go"
  wait "$holder"
  wait_for 'ended w'
  [ "$(status_of w)" = 0 ]
  echo "wait returned $(( ($(ended_at w) - before) / 1000 )) ms after the holder was let go"
  [ $(( $(ended_at w) - before )) -lt 1000000 ]
}

@test "waiters are not serialized: one release lets every waiter go at once; none holds anything" {
  held_until_go many
  local i
  for i in 1 2 3 4; do
    party "w$i" wait -k many -w 20s
    wait_for "watching $BG_PID" 10
  done
  # a waiter takes nothing a taker would see
  run flock -n -s "$D/many" true
  assert_failure 1
  local before
  before=$(now_us)
  touch "$T/go"
  wait_for 'ended w1 && ended w2 && ended w3 && ended w4'
  for i in 1 2 3 4; do
    [ "$(status_of "w$i")" = 0 ]
    echo "w$i returned $(( ($(ended_at "w$i") - before) / 1000 )) ms after the holder was let go"
    [ $(( $(ended_at "w$i") - before )) -lt 1000000 ]
  done
  run -0 flock -n "$D/many" true
}

@test "wait counts a release even when a lock waiter takes the lock at once" {
  held_until_go handover
  start_bg next "$DLOCK" run -k handover -w 20s -- sleep 4
  wait_for "grep -q -- '->' /proc/locks" 10
  party w wait -k handover -w 20s
  wait_for "watching $BG_PID" 10
  local before
  before=$(now_us)
  touch "$T/go"
  wait_for 'ended w' 3
  [ "$(status_of w)" = 0 ]
  echo "wait returned $(( ($(ended_at w) - before) / 1000 )) ms after the first holder was let go"
  # the second holder still has it: the wait did not wait for it
  run -0 "$DLOCK" status handover
}

@test "a holder killed with SIGKILL: wait returns at once (the kernel frees the lock)" {
  start_bg hold "$DLOCK" run -k dead -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/cmd.pid"
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  party w wait -k dead -w 20s
  wait_for "watching $BG_PID" 10
  local killed_at
  killed_at=$(now_us)
  kill -KILL "$holder" "$(cat "$T/cmd.pid")"
  wait_for 'ended w' 5
  [ "$(status_of w)" = 0 ]
  echo "wait returned $(( ($(ended_at w) - killed_at) / 1000 )) ms after the holder was killed"
}

@test "wait for a --shared lock returns once the last reader is gone (flock -s readers too)" {
  mkdir -p "$D"
  start_bg r1 "$DLOCK" run -k rd -s -- sleep 1
  start_bg r2 flock -s "$D/rd" sleep 2
  wait_for "[ \"\$(grep -c ' READ ' /proc/locks)\" -ge 2 ]" 10
  local start
  start=$(now_us)
  run -0 "$DLOCK" wait -k rd -w 10s
  local took=$(( ($(now_us) - start) / 1000 ))
  echo "wait took ${took} ms (readers of 1 s and 2 s)"
  [ "$took" -ge 1500 ]
}

@test "wait honours a --min-hold left by a holder gone" {
  run -0 "$DLOCK" run -k mh --min-hold 2s -- true
  local start
  start=$(now_us)
  run -0 "$DLOCK" wait -k mh -w 10s
  local took=$(( ($(now_us) - start) / 1000 ))
  echo "wait took ${took} ms (min-hold 2 s)"
  [ "$took" -ge 1000 ]
}

@test "wait --wait runs out: 75, or -E; a signal ends it with 128+N" {
  held_until_go busy
  run -75 "$DLOCK" wait -k busy -w 300ms
  run -3 "$DLOCK" wait -k busy -w 200ms -E 3
  run -75 --separate-stderr "$DLOCK" -v wait -k busy -w 200ms
  [[ $stderr == *"gave up waiting for lock 'busy' to be free after 200ms"* ]]
  party w wait -k busy
  wait_for "watching $BG_PID" 10
  kill -TERM "$(pgrep -P "$BG_PID")"
  wait_for 'ended w'
  [ "$(status_of w)" = 143 ]
}

# ---------------------------------------------------------------------------------------------
# dlock barrier

# barrier_round KEY ROUND: 5 parties started 0.5 s apart; all return 0, none before the last
# one started, within 200 ms of each other (a loaded machine).
barrier_round() {
  local key=$1 round=$2 i last_start first=0 last=0 at
  for i in 1 2 3 4 5; do
    [ "$i" = 5 ] && last_start=$(now_us)
    party "b$round-$i" barrier -k "$key" --parties 5 -w 20s
    [ "$i" = 5 ] || sleep 0.5
  done
  wait_for "ended b$round-1 && ended b$round-2 && ended b$round-3 && ended b$round-4 && ended b$round-5" 10
  for i in 1 2 3 4 5; do
    [ "$(status_of "b$round-$i")" = 0 ]
    at=$(ended_at "b$round-$i")
    [ "$at" -ge "$last_start" ]
    if [ "$first" = 0 ] || [ "$at" -lt "$first" ]; then first=$at; fi
    if [ "$at" -gt "$last" ]; then last=$at; fi
  done
  echo "round $round: all 5 returned within $(( (last - first) / 1000 )) ms of each other"
  [ $(( last - first )) -le 200000 ]
}

@test "a barrier of 5 parties started over 2 s: all return together, twice in a row; nothing is left" {
  barrier_round gen 1
  barrier_round gen 2
  [ "$(arrivals gen)" = 0 ]
  wait_for "[ -z \"\$(find '$D/.dlock' -name 'gen+*' ! -name 'gen+fence')\" ]" 5
}

@test "arrivals beyond N wait for the next generation" {
  local i
  for i in 1 2 3 4 5; do party "p$i" barrier -k over --parties 3 -w 20s; done
  wait_for '[ "$(ls "$T"/p*.end 2>/dev/null | wc -l)" = 3 ]' 10
  sleep 0.3
  [ "$(ls "$T"/p*.end | wc -l)" = 3 ]
  wait_for '[ "$(arrivals over)" = 2 ]'
  run -0 "$DLOCK" barrier -k over --parties 3 -w 5s
  wait_for 'ended p1 && ended p2 && ended p3 && ended p4 && ended p5'
  for i in 1 2 3 4 5; do [ "$(status_of "p$i")" = 0 ]; done
}

@test "a barrier party that times out, is signalled or is killed does not count" {
  run -75 "$DLOCK" barrier -k late --parties 3 -w 500ms
  [ "$(arrivals late)" = 0 ]
  party s barrier -k late --parties 3
  wait_for '[ "$(arrivals late)" = 1 ]'
  kill -TERM "$(pgrep -P "$BG_PID")"
  wait_for 'ended s'
  [ "$(status_of s)" = 143 ]
  [ "$(arrivals late)" = 0 ]
  # SIGKILL: its arrival stays behind, unlocked, and counts for nothing
  start_bg k "$DLOCK" barrier -k late --parties 3
  wait_for '[ "$(arrivals late)" = 1 ]'
  kill -KILL "$BG_PID"
  wait_for "gone $BG_PID"
  # had any of them counted, these two would make three
  party b1 barrier -k late --parties 3 -w 1s
  party b2 barrier -k late --parties 3 -w 1s
  wait_for 'ended b1 && ended b2' 10
  [ "$(status_of b1)" = 75 ]
  [ "$(status_of b2)" = 75 ]
  [ "$(arrivals late)" = 0 ]
  run -9 "$DLOCK" barrier -k late --parties 2 -w 300ms -E 9
}

@test "a party with another --parties while a barrier is in progress: 64, nothing registered" {
  party b barrier -k mix --parties 3 -w 10s
  wait_for '[ "$(arrivals mix)" = 1 ]'
  run -64 "$DLOCK" barrier -k mix --parties 2 -w 1s
  assert_output --partial "barrier 'mix' is in progress with --parties 3"
  [ "$(arrivals mix)" = 1 ]
}

# ---------------------------------------------------------------------------------------------
# dlock latch

@test "a latch of 12 counted down by 12 processes releases 3 waiters" {
  run -0 "$DLOCK" latch -k fan --count 12 --json
  json_ok 'assert d == {"version": 1, "key": "fan", "count": 12}, d'
  local i
  for i in 1 2 3; do
    party "w$i" latch -k fan --wait 30s
    wait_for "watching $BG_PID" 10
  done
  local downs=()
  for i in $(seq 11); do
    "$DLOCK" latch -k fan --down --json >"$T/down$i.json" &
    downs+=($!)
  done
  wait "${downs[@]}"
  sleep 0.3
  local w
  for w in w1 w2 w3; do
    if ended "$w"; then
      echo "$w returned ($(cat "$T/$w.end"), $(cat "$T/$w.err")) before the count reached zero"
      return 1
    fi
  done
  [ "$(cut -f2 "$D/.dlock/fan+latch")" = 1 ]
  local before
  before=$(now_us)
  "$DLOCK" latch -k fan --down --json >"$T/down12.json"
  wait_for 'ended w1 && ended w2 && ended w3'
  for i in 1 2 3; do
    [ "$(status_of "w$i")" = 0 ]
    echo "w$i returned $(( ($(ended_at "w$i") - before) / 1000 )) ms after the last count-down began"
    [ $(( $(ended_at "w$i") - before )) -lt 1000000 ]
  done
  # every count-down saw its own count: 11 down to 0
  run -0 bash -c "cat '$T'/down*.json | sed 's/.*\"count\":\([0-9-]*\).*/\1/' | sort -n | paste -sd' '"
  assert_output "0 1 2 3 4 5 6 7 8 9 10 11"
  # at zero it stays there; a late waiter passes at once
  run -0 "$DLOCK" latch -k fan --down
  [ "$(cut -f2 "$D/.dlock/fan+latch")" = 0 ]
  run -0 "$DLOCK" latch -k fan --wait 1s
}

@test "a latch expires (default 24h, --expire D), and is removed then; counting down an unset latch is 1" {
  run -0 "$DLOCK" latch -k day --count 2
  local expires now
  expires=$(cut -f3 "$D/.dlock/day+latch")
  now=$(date +%s%3N)
  [ $(( expires - now )) -gt $(( 24 * 3600 * 1000 - 60000 )) ]
  [ $(( expires - now )) -le $(( 24 * 3600 * 1000 )) ]
  run -0 "$DLOCK" latch -k short --count 2 --expire 300ms
  sleep 0.5
  run -1 "$DLOCK" latch -k short --down
  assert_output --partial "latch 'short' is not set"
  [ ! -e "$D/.dlock/short+latch" ]
  run -1 "$DLOCK" latch -k never --down
  # nothing is left past its expiry: list (or any look at the name) removes it
  run -0 "$DLOCK" latch -k gone --count 1 --expire 300ms
  sleep 0.5
  [ -e "$D/.dlock/gone+latch" ]
  run -0 "$DLOCK" list
  [ ! -e "$D/.dlock/gone+latch" ]
  [ -e "$D/.dlock/day+latch" ]
}

@test "latch --wait: runs out (75, -E), waits for a latch set later, --count 0 releases at once" {
  run -0 "$DLOCK" latch -k t --count 1
  run -75 "$DLOCK" latch -k t --wait 300ms
  run -5 "$DLOCK" latch -k t -w 200ms -E 5
  party w latch -k later --wait 20s
  wait_for "watching $BG_PID" 10
  run -0 "$DLOCK" latch -k later --count 1
  sleep 0.3
  ended w && { echo "returned before the count reached zero"; return 1; }
  local before
  before=$(now_us)
  run -0 "$DLOCK" latch -k later --count 0
  wait_for 'ended w'
  [ "$(status_of w)" = 0 ]
  echo "returned $(( ($(ended_at w) - before) / 1000 )) ms after --count 0"
}

# ---------------------------------------------------------------------------------------------
# a hostile neighbour (nobody) in a directory every user may write (1777, root's)

@test "nobody's FIFOs, symlinks and oversized files at the barrier's and latch's names hang nothing; nobody's latch is not waited on" {
  need_root
  chmod 1777 "$D"
  run -0 "$DLOCK" latch -k x --count 1 # makes .dlock (sticky, as the directory)
  as_nobody mkfifo "$D/.dlock/b+party+1+0123456789abcdef" "$D/.dlock/b+tripped+1+0123456789abcdef"
  as_nobody ln -s /etc/passwd "$D/.dlock/l+latch"
  as_nobody sh -c 'head -c 3000000 /dev/zero >"$0"' "$D/.dlock/m+latch"
  as_nobody ln -s /etc/shadow "$D/.dlock/b+party+2+1123456789abcdef"
  run timeout -k 5 20 "$DLOCK" barrier -k b --parties 1 -w 2s
  assert_success
  run timeout -k 5 20 "$DLOCK" latch -k l --wait 300ms
  assert_failure 75
  run timeout -k 5 20 "$DLOCK" latch -k m --wait 300ms
  assert_failure 75
  run timeout -k 5 20 "$DLOCK" latch -k l --down
  assert_failure
  [ "$status" -ne 124 ]
  # a latch nobody set and keeps locked: root counts it down without waiting on its flock
  as_nobody "$DLOCK" latch -k n --count 3
  start_bg nobody setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
    sh -c 'exec 9<"$0" && flock 9 && echo locked && exec sleep 60' "$D/.dlock/n+latch"
  wait_for "grep -q locked '$T/nobody.out'"
  run timeout -k 5 20 "$DLOCK" latch -k n --down
  assert_failure 69
  [ "${#lines[@]}" -eq 1 ]
  kill "$BG_PID"
  # nobody cannot count down root's latch (its file is root's, in a sticky .dlock)
  run timeout -k 5 20 setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$DLOCK" latch -k x --down
  assert_failure
  [ "$status" -ne 124 ]
  run -0 "$DLOCK" latch -k x --down --json
  assert_output --partial '"count":0'
  [ "$(stat -c %U /etc/passwd)" = root ]
}
