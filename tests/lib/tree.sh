# The aggregation tree of tests/system/tree_netns_test.sh and
# bench/stragglers.sh: two leaves and a spine, eight worker hosts, a TAN host.
# Sourced after tests/lib/topology.sh and topo_init.
#
#   topo_init tr
#   tree_topology 10.0.47 10.0.47.50
#
# Namespaces (P = the topo_init prefix):
#   P-leafa, P-leafb, P-spine   one switch process each, ports P-a0..P-a3 /
#                               P-b0..P-b3 / P-st, uplinks P-aup<->P-sa and
#                               P-bup<->P-sb (both ends af_packet ports)
#   P-w0..P-w7                  the ranks: 0-3 under leaf A, 4-7 under leaf B,
#                               eth0 = NET.(rank+21)/24 (NET.1-.20 are
#                               left to the switches: a worker must not
#                               answer ARP for a switch's address)
#   P-tan                       under the spine, eth0 = TAN_IP/24
#
# Each switch runs in a namespace of its own. DPDK 22.11's af_packet PMD puts
# each socket in the PACKET_FANOUT group (pid ^ ifindex) & 0xffff, and fanout
# groups are per network namespace: two switch processes in one namespace
# collide whenever their pids and ifindexes XOR alike (consecutive pids and
# ifindexes often do), and the second fails to probe the port ("could not set
# PACKET_FANOUT ... Invalid argument"). Their own namespaces also keep a
# starting switch's sockets, open but not yet bound to their interface, from
# taking in another switch's traffic. Two switches on the two ends of one veth
# pair work.

# tree_switch_ns NAME: the namespace P-NAME; no IPv6 on the ports moved into
# it (the kernel would send ND/MLD there, which af_packet captures).
tree_switch_ns() {
  local ns; ns=$(topo_ns "$1")
  ip netns del "$ns" 2>/dev/null || true
  ip netns add "$ns"
  TOPO_NAMESPACES+=("$ns")
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
}

# tree_into_switch IFACE SWITCH: moves a switch-side veth end into the
# switch's namespace and brings it up there.
tree_into_switch() {
  ip link set "$1" netns "$(topo_ns "$2")"
  ip -n "$(topo_ns "$2")" link set "$1" up
}

# tree_uplink LEAF_IFACE LEAF SPINE_IFACE: a veth pair from a leaf's
# namespace to the spine's.
tree_uplink() {
  local a b
  a=$(topo_ns "$2")
  b=$(topo_ns spine)
  ip link add "$1" netns "$a" type veth peer name "$3" netns "$b"
  ip netns exec "$a" ethtool -K "$1" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  ip netns exec "$b" ethtool -K "$3" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  ip -n "$a" link set "$1" up
  ip -n "$b" link set "$3" up
}

# tree_topology NET TAN_IP: the whole tree (above).
tree_topology() {
  local net="$1" tan_ip="$2" p="$TOPO_PREFIX" s r
  for s in leafa leafb spine; do tree_switch_ns "$s"; done
  for r in 0 1 2 3 4 5 6 7; do
    if [ "$r" -lt 4 ]; then
      topo_host "w$r" "$p-a$r" && tree_into_switch "$p-a$r" leafa
    else
      topo_host "w$r" "$p-b$r" && tree_into_switch "$p-b$r" leafb
    fi
    topo_addr "w$r" eth0 "$net.$((r + 21))/24"
  done
  topo_host tan "$p-st" && tree_into_switch "$p-st" spine
  topo_addr tan eth0 "$tan_ip/24"
  tree_uplink "$p-aup" leafa "$p-sa"
  tree_uplink "$p-bup" leafb "$p-sb"
}
