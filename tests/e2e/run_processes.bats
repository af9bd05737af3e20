#!/usr/bin/env bats
# dlock run and the processes around it: descendants that left the process group or session,
# dlock itself frozen past its TTL, SIGINT and SIGQUIT passed on as deaths, a script without
# "#!", SIGINT while waiting. (Ctrl-C and Ctrl-Z in a terminal: run_terminal.bats.)

load ../lib/helpers

# ---------------------------------------------------------------------------------------------
# descendants outside the process group

@test "a setsid descendant is stopped before the lock is released" {
  # The escaped process watches the lock: if it ever sees it free while it lives, it says so.
  cat >"$T/escapee.sh" <<'EOF2'
echo $$ >"$T/escapee.pid"
trap '' TERM HUP INT
while :; do
  [ "$(redis-cli -s "$REDIS_SOCK" exists 'dlock:{esc}')" = 1 ] || echo free >>"$T/seen"
  sleep 0.01
done
EOF2
  run -0 --separate-stderr "$DLOCK" run -k esc -- sh -c 'setsid sh "$T/escapee.sh" </dev/null >/dev/null 2>&1 &
    while [ ! -s "$T/escapee.pid" ]; do sleep 0.01; done; sleep 0.2'
  [ -z "$stderr" ]
  local pid
  pid=$(cat "$T/escapee.pid")
  echo "$pid" >>"$T/kill.pid"
  gone "$pid"
  [ ! -e "$T/seen" ]
  run -0 rcli exists 'dlock:{esc}'
  assert_output 0
}


@test "a daemonized descendant's exit status does not replace the command's" {
  run -3 "$DLOCK" run -k dmn -- sh -c '(setsid sleep 100 </dev/null >/dev/null 2>&1 & echo $! >"$T/daemon.pid"); exit 3'
  local pid
  pid=$(cat "$T/daemon.pid")
  echo "$pid" >>"$T/kill.pid"
  gone "$pid"
}

@test "dlock killed with SIGKILL: a setsid descendant dies too" {
  start_bg d "$DLOCK" run -k k9 -t 5s -- sh -c 'setsid sleep 100 </dev/null >/dev/null 2>&1 & echo $! >"$T/escapee.pid"; exec sleep 100'
  wait_for "[ -s '$T/escapee.pid' ]"
  local pid
  pid=$(cat "$T/escapee.pid")
  echo "$pid" >>"$T/kill.pid"
  alive "$pid"
  kill -9 "$BG_PID"
  wait_for "! alive $pid" 3
}

@test "lease lost: a setsid descendant is stopped too, before dlock exits 76" {
  start_bg d "$DLOCK" run -k lost -t 1s -- sh -c 'setsid sleep 100 </dev/null >/dev/null 2>&1 & echo $! >"$T/escapee.pid"; exec sleep 100'
  wait_for "[ -s '$T/escapee.pid' ]"
  local pid st=0
  pid=$(cat "$T/escapee.pid")
  echo "$pid" >>"$T/kill.pid"
  rcli del 'dlock:{lost}' >/dev/null
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
  gone "$pid"
}

# ---------------------------------------------------------------------------------------------
# dlock frozen

@test "dlock frozen (SIGSTOP) past its TTL: the command is dead before the lease expires, and no one else ran meanwhile" {
  # The first command writes a heartbeat until it dies; the second records when it started.
  start_bg first "$DLOCK" run -k frozen -t 2s -- sh -c 'echo $$ >"$T/cmd.pid"
    while :; do date +%s%3N >"$T/beat.tmp"; mv "$T/beat.tmp" "$T/beat"; sleep 0.01; done'
  local first=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ] && [ -s '$T/beat' ]"
  start_bg second "$DLOCK" run -k frozen -t 2s -- sh -c 'date +%s%3N >"$T/second_start"'
  sleep 0.3
  kill -STOP "$first"
  # the command must be dead while the key (not renewed since the freeze) still exists
  wait_for "! alive $(cat "$T/cmd.pid")" 3
  run -0 rcli pttl 'dlock:{frozen}'
  echo "lease left when the command was found dead: $output ms"
  [ "$output" -gt 0 ]
  # the waiter gets the lock once the lease expires, after the last heartbeat
  wait_for "[ -s '$T/second_start' ]" 5
  local last second
  last=$(cat "$T/beat")
  second=$(cat "$T/second_start")
  echo "last heartbeat $last, second holder started $second"
  [ "$second" -gt "$last" ]
  kill -CONT "$first"
  local st=0
  wait "$first" || st=$?
  [ "$st" -eq 76 ]
  grep -q "lock 'frozen'" "$T/first.err"
}

# ---------------------------------------------------------------------------------------------
# signals that end the command end dlock the same way

# died_of PYTHON_ARGS...: runs a command from python and prints its return code (negative: the
# signal that killed it), because a shell reports a death by SIGINT and exit 130 alike.
died_of() {
  python3 -c 'import subprocess, sys; print(subprocess.run(sys.argv[1:]).returncode)' "$@"
}

@test "a command that dies of SIGINT: dlock releases, then dies of SIGINT itself" {
  run -0 died_of "$DLOCK" run -k int -- sh -c 'kill -INT $$'
  assert_output -2
  run -0 rcli exists 'dlock:{int}'
  assert_output 0
}

@test "a command that dies of SIGQUIT: dlock dies of SIGQUIT, without a core file" {
  cd "$T"
  ulimit -c unlimited 2>/dev/null || true
  run -0 died_of "$DLOCK" run -k quit -- sh -c 'ulimit -c 0; kill -QUIT $$'
  assert_output -3
  if ls "$T" | grep -q '^core'; then fail "a core file was written: $(ls "$T")"; fi
  run -0 rcli exists 'dlock:{quit}'
  assert_output 0
}

@test "a command that exits 130 itself is an exit status, not a death" {
  run -0 died_of "$DLOCK" run -k e130 -- sh -c 'exit 130'
  assert_output 130
}

@test "SIGTERM still gives 128+15, as the contract says" {
  run -0 died_of "$DLOCK" run -k term -- sh -c 'kill -TERM $$'
  assert_output 143
}

# ---------------------------------------------------------------------------------------------
# scripts without "#!"

@test "a script without #! runs through /bin/sh, by path and from PATH" {
  mkdir "$T/bin"
  printf 'echo "no shebang $1"\n' >"$T/bin/noshebang"
  chmod +x "$T/bin/noshebang"
  run -0 "$DLOCK" run -k sb -- "$T/bin/noshebang" one
  assert_output "no shebang one"
  PATH=$T/bin:$PATH run -0 "$DLOCK" run -k sb -- noshebang two
  assert_output "no shebang two"
  # not executable at all is still 126, a missing file 127
  chmod -x "$T/bin/noshebang"
  run -126 "$DLOCK" run -k sb -- "$T/bin/noshebang"
  run -127 "$DLOCK" run -k sb -- "$T/bin/missing"
}

@test "SIGINT while waiting, in run and in acquire: dlock dies of SIGINT and holds nothing" {
  "$DLOCK" run -k wi -- sleep 30 3>&- &
  echo $! >>"$T/bg.pid"
  wait_for "key_exists wi"
  local sub
  for sub in "run -k wi -- true" "acquire -k wi -t 10s"; do
    # shellcheck disable=SC2086
    python3 -c 'import subprocess, sys, time, signal
p = subprocess.Popen(sys.argv[1:]); time.sleep(0.5); p.send_signal(signal.SIGINT); print(p.wait())' \
      "$DLOCK" $sub >"$T/code"
    [ "$(cat "$T/code")" = -2 ]
  done
}

# ---------------------------------------------------------------------------------------------
# SIGTSTP without job control (kill -TSTP from a script or cron, no terminal)

# proc_state PID: the process's state letter (T: stopped).
proc_state() { ps -o stat= -p "$1" 2>/dev/null | cut -c1; }
# in_own_group COMMAND...: execs COMMAND as the leader of a new process group of this session.
in_own_group() { python3 -c 'import os, sys; os.setpgid(0, 0); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }

@test "kill -TSTP of a waiting dlock without a terminal does not stop its caller" {
  hold_until busy "$T/release"
  # The caller: a script in a process group of its own (as a CI runner or a service manager
  # starts one), without a terminal; dlock shares its group. (A group whose parent is in the
  # same session: the kernel would carry out a SIGTSTP sent to it.)
  in_own_group sh -c 'echo $$ >"$T/caller.pid"; "$DLOCK" -v run -k busy -- true 2>"$T/waiter.err"
    echo "$?" >"$T/caller.done"' </dev/null >/dev/null 2>&1 3>&- &
  wait_for "[ -s '$T/caller.pid' ] && [ \"\$(waiters busy)\" = 1 ]" 10
  local caller waiter
  caller=$(cat "$T/caller.pid")
  waiter=$(pgrep -P "$caller")
  echo "$waiter" >>"$T/kill.pid"
  kill -TSTP "$waiter"
  # dlock handled it (said so, or stopped its caller's group: main's way)
  wait_for "grep -q SIGTSTP '$T/waiter.err' || [ \"\$(proc_state $caller)\" = T ]" 10
  local caller_state
  caller_state=$(proc_state "$caller")
  kill -CONT "$caller" "$waiter" 2>/dev/null || true
  cat "$T/waiter.err"
  [ "$caller_state" != T ]
  grep -q 'SIGTSTP ignored' "$T/waiter.err"
  # it still waits, and takes the lock once released
  touch "$T/release"
  wait_for "[ -s '$T/caller.done' ]" 10
  [ "$(cat "$T/caller.done")" = 0 ]
}

@test "kill -TSTP of a running dlock without a terminal stops the command alone; kill -CONT continues it" {
  # The command waits with bash's read -t, never forking: a shell stopped while it forks a
  # sleep waits in vfork (state D) behind its stopped child, and would never show T itself.
  mkfifo "$T/tick"
  in_own_group sh -c 'echo $$ >"$T/caller.pid"
    "$DLOCK" run -k tstp -- bash -c "echo \$\$ >\"\$T/cmd.pid\"; exec 9<>\"\$T/tick\"; until [ -e \"\$T/go\" ]; do read -t 0.02 -u 9 _ || true; done; echo ran"
    echo "$?" >"$T/caller.done"' </dev/null >"$T/caller.out" 2>&1 3>&- &
  wait_for "[ -s '$T/cmd.pid' ]" 10
  local caller dlock cmd
  caller=$(cat "$T/caller.pid")
  dlock=$(pgrep -P "$caller")
  cmd=$(cat "$T/cmd.pid")
  echo "$dlock" >>"$T/kill.pid"
  kill -TSTP "$dlock"
  wait_for "[ \"\$(proc_state $cmd)\" = T ]" 10
  # dlock and its caller run on, the lock still held
  [ "$(proc_state "$caller")" != T ]
  [ "$(proc_state "$dlock")" != T ]
  key_exists tstp
  kill -CONT "$dlock"
  wait_for "[ \"\$(proc_state $cmd)\" != T ]" 10
  touch "$T/go"
  wait_for "[ -s '$T/caller.done' ]" 10
  [ "$(cat "$T/caller.done")" = 0 ]
  grep -qx ran "$T/caller.out"
  ! key_exists tstp
}
