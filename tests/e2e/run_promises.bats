#!/usr/bin/env bats
# dlock run keeps its promises on the paths a shell user and a fault take: descendants that
# left the process group or session, dlock itself frozen past its TTL, Ctrl-C and Ctrl-Z in a
# real terminal (tmux), a script without "#!", SIGINT and SIGQUIT passed on as deaths.

load helpers

setup_file() { start_redis; }
teardown_file() { stop_redis; }

setup() {
  reset_redis
  export T=$BATS_TEST_TMPDIR
  export DLOCK
}

# Thaws Redis and dlock, SIGKILLs every process the test recorded in $T/*.pid, stops tmux.
teardown() {
  kill -CONT "$REDIS_PID" 2>/dev/null || true
  local file
  for file in "$T"/*.pid; do
    kill_recorded "$file"
  done
  [ -S "$T/tmux.sock" ] && tmux -S "$T/tmux.sock" kill-server 2>/dev/null || true
}

gone() { ! alive "$1"; }

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
  ! ls "$T" | grep -q '^core'
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

# ---------------------------------------------------------------------------------------------
# a real terminal: tmux

# term_start: an interactive bash in a private tmux server, 120x30.
term_start() {
  tmux -S "$T/tmux.sock" -f /dev/null new-session -d -x 120 -y 30 \
    "env -i PATH='$PATH' HOME='$T' TERM=xterm DLOCK='$DLOCK' DLOCK_URL='$DLOCK_URL' REDIS_SOCK='$REDIS_SOCK' T='$T' PS1='PROMPT\$ ' bash --norc --noprofile -i" 3>&-
  wait_for 'term_screen | grep -q "PROMPT\\$"' 5
}
term_keys() { tmux -S "$T/tmux.sock" send-keys -t 0 "$@"; }
term_screen() { tmux -S "$T/tmux.sock" capture-pane -p -t 0; }
# term_wait REGEX [TIMEOUT_S]: until the screen matches.
term_wait() {
  if ! wait_for "term_screen | grep -Eq '$1'" "${2:-5}"; then
    term_screen >&2
    return 1
  fi
}

@test "Ctrl-C in a script: the command and dlock die of SIGINT, the script stops, the lock is released" {
  cat >"$T/script.sh" <<'EOF2'
"$DLOCK" run -k cc -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 30'
echo "AFTER dlock: $?"
EOF2
  term_start
  term_keys 'bash "$T/script.sh"' Enter
  wait_for "[ -s '$T/cmd.pid' ] && key_exists cc"
  term_keys C-c
  term_wait 'PROMPT\$ ?$'
  term_keys 'echo "script status $?"' Enter
  term_wait 'script status 130'
  ! term_screen | grep -q AFTER
  gone "$(cat "$T/cmd.pid")"
  run -0 rcli exists 'dlock:{cc}'
  assert_output 0
}

@test "Ctrl-Z stops the command and gives the prompt back, the lease is renewed while stopped, fg resumes" {
  term_start
  term_keys "\$DLOCK run -k cz -t 1s -- sh -c 'echo \$\$ >\"\$T/cmd.pid\"; sleep 3; echo finished'" Enter
  wait_for "[ -s '$T/cmd.pid' ] && key_exists cz"
  local token pid
  token=$(rcli get 'dlock:{cz}')
  pid=$(cat "$T/cmd.pid")
  term_keys C-z
  term_wait 'Stopped'
  term_wait 'PROMPT\$ ?$'
  [[ $(ps -o stat= -p "$pid") == T* ]]
  # three TTLs later the lock is still ours: renewed while everything was stopped
  sleep 3
  run -0 rcli get 'dlock:{cz}'
  assert_output "$token"
  [[ $(ps -o stat= -p "$pid") == T* ]]
  term_keys "fg" Enter
  term_wait 'finished' 8
  term_wait 'PROMPT\$ ?$'
  term_keys 'echo "dlock status $?"' Enter
  term_wait 'dlock status 0'
  run -0 rcli exists 'dlock:{cz}'
  assert_output 0
}

@test "Ctrl-Z, bg, then a read from the terminal stops it again (tty input), fg finishes it" {
  term_start
  term_keys "\$DLOCK run -k bg -t 1s -- sh -c 'echo \$\$ >\"\$T/cmd.pid\"; sleep 1; read line; echo \"got \$line\"'" Enter
  wait_for "[ -s '$T/cmd.pid' ] && key_exists bg"
  term_keys C-z
  term_wait 'Stopped'
  term_keys "bg" Enter
  sleep 1.5
  term_keys "jobs -l" Enter
  term_wait 'Stopped \(tty input\)' 6
  term_keys "fg" Enter
  sleep 0.5
  term_keys "hello" Enter
  term_wait 'got hello'
  term_wait 'PROMPT\$ ?$'
  run -0 rcli exists 'dlock:{bg}'
  assert_output 0
}

@test "Ctrl-Z, kill %1, fg: the command gets SIGTERM and the lock is released" {
  term_start
  term_keys "\$DLOCK run -k ck -t 1s -- sh -c 'echo \$\$ >\"\$T/cmd.pid\"; exec sleep 30'" Enter
  wait_for "[ -s '$T/cmd.pid' ] && key_exists ck"
  term_keys C-z
  term_wait 'Stopped'
  # as without dlock, bash's kill leaves a stopped job stopped; fg continues it into SIGTERM
  term_keys "kill %1; fg" Enter
  term_wait 'PROMPT\$ ?$'
  term_keys 'echo "status $?"' Enter
  term_wait 'status 143' 8
  gone "$(cat "$T/cmd.pid")"
  run -0 rcli exists 'dlock:{ck}'
  assert_output 0
}

@test "dlock on one side of a pipeline: the other side (a pager) keeps the terminal" {
  term_start
  term_keys "\$DLOCK run -k pipe -- sh -c 'echo from-dlock; sleep 1' | sh -c 'cat; read line </dev/tty; echo \"pager read \$line\"'" Enter
  term_wait 'from-dlock'
  sleep 1.2
  term_keys "answer" Enter
  term_wait 'pager read answer'
  term_wait 'PROMPT\$ ?$'
  term_keys 'echo "pipeline status $?"' Enter
  term_wait 'pipeline status 0'
}

@test "Ctrl-Z, then the stopped command is killed: dlock wakes, releases the lock and reports it" {
  term_start
  term_keys "\$DLOCK run -k zk -t 1s -- sh -c 'echo \$\$ >\"\$T/cmd.pid\"; exec sleep 30'" Enter
  wait_for "[ -s '$T/cmd.pid' ] && key_exists zk"
  term_keys C-z
  term_wait 'Stopped'
  kill -KILL "$(cat "$T/cmd.pid")"
  # the renewer stops renewing and wakes dlock, which releases the lock at once
  wait_for "! key_exists zk" 3
  # dlock runs again (the job shows as continued) and ends with the command's status
  term_keys 'wait %1; echo "status $?"' Enter
  term_wait 'status 137'
}

@test "Ctrl-Z while waiting for the lock: dlock stops, and after fg goes on waiting and runs" {
  "$DLOCK" run -k zw -- sh -c 'until [ -e "$0" ]; do sleep 0.05; done' "$T/release" 3>&- &
  echo $! >>"$T/bg.pid"
  wait_for "key_exists zw"
  term_start
  term_keys "\$DLOCK run -k zw -- echo got-it" Enter
  term_wait 'waiting for lock'
  term_keys C-z
  term_wait 'Stopped'
  term_keys "fg" Enter
  sleep 0.5
  touch "$T/release"
  term_wait 'got-it' 8
  term_wait 'PROMPT\$ ?$'
  term_keys 'echo "status $?"' Enter
  term_wait 'status 0'
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
