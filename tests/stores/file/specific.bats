#!/usr/bin/env bats
# What only the file:// store has: interoperation with flock(1) on the same files, a lock the
# kernel frees when its process dies, shared locks and slot files, the fencing counter, release
# --force seen at once (checks, then inotify), waiting in the kernel's flock(2) without
# polling, and the errors of an unusable directory.

load ../../lib/helpers

setup_file() { :; }
teardown_file() { :; }
setup() {
  dlock_setup
  D=$T/locks
  export DLOCK_URL=file://$D
}
teardown() {
  dlock_teardown
  [ ! -s "$T/tmpfs.dir" ] || rm -rf "$(cat "$T/tmpfs.dir")"
}

# on_tmpfs: the lock directory on tmpfs, as /run/lock is (no disk flush in the fencing
# counter's fdatasync, which takes tens of ms on a busy disk).
on_tmpfs() {
  [ -d /dev/shm ] && [ -w /dev/shm ] || skip "no writable /dev/shm"
  D=$(mktemp -d /dev/shm/dlock-test.XXXXXX)
  echo "$D" >"$T/tmpfs.dir"
  export DLOCK_URL=file://$D
}

# held NAME: whether dlock status says NAME is held.
held() { "$DLOCK" status "$1" >/dev/null 2>&1; }

# waiting_in: whether a process waits in flock(2) for a file of the lock directory $D
# (/proc/locks lists the whole machine's locks: other tests' waiters do not count here).
waiting_in() {
  local f id
  for f in "$D"/* "$D"/.dlock/*; do
    [ -f "$f" ] || continue
    id=$(stat -c '%Hd %Ld %i' "$f" | { read -r major minor inode; printf '%02x:%02x:%s' "$major" "$minor" "$inode"; })
    grep -q -- "-> .* $id " /proc/locks && return 0
  done
  return 1
}

@test "the lock directory is created, and the lock file is DIR/NAME with bytes escaped" {
  run "$DLOCK" run -k 'jobs/nightly run' -- sh -c 'echo "$DLOCK_KEY"'
  assert_success
  assert_output 'jobs/nightly run'
  [ -f "$D/jobs%2Fnightly%20run" ]
  [ -d "$D/.dlock" ]
  # released, not removed: a flock(1) waiter may hold the file open
  run flock -n "$D/jobs%2Fnightly%20run" true
  assert_success
}

@test "flock(1) and dlock exclude each other on the same file, both ways" {
  mkdir -p "$D"
  start_bg flocker flock -o "$D/backup" sleep 30  # -o: flock(1) alone holds it
  wait_for "! flock -n '$D/backup' true"
  run "$DLOCK" run -n -k backup -- true
  assert_failure 75
  run -0 "$DLOCK" -v status backup
  assert_output --partial "pid $BG_PID"
  # its program name, not its arguments (as dlock records its own holders)
  assert_line --regexp "^ *command: +flock$"
  refute_output --partial "sleep 30"
  kill "$BG_PID"
  hold_file backup
  run flock -n "$D/backup" true
  assert_failure 1
  # flock(1) waits for dlock's release and gets the lock then
  start_bg flockwait flock "$D/backup" sh -c 'date +%s%3N >"$0"' "$T/flocked"
  sleep 0.2
  [ ! -e "$T/flocked" ]
  touch "$T/go"
  wait_for "[ -s '$T/flocked' ]"
}

# hold_file NAME [options]: a background holder of NAME that lets go once $T/go exists;
# returns once its command runs (the kernel's lock is granted a little before dlock has
# written its holder record and fencing token: "held" is too early).
hold_file() {
  local key=$1
  shift
  rm -f "$T/holding"
  start_bg hold "$DLOCK" run -k "$key" "$@" -- sh -c ': >"$1"; until [ -e "$0" ]; do sleep 0.01; done' \
    "$T/go" "$T/holding"
  wait_for "[ -e '$T/holding' ]" 10
}

@test "flock -s shares with dlock --shared, and both exclude an exclusive holder" {
  hold_file data --shared
  run -0 "$DLOCK" run -n -s -k data -- true
  run -0 flock -n -s "$D/data" true
  run flock -n -x "$D/data" true
  assert_failure 1
  run "$DLOCK" run -n -k data -- true
  assert_failure 75
  run -0 "$DLOCK" status data --json
  json_ok "assert d['kind'] == 'shared', d"
}

@test "flock -s and dlock --shared share the lock, and each kind waits for the other's exclusive holder, both ways" {
  mkdir -p "$D"
  # a flock -s reader: dlock --shared and flock -s share it; dlock exclusive and flock -x are kept out
  start_bg reader flock -o -s "$D/data" sh -c 'until [ -e "$0" ]; do sleep 0.01; done' "$T/go"
  local reader=$BG_PID
  wait_for "! flock -n -x '$D/data' true"
  run -0 "$DLOCK" run -n -s -k data -- flock -n -s "$D/data" true
  run "$DLOCK" run -n -k data -- true
  assert_failure 75
  run -0 "$DLOCK" status data --json
  json_ok "assert d['kind'] == 'shared', d"
  # a dlock exclusive waiter gets it once the flock -s reader is gone
  start_bg writer "$DLOCK" run -k data -- sh -c 'until [ -e "$0" ]; do sleep 0.01; done; : >"$1"' "$T/go2" "$T/wrote"
  local writer=$BG_PID
  sleep 0.3
  touch "$T/go"
  wait "$reader"
  wait_for "! flock -n -s '$D/data' true" 10 # the writer holds it now: flock -s is kept out
  run "$DLOCK" run -n -s -k data -- true
  assert_failure 75
  # a flock -s waiter gets it once the dlock writer is done, with a dlock --shared waiter
  start_bg sreader flock -s "$D/data" sh -c ': >"$0"; until [ -e "$1" ]; do sleep 0.01; done' "$T/flock-read" "$T/go3"
  start_bg dreader "$DLOCK" run -s -k data -- sh -c ': >"$0"; until [ -e "$1" ]; do sleep 0.01; done' "$T/dlock-read" "$T/go3"
  sleep 0.3
  [ ! -e "$T/flock-read" ] && [ ! -e "$T/dlock-read" ]
  touch "$T/go2"
  wait "$writer"
  [ -e "$T/wrote" ]
  # both readers in at once
  wait_for "[ -e '$T/flock-read' ] && [ -e '$T/dlock-read' ]" 10
  run flock -n -x "$D/data" true
  assert_failure 1
  touch "$T/go3"
  wait_for "flock -n -x '$D/data' true" 10
  # a flock -x holder keeps dlock --shared out
  start_bg xholder flock -o -x "$D/data" sh -c 'until [ -e "$0" ]; do sleep 0.01; done' "$T/go4"
  wait_for "! flock -n -s '$D/data' true"
  run "$DLOCK" run -n -s -k data -- true
  assert_failure 75
  touch "$T/go4"
  wait "$BG_PID"
  run -0 "$DLOCK" run -n -s -k data -- true
}

@test "SIGKILL of dlock frees the lock at once (the command dies with it)" {
  start_bg holder "$DLOCK" run -k k -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/cmd.pid"
  wait_for "[ -s '$T/cmd.pid' ]" 10
  kill -KILL "$BG_PID"
  local t0 t1
  ms_into t0
  # The command holds the lock's descriptor: the lock is free once it is gone too. A
  # command left running would keep it for its 60 s; 20 s is room for a loaded machine.
  wait_for "flock -n '$D/k' true" 20
  ms_into t1
  echo "freed $((t1 - t0)) ms after SIGKILL"
  wait_for "gone $(cat "$T/cmd.pid")" 5
}

@test "--limit 3 with 5 contenders: never more than 3 at once, all of them run" {
  mkdir -p "$T/in"
  local i
  for i in 1 2 3 4 5; do
    start_bg "c$i" "$DLOCK" run --limit 3 -k sem -- sh -c '
      touch "$0/$$"; n=$(ls "$0" | wc -l); echo "$n" >>"$0.max"; sleep 0.4; rm "$0/$$"' "$T/in"
  done
  for i in 1 2 3 4 5; do
    wait_for "[ \$(wc -l <'$T/in.max' 2>/dev/null || echo 0) -ge $i ]" 10
  done
  sort -n "$T/in.max" | tail -1
  [ "$(sort -n "$T/in.max" | tail -1)" -le 3 ]
  ls "$D"
  [ -f "$D/sem+slot.0" ] && [ -f "$D/sem+slot.2" ] && [ ! -e "$D/sem+slot.3" ]
}

@test "a --limit slot holder shows in status; a different kind on the key is refused" {
  hold_file sem --limit 2
  run -0 "$DLOCK" status sem --json
  json_ok "assert d['kind'] == 'limit' and d['limit'] == 2 and len(d['holders']) == 1, d"
  run "$DLOCK" run -n -k sem -- true
  assert_failure 64
  assert_output --partial 'cannot share'
}

@test "fencing tokens strictly increase across 2 x 10 concurrent runs" {
  local loop loops=()
  for loop in a b; do
    start_bg "loop$loop" sh -c 'for i in $(seq 10); do
        "$0" run -k fenced -- sh -c "echo \$DLOCK_FENCING_TOKEN >>$1"; done' "$DLOCK" "$T/tokens"
    loops+=("$BG_PID")
  done
  # both loops reaped: every run has released (status below must find the lock free)
  wait "${loops[@]}"
  [ "$(wc -l <"$T/tokens")" = 20 ]
  # appended under the lock: in the order the lock was held
  sort -n -c "$T/tokens"
  [ "$(sort -u "$T/tokens" | wc -l)" = 20 ]
  run -1 "$DLOCK" status fenced --json
  json_ok "assert d['last_fencing_token'] == int(A[0]), d" "$(tail -1 "$T/tokens")"
}

@test "release --force stops the holder with 76 at once, not at its next check" {
  # -t 60s: the holder checks its lock file every 20 s; inotify tells it at once
  start_bg holder "$DLOCK" run -k k -t 60s -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/cmd.pid"
  wait_for "[ -s '$T/cmd.pid' ]" 10
  local t0 t1
  ms_into t0
  run -0 "$DLOCK" release -k k --force
  wait_for "gone $BG_PID" 20
  ms_into t1
  echo "stopped $((t1 - t0)) ms after release --force"
  # well before the check 20 s after the acquisition (a few ms unloaded)
  [ $((t1 - t0)) -lt 10000 ]
  run wait "$BG_PID"
  assert_failure 76
  grep -q 'removed or replaced' "$T/holder.err"
  # the lock is free again (a fresh file)
  run -0 "$DLOCK" run -n -k k -- true
}

# has_inotify PID: process PID has an inotify descriptor open.
has_inotify() { ls -l "/proc/$1/fd" 2>/dev/null | grep -q inotify; }

@test "a short run makes no inotify instance (its close waits for the kernel's SRCU grace period)" {
  command -v strace >/dev/null || skip "strace is not installed"
  run -0 strace -f -o "$T/trace" -e trace=inotify_init1,inotify_add_watch "$DLOCK" run -k k -- true
  cat "$T/trace"
  ! grep -q inotify "$T/trace"
}

@test "a holder checks its files until inotify watches them: release --force and --replace stop it in either phase" {
  local phase
  for phase in checked watched; do
    rm -f "$T/cmd.pid"
    start_bg holder "$DLOCK" run -k k -t 300s -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/cmd.pid"
    local holder=$BG_PID
    wait_for "[ -s '$T/cmd.pid' ]" 10
    # watched: once it held the lock a while, inotify tells it (no more checks)
    [ "$phase" = checked ] || wait_for "has_inotify $holder" 10
    run -0 "$DLOCK" release -k k --force
    # long before the holder's renewal, 100 s on (a few ms unloaded)
    wait_for "gone $holder" 30
    local st=0
    wait "$holder" || st=$?
    cat "$T/holder.err"
    [ "$st" -eq 76 ]
    grep -q 'removed or replaced' "$T/holder.err"
  done
  for phase in checked watched; do
    rm -f "$T/cmd.pid" "$T/new"
    start_bg holder "$DLOCK" run -k r -t 300s -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/cmd.pid"
    local holder=$BG_PID
    wait_for "[ -s '$T/cmd.pid' ]" 10
    [ "$phase" = checked ] || wait_for "has_inotify $holder" 10
    # long before the holder's renewal, 100 s on
    run -0 "$DLOCK" run -k r --replace -w 30s -- touch "$T/new"
    local st=0
    wait "$holder" || st=$?
    cat "$T/holder.err"
    [ "$st" -eq 76 ]
    grep -q 'replaced by' "$T/holder.err"
    [ -e "$T/new" ]
  done
}

@test "an idle holder makes almost no system calls once inotify watches its files (no polling)" {
  command -v strace >/dev/null || skip "strace is not installed"
  start_bg holder "$DLOCK" run -k k -t 60s -- sleep 60
  local holder=$BG_PID
  wait_for "has_inotify $holder" 10
  run timeout -s INT 2 strace -f -c -p "$holder"
  echo "$output"
  local calls
  calls=$(printf '%s\n' "$output" | awk '$NF == "total" {print $4}')
  calls=${calls:-0}
  echo "system calls in 2 s: $calls"
  [ "$calls" -lt 10 ]
}

@test "release --force while the holder still writes its fence: it starts again, never beside the next holder" {
  command -v strace >/dev/null || skip "strace is not installed"
  # The holder's fdatasync (the fencing counter's) is delayed 3 s by strace: the lock file is
  # removed while it is taken but before the command starts, and a second dlock takes a new one.
  start_bg first strace -f -o /dev/null -e trace=fdatasync -e inject=fdatasync:delay_enter=3000000 \
    "$DLOCK" run -k k -t 60s -- sh -c 'echo A >>"$0"; sleep 2; echo A-end >>"$0"' "$T/order"
  local first=$BG_PID
  wait_for "held k" 20
  run -0 "$DLOCK" release -k k --force
  start_bg second "$DLOCK" run -k k -- sh -c 'echo B >>"$0"; sleep 2; echo B-end >>"$0"' "$T/order"
  local second=$BG_PID st=0
  wait "$first" || st=$?
  [ "$st" -eq 0 ]
  wait "$second" || st=$?
  [ "$st" -eq 0 ]
  # one after the other, in whichever order
  run -0 cat "$T/order"
  [[ $output == $'A\nA-end\nB\nB-end' || $output == $'B\nB-end\nA\nA-end' ]]
}

@test "a waiter wakes within 100 ms of the release (directory on tmpfs)" {
  on_tmpfs
  # A flock(1) holder (-o: flock alone holds it) releases when it exits, right after its
  # command wrote the time; the dlock waiter's command writes the time it started. Both
  # include starting a shell, which a loaded machine delays: the best of 3 must be in time
  # (a waiter that polled would not be woken at all within its 30 s block).
  local i gap best=999999 gaps=""
  for i in 1 2 3; do
    rm -f "$T/go" "$T/released" "$T/woke"
    start_bg holder flock -o "$D/k" sh -c 'until [ -e "$0" ]; do sleep 0.005; done; date +%s%3N >"$1"' "$T/go" "$T/released"
    local holder=$BG_PID
    wait_for "! flock -n '$D/k' true"
    start_bg waiter "$DLOCK" run -k k -- sh -c 'date +%s%3N >"$0"' "$T/woke"
    wait_for waiting_in 10
    sleep 0.3
    touch "$T/go"
    wait_for "[ -s '$T/woke' ]"
    wait "$holder" "$BG_PID" || true
    gap=$(( $(cat "$T/woke") - $(cat "$T/released") ))
    gaps+=" $gap"
    [ "$gap" -ge "$best" ] || best=$gap
  done
  echo "woke $gaps ms after the holder's command ended (best $best)"
  [ "$best" -lt 100 ]
}

@test "a dlock holder's release hands the lock to a dlock waiter" {
  on_tmpfs
  hold_file k
  start_bg waiter "$DLOCK" run -k k -- sh -c 'date +%s%3N >"$0"' "$T/woke"
  wait_for waiting_in 10
  touch "$T/go"
  wait_for "[ -s '$T/woke' ]" 10
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 0 ]
}

@test "an idle waiter makes almost no system calls (no polling)" {
  command -v strace >/dev/null || skip "strace is not installed"
  hold_file k
  start_bg waiter "$DLOCK" run -k k -- true
  wait_for waiting_in 10
  run timeout -s INT 2 strace -f -c -p "$BG_PID"
  echo "$output"
  local calls
  calls=$(printf '%s\n' "$output" | awk '$NF == "total" {print $4}')
  calls=${calls:-0}
  echo "system calls in 2 s: $calls"
  [ "$calls" -lt 10 ]
}

@test "a waiter that gives up takes nothing later; a waiter's Ctrl-C likewise" {
  hold_file k
  # -w: once dlock has exited, nothing of it waits for the lock
  run "$DLOCK" run -w 0.3 -k k -- touch "$T/ran"
  assert_failure 75
  run -1 waiting_in
  # Ctrl-C of a waiter blocked in flock(2): once it is reaped, nothing of it waits either
  start_bg waiter "$DLOCK" run -k k -- touch "$T/ran"
  wait_for waiting_in 10
  kill -INT "$BG_PID"
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 130 ]
  run -1 waiting_in
  touch "$T/go"
  wait_for "! held k" 10
  run -0 flock -n "$D/k" true
  [ ! -e "$T/ran" ]
}

@test "status and list show the holder, as text and JSON" {
  hold_file 'a/b'
  run -0 "$DLOCK" status a/b --json
  json_ok "assert d['held'] and d['holder']['pid'] > 0 and d['fencing_token'] >= 1 and d['ttl_ms'] == -1, d"
  run -0 "$DLOCK" list
  assert_output --partial 'a/b'
  run -0 "$DLOCK" list --json
  json_ok "assert [s['key'] for s in d['locks']] == ['a/b'], d"
  touch "$T/go"
  wait_for "! held a/b"
  run "$DLOCK" status a/b
  assert_failure 1
}

@test "nested runs and several keys work as on the other stores" {
  run -0 "$DLOCK" run -k outer -- "$DLOCK" run -n -k outer -- sh -c 'echo inner ran'
  assert_output 'inner ran'
  run -0 "$DLOCK" run -k a -k b -- sh -c 'echo "$DLOCK_KEYS"'
  assert_output 'a b'
  hold_file b
  run "$DLOCK" run -n -k a -k b -- true
  assert_failure 75
  run -0 flock -n "$D/a" true # nothing kept of the keys taken before the busy one
}

@test "what the file store cannot do is refused with 64 and one line" {
  run "$DLOCK" acquire -k k --ttl 10s
  assert_failure 64
  run "$DLOCK" run --wait-replicas 1 -k k -- true
  assert_failure 64
}

@test "bad file URLs are 64; an unusable directory is 77 or 78 with one line" {
  run "$DLOCK" -u file://relative/dir run -k k -- true
  assert_failure 64
  assert_output --partial 'bad file URL'
  run "$DLOCK" -u 'file:///tmp/x?y=1' run -k k -- true
  assert_failure 64
  run "$DLOCK" -u file:///a -u file:///b run -k k -- true
  assert_failure 64
  touch "$T/plain"
  run "$DLOCK" -u "file://$T/plain/sub" run -k k -- true
  assert_failure 78
  assert_output --regexp '^dlock: .*plain.*$'
  [ "${#lines[@]}" -eq 1 ]
  if [ "$(id -u)" -ne 0 ]; then
    skip "the permission case needs root (to run dlock as nobody)"
  fi
  # a directory nobody may enter, but not write
  local base
  base=$(mktemp -d /tmp/dlock-file-perm.XXXXXX)
  echo "$base" >"$T/tmpfs.dir" # removed by the teardown
  chmod 755 "$base"
  mkdir -m 755 "$base/rootonly"
  run setpriv --reuid=nobody --regid=nogroup --clear-groups "$DLOCK" -u "file://$base/rootonly/locks" run -k k -- true
  assert_failure 77
  assert_output --partial 'Permission denied'
  [ "${#lines[@]}" -eq 1 ]
}

@test "the command inherits the locked descriptor, so the lock outlives dlock only as long as the command" {
  start_bg holder "$DLOCK" run -k k -- sh -c 'echo $$ >"$0"; exec sleep 60' "$T/cmd.pid"
  wait_for "[ -s '$T/cmd.pid' ]"
  ls -l "/proc/$(cat "$T/cmd.pid")/fd" | grep -q "$D/k\$"
}

@test "renew and release --token of another process's holder: 0 while it holds, then 76 for it" {
  start_bg holder "$DLOCK" run -k k -- sh -c 'echo "$DLOCK_TOKEN" >"$0.tmp"; mv "$0.tmp" "$0"; exec sleep 60' "$T/token"
  wait_for "[ -s '$T/token' ]"
  run -0 "$DLOCK" renew -k k --token "$(cat "$T/token")"
  run "$DLOCK" renew -k k --token not-the-token
  assert_failure 76
  run -0 "$DLOCK" release -k k --token "$(cat "$T/token")"
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
  run "$DLOCK" renew -k k --token "$(cat "$T/token")"
  assert_failure 76
}

@test "status counts each waiter once (an exclusive one keeps the turnstile while it waits)" {
  hold_file k --shared
  start_bg w1 "$DLOCK" run -k k -- true
  wait_for "[ \"\$(waiters k)\" = 1 ]"
  start_bg w2 "$DLOCK" run -k k --shared -- true
  wait_for "[ \"\$(waiters k)\" = 2 ]"
  sleep 0.2
  [ "$(waiters k)" = 2 ]
  touch "$T/go"
  wait_for "gone $BG_PID"
  wait_for "[ \"\$(waiters k)\" = 0 ]"
}

@test "a lock file that exists can be taken in a directory dlock may not write (as flock(1) can)" {
  [ "$(id -u)" -eq 0 ] || skip "needs root (to run dlock as nobody)"
  local base
  base=$(mktemp -d /tmp/dlock-file-perm.XXXXXX)
  echo "$base" >"$T/tmpfs.dir" # removed by the teardown
  chmod 755 "$base"
  mkdir -m 755 "$base/ro"
  touch "$base/ro/k"
  chmod 644 "$base/ro/k"
  run setpriv --reuid=nobody --regid=nogroup --clear-groups "$DLOCK" -u "file://$base/ro" run -k k -- sh -c 'echo "ran ${DLOCK_FENCING_TOKEN:-without token}"'
  assert_success
  assert_output 'ran without token'
  run setpriv --reuid=nobody --regid=nogroup --clear-groups "$DLOCK" -u "file://$base/ro" run -k other -- true
  assert_failure 77
}

# tickets NAME: how many --fair tickets of NAME are in .dlock.
tickets() { find "$D/.dlock" -maxdepth 1 -name "$1+ticket+*" 2>/dev/null | wc -l; }

@test "--fair: a waiter killed with SIGKILL does not hold up the queue, and its ticket is cleaned" {
  on_tmpfs
  hold_file k
  start_bg first "$DLOCK" run --fair -k k -- touch "$T/first-ran"
  local first=$BG_PID
  wait_for "[ \"\$(tickets k)\" -eq 1 ]" 10
  start_bg second "$DLOCK" run --fair -w 20s -k k -- sh -c 'date +%s%3N >"$0"' "$T/second-ran"
  local second=$BG_PID
  wait_for "[ \"\$(tickets k)\" -eq 2 ]" 10
  # the second waits behind the first, not in flock(2); status counts both
  sleep 0.3
  [ ! -e "$T/second-ran" ]
  [ "$(waiters k)" = 2 ]
  kill -KILL "$first"
  wait_for "gone $first" 10
  touch "$T/go"
  # woken by the ticket's close (inotify), well within its 20 s, not at its end
  wait_for "[ -s '$T/second-ran' ]" 15
  local st=0
  wait "$second" || st=$?
  [ "$st" -eq 0 ]
  [ ! -e "$T/first-ran" ]
  [ "$(tickets k)" -eq 0 ]
  [ -z "$(find "$D/.dlock" -maxdepth 1 -name 'k+newticket+*')" ]
}

@test "--fair: a live ticket goes first, for run without --fair and -n too; a dead one counts for nothing" {
  on_tmpfs
  mkdir -p "$D/.dlock"
  # a waiter that queued and is still there (a ticket its process keeps open for writing, as
  # dlock does, and locked)
  start_bg queued sh -c 'exec 9>>"$0" && flock 9 && exec sleep 60' "$D/.dlock/k+ticket+0123456789abcdef"
  local queued=$BG_PID
  wait_for "! flock -n '$D/.dlock/k+ticket+0123456789abcdef' true"
  run "$DLOCK" -v run -n -k k -- touch "$T/ran"
  assert_failure 75
  assert_output --partial 'earlier --fair waiters go first'
  run "$DLOCK" run -w 0.5 --fair -k k -- touch "$T/ran"
  assert_failure 75
  start_bg waiter "$DLOCK" run -k k -- touch "$T/ran"
  sleep 0.3
  [ ! -e "$T/ran" ]
  # its process ends: the ticket is free, seen at once (its close, through inotify)
  kill "$queued"
  wait_for "[ -e '$T/ran' ]" 10
  [ "$(tickets k)" -eq 0 ]
}

@test "--fair: an idle waiter behind the queue makes almost no system calls (no polling)" {
  command -v strace >/dev/null || skip "strace is not installed"
  hold_file k
  start_bg first "$DLOCK" run --fair -k k -- true
  wait_for "[ \"\$(tickets k)\" -eq 1 ]" 10
  start_bg second "$DLOCK" run --fair -k k -- true
  wait_for "[ \"\$(tickets k)\" -eq 2 ]" 10
  sleep 0.3
  run timeout -s INT 2 strace -f -c -p "$BG_PID"
  echo "$output"
  local calls
  calls=$(printf '%s\n' "$output" | awk '$NF == "total" {print $4}')
  calls=${calls:-0}
  echo "system calls in 2 s: $calls"
  [ "$calls" -lt 10 ]
}

@test "history: this user's file in .dlock, rewritten to its newest 100 lines past 50 KiB, empty 7 days after its last event" {
  run -0 "$DLOCK" run -k h -- true
  local f=$D/.dlock/h+history+$(id -u) line stamp i
  [ "$(wc -l <"$f")" -eq 2 ]
  # 500 older events (70 KiB), copies of dlock's last one
  line=$(tail -1 "$f")
  stamp=${line%% *}
  for i in $(seq 500); do echo "$((stamp - 1000000 + i)) ${line#* }"; done >"$f"
  run -0 "$DLOCK" run -k h -- true
  # the acquired event crossed 50 KiB: the newest 100 were kept, then released was added
  [ "$(wc -l <"$f")" -eq 101 ]
  run -0 "$DLOCK" history --json --limit 100 h
  [ "$(jq '.events | length' <<<"$output")" -eq 100 ]
  [ "$(jq -r '[.events[0:3][].event] | join(",")' <<<"$output")" = released,acquired,released ]
  touch -d '8 days ago' "$f"
  run -0 "$DLOCK" history h
  [ -z "$output" ]
  run -0 "$DLOCK" run -k h -- true
  [ "$(wc -l <"$f")" -eq 2 ]
}
