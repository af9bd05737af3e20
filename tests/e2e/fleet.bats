#!/usr/bin/env bats
# Running dlock in a fleet: defaults from config files (the system's, the user's, or the one
# --config names; command line > environment > user file > system file), the environment for
# every global option, --syslog (one structured line per event, captured from a test syslog
# socket mounted over /dev/log in a mount namespace), and --metrics-dir (Prometheus text
# files, parsed with the Prometheus project's own Python parser).

load ../lib/helpers

PW=fleet-secret-3e1a

setup_file() {
  export REDIS_AUTH=$PW
  start_redis --requirepass "$PW"
}

setup() {
  dlock_setup
  # Nothing from the machine running the tests: this test's files only.
  unset DLOCK_URL DLOCK_PASSWORD DLOCK_PASSWORD_FILE DLOCK_PREFIX DLOCK_CONFIG
  export DLOCK_SYSTEM_CONFIG=$T/etc/dlock.conf XDG_CONFIG_HOME=$T/home/.config
  mkdir -p "$T/etc" "$T/home/.config/dlock"
  USER_CONF=$T/home/.config/dlock/dlock.conf
  SYSTEM_CONF=$T/etc/dlock.conf
  printf '%s\n' "$PW" >"$T/password"
  chmod 600 "$T/password"
  URL=unix://$REDIS_SOCK
}

# fence_under PREFIX KEY: whether a lock KEY was taken under PREFIX (its fencing counter stays).
fence_under() { [ "$(rcli exists "$1{$2}:fence")" = 1 ]; }

# ---------------------------------------------------------------------------------------------
# config files

@test "a config file sets the URL and the password file; a cron-style run -n finds them" {
  cat >"$SYSTEM_CONF" <<CONF
# /etc/dlock/dlock.conf
url = "$URL"          # the lock server
password-file = $T/password

[run]
ttl = 20s
CONF
  run -0 --separate-stderr "$DLOCK" run -k report -n -- sh -c 'echo "ran $DLOCK_TTL_MS"'
  assert_output "ran 20000"
  [ -z "$stderr" ]
  # held elsewhere: a quiet skip (75), as cron wants it
  start_bg holder "$DLOCK" run -k report -- sleep 5
  wait_for "fence_under dlock: report && [ \"\$(rcli exists 'dlock:{report}')\" = 1 ]"
  run -75 --separate-stderr "$DLOCK" run -k report -n -- echo ran
  [ -z "$output" ]
  [ -z "$stderr" ]
}

@test "precedence, option by option: command line > environment > user file > system file" {
  printf 'url = "unix:///nonexistent/system.sock"\nprefix = "system:"\npassword-file = %s\n[run]\nttl = 11s\n' \
    "$T/password" >"$SYSTEM_CONF"
  # the system file alone
  printf 'url = "%s"\n' "$URL" >"$T/url-only.conf"
  run -69 "$DLOCK" run -k p -- true
  assert_output --partial "/nonexistent/system.sock"
  # the user file over the system file
  printf 'url = "%s"\nprefix = "user:"\n[run]\nttl = 12s\n' "$URL" >"$USER_CONF"
  run -0 "$DLOCK" run -k p -- sh -c 'echo "$DLOCK_TTL_MS"'
  assert_output 12000
  fence_under user: p
  # the environment over the user file
  DLOCK_PREFIX=env: run -0 "$DLOCK" run -k p -- true
  fence_under env: p
  DLOCK_URL=unix:///nonexistent/env.sock run -69 "$DLOCK" run -k p -- true
  assert_output --partial "/nonexistent/env.sock"
  # the command line over the environment
  DLOCK_PREFIX=env: run -0 "$DLOCK" --prefix cli: run -k p -t 13s -- sh -c 'echo "$DLOCK_TTL_MS"'
  assert_output 13000
  fence_under cli: p
  DLOCK_URL=unix:///nonexistent/env.sock run -0 "$DLOCK" -u "$URL" run -k p -- true
  # a password in the environment wins over the file's password-file
  printf 'wrong\n' >"$T/wrong"
  printf 'url = "%s"\npassword-file = %s\n' "$URL" "$T/wrong" >"$USER_CONF"
  run -77 "$DLOCK" run -k p -- true
  DLOCK_PASSWORD=$PW run -0 "$DLOCK" run -k p -- true
  # flags: the environment's "0" over the file's true
  printf 'url = "%s"\nverbose = true\n' "$URL" >"$USER_CONF"
  run -0 --separate-stderr "$DLOCK" run -k p -- true
  [[ $stderr == *"acquired lock 'p'"* ]]
  DLOCK_VERBOSE=0 run -0 --separate-stderr "$DLOCK" run -k p -- true
  [ -z "$stderr" ]
}

@test "--config or DLOCK_CONFIG: that file only; missing is 78" {
  printf 'url = "unix:///nonexistent/user.sock"\n' >"$USER_CONF"
  printf 'url = "%s"\npassword-file = %s\n' "$URL" "$T/password" >"$T/mine.conf"
  run -0 "$DLOCK" --config "$T/mine.conf" run -k c -- true
  DLOCK_CONFIG=$T/mine.conf run -0 "$DLOCK" run -k c -- true
  run -78 "$DLOCK" --config "$T/missing.conf" run -k c -- true
  assert_output "dlock: cannot read config file '$T/missing.conf': No such file or directory"
  run -78 "$DLOCK" --config "$T" status c
  assert_output --partial "is a directory"
  # --config '': no config file at all (the user's would point to a missing socket)
  run -69 "$DLOCK" --config '' run -k c -- true
  assert_output --partial "127.0.0.1:6379"
  run -0 "$DLOCK" --config '' -u "$URL" --password-file "$T/password" run -k c -- true
}

@test "a malformed config file is 78 naming the line, whatever the subcommand" {
  local conf=$T/bad.conf
  printf 'url = "%s"\n\n# fine so far\nurl-typo = x\n' "$URL" >"$conf"
  run -78 "$DLOCK" --config "$conf" status k
  assert_output "dlock: $conf:4: 'url-typo' is not an option of dlock (global options)"
  printf 'url = "%s"\n[run]\nttl = 10s\nkill-after = soon\n' "$URL" >"$conf"
  run -78 "$DLOCK" --config "$conf" list
  assert_output --partial "$conf:4: invalid duration 'soon' for --kill-after"
  printf '[runn]\nttl = 10s\n' >"$conf"
  run -78 "$DLOCK" --config "$conf" status k
  assert_output --partial "$conf:2: no section [runn]"
  printf '[run]\nlimit = many\n' >"$conf"
  run -78 "$DLOCK" --config "$conf" status k
  assert_output --partial "$conf:2:"
  printf 'this is not a setting\n' >"$conf"
  run -78 "$DLOCK" --config "$conf" status k
  assert_output --partial "$conf:1: 'this is not a setting' is not an option"
  printf '[run]\ncommand = rm\n' >"$conf"
  run -78 "$DLOCK" --config "$conf" status k
  assert_output --partial "$conf:2: command cannot be set in a config file"
  [ "${#lines[@]}" -eq 1 ]
}

@test "a config file others can read that holds a password draws a warning" {
  printf 'url = "redis://:%s@127.0.0.1:%s"\n' "$PW" "$REDIS_PORT" >"$USER_CONF"
  chmod 644 "$USER_CONF"
  run -0 --separate-stderr "$DLOCK" run -k w -- true
  [[ $stderr == *"config file '$USER_CONF' holds a password and other users can read it (mode 644)"* ]]
  [[ $stderr != *"$PW"* ]]
  chmod 600 "$USER_CONF"
  run -0 --separate-stderr "$DLOCK" run -k w -- true
  [ -z "$stderr" ]
  # a password file named in a readable config is fine
  printf 'url = "%s"\npassword-file = %s\n' "$URL" "$T/password" >"$USER_CONF"
  chmod 644 "$USER_CONF"
  run -0 --separate-stderr "$DLOCK" run -k w -- true
  [ -z "$stderr" ]
}

@test "--help names the environment variable of every global option" {
  run -0 "$DLOCK" --help
  local var
  for var in DLOCK_URL DLOCK_PASSWORD DLOCK_SENTINEL_PASSWORD DLOCK_TLS_CA DLOCK_TLS_CERT \
    DLOCK_TLS_KEY DLOCK_TLS_SERVER_NAME DLOCK_PREFIX DLOCK_CONNECT_TIMEOUT DLOCK_VERBOSE \
    DLOCK_QUIET DLOCK_SYSLOG DLOCK_CONFIG; do
    assert_output --partial "$var"
  done
  run -0 "$DLOCK" run --help
  assert_output --partial DLOCK_METRICS_DIR
}

# ---------------------------------------------------------------------------------------------
# --syslog


start_syslog() {
  local unshare=(unshare -m --propagation private)
  [ "$(id -u)" = 0 ] || unshare=(unshare -rm --propagation private)
  "${unshare[@]}" true 2>/dev/null || skip "capturing syslog needs a mount namespace (root, or unprivileged user namespaces)"
  mkdir -p "$T/dev"
  local d
  for d in null zero urandom random; do touch "$T/dev/$d"; done
  start_bg syslogd /usr/bin/python3 -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o666)
with open(sys.argv[2], "ab", buffering=0) as out:
    while True:
        out.write(s.recv(65536).rstrip(b"\0") + b"\n")' "$T/dev/log" "$T/syslog"
  wait_for '[ -S "$T/dev/log" ]'
  : >"$T/syslog"
  # in_ns COMMAND...: COMMAND with this /dev (the devices dlock uses bound in).
  SYSLOG_NS=("${unshare[@]}" sh -c 'for d in null zero urandom random; do mount --bind "/dev/$d" "$0/dev/$d"; done
    mount --bind "$0/dev" /dev && exec "$@"' "$T")
}

# syslog_lines EVENT: the captured lines of that event.
syslog_lines() { grep "dlock\[[0-9]*\]: event=$1 " "$T/syslog" || true; }

@test "--syslog: acquired, skipped (held by whom), waited, released, lost and released by force; no secret" {
  start_syslog
  export DLOCK_URL=$URL DLOCK_PASSWORD=$PW
  # acquired and released, with the fencing token and the times
  run -0 "${SYSLOG_NS[@]}" "$DLOCK" --syslog run -k 'night report' -- sh -c 'echo "$DLOCK_TOKEN" >"$0"' "$T/token1"
  run -0 syslog_lines acquired
  assert_output --regexp 'event=acquired key="night report" kind=exclusive holder="[^"@]+@[^ ]+ pid [0-9]+" fencing_token=[0-9]+ ttl_ms=30000 waited_ms=[0-9]+$'
  run -0 syslog_lines released
  assert_output --regexp 'event=released key="night report" fencing_token=[0-9]+ held_ms=[0-9]+ status=0$'
  # skipped, naming the holder; then a wait of about a second, told in waited_ms
  # (--record-command: another holder's whole command line never reaches syslog)
  start_bg holder "$DLOCK" run -k busy --record-command -- sh -c 'exec sleep 1.5' secret-arg
  wait_for "[ \"\$(rcli exists 'dlock:{busy}')\" = 1 ]"
  run -75 "${SYSLOG_NS[@]}" "$DLOCK" --syslog run -k busy -n -- true
  run -0 syslog_lines skipped
  assert_output --regexp "event=skipped key=busy reason=no_wait held_by=\"$(id -un)@[^ ]+ pid [0-9]+, lease ends in [0-9.]+s\" waited_ms=[0-9]+\$"
  DLOCK_SYSLOG=1 run -0 "${SYSLOG_NS[@]}" "$DLOCK" run -k busy -w 10s -- true
  run -0 syslog_lines acquired
  local waited
  waited=$(syslog_lines acquired | grep 'key=busy' | tail -1 | sed 's/.*waited_ms=//')
  echo "waited_ms=$waited"
  [ "$waited" -ge 500 ]
  # lost: the key deleted under a running command (76), with the reason
  run -76 "${SYSLOG_NS[@]}" "$DLOCK" --syslog run -k gone -t 1s -- sh -c '
    echo "$DLOCK_TOKEN" >"$0"; redis-cli -s "$1" -a "$2" --no-auth-warning del "dlock:{gone}" >/dev/null; sleep 5' \
    "$T/token2" "$REDIS_SOCK" "$PW"
  run -0 syslog_lines lost
  assert_output --regexp 'event=lost key=gone fencing_token=[0-9]+ held_ms=[0-9]+ reason=".+"$'
  # released by force, naming whom it evicted
  start_bg victim "$DLOCK" run -k stuck --record-command -- sh -c 'exec sleep 5' secret-arg
  wait_for "[ \"\$(rcli exists 'dlock:{stuck}')\" = 1 ]"
  run -0 "${SYSLOG_NS[@]}" "$DLOCK" --syslog release -k stuck --force
  run -0 syslog_lines released_by_force
  assert_output --regexp 'event=released_by_force key=stuck evicted="[^"]*pid [0-9]+" fencing_token=[0-9]+$'
  # never the password, a token, or another holder's command line
  run -0 cat "$T/syslog"
  refute_output --partial secret-arg
  refute_output --partial "$PW"
  refute_output --partial "$(cat "$T/token1")"
  refute_output --partial "$(cat "$T/token2")"
  # without --syslog: nothing
  : >"$T/syslog"
  run -0 "${SYSLOG_NS[@]}" "$DLOCK" run -k quiet -- true
  [ ! -s "$T/syslog" ]
}

# ---------------------------------------------------------------------------------------------
# --metrics-dir

# metrics KEY-FILE PYTHON: parses the file with prometheus_client's parser into `m` (a dict of
# "name{outcome}" or "name" -> value, for key KEY) and runs the asserts.
metrics() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1]).read()
assert text.endswith("\n")
m = {}
for family in text_string_to_metric_families(text):
    for sample in family.samples:
        name = sample.name + ("{" + sample.labels["outcome"] + "}" if "outcome" in sample.labels else "")
        m[name] = sample.value
        m["key"] = sample.labels["key"]
exec(sys.argv[2])
PY
}

@test "--metrics-dir: the file parses, counts runs, skips and a loss, and keeps the last run" {
  /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || skip "python3-prometheus-client is not installed (packaging/install-deps.sh test)"
  export DLOCK_URL=$URL DLOCK_PASSWORD=$PW
  local dir=$T/textfile
  mkdir "$dir"
  run -0 "$DLOCK" run -k nightly --metrics-dir "$dir" -- sleep 0.3
  run -0 ls -A "$dir"
  assert_output "$(printf '.dlock_nightly.lock\ndlock_nightly.prom')"
  metrics "$dir/dlock_nightly.prom" '
assert m["key"] == "nightly", m
assert m["dlock_runs_total"] == 1 and m["dlock_skips_total"] == 0, m
assert m["dlock_last_run_outcome{ran}"] == 1 and m["dlock_last_run_outcome{skipped}"] == 0, m
assert m["dlock_last_run_exit_code"] == 0, m
assert 0.25 <= m["dlock_last_run_hold_seconds"] < 5, m
import time; assert abs(m["dlock_last_run_timestamp_seconds"] - time.time()) < 60, m'
  # a skip, an exit status passed through, a loss; DLOCK_METRICS_DIR as well
  start_bg holder "$DLOCK" run -k nightly -- sleep 2
  wait_for "[ \"\$(rcli exists 'dlock:{nightly}')\" = 1 ]"
  run -75 "$DLOCK" run -k nightly -n --metrics-dir "$dir" -- true
  metrics "$dir/dlock_nightly.prom" '
assert m["dlock_runs_total"] == 2 and m["dlock_skips_total"] == 1, m
assert m["dlock_last_run_outcome{skipped}"] == 1 and m["dlock_last_run_exit_code"] == 75, m
assert m["dlock_last_run_hold_seconds"] == 0, m'
  DLOCK_METRICS_DIR=$dir run -3 "$DLOCK" run -k nightly -w 10s -- sh -c 'exit 3'
  metrics "$dir/dlock_nightly.prom" '
assert m["dlock_runs_total"] == 3 and m["dlock_last_run_exit_code"] == 3, m
assert m["dlock_last_run_outcome{ran}"] == 1 and m["dlock_last_run_wait_seconds"] > 0.5, m'
  run -76 "$DLOCK" run -k nightly -t 1s --metrics-dir "$dir" -- sh -c '
    redis-cli -s "$0" -a "$1" --no-auth-warning del "dlock:{nightly}" >/dev/null; sleep 5' "$REDIS_SOCK" "$PW"
  metrics "$dir/dlock_nightly.prom" '
assert m["dlock_runs_total"] == 4 and m["dlock_losses_total"] == 1 and m["dlock_skips_total"] == 1, m
assert m["dlock_last_run_outcome{lost}"] == 1 and m["dlock_last_run_exit_code"] == 76, m'
  # an error (the store unreachable) counts too
  run -69 "$DLOCK" -u unix:///nonexistent.sock run -k nightly --metrics-dir "$dir" -- true
  metrics "$dir/dlock_nightly.prom" '
assert m["dlock_runs_total"] == 5 and m["dlock_errors_total"] == 1 and m["dlock_last_run_outcome{error}"] == 1, m'
}

@test "--metrics-dir: concurrent runs lose no count; odd key names get a file of their own" {
  /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || skip "python3-prometheus-client is not installed (packaging/install-deps.sh test)"
  export DLOCK_URL=$URL DLOCK_PASSWORD=$PW
  local dir=$T/textfile i pids=()
  mkdir "$dir"
  for i in $(seq 8); do
    "$DLOCK" run -k 'a/b "c"' --limit 8 --metrics-dir "$dir" -- true &
    pids+=($!)
  done
  wait "${pids[@]}"
  local file
  file=$(ls "$dir"/*.prom)
  [[ $file == "$dir"/dlock_a_b__c_-*.prom ]]
  metrics "$file" '
assert m["key"] == "a/b \"c\"", m
assert m["dlock_runs_total"] == 8, m'
}

@test "--metrics-dir: held 1 with the acquisition time while the command runs (a skip beside it too), 0 after" {
  /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || skip "python3-prometheus-client is not installed (packaging/install-deps.sh test)"
  export DLOCK_URL=$URL DLOCK_PASSWORD=$PW
  local dir=$T/textfile before after
  mkdir "$dir"
  run -0 "$DLOCK" run -k live --metrics-dir "$dir" -- true
  before=$(date +%s.%N)
  # The command copies the file as it starts: written before the command runs.
  start_bg live "$DLOCK" run -k live --metrics-dir "$dir" -- sh -c '
    cp "$0/dlock_live.prom" "$1"; until [ -e "$2" ]; do sleep 0.02; done' "$dir" "$T/started.prom" "$T/go"
  local live=$BG_PID
  started live '[ -e "$T/started.prom" ]'
  after=$(date +%s.%N)
  metrics "$T/started.prom" "
assert m['dlock_run_held'] == 1, m
assert $before - 1 <= m['dlock_run_acquired_timestamp_seconds'] <= $after + 1, m
assert m['dlock_runs_total'] == 1 and m['dlock_last_run_outcome{ran}'] == 1, m  # the last run's, carried on"
  # A run of this host that is skipped meanwhile counts its skip, and leaves held at 1.
  run -75 "$DLOCK" run -k live -n --metrics-dir "$dir" -- true
  metrics "$dir/dlock_live.prom" "
assert m['dlock_run_held'] == 1 and m['dlock_skips_total'] == 1 and m['dlock_runs_total'] == 2, m
assert m['dlock_last_run_outcome{skipped}'] == 1, m
assert $before - 1 <= m['dlock_run_acquired_timestamp_seconds'] <= $after + 1, m"
  touch "$T/go"
  wait "$live"
  metrics "$dir/dlock_live.prom" '
assert m["dlock_run_held"] == 0 and "dlock_run_acquired_timestamp_seconds" not in m, m
assert m["dlock_runs_total"] == 3 and m["dlock_last_run_outcome{ran}"] == 1, m'
  # A dlock killed outright leaves held at 1 until the next run of this host writes the file.
  rm "$T/go"
  start_bg killed "$DLOCK" run -k live -t 1s --metrics-dir "$dir" -- sh -c '
    touch "$0"; until [ -e "$1" ]; do sleep 0.02; done' "$T/in" "$T/go"
  local killed=$BG_PID
  started killed '[ -e "$T/in" ]'
  grep -qx 'dlock_run_held{key="live"} 1' "$dir/dlock_live.prom"
  kill -KILL "$killed"
  wait "$killed" || true
  run -0 "$DLOCK" run -k live -w 30s --metrics-dir "$dir" -- true
  metrics "$dir/dlock_live.prom" '
assert m["dlock_run_held"] == 0 and "dlock_run_acquired_timestamp_seconds" not in m, m
assert m["dlock_runs_total"] == 4, m'
}

@test "--metrics-dir that is missing, or not a directory: 78 before the run (no lock taken, nothing run, nothing created)" {
  export DLOCK_URL=$URL DLOCK_PASSWORD=$PW
  touch "$T/file"
  run -78 --separate-stderr "$DLOCK" run -k w --metrics-dir "$T/missing" -- touch "$T/ran"
  [ "$stderr" = "dlock: --metrics-dir '$T/missing': no such directory (dlock does not create it)" ]
  run -78 --separate-stderr "$DLOCK" run -k w --metrics-dir "$T/file" -- touch "$T/ran"
  [ "$stderr" = "dlock: --metrics-dir '$T/file': not a directory" ]
  DLOCK_METRICS_DIR=$T/missing/sub run -78 "$DLOCK" elect -k w -- touch "$T/ran"
  [ ! -e "$T/ran" ] && [ ! -e "$T/missing" ]
  ! fence_under dlock: w
}

@test "acquire --keep's holder logs to syslog in the same form, with or without --syslog" {
  start_syslog
  export DLOCK_URL=$URL DLOCK_PASSWORD=$PW
  start_bg owner sleep 30
  local owner=$BG_PID token
  token=$("${SYSLOG_NS[@]}" "$DLOCK" acquire -k kept -t 2s --keep --while-pid "$owner")
  wait_for '[ -n "$(syslog_lines holding)" ]'
  run -0 syslog_lines holding
  assert_output --regexp "event=holding key=kept owner_pid=$owner by=\"acquire --keep\"\$"
  run -0 "$DLOCK" release -k kept --token "$token"
  wait_for '[ -n "$(syslog_lines released)" ]'
  run -0 syslog_lines released
  assert_output --regexp 'event=released key=kept why=.+ by="acquire --keep"$'
  run -0 cat "$T/syslog"
  refute_output --partial "$token"
}

@test "--metrics-dir another user owns: no symlink followed, nothing planted read, no hang" {
  need_root
  export DLOCK_URL=$URL DLOCK_PASSWORD=$PW
  nobody_dir
  local dir=$NOBODY_DIR pid next
  printf 'secret\n' >"$T/victim"
  chmod 600 "$T/victim"
  # The lock file and the next pids' temporary names of the old layout point at root's files.
  as_nobody ln -s "$T/nologin" "$dir/.dlock_k.lock"
  next=$(cat /proc/sys/kernel/ns_last_pid)
  for pid in $(seq "$next" $((next + 400))); do
    as_nobody ln -s "$T/victim" "$dir/.dlock_k.prom.$pid.tmp"
  done
  run -0 --separate-stderr timeout 60 "$DLOCK" run -k k --metrics-dir "$dir" -- true
  [ ! -e "$T/nologin" ]
  [ "$(cat "$T/victim")" = secret ]
  [[ $stderr == *"cannot lock metrics file '$dir/.dlock_k.lock'"* ]]
  # The metrics file itself a FIFO, then /dev/zero: counted from zero, never read.
  as_nobody rm -f "$dir/.dlock_k.lock"
  as_nobody mkfifo "$dir/dlock_k.prom"
  run -3 --separate-stderr timeout 60 "$DLOCK" run -k k --metrics-dir "$dir" -- sh -c 'exit 3'
  [[ $stderr == *"metrics file '$dir/dlock_k.prom' cannot be read back"* ]]
  as_nobody rm -f "$dir/dlock_k.prom"
  as_nobody ln -s /dev/zero "$dir/dlock_k.prom"
  run -0 --separate-stderr timeout 60 "$DLOCK" run -k k --metrics-dir "$dir" -- true
  grep -q '^dlock_runs_total{key="k"} 1$' "$dir/dlock_k.prom"
  [ ! -L "$dir/dlock_k.prom" ]
  # Their flock on the lock file delays the run's end by seconds, not forever.
  rm -f "$dir/.dlock_k.lock"
  as_nobody touch "$dir/.dlock_k.lock"
  start_bg squatter as_nobody flock "$dir/.dlock_k.lock" sleep 120
  wait_for "! flock -n '$dir/.dlock_k.lock' true"
  run -0 --separate-stderr timeout 60 "$DLOCK" run -k k --metrics-dir "$dir" -- true
  [[ $stderr == *"cannot lock metrics file"* ]]
  # Root's only file there is the metrics file (no temporary name left behind).
  [ "$(find "$dir" -user root | wc -l)" -eq 1 ]
}

@test "a config file that another user owns or can write is refused (78), as ssh does; a FIFO does not hang" {
  printf 'url = "%s"\npassword-file = %s\n' "$URL" "$T/password" >"$T/c.conf"
  chmod 664 "$T/c.conf"
  run -78 "$DLOCK" --config "$T/c.conf" status k
  assert_output "dlock: config file '$T/c.conf' is refused: other users can write it (mode 664)"
  cp "$T/c.conf" "$USER_CONF"
  chmod 602 "$USER_CONF"
  run -78 "$DLOCK" status k
  assert_output --partial "config file '$USER_CONF' is refused: other users can write it"
  chmod 644 "$USER_CONF"
  run -1 "$DLOCK" status k
  mkfifo "$T/fifo.conf"
  run -78 timeout 20 "$DLOCK" --config "$T/fifo.conf" status k
  assert_output "dlock: config file '$T/fifo.conf' is not a regular file"
  need_root
  chmod 644 "$T/c.conf"
  chown nobody "$T/c.conf"
  run -78 "$DLOCK" --config "$T/c.conf" status k
  assert_output "dlock: config file '$T/c.conf' is refused: it is owned by another user (uid $(id -u nobody))"
}
