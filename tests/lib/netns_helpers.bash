# A private network namespace per bats file, for partition tests (root only): a veth pair whose
# server end (SERVER_IP) stays in the root namespace, where a store's server listens, and whose
# client end (CLIENT_IP) is in the namespace NS, where dlock runs (in_ns). `partition` drops
# every packet between the two inside the namespace (a silent cut: no RST, no ICMP); `heal`
# lets them through again. Clients in the root namespace reach the server over loopback and are
# not cut. Needs store_helpers.bash (skip_file).

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
