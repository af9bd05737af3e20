#!/usr/bin/env bats
# acquire --keep: a detached holder process renews the lease of a lock taken in one step of a
# script until release (which stops it), --max-hold, or the end of its owner: the calling
# script (found through $(...) with a redirection, ( ... ) subshells and pipeline parts) or
# --while-pid. A lost lease is recorded ($XDG_RUNTIME_DIR/dlock/<hash>.lost) for the next
# renew or release (76), and --on-lost signal:NAME signals the owner. Each test has its own
# XDG_RUNTIME_DIR, and the teardown stops every holder process started with it.

load ../lib/helpers

setup() {
  dlock_setup
  export XDG_RUNTIME_DIR=$T/run
  mkdir -m 700 "$XDG_RUNTIME_DIR"
  DLOCK_EXE=$(readlink -f "$DLOCK")
}

teardown() {
  # Holders left behind go with the rest (stop_recorded reads every $T/*.pid).
  keep_holders >>"$T/holders.pid"
  dlock_teardown
}

# keep_holders: the pids of the live dlock processes of this test that run with --keep (the
# holders, and an acquire still running), told apart by this test's XDG_RUNTIME_DIR.
keep_holders() {
  local pid
  for pid in $(pgrep -f -- '--keep'); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$DLOCK_EXE" ] || continue
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR" &&
      alive "$pid"; then
      echo "$pid"
    fi
  done
}

# holder_pid KEY: the pid recorded as the holder of the exclusive lock KEY.
holder_pid() { rcli hget "dlock:{$1}:holder" pid; }

# owner_of KEY: the owner pid in the holder's command field ("acquire --keep for pid N: ...").
owner_of() {
  rcli hget "dlock:{$1}:holder" command | sed -n 's/^acquire --keep for pid \([0-9][0-9]*\): .*/\1/p'
}

# is_holder PID: PID is a live dlock process, in a session of its own (detached).
is_holder() {
  alive "$1"
  [ "$(readlink "/proc/$1/exe")" = "$DLOCK_EXE" ]
  [ "$(ps -o sid= -p "$1" | tr -d ' ')" = "$1" ]
}

# is_ancestor PID OF: PID is OF or one of its ancestors.
is_ancestor() {
  local p=$2
  while [ "$p" -gt 1 ]; do
    [ "$p" != "$1" ] || return 0
    p=$(ps -o ppid= -p "$p" | tr -d ' ')
  done
  echo "pid $1 is not an ancestor of $2"
  return 1
}

# wait_file NAME: waits for $T/NAME (written with a rename, so whole) and prints it.
wait_file() {
  wait_for "[ -s '$T/$1' ]" "${2:-10}"
  cat "$T/$1"
}

# lease_left KEY TOKEN: the ms left of a --limit slot's lease, on the server's clock.
lease_left() {
  rcli eval "local t = redis.call('TIME')
    local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
    if not ends then return -1 end
    return tonumber(ends) - (t[1] * 1000 + math.floor(t[2] / 1000))" 1 "dlock:{$1}:holders" "$2"
}

# released_within KEY MS SINCE_MS: waits until the lock KEY is gone, MS after SINCE_MS at most.
released_within() {
  wait_for "! key_exists '$1'" 5
  local took=$(( $(now_ms) - $3 ))
  echo "lock '$1' released after ${took}ms"
  [ "$took" -lt "$2" ]
}

# ---------------------------------------------------------------------------------------------
# Holding across steps, release

@test "acquire --keep, a step longer than 3 TTLs, release (0) stops the holder; a second release is 76" {
  local tok hp
  tok=$("$DLOCK" acquire -k step -t 1s --keep)
  [[ $tok =~ ^[0-9a-f]{32}$ ]]
  hp=$(holder_pid step)
  is_holder "$hp"
  wait_for 'cat "$XDG_RUNTIME_DIR"/dlock/*.holder >/dev/null 2>&1' 2
  run -0 cat "$XDG_RUNTIME_DIR"/dlock/*.holder
  assert_output --regexp "^$hp [0-9]+ [0-9a-f]{32}\$" # pid, its start time, the token's fingerprint
  run -0 rcli hget 'dlock:{step}:holder' command
  assert_output --regexp '^acquire --keep for pid [0-9]+: '
  # The owner: this test's shell (the script that called dlock), or one of its forks' parents.
  local owner
  owner=$(owner_of step)
  is_ancestor "$owner" "$BASHPID"

  sleep 3.5 # the step: longer than 3 TTLs
  run -0 rcli get 'dlock:{step}'
  assert_output "$tok"
  run -0 "$DLOCK" status step --json
  json_ok '
held_status(d)
assert d["holder"]["pid"] == int(A[0]), d["holder"]
assert d["holder"]["command"].startswith("acquire --keep for pid "), d["holder"]
assert 0 < d["ttl_ms"] <= 1000, d
' "$hp"
  run -0 "$DLOCK" status step
  is_holder "$hp"

  run -0 --separate-stderr "$DLOCK" release -k step --token "$tok"
  [ -z "$output" ]
  [ -z "$stderr" ]
  wait_for "gone $hp" 2
  run -0 rcli exists 'dlock:{step}' 'dlock:{step}:holder'
  assert_output 0
  run -0 ls -A "$XDG_RUNTIME_DIR/dlock"
  assert_output ''
  # Nothing was lost: the second release is the plain "not held".
  run -76 --separate-stderr "$DLOCK" release -k step --token "$tok"
  [[ $stderr == *"is not held by this token"* ]]
  [[ $stderr != *"acquire --keep"* ]]
}

@test "release --token signals its own holder only: a holder whose pid another dlock took is not signalled" {
  local tok hp other
  tok=$("$DLOCK" acquire -k reuse -t 30s --keep)
  hp=$(holder_pid reuse)
  wait_for 'cat "$XDG_RUNTIME_DIR"/dlock/*.holder >/dev/null 2>&1' 2
  # The holder dies without a word: its file stays, and its pid goes to another dlock (here:
  # the file is given that dlock's pid, as a reused pid would).
  kill -KILL "$hp"
  wait_for "gone $hp" 2
  start_bg other "$DLOCK" run -k other -- sh -c 'trap "echo TERM >>\"\$T/other.seen\"" TERM
    trap "echo USR1 >>\"\$T/other.seen\"; exit 0" USR1
    echo $$ >"$T/other.pid"; while :; do sleep 0.02; done'
  other=$BG_PID
  wait_for "[ -s '$T/other.pid' ]" 10
  sed -i "s/^[0-9]*/$other/" "$XDG_RUNTIME_DIR"/dlock/*.holder
  run -0 "$DLOCK" release -k reuse --token "$tok"
  run -0 rcli exists 'dlock:{reuse}'
  assert_output 0
  # Then (after whatever release sent) the other dlock's command is told to end: it saw USR1 alone.
  kill -USR1 "$other"
  wait_for "gone $other" 10
  run -0 cat "$T/other.seen"
  assert_output USR1
}

@test "T=\$(dlock acquire --keep) returns at once: the holder keeps no pipe of the caller open" {
  # A guarded script: were the substitution held open, timeout would end it.
  run -0 timeout 10 bash -c '
    start=$(date +%s%3N)
    tok=$("$DLOCK" acquire -k quick -t 30s --keep)
    echo "took $(( $(date +%s%3N) - start ))"
    echo "token $tok"
    until hp=$(cut -d" " -f1 "$XDG_RUNTIME_DIR"/dlock/*.holder 2>/dev/null); do sleep 0.02; done
    for fd in /proc/$hp/fd/*; do echo "fd ${fd##*/} $(readlink "$fd")"; done
    start=$(date +%s%3N)
    "$DLOCK" acquire -k quick2 -t 30s --keep | cat >/dev/null
    echo "pipeline took $(( $(date +%s%3N) - start ))"'
  local took
  took=$(sed -n 's/^took //p' <<<"$output")
  [ "$took" -lt 1000 ]
  took=$(sed -n 's/^pipeline took //p' <<<"$output")
  [ "$took" -lt 1000 ]
  assert_line --regexp '^token [0-9a-f]{32}$'
  assert_line 'fd 0 /dev/null'
  assert_line 'fd 1 /dev/null'
  assert_line 'fd 2 /dev/null'
  refute_output --partial 'pipe:'
  # The script has ended: both holders release and exit.
  wait_for "! key_exists quick && ! key_exists quick2" 2
  wait_for '[ -z "$(keep_holders)" ]' 2
}

# ---------------------------------------------------------------------------------------------
# The owner: the calling script

@test "the calling shell SIGKILLed: the lock is released at once, not at the end of the TTL" {
  start_bg killed bash -c 'tok=$("$DLOCK" acquire -k killed -t 2s --keep)
    echo "$tok" >"$T/token.tmp"; mv "$T/token.tmp" "$T/token"
    sleep 60 & echo $! >"$T/sleep.pid"; wait'
  local script=$BG_PID tok hp
  tok=$(wait_file token)
  [[ $tok =~ ^[0-9a-f]{32}$ ]]
  run -0 rcli get 'dlock:{killed}'
  assert_output "$tok"
  hp=$(holder_pid killed)
  is_holder "$hp"
  run -0 owner_of killed
  assert_output "$script"

  kill -KILL "$script"
  local start
  start=$(now_ms)
  released_within killed 1000 "$start"
  wait_for "gone $hp" 2
  run -0 rcli exists 'dlock:{killed}:holder'
  assert_output 0
}

@test "T=\$(dlock acquire --keep 2>/dev/null): the owner is the script, not the substitution's subshell" {
  start_bg redirected bash -c 'tok=$("$DLOCK" acquire -k redir -t 1s --keep 2>/dev/null)
    echo "$tok" >"$T/token.tmp"; mv "$T/token.tmp" "$T/token"
    sleep 60 & echo $! >"$T/sleep.pid"; wait'
  local script=$BG_PID tok hp
  tok=$(wait_file token)
  [[ $tok =~ ^[0-9a-f]{32}$ ]]
  hp=$(holder_pid redir)
  run -0 owner_of redir
  assert_output "$script"

  sleep 3.5 # more than 3 TTLs, while the script lives
  run -0 rcli get 'dlock:{redir}'
  assert_output "$tok"
  run -0 holder_pid redir
  assert_output "$hp"
  is_holder "$hp"

  kill -KILL "$script"
  local start
  start=$(now_ms)
  released_within redir 1000 "$start"
  wait_for "gone $hp" 2
}

@test "the owner through ( ... ), a pipeline and a { ...; } | pipeline part: held while the script lives, released when it exits" {
  cat >"$T/subshell.sh" <<'EOF'
( tok=$("$DLOCK" acquire -k sub -t 1s --keep); echo "$tok" >"$T/sub.tmp"; mv "$T/sub.tmp" "$T/sub.token" )
until [ -e "$T/stop" ]; do sleep 0.05; done
echo done
EOF
  cat >"$T/pipeline.sh" <<'EOF'
"$DLOCK" acquire -k pipe -t 1s --keep | cat >"$T/pipe.tmp"
mv "$T/pipe.tmp" "$T/pipe.token"
{ "$DLOCK" acquire -k brace -t 1s --keep; echo; } | cat >"$T/brace.tmp"
mv "$T/brace.tmp" "$T/brace.token"
until [ -e "$T/stop" ]; do sleep 0.05; done
echo done
EOF
  start_bg subshell bash "$T/subshell.sh"
  local sub_script=$BG_PID
  start_bg pipeline bash "$T/pipeline.sh"
  local pipe_script=$BG_PID
  local -A tok hp script=([sub]=$sub_script [pipe]=$pipe_script [brace]=$pipe_script)
  local key
  for key in sub pipe brace; do
    tok[$key]=$(wait_file "$key.token" | head -n 1)
    [[ ${tok[$key]} =~ ^[0-9a-f]{32}$ ]]
    hp[$key]=$(holder_pid "$key")
    run -0 owner_of "$key"
    assert_output "${script[$key]}"
  done

  sleep 3.5 # more than 3 TTLs, while the scripts live
  for key in sub pipe brace; do
    run -0 rcli get "dlock:{$key}"
    assert_output "${tok[$key]}"
    is_holder "${hp[$key]}"
  done

  touch "$T/stop"
  wait_for "gone $sub_script && gone $pipe_script" 5
  local start
  start=$(now_ms)
  run -0 cat "$T/subshell.out" "$T/pipeline.out"
  assert_output $'done\ndone'
  # all three from one start, checked one after another (each check's redis-cli runs count
  # for the next on a loaded machine): 2 s for the last
  for key in sub pipe brace; do
    released_within "$key" 2000 "$start"
    wait_for "gone ${hp[$key]}" 2
  done
}

@test "--while-pid: the lock outlives the calling script, and goes when that process ends" {
  start_bg owner sleep 30
  local owner=$BG_PID tok hp
  run -0 bash -c '"$DLOCK" acquire -k wp -t 1s --keep --while-pid "$1" >"$T/wp.token"' _ "$owner"
  tok=$(cat "$T/wp.token")
  [[ $tok =~ ^[0-9a-f]{32}$ ]]
  run -0 owner_of wp
  assert_output "$owner"
  hp=$(holder_pid wp)

  sleep 2 # 2 TTLs after the script ended
  run -0 rcli get 'dlock:{wp}'
  assert_output "$tok"
  is_holder "$hp"

  kill -KILL "$owner"
  local start
  start=$(now_ms)
  released_within wp 1000 "$start"
  wait_for "gone $hp" 2
}

# ---------------------------------------------------------------------------------------------
# A lost lease, --max-hold

@test "the lease deleted under the holder: the next renew or release is 76 with the reason; --on-lost signal:USR1" {
  cat >"$T/lost.sh" <<'EOF'
trap 'echo USR1 >"$T/usr1"' USR1
tok=$("$DLOCK" acquire -k lost -t 1s --keep --on-lost signal:USR1)
echo "$tok" >"$T/lost.tmp"; mv "$T/lost.tmp" "$T/lost.token"
until [ -e "$T/stop" ]; do sleep 0.05; done
EOF
  start_bg lost bash "$T/lost.sh"
  local script=$BG_PID tok hp
  tok=$(wait_file lost.token)
  hp=$(holder_pid lost)
  is_holder "$hp"
  [ ! -e "$T/usr1" ]

  run -0 rcli del 'dlock:{lost}'
  assert_output 1
  wait_for "[ -s '$T/usr1' ]" 3
  wait_for "gone $hp" 2
  alive "$script" # it trapped the signal
  run -0 cat "$T/usr1"
  assert_output USR1
  run -0 rcli exists 'dlock:{lost}'
  assert_output 0

  run -76 --separate-stderr "$DLOCK" renew -k lost --token "$tok"
  [ -z "$output" ]
  [[ $stderr =~ "the lease on lock 'lost' was lost while acquire --keep held it, at "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z": the lock is no longer held by this token" ]]
  # Said once: the record goes.
  run -76 --separate-stderr "$DLOCK" renew -k lost --token "$tok"
  [[ $stderr != *"acquire --keep"* ]]

  # Without --on-lost, the owner (this shell) is not signalled; release reports the loss.
  local tok2 hp2
  tok2=$("$DLOCK" acquire -k lost2 -t 1s --keep)
  hp2=$(holder_pid lost2)
  is_holder "$hp2"
  run -0 rcli del 'dlock:{lost2}'
  wait_for "gone $hp2" 3
  run -76 --separate-stderr "$DLOCK" release -k lost2 --token "$tok2"
  [[ $stderr == *"the lease on lock 'lost2' was lost while acquire --keep held it, at "*": the lock is no longer held by this token"* ]]
  run -0 ls -A "$XDG_RUNTIME_DIR/dlock"
  assert_output ''
}

@test "--max-hold 1500ms with -t 1s: renewed past the TTL, released at 1.5 s" {
  local start tok hp took
  start=$(now_ms)
  tok=$("$DLOCK" acquire -k mh -t 1s --keep --max-hold 1500ms)
  hp=$(holder_pid mh)
  is_holder "$hp"
  # past the 1 s TTL (so renewed), before the 1.5 s --max-hold, both counted from the start
  # (on a loaded machine the lines above take a few hundred ms)
  local at=$((start + 1150)) now
  now=$(now_ms)
  [ "$now" -ge "$at" ] || sleep "$(awk -v ms=$((at - now)) 'BEGIN { print ms / 1000 }')"
  run -0 rcli get 'dlock:{mh}'
  now=$(now_ms)
  echo "checked at +$((now - start)) ms"
  if [ $((now - start)) -lt 1450 ]; then
    assert_output "$tok"
  fi
  wait_for "! key_exists mh" 3
  took=$(( $(now_ms) - start ))
  echo "released after ${took}ms"
  [ "$took" -ge 1400 ]
  [ "$took" -lt 2100 ]
  wait_for "gone $hp" 2
  # Released, not lost.
  run -76 --separate-stderr "$DLOCK" release -k mh --token "$tok"
  [[ $stderr != *"acquire --keep"* ]]
}

# ---------------------------------------------------------------------------------------------
# Usage errors, failures, kinds

@test "usage errors (64): --while-pid, --max-hold, --on-lost without --keep; a bad --on-lost; --while-pid of no process" {
  run -64 --separate-stderr "$DLOCK" acquire -k u -t 5s --while-pid $$
  [[ $stderr == *"--while-pid needs --keep"* ]]
  run -64 --separate-stderr "$DLOCK" acquire -k u -t 5s --max-hold 1s
  [[ $stderr == *"--max-hold needs --keep"* ]]
  run -64 --separate-stderr "$DLOCK" acquire -k u -t 5s --on-lost signal:TERM
  [[ $stderr == *"--on-lost needs --keep"* ]]
  run -64 --separate-stderr "$DLOCK" acquire -k u -t 5s --keep --on-lost bogus
  [[ $stderr == *"--on-lost takes signal:NAME"* ]]
  run -64 --separate-stderr "$DLOCK" acquire -k u -t 5s --keep --on-lost signal:BOGUS
  [[ $stderr == *"unknown signal"* ]]
  run -64 --separate-stderr "$DLOCK" acquire -k u -t 5s --keep --while-pid 999999999
  [[ $stderr == *"999999999"* ]]
  run -64 --separate-stderr "$DLOCK" acquire -k u -t 5s --keep --max-hold 0s
  [[ $stderr == *"--max-hold must be greater than zero"* ]]
  run -0 rcli exists 'dlock:{u}'
  assert_output 0
  run -0 keep_holders
  assert_output ''
}

@test "a failed acquire --keep (75 -n, 75 --wait, 64 kind clash) leaves no holder process" {
  local other
  other=$("$DLOCK" acquire -k busy-keep -t 30s)
  run -75 --separate-stderr "$DLOCK" acquire -k busy-keep -t 5s --keep -n
  [ -z "$output" ]
  run -75 --separate-stderr "$DLOCK" acquire -k busy-keep -t 5s --keep --wait 300ms
  [ -z "$output" ]
  run -64 --separate-stderr "$DLOCK" acquire -k busy-keep -t 5s --limit 2 --keep -n
  [ -z "$output" ]
  wait_for "! pgrep -f -- '-k busy-keep -t 5s' >/dev/null" 2
  run -0 keep_holders
  assert_output ''
  run -0 rcli get 'dlock:{busy-keep}'
  assert_output "$other"
  # nothing recorded (the records' directory is made by the first keep process that holds)
  [ -z "$(ls -A "$XDG_RUNTIME_DIR/dlock" 2>/dev/null)" ]
  run -0 "$DLOCK" release -k busy-keep --token "$other"
}

@test "--keep with --limit 2 and with two keys: renewed past 3 TTLs, released by token" {
  local ltok mtok
  ltok=$("$DLOCK" acquire -k sem -t 1s --limit 2 --keep)
  mtok=$("$DLOCK" acquire -k b -k a -t 1s --keep)
  run -0 keep_holders
  [ "${#lines[@]}" -eq 2 ]
  local holders=$output

  sleep 3.5 # more than 3 TTLs
  run -0 lease_left sem "$ltok"
  [ "$output" -gt 0 ]
  [ "$output" -le 1000 ]
  run -0 rcli get 'dlock:{a}'
  assert_output "$mtok"
  run -0 rcli get 'dlock:{b}'
  assert_output "$mtok"
  run -0 keep_holders
  assert_output "$holders"
  # One slot of two is taken.
  local other
  other=$("$DLOCK" acquire -k sem -t 5s --limit 2 -n)
  run -75 "$DLOCK" acquire -k sem -t 5s --limit 2 -n
  run -0 "$DLOCK" release -k sem --token "$other"

  run -0 --separate-stderr "$DLOCK" release -k sem --token "$ltok"
  [ -z "$stderr" ]
  run -0 --separate-stderr "$DLOCK" release -k a -k b --token "$mtok"
  [ -z "$stderr" ]
  wait_for '[ -z "$(keep_holders)" ]' 2
  run -0 rcli exists 'dlock:{sem}:holders' 'dlock:{a}' 'dlock:{b}'
  assert_output 0
  run -0 ls -A "$XDG_RUNTIME_DIR/dlock"
  assert_output ''
  run -76 "$DLOCK" release -k a -k b --token "$mtok"
}
