#!/usr/bin/env bats
# dlock run in a real terminal (tmux): Ctrl-C and Ctrl-Z, job control, a pipeline with a pager,
# and the waiting line drawn on the terminal while dlock waits for a lock.

load ../lib/helpers

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
  if term_screen | grep -q AFTER; then fail "the script went on after dlock: $(term_screen)"; fi
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
  local pid
  pid=$(cat "$T/cmd.pid")
  term_keys "bg" Enter
  # running again (its sleep 1), then stopped by its read from the terminal
  wait_for "[[ \$(ps -o stat= -p $pid) != T* ]]"
  wait_for "[[ \$(ps -o stat= -p $pid) == T* ]]" 6
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
  # bash's kill sends a stopped job SIGTERM and SIGCONT. If the job has ended before fg runs,
  # fg finds no job to continue and bash reports "Exit 143" itself: both as without dlock.
  term_keys "kill %1; fg" Enter
  term_wait 'PROMPT\$ ?$'
  term_keys 'echo "status $?"' Enter
  term_wait 'status (143|1)$' 8
  if term_screen | grep -q 'status 1$'; then
    term_screen | grep -Eq 'fg: .*(job has terminated|no such job)'
    term_screen | grep -Eq 'Exit 143 +\$DLOCK run -k ck'
  fi
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

# ---------------------------------------------------------------------------------------------
# the waiting line, on a real terminal

# pane: the text of the tmux pane, one line per row, trailing blanks removed.
pane() { tmux -S "$T/tmux.sock" capture-pane -p -t waiter | sed 's/ *$//'; }

@test "the waiting line fits an 80-column terminal and is erased once the lock is taken" {
  command -v tmux >/dev/null || skip "tmux is not installed"
  export LC_ALL=C.UTF-8
  # A holder whose command line is 300 characters long.
  local release=$T/release
  start_bg holder "$DLOCK" run -k wl --record-command -- sh -c 'until [ -e "$0" ]; do sleep 0.05; done' "$release" \
    "$(printf 'x%.0s' $(seq 300))"
  wait_for 'key_exists wl'

  tmux -u -S "$T/tmux.sock" -f /dev/null new-session -d -s waiter -x 80 -y 24 \
    "'$DLOCK' run -k wl -- echo acquired; sleep 60"
  wait_for 'pane | grep -q "waiting for lock"'
  sleep 2.5 # two redraws
  run -0 pane
  local -a drawn
  mapfile -t drawn < <(printf '%s\n' "$output" | grep -v '^$')
  printf 'pane: %s\n' "${drawn[@]}"
  [ "${#drawn[@]}" -eq 1 ] || fail "expected one line, got ${#drawn[@]}"
  [[ ${drawn[0]} == "dlock: waiting for lock 'wl' ("*"s), held by "* ]] || fail "${drawn[0]}"
  # 79 columns, but capture-pane drops trailing blanks
  [ "${#drawn[0]}" -le 79 ] && [ "${#drawn[0]}" -ge 75 ] || fail "${#drawn[0]} columns"

  touch "$release"
  wait_for 'pane | grep -q acquired'
  run -0 pane
  refute_output --partial 'waiting for lock'
  assert_line acquired
  wait
}

@test "the waiting line counts characters, not bytes, and is erased when the waiter gives up" {
  command -v tmux >/dev/null || skip "tmux is not installed"
  export LC_ALL=C.UTF-8
  local key
  key=$(printf 'é%.0s' $(seq 100)) # 200 bytes
  hold "$key" 5
  tmux -u -S "$T/tmux.sock" -f /dev/null new-session -d -s waiter -x 80 -y 24 \
    "'$DLOCK' run -k '$key' -w 2500ms -- true; echo exit=\$?; sleep 60"
  wait_for 'pane | grep -q "waiting for lock"'
  sleep 1.2
  run -0 pane
  # 79 characters: the 25 of "dlock: waiting for lock '" and 54 whole é.
  assert_line "dlock: waiting for lock '${key:0:54}"
  wait_for 'pane | grep -q "exit="' 5
  run -0 pane
  refute_output --partial 'dlock: waiting for lock'
  # The report of the holder begins where the waiting line was, on the first row.
  assert_line --index 0 --regexp "^dlock: gave up waiting for lock 'é+$"
  assert_line exit=75
}
