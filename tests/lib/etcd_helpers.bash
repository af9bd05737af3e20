# A private etcd server per bats file, for the etcd:// store (tests/stores/etcd).
#
# start_etcd [etcd args...]: etcd with its data in a fresh directory under /tmp, serving
# clients on a loopback port the kernel hands out (free_port) and peers on another; started
# again on new ports if it lost the race for one. Exports ETCD_DIR, ETCD_PORT, ETCD_PID,
# ETCD_ENDPOINT (http://127.0.0.1:PORT, for etcdctl) and DLOCK_URL (etcd://127.0.0.1:PORT).
# ETCD_LISTEN (default 127.0.0.1) widens where clients may connect (the partition test);
# ETCD_SCHEME=https serves clients over TLS (with the certificates given as etcd args, and
# ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY exported for etcdctl).
# Skips the file when etcd or etcdctl is not installed.

load "${BASH_SOURCE[0]%/*}/store_helpers"

: "${ETCD:=$(command -v etcd || true)}"
: "${ETCDCTL:=$(command -v etcdctl || true)}"

start_etcd() {
  if [ -z "$ETCD" ] || [ -z "$ETCDCTL" ]; then
    skip_file "etcd and etcdctl not found (install etcd-server and etcd-client)"
    return 0
  fi
  if "$DLOCK" --version 2>&1 | grep -qi 'libcurl not'; then
    skip_file "etcd:// needs libcurl: $("$DLOCK" --version 2>&1 | grep -io 'libcurl not[^;)]*')"
    return 0
  fi
  ETCD_DIR=$(mktemp -d /tmp/dlock-etcd.XXXXXX)
  export ETCD_DIR
  local try listen host
  for try in 1 2 3 4 5; do
    ETCD_PORT=$(free_port)
    local peer
    peer=$(free_port)
    rm -rf "$ETCD_DIR/data" "$ETCD_DIR/etcd.log"
    listen=""
    for host in ${ETCD_LISTEN:-127.0.0.1}; do
      listen+="${listen:+,}${ETCD_SCHEME:-http}://$host:$ETCD_PORT"
    done
    "$ETCD" --name dlock-test --data-dir "$ETCD_DIR/data" \
      --listen-client-urls "$listen" --advertise-client-urls "${ETCD_SCHEME:-http}://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "dlock-test=http://127.0.0.1:$peer" --log-level error \
      --unsafe-no-fsync "$@" >"$ETCD_DIR/etcd.log" 2>&1 3>&- &
    ETCD_PID=$!
    export ETCD_PORT ETCD_PID ETCD_ENDPOINT=${ETCD_SCHEME:-http}://127.0.0.1:$ETCD_PORT
    if wait_for "ectl endpoint health >/dev/null 2>&1 || ! kill -0 $ETCD_PID 2>/dev/null" 20 &&
      kill -0 "$ETCD_PID" 2>/dev/null; then
      break
    fi
    kill -KILL "$ETCD_PID" 2>/dev/null || true
    ETCD_PID=
    grep -qs 'address already in use' "$ETCD_DIR/etcd.log" || break
  done
  if [ -z "${ETCD_PID:-}" ]; then
    skip_file "etcd did not start: $(tail -n 3 "$ETCD_DIR/etcd.log" | tr '\n' ' ')"
    return 0
  fi
  export DLOCK_URL=etcd://127.0.0.1:$ETCD_PORT
  unset DLOCK_PASSWORD DLOCK_PASSWORD_FILE
}

stop_etcd() {
  if [ -n "${ETCD_PID:-}" ]; then
    kill -TERM "$ETCD_PID" 2>/dev/null || true
    local i
    for i in $(seq 50); do kill -0 "$ETCD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$ETCD_PID" 2>/dev/null || true
  fi
  if [ -n "${ETCD_DIR:-}" ] && [[ $ETCD_DIR == /tmp/dlock-etcd.* ]]; then
    rm -rf "$ETCD_DIR"
  fi
}

# ectl ARGS...: etcdctl (API v3) against this file's server.
ectl() { ETCDCTL_API=3 "$ETCDCTL" --endpoints "$ETCD_ENDPOINT" --dial-timeout 2s "$@"; }

# The hooks of store.bats (store_helpers.bash).
STORE_FEATURES="fair shared limit coordinate detached loss_notice fencing end_sessions min_hold lock_delay replace supersede keep elect history"
STORE_LOSS="its etcd lease expired or was revoked"

store_start() { start_etcd; }
store_stop() { stop_etcd; }

# Revokes every lease (each dlock holder and waiter has one); prints how many.
store_end_sessions() {
  local lease n=0
  for lease in $(ectl lease list | sed -n 's/^\([0-9a-f]\{4,\}\)$/\1/p'); do
    ectl lease revoke "$lease" >/dev/null 2>&1 && n=$((n + 1))
  done
  echo "$n"
}
