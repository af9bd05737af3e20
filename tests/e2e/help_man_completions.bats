#!/usr/bin/env bats
# The man page and the shell completions: they render, and they know every subcommand and
# every option that --help lists. Only the ACL test uses the file's redis-server.

load ../lib/helpers

ROOT=$BATS_TEST_DIRNAME/../..
MAN=$ROOT/man/dlock.1
BASH_COMPLETION=$ROOT/completions/dlock.bash
ZSH_COMPLETION=$ROOT/completions/_dlock
FISH_COMPLETION=$ROOT/completions/dlock.fish

SUBCOMMANDS=(run status list acquire renew release wait barrier latch elect leader history)

# --help and the rendered man page, computed once for the file.
setup_file() {
  dlock_setup_file
  local dir=$BATS_FILE_TMPDIR/docs sub
  mkdir -p "$dir"
  "$DLOCK" --help >"$dir/help"
  for sub in "${SUBCOMMANDS[@]}"; do
    "$DLOCK" "$sub" --help >"$dir/help-$sub"
  done
  MANWIDTH=80 MAN_KEEP_FORMATTING= man -l "$MAN" 2>/dev/null | col -b >"$dir/man.txt"
}

# help_options [SUBCOMMAND]: the option names --help lists ("-k", "--key", ...), one a line.
help_options() {
  awk '
    /^Options:/ { on = 1; next }
    /^[A-Z][A-Za-z ]*:$/ { on = 0 }
    on && /^ +-/ { sub(/[={].*/, "", $1); print $1 }' "$BATS_FILE_TMPDIR/docs/help${1:+-$1}" \
    | tr ',' '\n' | grep '^-'
}

# help_subcommands: the subcommands dlock --help lists.
help_subcommands() {
  awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }' "$BATS_FILE_TMPDIR/docs/help"
}

# has_option TEXT OPTION: whether OPTION appears in TEXT as a whole word.
has_option() {
  local re="(^|[^-[:alnum:]])$2([^-[:alnum:]]|\$)"
  [[ $1 =~ $re ]]
}

# The man page rendered for an 80-column terminal.
render_man() { cat "$BATS_FILE_TMPDIR/docs/man.txt"; }

# man_section TEXT NAME: the lines of section NAME (a heading in column 0).
man_section() {
  awk -v name="$2" '$0 == name { on = 1; next } /^[A-Z]/ { on = 0 } on' <<<"$1"
}

# man_subsection TEXT SUB: the lines of the subsection of subcommand SUB under COMMANDS.
man_subsection() {
  awk -v want="$2" '
    /^[A-Z]/ { on = 0; commands = ($0 == "COMMANDS"); next }
    commands && /^   [a-z]/ { on = ($1 == want); next }
    on' <<<"$1"
}

# bash_complete LINE: completes the last word of LINE with the bash completion (splitting LINE
# into COMP_WORDS the way readline does: at blanks, with "=" and ":" words of their own) and
# prints COMPREPLY, one a line.
bash_complete() {
  bash -c '
    source "$1"
    COMP_LINE=$2 COMP_POINT=${#2}
    COMP_WORDS=()
    rest=$2
    while [[ -n $rest ]]; do
      rest=${rest#"${rest%%[! ]*}"}
      if [[ $rest =~ ^[=:]+ || $rest =~ ^[^\ =:]+ ]]; then
        COMP_WORDS+=("${BASH_REMATCH[0]}")
        rest=${rest:${#BASH_REMATCH[0]}}
      fi
    done
    [[ $2 == *" " || ${#COMP_WORDS[@]} -eq 0 ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _dlock
    printf "%s\n" "${COMPREPLY[@]}"' _ "$BASH_COMPLETION" "$1"
}

@test "--help and every SUBCOMMAND --help succeed and list options" {
  run -0 "$DLOCK" --help
  local sub
  for sub in "${SUBCOMMANDS[@]}"; do
    run -0 "$DLOCK" "$sub" --help
    assert_output --partial 'Options:'
  done
  run -0 help_options
  assert_line -- --url
  for sub in "${SUBCOMMANDS[@]}"; do
    run -0 help_options "$sub"
    assert_line -- --help
  done
  run -0 help_subcommands
  assert_equal "$(echo $output)" "${SUBCOMMANDS[*]}"
}

@test "--help names every store and every URL scheme the stores accept" {
  local help schemes scheme
  help=$(cat "$BATS_FILE_TMPDIR/docs/help")
  # The schemes as the stores' sources test for them ("etcd://", scheme == "rediss", ...).
  schemes=$(grep -rhoE '(starts_with|rfind)\("[a-z-]+://"|scheme = "[a-z-]+://"|scheme == "[a-z-]+"' "$ROOT/src/stores" \
    | grep -oE '"[a-z-]+' | tr -d '"' | sort -u)
  [ "$(wc -l <<<"$schemes")" -ge 13 ] || fail "found only: $schemes"
  for scheme in $schemes; do
    [[ $help == *"$scheme://"* ]] || fail "--help does not name $scheme://"
  done
  for store in Redis PostgreSQL MySQL etcd ZooKeeper; do
    [[ $help == *"$store"* ]] || fail "--help does not name $store"
  done
  [[ $help != *"held in Redis"$'\n'* ]] || fail "--help says the lock is held in Redis (only)"
  run -0 render_man
  refute_output --partial 'distributed lock held in Redis'$'\n'
}

@test "the man page renders without warnings" {
  run -0 --separate-stderr env MANWIDTH=80 man --warnings -l "$MAN"
  [ -z "$stderr" ] || fail "man --warnings: $stderr"
  [ "${#lines[@]}" -gt 200 ]
  if command -v lexgrog >/dev/null; then
    run -0 lexgrog "$MAN"
    assert_output --partial 'dlock - run a command under a distributed lock'
  fi
}

@test "the man page has every section" {
  local text heading
  text=$(render_man)
  for heading in NAME SYNOPSIS DESCRIPTION OPTIONS COMMANDS DURATIONS ENVIRONMENT 'EXIT STATUS' \
    'LEASE RENEWAL AND LOSS' WAITING KEYS FILES EXAMPLES SECURITY 'SEE ALSO'; do
    grep -qx "$heading" <<<"$text" || fail "no $heading section"
  done
}

@test "the man page documents every global option in OPTIONS" {
  local text opts opt
  text=$(man_section "$(render_man)" OPTIONS)
  opts=$(help_options)
  for opt in $opts; do
    has_option "$text" "$opt" || fail "OPTIONS lacks $opt"
  done
}

@test "the man page documents every subcommand and its options in its own subsection" {
  local text section sub opt run_section
  text=$(render_man)
  run_section=$(man_subsection "$text" run)
  for sub in $(help_subcommands); do
    section=$(man_subsection "$text" "$sub")
    [ -n "$section" ] || fail "COMMANDS has no subsection for $sub"
    for opt in $(help_options "$sub"); do
      [ "$opt" = -h ] || [ "$opt" = --help ] && continue # documented once, under OPTIONS
      # elect's subsection refers to run's for the options they share
      if [ "$sub" = elect ] && help_options run | grep -qxF -- "$opt"; then
        has_option "$run_section" "$opt" || fail "the run subsection (for elect) lacks $opt"
        continue
      fi
      has_option "$section" "$opt" || fail "the $sub subsection lacks $opt"
    done
  done
}

@test "elect offers none of run's options an election refuses or implies (--shared, --limit, -x, --fair), in its help or its completions" {
  local opt
  for opt in -x --exclusive -s --shared --limit --fair; do
    ! help_options elect | grep -qxF -- "$opt" || fail "elect --help offers $opt"
  done
  help_options elect | grep -qxF -- --value
  run -0 bash_complete "dlock elect -"
  refute_line -- --shared
  refute_line -- --limit
  assert_line -- --keep-campaigning
  # still read, and refused with one line
  run -64 --separate-stderr "$DLOCK" elect -k a --limit 2 -- true
  [ "${#stderr_lines[@]}" -eq 1 ]
}

@test "the man page documents every environment variable and exit status" {
  local text env_text exit_text var code
  text=$(render_man)
  env_text=$(man_section "$text" ENVIRONMENT)
  for var in $(cat "$BATS_FILE_TMPDIR"/docs/help* | grep -o 'Env:[A-Z_]*' | cut -d: -f2 | sort -u) \
    DLOCK_URL DLOCK_PASSWORD DLOCK_PREFIX DLOCK_TOKEN DLOCK_TLS_CA DLOCK_TLS_CERT DLOCK_TLS_KEY \
    DLOCK_TLS_SERVER_NAME DLOCK_KEY DLOCK_FENCING_TOKEN DLOCK_TTL_MS; do
    grep -qw "$var" <<<"$env_text" || fail "ENVIRONMENT lacks $var"
  done
  exit_text=$(man_section "$text" 'EXIT STATUS')
  for code in 64 69 70 75 76 77 78 124 126 127; do
    grep -qE "^       $code( |\$)" <<<"$exit_text" || fail "EXIT STATUS lacks $code"
  done
  grep -qF '128+N' <<<"$exit_text" || fail "EXIT STATUS lacks 128+N"
}

@test "the man page lists every key dlock writes" {
  local text key
  text=$(man_section "$(render_man)" KEYS)
  for key in 'dlock:{KEY}' 'dlock:{KEY}:holder' 'dlock:{KEY}:fence' 'dlock:{KEY}:waiters' \
    'dlock:{KEY}:queue' 'dlock:{KEY}:queue-expiry' 'dlock:{KEY}:wake' 'dlock:{KEY}:wake:ID' \
    'dlock:{KEY}:holders' 'dlock:{KEY}:slots' 'dlock:{KEY}:kind' 'dlock:{KEY}:writers' \
    'dlock:{KEY}:watchers' 'dlock:{KEY}:watch' 'dlock:{KEY}:freed' 'dlock:{KEY}:barrier' \
    'dlock:{KEY}:barrier:arrivals' 'dlock:{KEY}:barrier:GENERATION' 'dlock:{KEY}:latch' \
    'dlock:{KEY}:latch:waiters' 'dlock:{KEY}:latch:wake'; do
    grep -qxF "       $key" <<<"$text" || fail "KEYS lacks $key"
  done
}

@test "every subcommand and option is in each completion file" {
  local file text sub opt
  for file in "$BASH_COMPLETION" "$ZSH_COMPLETION" "$FISH_COMPLETION"; do
    text=$(<"$file")
    for sub in $(help_subcommands); do
      has_option "$text" "$sub" || fail "$(basename "$file") lacks the subcommand $sub"
    done
    for opt in $(help_options; for sub in "${SUBCOMMANDS[@]}"; do help_options "$sub"; done | sort -u); do
      if [ "$file" = "$FISH_COMPLETION" ]; then
        # fish spells them "-s k" and "-l key"
        case $opt in
          --*) [[ $text =~ " -l ${opt#--}"( |$'\n') ]] || fail "dlock.fish lacks -l ${opt#--}" ;;
          *) [[ $text =~ " -s ${opt#-}"( |$'\n') ]] || fail "dlock.fish lacks -s ${opt#-}" ;;
        esac
      else
        has_option "$text" "$opt" || fail "$(basename "$file") lacks $opt"
      fi
    done
  done
}

@test "zsh completion: each subcommand's block has that subcommand's options" {
  local sub block opt array
  for sub in "${SUBCOMMANDS[@]}"; do
    block=$(awk -v want="$sub" '$1 == want ")" { on = 1; next } on && /;;/ { exit } on' "$ZSH_COMPLETION")
    [ -n "$block" ] || fail "_dlock has no case for $sub"
    # with the shared option arrays it uses ($_dlock_wait_opts)
    for array in $(grep -o '\$_dlock_[a-z_]*' <<<"$block" | sort -u); do
      block+=$'\n'$(awk -v want="${array#\$}=(" '$1 == want { on = 1; next } on && /^\)/ { exit } on' "$ZSH_COMPLETION")
    done
    for opt in $(help_options "$sub"); do
      has_option "$block" "$opt" || fail "_dlock: $sub lacks $opt"
    done
  done
  if command -v zsh >/dev/null; then
    run -0 zsh -n "$ZSH_COMPLETION"
  fi
}

@test "bash completion of 'dlock run --' lists run's options" {
  run -0 bash_complete "dlock run --"
  local opt
  for opt in $(help_options run | grep '^--'); do
    assert_line -- "$opt"
  done
  refute_line -- --json
  refute_line -- --force
}

@test "bash completion offers each subcommand's options, and global ones" {
  local sub opt
  for sub in "${SUBCOMMANDS[@]}"; do
    run -0 bash_complete "dlock $sub -"
    for opt in $(help_options "$sub") $(help_options | grep -vx -e --version -e -h -e --help); do
      assert_line -- "$opt"
    done
  done
  run -0 bash_complete "dlock -"
  for opt in $(help_options); do
    assert_line -- "$opt"
  done
}

@test "bash completion: subcommands, --on-lost values, files, the command after --" {
  run -0 bash_complete "dlock "
  assert_equal "$(echo $(sort <<<"$output"))" "acquire barrier elect history latch leader list release renew run status wait"
  run -0 bash_complete "dlock -u redis://h:6379 run --on-lost "
  assert_equal "$(echo $(sort <<<"$output"))" "ignore stop"
  run -0 bash_complete "dlock --url=redis://h:6379 run --on-lost=i"
  assert_output ignore
  run -0 bash_complete "dlock list --format "
  assert_equal "$(echo $(sort <<<"$output"))" "json prometheus table"
  run -0 bash_complete "dlock -u "
  assert_line etcd://
  assert_line file://
  run -0 bash_complete "dlock elect --value leader-1 --on-lost "
  assert_equal "$(echo $(sort <<<"$output"))" "ignore stop"
  local tmp=$BATS_TEST_TMPDIR
  touch "$tmp/secret.pass" "$tmp/ca.pem"
  run -0 bash_complete "dlock --password-file $tmp/sec"
  assert_output "$tmp/secret.pass"
  for opt in --tls-ca --tls-cert --tls-key; do
    run -0 bash_complete "dlock run -k x $opt $tmp/c"
    assert_output "$tmp/ca.pem"
  done
  run -0 bash_complete "dlock --prefix run run -k x -- bas"
  assert_line bash
  run -0 bash_complete "dlock elect -k x --value v --keep-campaigning -- bas"
  assert_line bash
  run -0 bash_complete "dlock status "
  assert_output ''
  run -0 bash_complete "dlock leader --watch "
  assert_output ''
}

@test "fish completion: subcommand options, --on-lost values, files" {
  command -v fish >/dev/null || skip "fish is not installed"
  run -0 fish -n "$FISH_COMPLETION"
  fish_complete() {
    fish -c 'source $argv[1]; complete -C $argv[2] | string replace -r "\t.*" ""; true' \
      "$FISH_COMPLETION" "$1"
  }
  local sub opt
  for sub in "${SUBCOMMANDS[@]}"; do
    run -0 fish_complete "dlock $sub --"
    for opt in $(help_options "$sub" | grep '^--'); do
      assert_line -- "$opt"
    done
  done
  run -0 fish_complete "dlock run --on-lost "
  assert_equal "$(echo $(sort <<<"$output"))" "ignore stop"
  run -0 fish_complete "dlock elect --on-lost "
  assert_equal "$(echo $(sort <<<"$output"))" "ignore stop"
  touch "$BATS_TEST_TMPDIR/secret.pass"
  run -0 fish_complete "dlock --password-file $BATS_TEST_TMPDIR/sec"
  assert_output "$BATS_TEST_TMPDIR/secret.pass"
}

@test "the least-privilege ACL in the man page is enough for every subcommand" {
  local rules
  rules=$(sed -n '/^ACL SETUSER dlock on >PASSWORD/,/^\.fi/p' "$MAN" | grep -o '[~+][^ ]*')
  [[ $rules == *+evalsha* ]] || fail "no ACL SETUSER example found in the man page"
  # shellcheck disable=SC2086
  rcli ACL SETUSER dlock reset on '>acl-test-pw' $rules
  export DLOCK_URL=unix://dlock@$REDIS_SOCK DLOCK_PASSWORD=acl-test-pw
  run -77 --separate-stderr env DLOCK_PASSWORD=wrong "$DLOCK" status k

  rcli script flush >/dev/null # the first call of each script goes through EVAL
  run -0 "$DLOCK" run -k k -- true
  # no replica here: 69 after WAIT's timeout, not 77 (WAIT is allowed)
  run -69 "$DLOCK" run -k k --wait-replicas 1 --wait-replicas-timeout 100ms -- true
  run -1 "$DLOCK" status k
  run -0 "$DLOCK" run -k k -t 1s -- sleep 1.2 # renewals
  run -0 "$DLOCK" run -k s --shared -t 1s -- sleep 1.2
  run -0 "$DLOCK" run -k m --limit 2 -k n -t 1s -- sleep 1.2
  run -0 --separate-stderr "$DLOCK" acquire -k k -t 10s
  local token=$output
  run -0 "$DLOCK" status k
  run -0 "$DLOCK" status --json k
  run -0 "$DLOCK" list
  run -0 "$DLOCK" list --json
  run -0 "$DLOCK" renew -k k --token "$token"
  run -0 "$DLOCK" renew -k k --token "$token" -t 20s
  run -75 "$DLOCK" run -k k -n -- true
  run -75 "$DLOCK" run -k k -w 200ms -- true
  run -75 "$DLOCK" run -k k -w 200ms --fair -- true
  run -0 "$DLOCK" release -k k --token "$token"
  run -76 "$DLOCK" release -k k --token "$token"
  run -0 --separate-stderr "$DLOCK" acquire -k k -t 10s
  run -0 "$DLOCK" release -k k --force
  run -0 "$DLOCK" release -k k --force

  # Waiters woken by a release, unordered and --fair.
  local mode holder
  for mode in --wait=10s --fair; do
    "$DLOCK" run -k w -- sleep 0.5 &
    holder=$!
    wait_for "rcli exists 'dlock:{w}' | grep -qx 1"
    run -0 "$DLOCK" run -k w "$mode" -- true
    wait "$holder"
  done

  # wait, barrier and latch
  "$DLOCK" run -k w -- sleep 0.5 &
  holder=$!
  wait_for "rcli exists 'dlock:{w}' | grep -qx 1"
  run -0 "$DLOCK" wait -k w -w 10s
  wait "$holder"
  "$DLOCK" barrier -k b --parties 2 -w 10s &
  local party=$!
  run -0 "$DLOCK" barrier -k b --parties 2 -w 10s
  wait "$party"
  run -75 "$DLOCK" barrier -k b --parties 2 -w 100ms
  run -0 "$DLOCK" latch -k l --count 1
  run -75 "$DLOCK" latch -k l --wait 100ms
  run -0 "$DLOCK" latch -k l --down
  run -0 "$DLOCK" latch -k l --wait 1s

  # the history the runs above wrote, read back; no command was refused on the way
  run -0 "$DLOCK" history k
  [[ $output == *released* && $output == *forced* ]] || fail "history: $output"
  # (the log has the wrong password's AUTH above, and no refused command or key)
  run -0 rcli acl log
  ! grep -qxE 'command|key' <<<"$output" || fail "refused: $output"
}
