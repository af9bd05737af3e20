# A private ZooKeeper server per bats file, for the zk:// store (tests/stores/zookeeper).
#
# start_zookeeper: a standalone server from Debian's zookeeper package, run with java from
# its jars (no init script, no /var/log), on a loopback port the kernel hands out (free_port),
# with its data in a fresh directory under /tmp and this configuration:
#   tickTime=500, minSessionTimeout=1000, maxSessionTimeout=60000 (ZK_MAX_SESSION ms, if set):
#     dlock's session timeout is its --ttl, which the server must grant exactly (1 s to 60 s
#     here; 30 s is the default, for which dlock takes the server's bound when it is lower)
#   admin.enableServer=false (no Jetty port), 4lw.commands.whitelist: ruok (ready), wchp
#     (watches by path: who waits for whom), cons
# ZK_ADDRESS (default 127.0.0.1) is the one address it listens on (a partition test: the veth
# pair's server end).
# Exports ZK_DIR, ZK_PORT, ZK_PID and DLOCK_URL (zk://ZK_ADDRESS:PORT/dlock-test: dlock makes
# the chroot /dlock-test itself). zk_cli runs one zkCli command against it; zk_4lw sends a
# four-letter word. Skips the file when java or the zookeeper jars are missing.

load "${BASH_SOURCE[0]%/*}/store_helpers"

: "${ZK_JARS:=/usr/share/java}"
ZK_CLASSPATH=
for jar in zookeeper zookeeper-jute slf4j-api slf4j-nop netty-handler netty-common \
  netty-transport netty-buffer netty-resolver netty-codec netty-transport-native-epoll \
  netty-transport-native-unix-common metrics-core commons-cli snappy-java jline; do
  [ -e "$ZK_JARS/$jar.jar" ] && ZK_CLASSPATH+="${ZK_CLASSPATH:+:}$ZK_JARS/$jar.jar"
done
export ZK_CLASSPATH
unset jar

# zk_4lw WORD: the server's answer to a four-letter word.
zk_4lw() {
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$3/$1" && printf %s "$2" >&3 && cat <&3' _ "$ZK_PORT" "$1" "${ZK_ADDRESS:-127.0.0.1}" 2>/dev/null
}

# zk_cli COMMAND [ARG...]: one zkCli command (a JVM of its own: about a second), its output
# without the client's connection chatter.
zk_cli() {
  java -cp "$ZK_CLASSPATH" -Dzookeeper.jmx.log4j.disable=true org.apache.zookeeper.ZooKeeperMain \
    -server "${ZK_ADDRESS:-127.0.0.1}:$ZK_PORT" "$@" 2>/dev/null | grep -v '^$\|^WATCHER::\|^WatchedEvent'
}

start_zookeeper() {
  if ! command -v java >/dev/null || [ ! -e "$ZK_JARS/zookeeper.jar" ]; then
    skip_file "ZooKeeper server not found (java and $ZK_JARS/zookeeper.jar; install zookeeper)"
    return 0
  fi
  ZK_DIR=$(mktemp -d /tmp/dlock-zk.XXXXXX)
  export ZK_DIR
  local try i
  for try in 1 2 3 4 5; do
    ZK_PORT=$(free_port)
    cat >"$ZK_DIR/zoo.cfg" <<CFG
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=${ZK_MAX_SESSION:-60000}
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=${ZK_ADDRESS:-127.0.0.1}
admin.enableServer=false
4lw.commands.whitelist=ruok,wchp,cons,stat
CFG
    # from a subshell: not a job of bats' shell, which would report its SIGKILL
    (java -cp "$ZK_CLASSPATH" -Xmx256m -Dzookeeper.admin.enableServer=false \
      -Dzookeeper.jmx.log4j.disable=true org.apache.zookeeper.server.quorum.QuorumPeerMain \
      "$ZK_DIR/zoo.cfg" >"$ZK_DIR/server.log" 2>&1 3>&- &
      echo $! >"$ZK_DIR/pid")
    ZK_PID=$(cat "$ZK_DIR/pid")
    export ZK_PORT ZK_PID
    for i in $(seq 300); do
      # ruok says imok as soon as the process runs; stat names the mode only once the
      # server serves sessions (before, a client's first connection is lost)
      [ "$(zk_4lw ruok)" = imok ] && zk_4lw stat | grep -q '^Mode: ' && return 0
      kill -0 "$ZK_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$ZK_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$ZK_PID" 2>/dev/null && [[ $(ps -o stat= -p "$ZK_PID") != Z* ]] || break; sleep 0.05; done
    grep -qs 'Address already in use' "$ZK_DIR/server.log" || break
  done
  echo "ZooKeeper did not start:" >&2
  cat "$ZK_DIR/server.log" >&2
  return 1
}

# stop_zookeeper: kills the server of this file by pid and removes its directory.
stop_zookeeper() {
  if [ -n "${ZK_PID:-}" ]; then
    kill -CONT "$ZK_PID" 2>/dev/null
    kill -KILL "$ZK_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$ZK_PID" 2>/dev/null && [[ $(ps -o stat= -p "$ZK_PID") != Z* ]] || break; sleep 0.05; done
  fi
  if [ -n "${ZK_DIR:-}" ] && [[ $ZK_DIR == /tmp/dlock-zk.* ]]; then
    rm -rf "$ZK_DIR"
  fi
}

# zk_contenders: the paths of every contender node under the chroot (Curator's names; an
# exclusive dlock contender is a pair, a candidate of dlock elect a triple: grep -- -lock- for
# one line each).
zk_contenders() {
  zk_cli ls -R /dlock-test | grep -E '/_c_[0-9a-f-]{36}-(lock-|__READ__|__WRIT__|latch-)[0-9]{10}$' || true
}

# The hooks of store.bats (store_helpers.bash).
STORE_FEATURES="shared limit fair coordinate loss_notice min_hold lock_delay replace supersede keep elect history"
STORE_LOSS="its ZooKeeper session expired or its node was deleted"

store_start() {
  if "$DLOCK" --version 2>&1 | grep -qi 'ZooKeeper C client not'; then
    skip_file "zk:// needs libzookeeper-mt2"
    return 0
  fi
  start_zookeeper || return 1
  [ -n "${STORE_SKIP:-}" ] || export DLOCK_URL="zk://${ZK_ADDRESS:-127.0.0.1}:$ZK_PORT/dlock-test"
}

store_stop() { stop_zookeeper; }

# What the server does when a session ends, without ending it: ZooKeeper has no command to
# expire another client's session (the Java API needs the session's password), so this deletes
# every contender node dlock made under the chroot, which is what an expiry does to a lock;
# the holder's watch on its own node sees it. Prints how many nodes it deleted.
store_end_sessions() {
  local nodes node count=0
  nodes=$(zk_contenders)
  for node in $nodes; do
    zk_cli delete "$node" >/dev/null && count=$((count + 1))
  done
  echo "$count"
}

# ---------------------------------------------------------------------------------------------
# Apache Curator's own recipes beside dlock (tests/stores/zookeeper/curator.bats, elect.bats):
# a small client of ours (tests/stores/zookeeper/curator/CuratorClient.java) compiled with javac
# against Debian's libcurator-recipes-java. It and each dlock command append their events ("NAME
# acquired", "NAME releasing", ...) to one log, $T/events, with O_APPEND: the log is the order in
# which they happened, which is what the tests check (no wall-clock bounds).

CURATOR_CLIENT_SOURCE="${BASH_SOURCE[0]%/*}/../stores/zookeeper/curator/CuratorClient.java"

# Debian's jars (in CURATOR_JAR_DIR, default /usr/share/java) the client compiles and runs
# with: Curator's recipes, framework and client, the ZooKeeper client, and what they need at
# run time (Guava, with its failureaccess classes inside; SLF4J, with the no-op binding for a
# quiet stderr): what the JVM loads classes from (-verbose:class). The client talks to the
# server through ZooKeeper's NIO socket: no Netty.
: "${CURATOR_JAR_DIR:=/usr/share/java}"
CURATOR_JARS="curator-recipes curator-framework curator-client zookeeper zookeeper-jute guava
  slf4j-api slf4j-nop"
# A short-lived client: the C1 compiler alone and the serial collector start faster.
CURATOR_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto -Xmx128m"

# build_curator_client: compiles CuratorClient.java into $BATS_FILE_TMPDIR/curator; exports
# CURATOR_CP. Without javac or a jar: every test skips, saying what to install (fails in CI).
build_curator_client() {
  local jar missing=() cp=
  command -v javac >/dev/null || missing+=(javac)
  for jar in $CURATOR_JARS; do
    if [ -e "$CURATOR_JAR_DIR/$jar.jar" ]; then
      cp+="$CURATOR_JAR_DIR/$jar.jar:"
    else
      missing+=("$CURATOR_JAR_DIR/$jar.jar")
    fi
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    local why="Apache Curator's test client needs ${missing[*]}"
    why+=" (packaging/install-deps.sh test: default-jdk-headless, libcurator-recipes-java)"
    if [ -n "${CI:-}" ]; then
      echo "$why" >&2
      return 1
    fi
    skip_file "$why"
    return 0
  fi
  local dir=$BATS_FILE_TMPDIR/curator
  mkdir -p "$dir"
  javac -nowarn -encoding UTF-8 -d "$dir" -cp "$cp" \
    "$CURATOR_CLIENT_SOURCE" >&2 || return 1
  export CURATOR_CP="$cp$dir"
}

# zpath KEY: the node of dlock's key KEY, for Curator's recipes.
zpath() { echo "/dlock-test/dlock:$1"; }

# curator_args NAME COMMAND PATH ARG...: the java command line of the client as NAME, into
# the array JAVA_ARGS.
curator_args() {
  local name=$1
  shift
  # shellcheck disable=SC2206
  JAVA_ARGS=(java $CURATOR_JAVA_OPTS -Dname="$name" -cp "$CURATOR_CP" CuratorClient
    "${ZK_ADDRESS:-127.0.0.1}:$ZK_PORT" "$@")
}

# curator NAME COMMAND PATH ARG...: the client in the background (BG_PID: the JVM, recorded for
# the teardown), its events (as NAME) appended to the log, its stderr in $T/NAME.err.
curator() {
  curator_args "$@"
  "${JAVA_ARGS[@]}" >>"$T/events" 2>>"$T/$1.err" 3>&- &
  BG_PID=$!
  echo "$BG_PID" >>"$T/bg.pid"
}
# curator_fg NAME COMMAND PATH ARG...: the same in the foreground (for run: its status).
curator_fg() {
  curator_args "$@"
  "${JAVA_ARGS[@]}" >>"$T/events" 2>>"$T/$1.err" 3>&-
}

# logged EVENT: whether the log has the line EVENT ("NAME what"); not_logged EVENT: fails if so.
logged() { grep -qxF -- "$1" "$T/events"; }
not_logged() {
  if logged "$1"; then
    echo "logged too soon: $1"
    return 1
  fi
}
# wait_event EVENT [PID]: until it is logged (30 s at most: JVMs on a loaded machine); fails
# at once, showing NAME's stderr, if the process PID (NAME's) exits first.
wait_event() {
  wait_for "logged '$1'${2:+ || ! alive $2}" 30 || true
  logged "$1" && return 0
  echo "not logged: $1; ${1%% *}'s stderr:"
  cat "$T/${1%% *}.err" 2>/dev/null
  return 1
}
# in_order EVENT...: each was logged, in this order.
in_order() {
  local prev=0 n event
  for event in "$@"; do
    n=$(grep -nxF -m1 -- "$event" "$T/events" | cut -d: -f1)
    if [ -z "$n" ]; then
      echo "not logged: $event"
      return 1
    fi
    if [ "$n" -le "$prev" ]; then
      echo "out of order: '$event' (line $n) came before line $prev"
      return 1
    fi
    prev=$n
  done
}
# most_held: the most holders at once in the log (acquired, not yet releasing).
most_held() {
  awk '$2 == "acquired" { if (++n > m) m = n } $2 == "releasing" { n-- } END { print m + 0 }' \
    "$T/events"
}

# exclusion_ok: whether the log shows no holder beside an exclusive one (a name starting
# with x: a writer or an exclusive lock) and no more than LIMIT (default: any) holders at once.
exclusion_ok() {
  awk -v limit="${1:-0}" '
    $2 == "acquired" {
      if (x > 0 || ($1 ~ /^x/ && n > 0)) { print "overlap: " $0 " at line " NR; bad = 1 }
      n++; if ($1 ~ /^x/) x++
      if (limit > 0 && n > limit) { print "more than " limit " holders at line " NR; bad = 1 }
    }
    $2 == "releasing" { n--; if ($1 ~ /^x/) x-- }
    END { exit bad }' "$T/events"
}

# queued KEY N [PID]: until the lock KEY has N waiters, as dlock status counts them (Curator's
# nodes and dlock's alike); fails at once if the process PID (the last waiter) exits first.
queued() {
  wait_for "[ \"\$(waiters '$1')\" = '$2' ]${3:+ || ! alive $3}" 30 || true
  [ "$(waiters "$1")" = "$2" ] || { echo "$1 has not $2 waiters"; "$DLOCK" status "$1"; return 1; }
}
