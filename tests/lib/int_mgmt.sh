# shellcheck shell=bash
# The management network of the INT system tests (int_netns_test.sh,
# int_decisions_netns_test.sh): a bridge P-mgmt in the root namespace at
# MGMT.254, where agg-intcollector runs, and a veth mgmt0 into each switch's
# namespace at MGMT.<node id>. Sourced after tests/lib/topology.sh, by a test
# that defines MGMT, SWITCHES and NODE=([NAME]=id).
#
#   int_mgmt_network
#   check "the collector listens" until_collector 127.0.0.1:19543
#   int_mgmt_cleanup   # in the EXIT trap

int_mgmt_network() {
  local p="$TOPO_PREFIX" s
  ip link del "$p-mgmt" 2>/dev/null
  ip link add "$p-mgmt" type bridge
  ip addr add "$MGMT.254/24" dev "$p-mgmt"
  ip link set "$p-mgmt" up
  for s in "${SWITCHES[@]}"; do
    ip link add "$p-m$s" type veth peer name mgmt0 netns "$(topo_ns "$s")"
    ip link set "$p-m$s" master "$p-mgmt" up
    ip -n "$(topo_ns "$s")" addr add "$MGMT.${NODE[$s]}/24" dev mgmt0
    ip -n "$(topo_ns "$s")" link set mgmt0 up
  done
}

int_mgmt_cleanup() { ip link del "$TOPO_PREFIX-mgmt" 2>/dev/null; }

# until_collector ADDR:PORT: agg-intcollector answers on its HTTP address
# within 5 s.
until_collector() {
  local i
  for i in $(seq 50); do
    curl -fsS -m 1 "http://$1/api/v1/stats" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}
