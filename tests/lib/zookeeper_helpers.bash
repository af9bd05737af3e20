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
      [ "$(zk_4lw ruok)" = imok ] && return 0
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
# exclusive dlock contender is a pair: grep -- -lock- for one line each).
zk_contenders() {
  zk_cli ls -R /dlock-test | grep -E '/_c_[0-9a-f-]{36}-(lock-|__READ__|__WRIT__)[0-9]{10}$' || true
}

# The hooks of store.bats (store_helpers.bash).
STORE_FEATURES="shared limit fair coordinate loss_notice min_hold lock_delay replace supersede keep elect"
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
