#!/usr/bin/env bats
# The file:// store in a directory every user may write (mode 1777, root's, as /run/lock: the
# setup the man page gives for several users), with a hostile second local user: dlock runs as
# root, the attacker as nobody. What nobody plants (a FIFO, a symlink, a hard link, a squatted
# .dlock, a counter of its own, a flock on dlock's files) never hangs dlock, never makes it
# touch a file outside the lock directory, never winds the fencing counter back, and what
# dlock cannot do (remove root's files as nobody) is said, not reported as done.
#
# Bounds: every dlock that could hang runs under `timeout -k 5 20`; a status of 124 is the hang
# (dlock ends by itself in milliseconds here, 20 s leaves room for a loaded machine).

load ../../lib/helpers

setup_file() { :; }
teardown_file() { :; }
setup() {
  dlock_setup
  need_root
  S=$(mktemp -d /dev/shm/dlock-shared.XXXXXX)
  echo "$S" >>"$T/nobody.dirs" # removed by the teardown
  chmod 1777 "$S"
  export DLOCK_URL=file://$S
}
teardown() { dlock_teardown; }

# in_time COMMAND...: runs dlock's COMMAND as root under timeout 20 (bats' run: $status, $output).
in_time() { run timeout -k 5 20 "$DLOCK" "$@"; }

# one_line: the output is one line, prefixed dlock:.
one_line() {
  [ "${#lines[@]}" -eq 1 ] && [[ ${lines[0]} == dlock:* ]]
}

# as_nobody_exec COMMAND...: as_nobody, in the same process (its pid is the command's).
as_nobody_exec() { exec setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"; }

# nobody_holds FILE: nobody keeps an exclusive flock on FILE, in one process (its pid in
# BG_PID, killed by the test or the teardown), from when this returns.
nobody_holds() {
  start_bg nobody as_nobody_exec sh -c 'exec 9<"$0" && flock 9 && echo locked && exec sleep 60' "$1"
  wait_for "grep -q locked '$T/nobody.out'"
}

# snapshot DIR: DIR and what is in it, with sizes and modification times (to compare).
snapshot() { find "$1" -printf '%p %y %s %T@\n' | sort; }

# free NAME: no process holds the lock file of NAME (root may take it at once).
free() { flock -n "$S/$1" true; }

@test "a FIFO at a lock path or in .dlock hangs neither run -n, -w, status nor list" {
  run -0 "$DLOCK" run -k warm -- true # makes .dlock, sticky as the directory
  [ "$(stat -c %a "$S/.dlock")" = 1777 ]
  as_nobody mkfifo "$S/k" "$S/.dlock/j+fence" "$S/.dlock/j+by+0123456789abcdef" "$S/q+queue"
  in_time run -n -k k -- true
  assert_failure 78
  one_line
  assert_output --partial 'not a regular file'
  in_time run -k k -- true
  assert_failure 78
  in_time status k
  assert_failure 1
  in_time list
  assert_success
  # the counter that is a FIFO is replaced by root's own; the record that is one is skipped
  in_time run -n -k j -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  assert_success
  [ "$output" -gt 1000000 ]
  [ -f "$S/.dlock/j+fence" ] && [ "$(stat -c %U:%a "$S/.dlock/j+fence")" = root:600 ]
  in_time status j
  assert_failure 1
  in_time list
  assert_success
  # a FIFO turnstile: a waiter keeps its -w
  as_nobody touch "$S/q"
  nobody_holds "$S/q"
  in_time run -w 1 -k q -- true
  assert_failure 75
  kill "$BG_PID"
  wait_for "free q"
  [ -p "$S/k" ] && [ -p "$S/q+queue" ]
}

@test "the fencing counter is root's alone: nobody cannot wind it back, lock it or plant one" {
  run -0 "$DLOCK" run -k k -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  local first=$output
  as_nobody sh -c 'echo 2 >"$0"' "$S/.dlock/k+fence" || true
  in_time run -n -k k -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  assert_success
  [ "$output" -gt "$first" ]
  [ "$(stat -c %U:%a "$S/.dlock/k+fence")" = root:600 ]
  run as_nobody flock -n "$S/.dlock/k+fence" true
  assert_failure
  # a counter nobody made before root's first run, set low and locked: not trusted, not
  # waited for; the counter restarts from the clock, above every token issued
  as_nobody sh -c 'echo 2 >"$0"' "$S/.dlock/m+fence"
  nobody_holds "$S/.dlock/m+fence"
  in_time run -n -k m -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  assert_success
  [ "$output" -gt "$first" ]
  [ "$(stat -c %U:%a "$S/.dlock/m+fence")" = root:600 ]
  free k && free m
}

@test "a lock file nobody made is used as it is (held by nobody: 75, a wait ends on SIGTERM); one with another link is refused" {
  as_nobody touch "$S/k"
  run -0 "$DLOCK" run -n -k k -- true
  [ "$(stat -c %U "$S/k")" = nobody ]
  # its owner can always lock it: the same as holding the lock
  nobody_holds "$S/k"
  local owner=$BG_PID
  in_time run -n -k k -- true
  assert_failure 75
  start_bg waiter "$DLOCK" run -k k -- touch "$T/ran"
  local waiter=$BG_PID
  wait_for "grep -q -- '->' /proc/locks"
  kill -TERM "$waiter"
  wait_for "gone $waiter" 20
  ! grep -q -- '->' /proc/locks # no helper left waiting
  kill "$owner"
  wait_for "free k"
  [ ! -e "$T/ran" ]
  # the turnstile (root's, made by the waiter above) kept by nobody: --shared ones keep -n and -w
  nobody_holds "$S/k+queue"
  in_time run -n -s -k k -- true
  assert_failure 75
  in_time run -w 1 -s -k k -- true
  assert_failure 75
  kill "$BG_PID"
  free k
  # a hard link would let nobody choose the file root locks (and see it through another name)
  as_nobody touch "$S/target"
  as_nobody ln "$S/target" "$S/h"
  in_time run -n -k h -- true
  assert_failure 78
  one_line
  assert_output --partial 'other hard links'
  # a symlink: not followed
  as_nobody ln -s /etc/passwd "$S/l"
  in_time run -n -k l -- true
  assert_failure 78
  one_line
}

@test ".dlock as a symlink, a squatted .dlock or lock directory, a directory anyone may replace files in: refused with 78, nothing outside touched" {
  local victim
  victim=$(mktemp -d /dev/shm/dlock-victim.XXXXXX)
  echo "$victim" >>"$T/nobody.dirs"
  echo planted >"$victim/k+by+0123456789abcdef"
  echo planted >"$victim/k+new+0123456789abcdef"
  local before
  before=$(snapshot "$victim")
  as_nobody ln -s "$victim" "$S/.dlock"
  local cmd
  for cmd in "run -n -k k -- true" "status k" "list" "release -k k --force"; do
    # shellcheck disable=SC2086
    in_time $cmd
    assert_failure 78
    one_line
    assert_output --partial '.dlock'
  done
  [ "$(snapshot "$victim")" = "$before" ]
  free k # nothing left held
  # a .dlock nobody made (a real directory): its owner could remove root's records and counters
  rm "$S/.dlock"
  as_nobody mkdir -m 1777 "$S/.dlock"
  in_time run -n -k k -- true
  assert_failure 78
  one_line
  assert_output --partial 'owned by another user'
  [ -z "$(ls -A "$S/.dlock")" ]
  # a lock directory nobody owns
  nobody_dir
  in_time -u "file://$NOBODY_DIR" run -n -k k -- true
  assert_failure 78
  one_line
  [ -z "$(ls -A "$NOBODY_DIR")" ]
  # a lock directory that is nobody's symlink to root's directory
  as_nobody ln -s "$victim" "$S/sub"
  in_time -u "file://$S/sub" run -n -k k -- true
  assert_failure 78
  one_line
  [ "$(snapshot "$victim")" = "$before" ]
  # a lock directory anyone may write, not sticky: anyone could replace a held lock file
  local open_dir=$S/open
  mkdir -m 777 "$open_dir"
  chmod 777 "$open_dir"
  in_time -u "file://$open_dir" run -n -k k -- true
  assert_failure 78
  one_line
  assert_output --partial 'sticky'
  [ -z "$(ls -A "$open_dir")" ]
}

@test "release --force and --token by nobody of root's lock: 77 with one line, and root keeps it" {
  start_bg holder "$DLOCK" run -k k -- sh -c 'echo "$DLOCK_TOKEN" >"$0.tmp"; mv "$0.tmp" "$0"; exec sleep 60' "$T/token"
  local holder=$BG_PID
  wait_for "[ -s '$T/token' ]"
  run as_nobody timeout -k 5 20 "$DLOCK" -v release -k k --force
  assert_failure 77
  one_line
  refute_output --partial 'released'
  run as_nobody timeout -k 5 20 "$DLOCK" -v release -k k --token "$(cat "$T/token")"
  assert_failure 77
  one_line
  # the holder was not disturbed, and its files are where they were
  sleep 0.2
  alive "$holder"
  run -0 "$DLOCK" status k
  ! free k
  run -0 "$DLOCK" release -k k --token "$(cat "$T/token")"
  local st=0
  wait "$holder" || st=$?
  [ "$st" -eq 76 ]
  free k
}

@test "--fair: nobody cannot jump root's queue (a ticket's place is its ctime: touch -d does not set it back); its FIFO or symlink ticket is ignored" {
  start_bg holder "$DLOCK" run -k k -- sh -c 'until [ -e "$0" ]; do sleep 0.01; done' "$T/go"
  wait_for "! free k"
  start_bg root "$DLOCK" run --fair -w 30s -k k -- touch "$T/root-ran"
  local root=$BG_PID
  wait_for "[ -n \"\$(find '$S/.dlock' -name 'k+ticket+*')\" ]" 10
  sleep 0.1
  as_nobody mkfifo "$S/.dlock/k+ticket+1111111111111111"
  as_nobody ln -s /etc/passwd "$S/.dlock/k+ticket+2222222222222222"
  # a ticket made after root's, claiming an old time and a name that sorts first
  as_nobody touch -d 2000-01-01 "$S/.dlock/k+ticket+0000000000000000"
  nobody_holds "$S/.dlock/k+ticket+0000000000000000"
  local squatter=$BG_PID
  touch "$T/go"
  wait_for "[ -e '$T/root-ran' ]" 20
  wait "$root"
  # its live ticket is now first: as when it holds the lock file itself, which it may
  in_time run -n -k k -- true
  assert_failure 75
  kill "$squatter"
  wait_for "gone $squatter"
  in_time run -w 10 -k k -- true
  assert_success
  in_time run -w 10 --fair -k k -- true
  assert_success
}

@test "history: root's and nobody's events merge; what nobody plants (a symlink, a FIFO, a file under root's uid, 5 MB) gives warnings, never a hang; its flock on root's file drops root's event, never the run" {
  run -0 "$DLOCK" run -k h -- true
  run -0 as_nobody "$DLOCK" run -k h -- true
  in_time history --json h
  assert_success
  [ "$(jq -r '[.events[] | .event + ":" + .user] | join(",")' <<<"$output")" = released:nobody,acquired:nobody,released:root,acquired:root ]
  [ "$(stat -c %U:%a "$S/.dlock/h+history+0")" = root:644 ]
  # planted: a symlink and a FIFO under names of root's, a file of nobody's named uid 1's
  as_nobody ln -s /etc/shadow "$S/.dlock/s+history+0"
  as_nobody mkfifo "$S/.dlock/f+history+0" "$S/.dlock/h+history+2"
  as_nobody sh -c 'head -c 5000000 /dev/zero | tr "\0" x >"$0"' "$S/.dlock/h+history+1"
  in_time history h
  assert_success
  assert_output --partial 'h+history+1: owned by uid'
  assert_output --partial 'h+history+2: not a regular file'
  assert_output --partial 'released  nobody@'
  in_time run -k s -- true
  assert_success
  in_time run -k f -- true
  assert_success
  [ -f "$S/.dlock/f+history+0" ] && [ ! -L "$S/.dlock/s+history+0" ] # replaced by root's own
  run -0 --separate-stderr timeout -k 5 20 "$DLOCK" history --json f
  echo "$output; $stderr"
  [ "$(jq -r '[.events[].event] | join(",")' <<<"$output")" = released,acquired ]
  # nobody keeps a flock on root's history file: root's events are dropped, its run is not
  nobody_holds "$S/.dlock/h+history+0"
  in_time -v run -k h -- true
  assert_success
  assert_output --partial 'kept locked by another process'
  run -0 --separate-stderr timeout -k 5 20 "$DLOCK" history --json h
  [ "$(jq -r '.events[0].user' <<<"$output")" = nobody ]
}
