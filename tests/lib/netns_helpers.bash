# A private network namespace per bats file, for partition tests (root only): a veth pair whose
# server end (SERVER_IP) stays in the root namespace, where a store's server listens, and whose
# client end (CLIENT_IP) is in the namespace NS, where dlock runs (in_ns). `partition` drops
# every packet between the two inside the namespace (a silent cut: no RST, no ICMP); `heal`
# lets them through again. Clients in the root namespace reach the server over loopback and are
# not cut. A file exports NS_URL, its server's URL at SERVER_IP, for dlock in the namespace.
# Needs store_helpers.bash (skip_file).

# netns_start TAG: creates the namespace and the veth pair (a /30 of its own from the pid, so
# that parallel files do not share addresses); skips the file, saying why, without root,
# iptables or ip. Exports NS, VETH, SERVER_IP, CLIENT_IP.
netns_start() {
  local tag=$1
  if [ "$(id -u)" -ne 0 ]; then
    skip_file "needs root (network namespace, veth pair and iptables); run as root to test a partition"
    return 0
  fi
  if ! command -v iptables >/dev/null; then
    skip_file "needs iptables (packaging/install-deps.sh test installs it)"
    return 0
  fi
  if ! command -v ip >/dev/null; then
    skip_file "needs ip (iproute2)"
    return 0
  fi
  export NS=dlock-$tag-$$
  if ! ip netns add "$NS" 2>"$BATS_FILE_TMPDIR/netns.err"; then
    NS=
    skip_file "cannot create a network namespace here: $(cat "$BATS_FILE_TMPDIR/netns.err")"
    return 0
  fi
  local net=10.$((200 + ${#tag} % 50)).$(($$ % 250 + 1))
  export VETH=dl${tag:0:4}$$ SERVER_IP=$net.1 CLIENT_IP=$net.2
  if ! ip link add "$VETH" type veth peer name "${VETH}n" netns "$NS" 2>"$BATS_FILE_TMPDIR/veth.err"; then
    skip_file "cannot create a veth pair here: $(cat "$BATS_FILE_TMPDIR/veth.err")"
    VETH=
    return 0
  fi
  ip addr add "$SERVER_IP/30" dev "$VETH"
  ip link set "$VETH" up
  in_ns ip link set lo up
  in_ns ip addr add "$CLIENT_IP/30" dev "${VETH}n"
  in_ns ip link set "${VETH}n" up
}

# netns_stop: removes the veth pair and the namespace.
netns_stop() {
  [ -z "${VETH:-}" ] || ip link del "$VETH" 2>/dev/null || true
  [ -z "${NS:-}" ] || ip netns del "$NS" 2>/dev/null || true
}

in_ns() { ip netns exec "$NS" "$@"; }

# partition: inside the namespace, drops every packet to or from the server.
partition() {
  in_ns iptables -I INPUT -s "$SERVER_IP" -j DROP
  in_ns iptables -I OUTPUT -d "$SERVER_IP" -j DROP
}
heal() { in_ns iptables -F INPUT 2>/dev/null; in_ns iptables -F OUTPUT 2>/dev/null; true; }

# netns_setup, netns_teardown: the per-test defaults of a file that loads this one (after
# helpers.bash, whose defaults they replace): a file skipped (skip_file) skips each test, and a
# cut that a failed test left behind is healed.
netns_setup() {
  skip_if_file_skipped
  dlock_setup
  heal
}
netns_teardown() {
  [ -n "${STORE_SKIP:-}" ] || heal
  dlock_teardown
}
setup() { netns_setup; }
teardown() { netns_teardown; }

# The partition scenario, written once for every store: a holder in the namespace, a waiter
# in the root namespace, the cut, and what each must have done. A file's test strings them
# together and adds its store's own bounds, e.g.
#   ns_holder part 4s; outside_waiter part 4s; wait_for QUEUED; cut_holder; waiter_took
#   [ $((LAST - CUT)) -lt 4000 ]    # stopped before the 4 s lease could end

# ns_holder KEY TTL [dlock run options...]: in the namespace, dlock run (against NS_URL) of a
# command that writes its pid to $T/cmd.pid and a heartbeat (the time, ms) to $T/beat every
# 10 ms, dlock's stderr in $T/holder.err; returns once the command beats. Sets HOLDER (dlock's
# pid, recorded for the teardown).
ns_holder() {
  local key=$1 ttl=$2
  shift 2
  in_ns "$DLOCK" -u "$NS_URL" run -k "$key" -t "$ttl" "$@" -- sh -c 'echo $$ >"$T/cmd.pid"
      while :; do date +%s%3N >"$T/beat.tmp"; mv "$T/beat.tmp" "$T/beat"; sleep 0.01; done' \
    2>"$T/holder.err" 3>&- &
  HOLDER=$!
  echo "$HOLDER" >>"$T/bg.pid"
  wait_for "[ -s '$T/cmd.pid' ] && [ -s '$T/beat' ]" 10
}

# outside_waiter KEY TTL: a waiter for the lock outside the namespace, in the root one
# (DLOCK_URL: not cut), -w 30s, whose command writes the time (ms) it got the lock to $T/taken
# (start_bg waiter). Sets WAITER.
outside_waiter() {
  start_bg waiter "$DLOCK" run -k "$1" -t "$2" -w 30s -- sh -c 'date +%s%3N >"$T/taken"'
  WAITER=$BG_PID
}

# cut_holder: cuts the namespace from the server (partition) and waits until the holder's
# command is gone (10 s at most) and dlock exited, which must be with 76. Sets CUT (when the
# cut came, ms), LAST (the command's last heartbeat, ms) and EXITED (ms from the cut to
# dlock's exit).
cut_holder() {
  CUT=$(now_ms)
  partition
  wait_for "gone $(cat "$T/cmd.pid")" 10
  LAST=$(cat "$T/beat")
  local st=0
  wait "$HOLDER" || st=$?
  EXITED=$(($(now_ms) - CUT))
  cat "$T/holder.err"
  echo "command's last heartbeat at +$((LAST - CUT)) ms, dlock exited $st at +$EXITED ms"
  [ "$st" -eq 76 ]
}

# waiter_took: waits for outside_waiter's waiter, which must have exited 0, having taken the
# lock after the holder's command's last heartbeat. Sets TAKEN (when it took the lock, ms).
waiter_took() {
  local st=0
  wait "$WAITER" || st=$?
  cat "$T/waiter.err"
  [ "$st" -eq 0 ]
  TAKEN=$(cat "$T/taken")
  echo "the waiter took the lock at +$((TAKEN - CUT)) ms"
  [ "$TAKEN" -gt "$LAST" ]
}

# An election's candidates in a partition test run `sh "$T/witness.sh" NAME` (elect_witness
# writes it): the command appends "start NAME NS" to $T/witness as it starts, and "stop NAME
# NS" once, at the first SIGTERM or SIGINT, or when $T/NAME.go appears (NS: date +%s%N).
elect_witness() {
  cat >"$T/witness.sh" <<'SCRIPT'
echo "start $1 $(date +%s%N)" >>"$T/witness"
trap 'trap "" TERM INT; echo "stop $1 $(date +%s%N)" >>"$T/witness"; exit 0' TERM INT
until [ -e "$T/$1.go" ]; do sleep 0.02; done
echo "stop $1 $(date +%s%N)" >>"$T/witness"
SCRIPT
}
# witness_at EVENT NAME: the NS of the witness line "EVENT NAME NS", or nothing.
witness_at() { awk -v e="$1" -v n="$2" '$1 == e && $2 == n { print $3; exit }' "$T/witness" 2>/dev/null; }
# witness_order: the witness's events in the order of their times: "start a,stop a,start b,".
witness_order() { sort -n -k3 "$T/witness" | cut -d' ' -f1,2 | tr '\n' ,; }
