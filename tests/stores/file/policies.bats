#!/usr/bin/env bats
# The cron and CI policies on the file:// store: what they leave in .dlock (NAME+policy for
# --min-hold and --lock-delay, NAME+replace+FP for --replace, NAME+newest for --supersede), that
# it is removed once over, that flock(1) does not honour it (it cannot: a documented limit), and
# a hostile second local user planting side files there: dlock (root) neither hangs, follows a
# symlink, reads an oversized file whole, nor stays closed past release --force.
#
# Bounds: every dlock that could hang runs under `timeout -k 5 20`; 124 is the hang.

load ../../lib/helpers

setup_file() { :; }
teardown_file() { :; }
setup() {
  dlock_setup
  D=$(mktemp -d /dev/shm/dlock-policies.XXXXXX)
  echo "$D" >>"$T/nobody.dirs" # removed by the teardown
  export DLOCK_URL=file://$D
}
teardown() { dlock_teardown; }

# in_time COMMAND...: dlock's COMMAND under timeout 20 (bats' run: $status, $output).
in_time() { run --separate-stderr timeout -k 5 20 "$DLOCK" "$@"; }

# fingerprint KEY: the token fingerprint of KEY's live holder record.
fingerprint() {
  local f
  for f in "$D"/.dlock/"$1"+by+*; do
    [ -f "$f" ] && echo "${f##*+by+}" && return 0
  done
  return 1
}

# no_side_files KEY: no policy record or end stamp of KEY is left in .dlock.
no_side_files() {
  run find "$D/.dlock" -name "$1+policy+*" -o -name "$1+ended+*"
  [ -z "$output" ]
}

# a valid side record of a holder that never was: min-hold until HOLD_UNTIL_MS, delay DELAY_MS.
planted_policy() {
  printf 'dlockpolicy1\t0123456789abcdef\t%s\t1\t%s\t0\n' "$2" "${3:-0}"
  printf 'dlock1\t%s\texclusive\t-1\t0\tmallory\telsewhere\t4242\t1\t0\t0\tevil\tplanted\n' "$1"
}

@test "--min-hold: NAME+policy outlives the run, flock(1) does not honour it, and it is removed once over" {
  run -0 "$DLOCK" run -k m --min-hold 2s --note "once a period" -- true
  [ -f "$D"/.dlock/m+policy+* ]
  # the flock is free: flock(1) takes it (it knows nothing of dlock's side records)
  run -0 flock -n "$D/m" true
  run -0 --separate-stderr "$DLOCK" status m --json
  json_ok 'assert d["held"] and d["command_ended"] and d["holder"]["note"] == "once a period", d'
  run -75 "$DLOCK" run -k m -n -- touch "$T/ran"
  sleep 2.2
  run -0 "$DLOCK" run -k m -n -- true
  no_side_files m
  # a clean release leaves nothing, and no delay
  run -0 "$DLOCK" run -k c --lock-delay 30s -- true
  no_side_files c
  run -0 "$DLOCK" run -k c -n -- true
  [ ! -e "$T/ran" ]
}

@test "--min-hold: kill -9 of the holder (and its command): the flock is free, dlock keeps the lock closed to hold_until" {
  start_bg holder "$DLOCK" run -k k9 --min-hold 4s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  local started=$(now_ms)
  kill -KILL "$holder" "$(cat "$T/cmd.pid")"
  wait_for "flock -n '$D/k9' true" 5
  run -75 --separate-stderr "$DLOCK" -v run -k k9 -n -- touch "$T/ran"
  [[ $stderr == *"--min-hold"* ]]
  run -0 --separate-stderr "$DLOCK" status k9 --json
  json_ok 'assert d["held"] and d["command_ended"] and 0 < d["ttl_ms"] <= 4000, d'
  run -0 "$DLOCK" run -k k9 -w 15s -- true
  local took=$(($(now_ms) - started))
  echo "taken $took ms after the kill"
  [ "$took" -ge 3000 ]
  [ ! -e "$T/ran" ]
}

@test "--lock-delay after kill -9: the first dlock to find the flock free stamps the end; later ones count from it" {
  start_bg holder "$DLOCK" run -k d9 --lock-delay 3s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  local holder=$BG_PID
  wait_for "[ -s '$T/cmd.pid' ]" 10
  kill -KILL "$holder" "$(cat "$T/cmd.pid")"
  wait_for "flock -n '$D/d9' true" 5
  local stamped=$(now_ms)
  run -75 "$DLOCK" run -k d9 -n -- touch "$T/ran"
  sleep 1
  run -1 --separate-stderr "$DLOCK" status d9 --json
  json_ok 'assert not d["held"] and 0 < d["delay_ms"] <= 2200, d'
  run -0 "$DLOCK" run -k d9 -w 15s -- true
  local took=$(($(now_ms) - stamped))
  echo "taken $took ms after the first refusal"
  [ "$took" -ge 2500 ] && [ "$took" -lt 6000 ]
  no_side_files d9
  [ ! -e "$T/ran" ]
}

@test "a waiter closed by a min-hold blocks until its end, and release --force wakes it at once (inotify, no polling)" {
  run -0 "$DLOCK" run -k w --min-hold 60s -- true
  start_bg waiter "$DLOCK" -v run -k w -w 30s -- sh -c 'touch "$T/ran"'
  sleep 1
  [ ! -e "$T/ran" ]
  local forced=$(now_ms)
  run -0 "$DLOCK" release --force -k w
  wait_for "[ -e '$T/ran' ]" 5 || { cat "$T/waiter.err"; false; }
  local took=$(($(now_ms) - forced))
  echo "the waiter ran $took ms after release --force"
  [ "$took" -lt 2000 ]
  no_side_files w
}

@test "--replace and --supersede leave nothing in .dlock once over" {
  start_bg holder "$DLOCK" run -k r -t 1500ms --kill-after 1s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  wait_for "[ -s '$T/cmd.pid' ]" 10
  run -0 timeout 20 "$DLOCK" run -k r --replace --supersede -w 15s -- true
  wait "$BG_PID" || [ $? -eq 76 ]
  run -0 find "$D/.dlock" -name 'r+*' ! -name 'r+fence' ! -name 'r+history+*'
  assert_output ''
}

@test "hostile: nobody's FIFO, symlink or oversized file as a side record: ignored, never followed, no hang" {
  need_root
  chmod 1777 "$D"
  run -0 "$DLOCK" run -k warm -- true # makes .dlock, sticky as the directory
  [ "$(stat -c %a "$D/.dlock")" = 1777 ]
  echo "root's own" >"$T/target"
  chmod 644 "$T/target"
  local before
  before=$(sha256sum "$T/target")
  local fp=0123456789abcdef
  as_nobody mkfifo "$D/.dlock/f+policy+$fp" "$D/.dlock/f+ended+$fp" "$D/.dlock/f+waiter+$fp"
  as_nobody ln -s "$T/target" "$D/.dlock/s+policy+$fp"
  as_nobody ln -s "$T/target" "$D/.dlock/s+waiter+$fp"
  as_nobody sh -c "head -c 100000 /dev/zero | tr '\\0' 'x' >'$D/.dlock/o+policy+$fp'"
  as_nobody sh -c "{ printf 'dlockpolicy1\t$fp\t99999999999999\t1\t0\t0\n'; head -c 10000 /dev/zero | tr '\\0' 'x'; } >'$D/.dlock/g+policy+$fp'"
  # a valid record under another holder's name is not that holder's
  planted_policy n 99999999999999 | as_nobody sh -c "cat >'$D/.dlock/n+policy+fedcba9876543210'"
  for k in f s o g n; do
    in_time status "$k"
    assert_failure 1
    in_time run -n -k "$k" --min-hold 1s -- true
    assert_success
    in_time status "$k"
    assert_success # its own min-hold now
  done
  in_time list
  assert_success
  # a --supersede waiter reads past nobody's FIFO and symlink announcements
  for k in f s; do
    start_bg flocker flock -o "$D/$k" sleep 30
    wait_for "! flock -n '$D/$k' true"
    in_time run -k "$k" --supersede -w 1s -- true
    assert_failure 75
    kill "$BG_PID"
    wait_for "flock -n '$D/$k' true"
  done
  [ "$(sha256sum "$T/target")" = "$before" ]
  [ ! -p "$D/.dlock/f+policy+$fp" ] && [ ! -L "$D/.dlock/s+policy+$fp" ]
}

@test "hostile: nobody's request to stand down as a FIFO, a symlink or garbage does not stop the holder" {
  need_root
  chmod 1777 "$D"
  start_bg holder "$DLOCK" run -k h -t 1s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  wait_for "[ -s '$T/cmd.pid' ]" 10
  local fp
  fp=$(fingerprint h)
  as_nobody mkfifo "$D/.dlock/h+replace+$fp"
  sleep 1.2 # renewals every 300 ms read it
  alive "$BG_PID"
  rm "$D/.dlock/h+replace+$fp"
  as_nobody ln -s /etc/passwd "$D/.dlock/h+replace+$fp"
  sleep 1.2
  alive "$BG_PID"
  rm "$D/.dlock/h+replace+$fp"
  as_nobody sh -c "printf 'dlockwho1\tnot-a-fingerprint\n' >'$D/.dlock/h+replace+$fp'"
  sleep 1.2
  alive "$BG_PID"
  kill "$BG_PID"
}

@test "hostile: nobody's --replace does not stop root's command (kill(2) would not either); it waits, and root's own --replace does" {
  need_root
  chmod 1777 "$D"
  start_bg holder "$DLOCK" run -k h -t 1s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  wait_for "[ -s '$T/cmd.pid' ]" 10
  run --separate-stderr as_nobody timeout -k 5 20 "$DLOCK" -v run -k h --replace -w 2s -- touch "$T/ran"
  echo "$stderr"
  assert_failure 75
  alive "$BG_PID"
  [ ! -e "$T/ran" ]
  # the holder's own user may
  in_time run -k h --replace -w 10s -- touch "$T/ran"
  assert_success
  local st=0
  wait "$BG_PID" || st=$?
  [ "$st" -eq 76 ]
  grep -q "replaced by" "$T/holder.err"
}

@test "hostile: nobody's valid far-future min-hold record: -n is 75 saying so, a waiter keeps its -w, status answers; release --force clears it" {
  need_root
  chmod 1777 "$D"
  run -0 "$DLOCK" run -k warm -- true
  as_nobody touch "$D/far"
  planted_policy far 99999999999999 | as_nobody sh -c "cat >'$D/.dlock/far+policy+0123456789abcdef'"
  in_time -v run -n -k far -- touch "$T/ran"
  assert_failure 75
  [[ $stderr == *"--min-hold"* ]]
  in_time run -k far -w 1s -- touch "$T/ran"
  assert_failure 75
  in_time status far --json
  assert_success
  json_ok 'assert d["held"] and d["command_ended"] and d["holder"]["note"] == "planted", d'
  in_time release --force -k far
  assert_success
  no_side_files far
  in_time run -n -k far -- true
  assert_success
  # a planted lock-delay is cleared the same way
  planted_policy far 0 99999999999 | as_nobody sh -c "cat >'$D/.dlock/far+policy+0123456789abcdef'"
  in_time -v run -n -k far -- touch "$T/ran"
  assert_failure 75
  [[ $stderr == *"--lock-delay"* ]]
  in_time release --force -k far
  in_time run -n -k far -- true
  assert_success
  [ ! -e "$T/ran" ]
}

@test "hostile: nobody's directory or FIFO as a policy record or end stamp: ignored, --min-hold and --lock-delay still kept" {
  need_root
  chmod 1777 "$D"
  run -0 "$DLOCK" run -k warm -- true
  as_nobody mkdir "$D/.dlock/dir+policy+0123456789abcdef"
  as_nobody touch "$D/.dlock/dir+policy+0123456789abcdef/x"
  in_time run -n -k dir --min-hold 3s -- true
  assert_success
  in_time run -n -k dir -- touch "$T/ran"
  assert_failure 75
  in_time status dir
  assert_success
  [ ! -e "$T/ran" ]
  # and a lock-delay in the same directory is still kept after kill -9
  start_bg holder "$DLOCK" run -k st --lock-delay 2s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  wait_for "[ -s '$T/cmd.pid' ]" 10
  kill -KILL "$BG_PID" "$(cat "$T/cmd.pid")"
  wait_for "flock -n '$D/st' true" 5
  in_time run -n -k st -- true
  assert_failure 75
  in_time run -k st -w 10s -- true
  assert_success
}

@test "several users in a sticky .dlock: a lock-delay of root's is stamped and honoured by nobody, who may not rewrite it" {
  need_root
  chmod 1777 "$D"
  run -0 "$DLOCK" run -k warm -- true
  as_nobody touch "$D/u"
  chmod 644 "$D/u"
  start_bg holder "$DLOCK" run -k u --lock-delay 3s -- sh -c 'echo $$ >"$T/cmd.pid"; exec sleep 60'
  wait_for "[ -s '$T/cmd.pid' ]" 10
  kill -KILL "$BG_PID" "$(cat "$T/cmd.pid")"
  wait_for "flock -n '$D/u' true" 5
  local first=$(now_ms)
  run --separate-stderr timeout 20 setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$DLOCK" run -n -k u -- true
  [ "$status" -eq 75 ]
  [ -f "$D"/.dlock/u+ended+* ] # root's record could not be rewritten: the end is stamped beside it
  run --separate-stderr timeout 20 setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$DLOCK" run -k u -w 15s -- true
  [ "$status" -eq 0 ]
  local took=$(($(now_ms) - first))
  echo "nobody took it $took ms after its first attempt"
  [ "$took" -ge 2500 ] && [ "$took" -lt 8000 ]
}

@test "several users in a sticky .dlock: nobody's newer --supersede waiter supersedes root's, and root's newer one nobody's" {
  need_root
  chmod 1777 "$D"
  run -0 "$DLOCK" run -k warm -- true
  as_nobody touch "$D/sup"
  chmod 644 "$D/sup"
  start_bg flocker flock -o "$D/sup" sleep 60
  local flocker=$BG_PID
  wait_for "! flock -n '$D/sup' true"
  start_bg first "$DLOCK" -v run -k sup --supersede -w 30s -- true
  local first=$BG_PID
  wait_for "ls '$D'/.dlock/sup+waiter+* >/dev/null 2>&1" 10
  start_bg second setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$DLOCK" run -k sup --supersede -w 30s -- true
  local second=$BG_PID st=0
  wait "$first" || st=$?
  [ "$st" -eq 75 ]
  grep -q superseded "$T/first.err"
  start_bg third "$DLOCK" run -k sup --supersede -w 30s -- touch "$T/ran"
  local third=$BG_PID
  st=0
  wait "$second" || st=$?
  [ "$st" -eq 75 ]
  kill "$flocker"
  wait "$third"
  [ -e "$T/ran" ]
}
