#!/usr/bin/env bats
# --shared and --limit N on etcd://, in the layout of etcd's own recipes: a reader's key is
# dlock:NAME/read/<lease hex> (clientv3's recipes RWMutex puts readers under PFX/read), a
# semaphore's slots are dlock:NAME/<lease hex> keys whose record says "limit:N" (the N oldest
# hold it). `etcdctl lock dlock:NAME` waits for every key under dlock:NAME/, readers included;
# a reader waits for every exclusive key (etcdctl's, dlock's) created before its own.

load ../../lib/helpers
load ../../lib/etcd_helpers

setup_file() { start_etcd; }
teardown_file() { stop_etcd; }
setup() {
  skip_if_file_skipped
  dlock_setup
}
teardown() { dlock_teardown; }

# keys NAME: every key under dlock:NAME/, oldest first, with its value.
keys() {
  ectl get --prefix "dlock:$1/" -w json | python3 -c '
import base64, json, sys
d = json.load(sys.stdin)
for kv in sorted(d.get("kvs", []), key=lambda kv: kv["create_revision"]):
    print(base64.b64decode(kv["key"]).decode(), base64.b64decode(kv.get("value", "")).decode())'
}

# hold_bg NAME KEY RELEASE_FILE [options]: a dlock run holding KEY until RELEASE_FILE exists.
hold_bg() {
  local name=$1 key=$2 file=$3
  shift 3
  start_bg "$name" "$DLOCK" run -k "$key" "$@" -- sh -c 'until [ -e "$0" ]; do sleep 0.02; done' "$file"
}

@test "etcdctl's view: a --shared holder is dlock:NAME/read/<lease hex>, a --limit slot dlock:NAME/<lease hex> saying limit:N" {
  hold_bg r1 kv "$T/release" --shared
  hold_bg r2 kv "$T/release" --shared
  hold_bg s1 sem "$T/release" --limit 3
  started r1 '[ "$(keys kv | wc -l)" = 2 ]'
  started s1 '[ "$(keys sem | wc -l)" = 1 ]'
  run -0 keys kv
  echo "$output"
  [[ ${lines[0]} =~ ^dlock:kv/read/[0-9a-f]+\ \{.*\"kind\":\"shared\" ]]
  [[ ${lines[1]} =~ ^dlock:kv/read/[0-9a-f]+\ \{.*\"kind\":\"shared\" ]]
  run -0 keys sem
  echo "$output"
  [[ $output =~ ^dlock:sem/[0-9a-f]+\ \{.*\"kind\":\"limit:3\" ]]
  # the key is on the holder's lease (etcdctl lease list shows it)
  local lease=${lines[0]%% *}
  lease=${lease##*/}
  run -0 ectl lease timetolive "$(printf '%x' "0x$lease")"
  [[ $output == *"remaining"* ]]
  run -0 "$DLOCK" status kv --json
  echo "$output"
  [[ $output == *'"kind":"shared"'* ]]
  run -0 "$DLOCK" list
  [[ $output == *kv* ]] && [[ $output == *sem* ]] && [[ $output != *kv/read* ]]
  touch "$T/release"
  wait_for '[ -z "$(keys kv)$(keys sem)" ]' 10
}

@test "interop: etcdctl lock holds the name: --shared -n exits 75, a --shared waiter gets it when etcdctl lets go" {
  ectl lock dlock:rw -- sh -c 'echo $$ >"$0"; until [ -e "$1" ]; do sleep 0.02; done; date +%s%3N >"$2"' \
    "$T/ectl.pid" "$T/ectl.release" "$T/ectl.done" >/dev/null 2>&1 3>&- &
  local ectl_pid=$!
  echo "$ectl_pid" >>"$T/bg.pid"
  wait_for "[ -s '$T/ectl.pid' ]" 10
  run -75 --separate-stderr "$DLOCK" -v run -k rw --shared -n -- touch "$T/ran"
  echo "$stderr"
  [ ! -e "$T/ran" ]
  [[ $stderr == *"etcdctl lock"* ]]
  start_bg reader "$DLOCK" run -k rw --shared -w 20s -- sh -c 'date +%s%3N >"$0"' "$T/reader.got"
  local reader=$BG_PID
  wait_for '[ "$(keys rw | wc -l)" = 2 ]' 10
  sleep 0.5
  [ ! -e "$T/reader.got" ]
  touch "$T/ectl.release"
  wait "$ectl_pid"
  wait "$reader"
  echo "the reader got it $(($(cat "$T/reader.got") - $(cat "$T/ectl.done"))) ms after etcdctl's command ended"
  [ "$(cat "$T/reader.got")" -ge "$(cat "$T/ectl.done")" ]
}

@test "interop: dlock --shared holders hold the name: etcdctl lock waits for the last of them" {
  hold_bg r1 rw2 "$T/r1.release" --shared
  local r1=$BG_PID
  started r1 '[ "$(keys rw2 | wc -l)" = 1 ]'
  hold_bg r2 rw2 "$T/r2.release" --shared
  started r2 '[ "$(keys rw2 | wc -l)" = 2 ]'
  local r2=$BG_PID
  ectl lock dlock:rw2 -- sh -c 'date +%s%3N >"$0"' "$T/ectl.got" >/dev/null 2>&1 3>&- &
  local waiter=$!
  echo "$waiter" >>"$T/bg.pid"
  wait_for '[ "$(keys rw2 | wc -l)" = 3 ]' 10
  # a new reader now waits behind etcdctl's waiting key (a writer goes first)
  run -75 "$DLOCK" run -k rw2 --shared -n -- true
  touch "$T/r1.release"
  wait "$r1"
  sleep 0.5
  [ ! -e "$T/ectl.got" ]
  local released=$(now_ms)
  touch "$T/r2.release"
  wait "$r2"
  wait "$waiter"
  [ "$(cat "$T/ectl.got")" -ge "$released" ]
}

@test "a --shared waiter behind an exclusive holder is woken by its release (a watch), not at a poll" {
  hold_bg x wake "$T/release"
  local x=$BG_PID
  started x '[ "$(keys wake | wc -l)" = 1 ]'
  start_bg reader "$DLOCK" run -k wake --shared -w 30s -- sh -c 'date +%s%3N >"$0"' "$T/got"
  local reader=$BG_PID
  start_bg slot "$DLOCK" run -k wake2 --limit 2 -w 30s -- true
  wait_for '[ "$(keys wake | wc -l)" = 2 ]' 10
  local released=$(now_ms)
  touch "$T/release"
  wait "$x"
  wait "$reader"
  local gap=$(($(cat "$T/got") - released))
  echo "the reader started $gap ms after the release was asked"
  [ "$gap" -lt 3000 ] # its waits last 10 s (a third of the TTL): it was woken
}

@test "--limit 2: the third waits, woken by either holder's end; a slot of another N, a shared or an exclusive lock is 64" {
  hold_bg s1 lim "$T/s1.release" --limit 2
  local s1=$BG_PID
  started s1 '[ "$(keys lim | wc -l)" = 1 ]'
  hold_bg s2 lim "$T/s2.release" --limit 2
  started s2 '[ "$(keys lim | wc -l)" = 2 ]'
  run -75 "$DLOCK" run -k lim --limit 2 -n -- true
  run -64 --separate-stderr "$DLOCK" run -k lim --limit 3 -n -- true
  echo "$stderr"
  [[ $stderr == *"semaphore of 2"* ]]
  run -64 "$DLOCK" run -k lim --shared -n -- true
  run -64 "$DLOCK" run -k lim -n -- true
  start_bg third "$DLOCK" run -k lim --limit 2 -w 30s -- sh -c 'date +%s%3N >"$0"' "$T/third.got"
  local third=$BG_PID
  wait_for '[ "$(keys lim | wc -l)" = 3 ]' 10
  # the OLDEST holder ends: the third (watching every earlier key's end) gets its slot
  local released=$(now_ms)
  touch "$T/s1.release"
  wait "$s1"
  wait "$third"
  local gap=$(($(cat "$T/third.got") - released))
  echo "the third started $gap ms after the first holder was told to go"
  [ "$gap" -lt 3000 ]
  touch "$T/s2.release"
  # nothing left: a new kind may use the name
  wait_for '[ -z "$(keys lim)" ]' 10
  run -0 "$DLOCK" run -k lim --shared -n -- true
  # an etcdctl lock holder is exclusive: a semaphore cannot share the name (64)
  ectl lock dlock:lim -- sh -c 'echo $$ >"$0"; until [ -e "$1" ]; do sleep 0.02; done' \
    "$T/ectl.pid" "$T/ectl.release" >/dev/null 2>&1 3>&- &
  local ectl_pid=$!
  echo "$ectl_pid" >>"$T/bg.pid"
  wait_for "[ -s '$T/ectl.pid' ]" 10
  run -64 "$DLOCK" run -k lim --limit 2 -n -- true
  touch "$T/ectl.release"
  wait "$ectl_pid"
}

@test "etcdctl lock waits for the slots of a --limit semaphore" {
  hold_bg s1 lim2 "$T/release" --limit 2
  local s1=$BG_PID
  started s1 '[ "$(keys lim2 | wc -l)" = 1 ]'
  ectl lock dlock:lim2 -- sh -c 'date +%s%3N >"$0"' "$T/ectl.got" >/dev/null 2>&1 3>&- &
  local waiter=$!
  echo "$waiter" >>"$T/bg.pid"
  sleep 1
  [ ! -e "$T/ectl.got" ]
  local released=$(now_ms)
  touch "$T/release"
  wait "$s1"
  wait "$waiter"
  [ "$(cat "$T/ectl.got")" -ge "$released" ]
}

@test "another tenant's junk under the prefix: keys outside the layout and dlock-looking records of another name are passed over" {
  ectl put dlock:junk/read/zz 'not hex' >/dev/null
  ectl put dlock:junk/other 'x' >/dev/null
  ectl put dlock:junk/write/xyz 'x' >/dev/null
  ectl put dlock:junk/sub/1 'x' >/dev/null
  # the exclusive lock of the name junk/read (dlock's record without "kind") is not a reader of
  # junk, and does not block it
  start_bg other "$DLOCK" run -k junk/read -- sleep 30
  wait_for '[ "$(ectl get --prefix dlock:junk/read/ --keys-only | grep -c .)" -ge 2 ]' 10
  run -0 "$DLOCK" run -k junk --shared -n -- true
  run -0 "$DLOCK" run -k junk --limit 2 -n -- true
  run -0 "$DLOCK" run -k junk -n -- true
  run -0 "$DLOCK" list
  echo "$output"
  [[ $output == *junk/read* ]]
  # a record claiming a semaphore with a malformed N is an exclusive key, never a crash
  local lease
  lease=$(ectl lease grant 30 | sed -n 's/^lease \([0-9a-f]*\) granted.*/\1/p')
  ectl put --lease="$lease" "dlock:bad/$lease" '{"host":"h","pid":1,"user":"u","command":"c","acquired_ms":1,"ttl_ms":1,"token":"00","kind":"limit:x"}' >/dev/null
  run -75 "$DLOCK" run -k bad --shared -n -- true
  run -75 "$DLOCK" run -k bad -n -- true
  run -0 "$DLOCK" status bad
  ectl lease revoke "$lease" >/dev/null
  run -0 "$DLOCK" run -k bad --limit 2 -n -- true
}
