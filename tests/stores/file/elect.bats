#!/usr/bin/env bats
# dlock elect and dlock leader on the file:// store, what only it has: a directory every user
# may write (mode 1777, root's, as /run/lock), root's candidates and nobody as the neighbour who
# reads the leadership (dlock leader, --watch) and plants junk, FIFOs and symlinks where the
# holder records live; and flock(1) on the same lock file, a holder that is not dlock. (The
# three candidates, the fail-over and the --watch lines are store.bats' shared scenarios. No
# partition test here: file:// is one host.)
#
# Bounds: every dlock that could hang runs under `timeout -k 5 20`; a status of 124 is the hang.
# Waits for a change are bounded generously (a loaded machine); what is checked is the order.

load ../../lib/helpers

setup_file() { :; }
teardown_file() { :; }
setup() {
  dlock_setup
  need_root
  S=$(mktemp -d /dev/shm/dlock-elect.XXXXXX)
  echo "$S" >>"$T/nobody.dirs" # removed by the teardown
  chmod 1777 "$S"
  export DLOCK_URL=file://$S
  run -0 "$DLOCK" run -k warm -- true # makes .dlock, sticky as the directory
  [ "$(stat -c %a "$S/.dlock")" = 1777 ]
}
teardown() { dlock_teardown; }

# in_time COMMAND...: dlock's COMMAND as root under timeout 20 (bats' run: $status, $output).
in_time() { run timeout -k 5 20 "$DLOCK" "$@"; }
# nobody_in_time COMMAND...: the same as nobody.
nobody_in_time() { run as_nobody timeout -k 5 20 "$DLOCK" "$@"; }

# elect NAME VALUE [COMMAND...]: root's background candidate (start_bg NAME), its command
# `sleep 60` unless given; returns once it leads.
elect() {
  local name=$1 value=$2
  shift 2
  [ $# -gt 0 ] || set -- sleep 60
  start_bg "$name" "$DLOCK" elect -k svc --value "$value" -- "$@"
  started "$name" "'$DLOCK' status svc >/dev/null"
}

# nobody_holds FILE: nobody keeps an exclusive flock on FILE, in one process (BG_PID), from
# when this returns.
nobody_holds() {
  start_bg nobody setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
    sh -c 'exec 9<"$0" && flock 9 && echo locked && exec sleep 60' "$1"
  wait_for "grep -q locked '$T/nobody.out'"
}

# record VALUE [NAME]: a holder record as dlock writes it (dlock1, 14 fields), for the lock svc.
record() {
  printf 'dlock1\t%s\texclusive\t-1\t1\troot\th\t1\t1700000000000\t%s\t30000\tsleep\t\t%s\n' \
    "${2:-svc}" 99999999999999999 "$1"
}

@test "nobody's dlock leader reads root's leader and its value; free again once it ends" {
  elect candidate "10.0.0.7:8080 v2"
  nobody_in_time leader svc
  assert_success
  assert_output --partial "10.0.0.7:8080 v2"
  nobody_in_time leader svc --json
  assert_success
  python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert "10.0.0.7:8080 v2" in json.dumps(d)' "$output"
  # the record keeps it (mode 0644: every user reads it; 0600 while it was being written)
  run -0 grep -l "10.0.0.7:8080 v2" "$S"/.dlock/svc+by+*
  kill -TERM "$BG_PID"
  wait "$BG_PID" || true
  nobody_in_time leader svc
  assert_failure 1
}

@test "nobody's leader --watch sees root's leaders come and go, and root's is not made to hang by nobody's FIFOs, symlinks and junk" {
  # what nobody plants where the records live: a FIFO, a symlink to a live record of root's
  # outside the directory (if followed, its value would show), junk, an oversized record, a
  # value over its cap, and a well-formed record that names root as its holder, all kept locked
  # as a live holder keeps its record
  as_nobody mkfifo "$S/.dlock/svc+by+0123456789abcdef" "$S/.dlock/svc+new+0123456789abcdef" \
    "$S/svc+slot.0"
  record "FROM-THE-SYMLINK" >"$T/outside"
  start_bg outside sh -c 'exec 9<"$0" && flock -s 9 && exec sleep 60' "$T/outside"
  as_nobody ln -s "$T/outside" "$S/.dlock/svc+by+1111111111111111"
  as_nobody sh -c 'head -c 100000 /dev/zero | tr "\0" x >"$0"' "$S/.dlock/svc+by+2222222222222222"
  as_nobody sh -c 'printf "dlock1\tsvc\tgarbage\n" >"$0"' "$S/.dlock/svc+by+3333333333333333"
  record "$(head -c 300 /dev/zero | tr '\0' v)" >"$T/long"
  as_nobody sh -c 'cat >"$0"' "$S/.dlock/svc+by+4444444444444444" <"$T/long"
  record "FORGED-ROOT" >"$T/forged"
  as_nobody sh -c 'cat >"$0"' "$S/.dlock/svc+by+5555555555555555" <"$T/forged"
  for f in 2222222222222222 3333333333333333 4444444444444444 5555555555555555; do
    rm -f "$T/nobody.out"
    nobody_holds "$S/.dlock/svc+by+$f"
  done
  # none of them is a leader: free (1), no crash, no hang
  in_time leader svc
  assert_failure 1
  nobody_in_time leader svc --json
  assert_failure 1

  start_bg root_watch timeout -k 5 60 "$DLOCK" leader svc --watch
  local root_watch=$BG_PID
  start_bg nobody_watch as_nobody timeout -k 5 60 "$DLOCK" leader svc --watch
  local nobody_watch=$BG_PID
  sleep 0.5 # both watching (a leader before that is their first line anyway)
  elect first "value-one"
  local first=$BG_PID
  wait_for "grep -q value-one '$T/root_watch.out' && grep -q value-one '$T/nobody_watch.out'" 20
  kill -TERM "$first"
  wait "$first" || true
  elect second "value-two"
  wait_for "grep -q value-two '$T/root_watch.out' && grep -q value-two '$T/nobody_watch.out'" 20
  # in that order, each once, and nothing of the planted files
  for w in root_watch nobody_watch; do
    [ "$(grep -c value-one "$T/$w.out")" -eq 1 ]
    [ "$(grep -c value-two "$T/$w.out")" -eq 1 ]
    [ "$(grep -n value-one "$T/$w.out" | cut -d: -f1)" -lt "$(grep -n value-two "$T/$w.out" | cut -d: -f1)" ]
    run ! grep -q -e FROM-THE-SYMLINK -e vvvvvvvv -e FORGED-ROOT "$T/$w.out"
  done
  alive "$root_watch" && alive "$nobody_watch"
  [ -p "$S/.dlock/svc+by+0123456789abcdef" ] && [ -L "$S/.dlock/svc+by+1111111111111111" ]
}

@test "flock(1) on the lock file: leader shows a holder that is not dlock (0), elect waits until flock exits, --watch shows no holder in between" {
  touch "$S/svc"
  mkfifo "$T/go"
  start_bg flock flock "$S/svc" sh -c 'echo locked; read -r _ <"$0"; date +%s%N >"$1"' "$T/go" "$T/flock.end"
  local flock=$BG_PID
  wait_for "grep -q locked '$T/flock.out'"
  # held (0) by flock(1)'s process, with no value and no term: not a dlock holder
  in_time leader svc
  assert_success
  assert_output "- (root@$(hostname) pid $flock)"
  nobody_in_time leader svc --json
  assert_success
  python3 - "$output" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["leader"] is True and d["value"] == "" and d["term"] is None and d["since"] is None, d
assert d["holder"]["command"] == "flock", d
PY
  start_bg watch timeout -k 5 60 "$DLOCK" leader svc --watch
  local watch=$BG_PID
  wait_for "grep -q 'pid $flock' '$T/watch.out'"
  start_bg candidate "$DLOCK" elect -k svc --value after-flock -- sh -c 'date +%s%N >"$0"; exec sleep 60' "$T/elect.start"
  local candidate=$BG_PID
  sleep 1
  [ ! -e "$T/elect.start" ] # still waiting
  alive "$candidate"
  echo go >"$T/go"
  wait "$flock"
  started candidate "[ -s '$T/elect.start' ]" "$candidate" 20
  # the candidate's command started after flock's command ended
  [ "$(cat "$T/elect.start")" -ge "$(cat "$T/flock.end")" ]
  in_time leader svc
  assert_success
  assert_output --regexp "^after-flock \\(root@.* pid $candidate, since .*, term [0-9]+\\)$"
  # the watcher: flock's holder, then the candidate, and no one between (the candidate's flock
  # before its record is not a leader of its own)
  wait_for "grep -q '^after-flock ' '$T/watch.out'" 20
  cat "$T/watch.out"
  [ "$(grep -c . "$T/watch.out")" -le 3 ]
  [ "$(head -n1 "$T/watch.out")" = "- (root@$(hostname) pid $flock)" ]
  run ! grep -v -e '^no leader$' -e "pid $flock)\$" -e '^after-flock ' "$T/watch.out"
  alive "$watch"
}
