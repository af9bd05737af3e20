#!/usr/bin/env bats
# Redis Sentinel: with a redis-sentinel://HOST:PORT,...#MASTER URL, dlock asks the Sentinels in
# turn for the master (SENTINEL GET-MASTER-ADDR-BY-NAME), checks that it is one (ROLE), and
# takes, renews and releases the lock there. A group of this file's own (a master, a replica,
# three Sentinels: sentinel_helpers.bash) serves every test but the password test, which
# starts its own; failovers are in sentinel_failover.bats.

load ../lib/sentinel_helpers

setup_file() { start_sentinel_group; }
teardown_file() { stop_sentinel_group; }
setup() {
  dlock_setup
  unset DLOCK_URL DLOCK_PASSWORD DLOCK_SENTINEL_PASSWORD
  mcli flushall >/dev/null
}
teardown() {
  # the masters a test adds to the first Sentinel, even if it failed half-way
  scli "${SENTINEL_PORTS%% *}" sentinel remove deadmaster >/dev/null 2>&1 || true
  scli "${SENTINEL_PORTS%% *}" sentinel remove notmaster >/dev/null 2>&1 || true
  dlock_teardown
}

# The holder's command for these tests: writes its DLOCK_TOKEN to $T/token, then waits until
# $T/stop exists.
HOLD_CMD='echo "$DLOCK_TOKEN" >"$0.tmp"; mv "$0.tmp" "$0"; until [ -e "$1" ]; do sleep 0.02; done'

# hold_via URL NAME [run options...]: a background dlock -u URL run -k NAME holding until
# $T/stop exists (start_bg hold: BG_PID); returns once the master has the lock.
hold_via() {
  local url=$1 name=$2
  shift 2
  start_bg hold "$DLOCK" -u "$url" run -k "$name" "$@" -- sh -c "$HOLD_CMD" "$T/token" "$T/stop"
  wait_for "[ -s '$T/token' ] && master_key_exists '$name'" 10 ||
    fail "the holder did not get the lock: $(cat "$T/hold.err")"
}

@test "run through Sentinel: the lock is on the master while the command runs, renewed, released" {
  # The command sees its lock on the master (the token is the key's value) and passes its
  # status through.
  run -7 --separate-stderr "$DLOCK" -u "$SENTINEL_URL" run -k s1 -t 3s -- sh -c '
    redis-cli -p "$1" get "dlock:{s1}" >"$2"; echo "$DLOCK_TOKEN" >"$3"; echo ran; exit 7' \
    sh "$MASTER_PORT" "$T/seen" "$T/token"
  assert_output ran
  [ -z "$stderr" ] || fail "stderr: $stderr"
  [[ $(cat "$T/token") =~ ^[0-9a-f]{32}$ ]]
  [ "$(cat "$T/seen")" = "$(cat "$T/token")" ] || fail "the master has '$(cat "$T/seen")'"
  refute master_key_exists s1
  # The release reached the replica too.
  wait_for "! node_key_exists $REPLICA_PORT s1"

  # A command that outlives its ttl (1s, renewed every ~333ms) still holds the lock at the end.
  run -0 "$DLOCK" -u "$SENTINEL_URL" run -k s1 -t 1s -- sh -c '
    sleep 2.5; [ "$(redis-cli -p "$1" get "dlock:{s1}")" = "$DLOCK_TOKEN" ]' sh "$MASTER_PORT"
  refute master_key_exists s1

  # DLOCK_URL works like -u.
  DLOCK_URL=$SENTINEL_URL run -0 "$DLOCK" run -k s1 -- sh -c '
    [ "$(redis-cli -p "$1" get "dlock:{s1}")" = "$DLOCK_TOKEN" ] && echo on-master' sh "$MASTER_PORT"
  assert_output on-master
  # Their history is on the master, read through Sentinel: three runs, newest first.
  [ "$(redis-cli -p "$MASTER_PORT" xlen "dlock:{s1}:history")" -eq 6 ]
  run -0 --separate-stderr "$DLOCK" -u "$SENTINEL_URL" history --json s1
  [ "$(jq -r '[.events[] | .event + ":" + (.exit_status | tostring)] | join(",")' <<<"$output")" = released:0,acquired:null,released:0,acquired:null,released:7,acquired:null ]
}

@test "acquire, renew, release, status and list through Sentinel" {
  run -0 --separate-stderr "$DLOCK" -u "$SENTINEL_URL" acquire -k s2 -t 4s
  [ -z "$stderr" ] || fail "stderr: $stderr"
  [[ $output =~ ^[0-9a-f]{32}$ ]]
  local tok=$output
  run -0 mcli get 'dlock:{s2}'
  assert_output "$tok"

  run -0 "$DLOCK" -u "$SENTINEL_URL" status s2
  assert_line --regexp '^lock: +s2$'
  assert_line --regexp '^state: +held$'
  run -0 "$DLOCK" -u "$SENTINEL_URL" status s2 --json
  json_ok 'assert d["key"] == "s2", d
held_status(d)
assert 0 < d["ttl_ms"] <= 4000, d'
  run -0 "$DLOCK" -u "$SENTINEL_URL" list --json
  json_ok 'assert [s["key"] for s in d["locks"]] == ["s2"], d'
  run -0 "$DLOCK" -u "$SENTINEL_URL" list
  [ "$(printf '%s\n' "$output" | awk 'NR > 1 { print $1 }')" = s2 ]

  # renew: the master's PTTL goes up to the new ttl; a wrong token renews nothing.
  run -0 "$DLOCK" -u "$SENTINEL_URL" renew -k s2 --token "$tok" --ttl 10s
  run -0 mcli pttl 'dlock:{s2}'
  [ "$output" -gt 9000 ] && [ "$output" -le 10000 ] || fail "pttl $output after renew --ttl 10s"
  run -76 "$DLOCK" -u "$SENTINEL_URL" renew -k s2 --token 0123456789abcdef0123456789abcdef
  run -76 "$DLOCK" -u "$SENTINEL_URL" release -k s2 --token 0123456789abcdef0123456789abcdef
  run -0 mcli get 'dlock:{s2}'
  assert_output "$tok"

  # release: gone from the master; free for status; a second release is 76.
  run -0 --separate-stderr "$DLOCK" -u "$SENTINEL_URL" release -k s2 --token "$tok"
  [ -z "$output$stderr" ] || fail "release printed: $output $stderr"
  refute master_key_exists s2
  run -1 "$DLOCK" -u "$SENTINEL_URL" status s2
  run -1 "$DLOCK" -u "$SENTINEL_URL" status s2 --json
  json_ok 'assert d["held"] is False and d["holder"] is None, d'
  run -76 "$DLOCK" -u "$SENTINEL_URL" release -k s2 --token "$tok"
  run -0 "$DLOCK" -u "$SENTINEL_URL" list --json
  json_ok 'assert d["locks"] == [], d'
}

@test "wait, barrier and latch through Sentinel: their keys are on the master" {
  "$DLOCK" -u "$SENTINEL_URL" barrier -k meet --parties 2 -w 20s 3>&- &
  local party=$!
  run -0 "$DLOCK" -u "$SENTINEL_URL" barrier -k meet --parties 2 -w 20s
  wait "$party" || fail "the other party did not pass the barrier"
  run -0 mcli exists 'dlock:{meet}:barrier'
  assert_output 1
  run -0 "$DLOCK" -u "$SENTINEL_URL" latch -k fan --count 1
  run -0 mcli get 'dlock:{fan}:latch'
  assert_output 1
  "$DLOCK" -u "$SENTINEL_URL" latch -k fan --wait 20s 3>&- &
  local waiter=$!
  run -0 "$DLOCK" -u "$SENTINEL_URL" latch -k fan --down
  wait "$waiter" || fail "the latch waiter did not return 0"
  "$DLOCK" -u "$SENTINEL_URL" run -k busy -- sleep 1 3>&- &
  local holder=$!
  wait_for "master_key_exists busy"
  run -0 "$DLOCK" -u "$SENTINEL_URL" wait -k busy -w 20s
  refute master_key_exists busy
  wait "$holder"
}

@test "a second run with -n while the first holds through Sentinel: 75, the command does not run" {
  hold_via "$SENTINEL_URL" s3 -t 3s
  local holder=$BG_PID
  run -75 "$DLOCK" -u "$SENTINEL_URL" run -k s3 -n -- touch "$T/second-ran"
  [ ! -e "$T/second-ran" ]
  # The same lock for a client that goes to the master directly.
  run -75 "$DLOCK" -u "redis://127.0.0.1:$MASTER_PORT" run -k s3 -n -- touch "$T/second-ran"
  [ ! -e "$T/second-ran" ]
  run -75 "$DLOCK" -u "$SENTINEL_URL" acquire -k s3 -t 5s -n
  run -0 mcli get 'dlock:{s3}'
  assert_output "$(cat "$T/token")"

  touch "$T/stop"
  local st=0
  wait "$holder" || st=$?
  [ "$st" = 0 ] || fail "the holder exited $st: $(cat "$T/hold.err")"
  refute master_key_exists s3
  run -0 "$DLOCK" -u "$SENTINEL_URL" run -k s3 -n -- echo second
  assert_output second
}

@test "Sentinels that are down or silent are skipped: the next one in the URL answers" {
  # The first address refuses connections.
  local url="redis-sentinel://127.0.0.1:$CLOSED_PORT,$SENTINEL_ADDRS#$SENTINEL_MASTER"
  run -0 "$DLOCK" -u "$url" run -k s4 -- sh -c '
    [ "$(redis-cli -p "$1" get "dlock:{s4}")" = "$DLOCK_TOKEN" ] && echo on-master' sh "$MASTER_PORT"
  assert_output on-master
  refute master_key_exists s4

  # Only the last of three answers.
  url="redis-sentinel://127.0.0.1:$CLOSED_PORT,127.0.0.1:$(free_port),127.0.0.1:${SENTINEL_PORTS##* }#$SENTINEL_MASTER"
  run -0 "$DLOCK" -u "$url" acquire -k s4 -t 10s
  local tok=$output
  run -0 mcli get 'dlock:{s4}'
  assert_output "$tok"
  run -0 "$DLOCK" -u "$url" status s4
  run -0 "$DLOCK" -u "$url" release -k s4 --token "$tok"
  refute master_key_exists s4

  # The first accepts the connection but never answers: given up after --connect-timeout.
  start_bg silent python3 -c '
import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
time.sleep(600)'
  wait_for "[ -s '$T/silent.out' ]"
  url="redis-sentinel://127.0.0.1:$(cat "$T/silent.out"),$SENTINEL_ADDRS#$SENTINEL_MASTER"
  local start
  start=$(now_ms)
  run -0 "$DLOCK" --connect-timeout 500ms -u "$url" run -k s4 -- sh -c '
    [ "$(redis-cli -p "$1" get "dlock:{s4}")" = "$DLOCK_TOKEN" ] && echo on-master' sh "$MASTER_PORT"
  assert_output on-master
  [ $(($(now_ms) - start)) -lt 5000 ] || fail "took $(($(now_ms) - start)) ms"
}

@test "no master to be had: unknown master name, every Sentinel down, master down or not a master: 69" {
  # A master name the Sentinels do not monitor: 69, naming it.
  run -69 --separate-stderr "$DLOCK" -u "redis-sentinel://$SENTINEL_ADDRS#nosuch" run -k s5 -- touch "$T/ran"
  [[ $stderr == *nosuch* ]] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ]
  run -69 "$DLOCK" -u "redis-sentinel://$SENTINEL_ADDRS#nosuch" acquire -k s5 -t 5s
  run -69 "$DLOCK" -u "redis-sentinel://$SENTINEL_ADDRS#nosuch" status s5

  # No Sentinel answers.
  local none
  none="redis-sentinel://127.0.0.1:$CLOSED_PORT,127.0.0.1:$(free_port)#$SENTINEL_MASTER"
  run -69 --separate-stderr "$DLOCK" -u "$none" run -k s5 -- touch "$T/ran"
  [[ $stderr == dlock:* ]] || fail "stderr: $stderr"
  [ ! -e "$T/ran" ]
  run -69 "$DLOCK" -u "$none" acquire -k s5 -t 5s
  run -69 "$DLOCK" -u "$none" status s5
  run -69 "$DLOCK" -u "$none" list

  # The Sentinel names a master that is down, or a node that is a replica (ROLE): nothing is
  # locked there. (Masters added to the first Sentinel alone, for this test only: the
  # teardown removes them.)
  local s1=${SENTINEL_PORTS%% *}
  scli "$s1" sentinel monitor deadmaster 127.0.0.1 "$CLOSED_PORT" 2 >/dev/null
  scli "$s1" sentinel monitor notmaster 127.0.0.1 "$REPLICA_PORT" 2 >/dev/null
  run -0 scli "$s1" sentinel get-master-addr-by-name notmaster
  assert_line "$REPLICA_PORT"
  run -69 --separate-stderr "$DLOCK" -u "redis-sentinel://127.0.0.1:$s1#deadmaster" run -k s5 -- touch "$T/ran"
  [[ $stderr == *deadmaster* ]] || fail "stderr: $stderr"
  run -69 --separate-stderr "$DLOCK" -u "redis-sentinel://127.0.0.1:$s1#notmaster" run -k s5 -- touch "$T/ran"
  [[ $stderr == *notmaster* ]] || fail "stderr: $stderr"
  run -69 "$DLOCK" -u "redis-sentinel://127.0.0.1:$s1#notmaster" acquire -k s5 -t 5s
  [ ! -e "$T/ran" ]
  refute master_key_exists s5
  refute node_key_exists "$REPLICA_PORT" s5
}

@test "a redis-sentinel:// URL without a master name is a usage error (64)" {
  run -64 --separate-stderr "$DLOCK" -u "redis-sentinel://$SENTINEL_ADDRS" run -k s6 -- touch "$T/ran"
  [[ $stderr == dlock:* ]] || fail "stderr: $stderr"
  [ -z "$output" ]
  run -64 "$DLOCK" -u "redis-sentinel://$SENTINEL_ADDRS#" run -k s6 -- touch "$T/ran"
  DLOCK_URL="redis-sentinel://$SENTINEL_ADDRS" run -64 "$DLOCK" run -k s6 -- touch "$T/ran"
  run -64 "$DLOCK" -u "redis-sentinel://$SENTINEL_ADDRS" acquire -k s6 -t 5s
  run -64 "$DLOCK" -u "redis-sentinel://$SENTINEL_ADDRS" status s6
  [ ! -e "$T/ran" ]
  refute master_key_exists s6
}

# Passwords of the password test; none may appear in dlock's output.
SENTINEL_PW=sentinel-Secret-4b1e   # the Sentinels' own (requirepass in their config)
DATA_PW=data-Secret-8d27           # the master's and the replica's
WRONG_PW=wrong-Secret-e530

# dl_pw STATUS DLOCK-ARGS...: runs dlock expecting STATUS, stderr in $stderr, and checks that
# no password of this file shows in its output.
dl_pw() {
  local expect=$1 pw
  shift
  run "-$expect" --separate-stderr "$DLOCK" "$@"
  for pw in "$SENTINEL_PW" "$DATA_PW" "$WRONG_PW"; do
    [[ "$output$stderr" != *"$pw"* ]] || fail "password '$pw' leaked: $output $stderr"
  done
}

@test "Sentinels with a password of their own: DLOCK_SENTINEL_PASSWORD or --sentinel-password-file; 77 without" {
  start_sentinel_group --sentinel-password "$SENTINEL_PW" --data-password "$DATA_PW"
  # The URL's password is the data nodes', not the Sentinels'.
  local url="redis-sentinel://:$DATA_PW@$SENTINEL_ADDRS#$SENTINEL_MASTER"
  local check='[ "$(redis-cli -p "$1" --no-auth-warning -a "$2" get "dlock:{s7}")" = "$DLOCK_TOKEN" ] && echo on-master'
  printf '%s\n' "$SENTINEL_PW" >"$T/sentinel.pw"
  printf '%s\n' "$WRONG_PW" >"$T/wrong.pw"

  DLOCK_SENTINEL_PASSWORD=$SENTINEL_PW dl_pw 0 -u "$url" run -k s7 -- sh -c "$check" sh "$MASTER_PORT" "$DATA_PW"
  assert_output on-master
  dl_pw 0 --sentinel-password-file "$T/sentinel.pw" -u "$url" run -k s7 -- sh -c "$check" sh "$MASTER_PORT" "$DATA_PW"
  assert_output on-master
  # The data nodes' password from DLOCK_PASSWORD instead of the URL.
  DLOCK_PASSWORD=$DATA_PW DLOCK_SENTINEL_PASSWORD=$SENTINEL_PW \
    dl_pw 0 -u "$SENTINEL_URL" run -k s7 -- sh -c "$check" sh "$MASTER_PORT" "$DATA_PW"
  assert_output on-master
  DLOCK_SENTINEL_PASSWORD=$SENTINEL_PW dl_pw 0 -u "$url" acquire -k s7 -t 10s
  local tok=$output
  run -0 ncli "$MASTER_PORT" get 'dlock:{s7}'
  assert_output "$tok"
  DLOCK_SENTINEL_PASSWORD=$SENTINEL_PW dl_pw 0 -u "$url" status s7
  DLOCK_SENTINEL_PASSWORD=$SENTINEL_PW dl_pw 0 -u "$url" release -k s7 --token "$tok"

  # No password for the Sentinels: 77, pointing at --sentinel-password-file.
  dl_pw 77 -u "$url" run -k s7 -- touch "$T/ran"
  [[ $stderr == *--sentinel-password-file* ]] || fail "stderr: $stderr"
  dl_pw 77 -u "$url" status s7
  # The data nodes' password is not the Sentinels'.
  DLOCK_SENTINEL_PASSWORD=$DATA_PW dl_pw 77 -u "$url" run -k s7 -- touch "$T/ran"
  dl_pw 77 --sentinel-password-file "$T/wrong.pw" -u "$url" run -k s7 -- touch "$T/ran"
  # The Sentinels' password is not the data nodes': none, or a wrong one, for the master.
  DLOCK_SENTINEL_PASSWORD=$SENTINEL_PW dl_pw 77 -u "$SENTINEL_URL" run -k s7 -- touch "$T/ran"
  DLOCK_SENTINEL_PASSWORD=$SENTINEL_PW \
    dl_pw 77 -u "redis-sentinel://:$WRONG_PW@$SENTINEL_ADDRS#$SENTINEL_MASTER" run -k s7 -- touch "$T/ran"
  # An unreadable password file: 78.
  dl_pw 78 --sentinel-password-file "$T/no-such.pw" -u "$url" run -k s7 -- touch "$T/ran"
  [ ! -e "$T/ran" ]
  [ "$(ncli "$MASTER_PORT" exists 'dlock:{s7}')" = 0 ]
}
