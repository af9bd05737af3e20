#!/usr/bin/env bats
# What another tenant of the same Redis can write into dlock's keys (redis-cli, no dlock): an
# oversized holder record, a fencing counter or slot record that is not dlock's, holder text
# made to fool a terminal. dlock reads it bounded and checked: "not a dlock holder" or an
# unknown token, never 70, a crash, a wait past --wait or memory the size of the record.

load ../lib/helpers

# max_rss_kb FILE: the peak memory /usr/bin/time -v wrote to FILE, in KiB.
max_rss_kb() { awk -F': ' '/Maximum resident set size/ { print $2 }' "$1"; }

@test "a 64 MB holder record another tenant wrote: run --wait 2s gives up with 75, status and list show the lock, all in little memory" {
  rcli SET 'dlock:{big}' not-a-dlock-token PX 120000 >/dev/null
  head -c $((64 * 1024 * 1024)) /dev/zero | tr '\0' x | rcli -x HSET 'dlock:{big}:holder' command >/dev/null
  [ "$(rcli HSTRLEN 'dlock:{big}:holder' command)" -eq $((64 * 1024 * 1024)) ]

  local start end
  start=$(now_ms)
  run -75 --separate-stderr /usr/bin/time -v -o "$T/run.time" "$DLOCK" -v run -k big --wait 2s -- true
  end=$(now_ms)
  echo "run took $((end - start)) ms, peak $(max_rss_kb "$T/run.time") KiB; stderr: ${stderr:0:300}"
  [[ $stderr == *"not a dlock holder"* ]]
  # The point: --wait 2s is kept (main took 33 s, reading the record once a second). 15 s
  # leaves room for a loaded machine and is still far from that.
  [ $((end - start)) -lt 15000 ]
  # Main took 1.4 GB; a record is read no larger than a few KiB, so dlock stays small.
  [ "$(max_rss_kb "$T/run.time")" -lt 40000 ]

  run -0 --separate-stderr /usr/bin/time -v -o "$T/status.time" "$DLOCK" status big
  echo "status peak $(max_rss_kb "$T/status.time") KiB"
  assert_line --regexp '^state: +held$'
  assert_line --regexp '^command: +\(not a dlock holder\)$'
  [ "$(max_rss_kb "$T/status.time")" -lt 40000 ]

  run -0 --separate-stderr /usr/bin/time -v -o "$T/list.time" "$DLOCK" list
  assert_line --regexp '^big +.*\(not a dlock holder\)$'
  [ "$(max_rss_kb "$T/list.time")" -lt 40000 ]
}

@test "a fencing counter that is not a number: status shows the token unknown, list shows the other locks, run still takes the lock" {
  start_bg good "$DLOCK" run -k good -t 20s -- sleep 30
  wait_for '[ "$(rcli EXISTS "dlock:{good}")" = 1 ]' 10
  rcli SET 'dlock:{bad}' not-a-dlock-token PX 120000 >/dev/null
  rcli SET 'dlock:{bad}:fence' 'not a number' >/dev/null

  run -0 --separate-stderr "$DLOCK" status bad --json
  json_ok 'assert d["held"] is True and d["last_fencing_token"] is None, d'
  run -0 --separate-stderr "$DLOCK" list
  [ -z "$stderr" ]
  assert_line --regexp '^bad '
  assert_line --regexp "^good +$(id -un)@"
  run -0 --separate-stderr "$DLOCK" list --json
  json_ok 'assert sorted(l["key"] for l in d["locks"]) == ["bad", "good"], d'

  # Free, with a counter of another type or out of range: taken, the counter restarted.
  rcli DEL 'dlock:{bad}' >/dev/null
  run -1 --separate-stderr "$DLOCK" status bad
  assert_line --regexp '^last fencing: +unknown$'
  run -0 --separate-stderr "$DLOCK" run -k bad -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  [[ $output =~ ^[0-9]+$ ]] && [ "$output" -gt 1000000 ]
  rcli DEL 'dlock:{bad}:fence' >/dev/null
  rcli HSET 'dlock:{bad}:fence' x y >/dev/null
  run -0 "$DLOCK" run -k bad -- true
  rcli SET 'dlock:{bad}:fence' -42 >/dev/null
  run -0 "$DLOCK" run -k bad -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
  [ "$output" -gt 1000000 ]
}

@test "a slot record that is not dlock's JSON: status and list show a holder they cannot name" {
  local until=$(( $(rcli TIME | head -1) * 1000 + 120000 ))
  rcli SET 'dlock:{slots}:kind' shared >/dev/null
  rcli ZADD 'dlock:{slots}:holders' "$until" tok1 "$until" tok2 >/dev/null
  rcli HSET 'dlock:{slots}:slots' tok1 '{not json' tok2 '[1,2,{"a":3}]' >/dev/null
  rcli PEXPIRE 'dlock:{slots}:holders' 120000 >/dev/null

  run -0 --separate-stderr "$DLOCK" status slots
  [ -z "$stderr" ]
  assert_line --regexp '^state: +held shared by 2$'
  assert_line --partial '(not a dlock holder)'
  run -0 --separate-stderr "$DLOCK" list
  assert_line --regexp '^slots '
  run -75 --separate-stderr "$DLOCK" -v run -k slots -n -- true
}

@test "a kind key that is not dlock's (a 64 MB string, a hash) beside live slot holders: run waits and gives up with 75, status and list answer" {
  start_bg holder "$DLOCK" run -k kinds --limit 2 -- sleep 60
  wait_for "[ \"\$(rcli ZCARD 'dlock:{kinds}:holders')\" = 1 ]"
  head -c $((64 * 1024 * 1024)) /dev/zero | tr '\0' x | rcli -x SET 'dlock:{kinds}:kind' >/dev/null
  run -75 --separate-stderr /usr/bin/time -v -o "$T/run.time" "$DLOCK" -v run -k kinds --limit 2 -w 1s -- true
  [[ $stderr == *"not a dlock holder"* ]]
  # never read whole: a few MB, not 64
  [ "$(max_rss_kb "$T/run.time")" -lt 40000 ]
  run -0 --separate-stderr "$DLOCK" status kinds
  run -0 --separate-stderr "$DLOCK" list
  assert_line --regexp '^kinds '
  rcli DEL 'dlock:{kinds}:kind' >/dev/null
  rcli HSET 'dlock:{kinds}:kind' a b >/dev/null
  run -75 --separate-stderr "$DLOCK" run -k kinds --shared -n -- true
  run -0 --separate-stderr "$DLOCK" status kinds
}

@test "holder text with C1 controls and bidi characters written by redis-cli is escaped in status, list and the conflict line" {
  rcli SET 'dlock:{evil}' not-a-dlock-token PX 120000 >/dev/null
  rcli HSET 'dlock:{evil}:holder' host $'h\xc2\x9b2J' user $'u\xe2\x80\xaeoot' pid 7 \
    command $'c\xc2\x85x\xe2\x81\xa6y\xe2\x80\x8bz' >/dev/null

  run -0 --separate-stderr "$DLOCK" status evil
  assert_line --regexp '^holder: +u\\u202eoot@h\\u009b2J pid 7$'
  assert_line --regexp '^command: +c\\u0085x\\u2066y\\u200bz$'
  local shown=$output
  run -0 --separate-stderr "$DLOCK" list
  assert_line --regexp '^evil +u\\u202eoot@h\\u009b2J +7 .*c\\u0085x\\u2066y\\u200bz$'
  shown+=$output
  run -75 --separate-stderr "$DLOCK" -v run -k evil -n -- true
  [[ $stderr == *'u\u202eoot@h\u009b2J pid 7 (c\u0085x\u2066y\u200bz)'* ]]
  # None of those characters reaches the terminal as it is.
  for text in "$shown" "$stderr"; do
    if printf '%s' "$text" | LC_ALL=C.UTF-8 grep -qP '[\x{80}-\x{9f}\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}]'; then
      echo "raw: $text"
      return 1
    fi
  done
}

@test "history: a key of another type gives no events and is left alone; another tenant's entries (64 MB, other fields) are left out; the stream keeps exactly 100 and expires in 7 days" {
  rcli SET 'dlock:{hwrong}:history' not-a-stream >/dev/null
  run -0 "$DLOCK" run -k hwrong -- true
  run -0 --separate-stderr "$DLOCK" -v history hwrong
  [ -z "$output" ]
  [[ $stderr == *"is a string, not dlock's history"* ]]
  [ "$(rcli GET 'dlock:{hwrong}:history')" = not-a-stream ]

  local key='dlock:{hcap}:history'
  rcli EVAL "for i = 1, 150 do redis.call('XADD', KEYS[1], '*', 'e', 'not-dlock-' .. i) end" 1 "$key" >/dev/null
  head -c $((64 * 1024 * 1024)) /dev/zero | tr '\0' x | rcli -x XADD "$key" '*' e >/dev/null
  rcli XADD "$key" '*' other field >/dev/null
  run -0 "$DLOCK" run -k hcap -- true
  [ "$(rcli XLEN "$key")" -eq 100 ] # MAXLEN exact: 153 became 100
  local ttl
  ttl=$(rcli PTTL "$key")
  [ "$ttl" -gt $((7 * 86400000 - 600000)) ] && [ "$ttl" -le $((7 * 86400000)) ]
  run -0 --separate-stderr /usr/bin/time -v -o "$T/history.time" "$DLOCK" history --json --limit 100 hcap
  echo "$output; peak $(max_rss_kb "$T/history.time") KiB"
  [ "$(jq -r '[.events[].event] | join(",")' <<<"$output")" = released,acquired ]
  [ "$(max_rss_kb "$T/history.time")" -lt 40000 ]
}
