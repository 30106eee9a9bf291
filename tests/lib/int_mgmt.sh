# shellcheck shell=bash
# What the INT system tests (int_netns_test.sh, int_decisions_netns_test.sh)
# share: the management network, a bridge P-mgmt in the root namespace at
# MGMT.254, where agg-intcollector runs, and a veth mgmt0 into each switch's
# namespace at MGMT.<node id>; and the switches' configs. Sourced after
# tests/lib/topology.sh, by a test that defines MGMT, SWITCHES,
# NODE=([NAME]=id), HTTP=([NAME]=port), REPORTS (the collector's UDP
# address), WORK and DPDK_TAG (its EAL file prefixes are agg-DPDK_TAG-NAME-PID).
#
#   int_mgmt_network
#   int_switch_config leafa 02:a9:9c:00:78:01 "h1:veth1:edge" "up:veth2:fabric:ups:20000" >leafa.yaml
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

# int_switch_config NAME MAC PORTS...: a switch's config, its telemetry
# section open for a watch list to follow. PORTS are
# "name:iface:role[:group[:delay_us]]", every port in VLAN 10; a delay is
# injected on the port's TX. The API listens on every address (127.0.0.1 in
# the namespace, MGMT.<node> from the collector).
int_switch_config() {
  local name="$1" mac="$2" port n i r g d extra
  shift 2
  cat <<EOF
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 256
  file_prefix: agg-$DPDK_TAG-$name-$$
  idle_sleep_us: 100
switch: {name: $DPDK_TAG-$name, mac: $mac}
http: {listen: "0.0.0.0:${HTTP[$name]}", token_file: "$WORK/$name.token"}
mempool: {mbufs: 4095}
ports:
EOF
  for port in "$@"; do
    IFS=: read -r n i r g d <<<"$port"
    extra=""
    [ -n "$g" ] && extra+=", group: $g"
    [ -n "$d" ] && extra+=", faults: {delay_us: $d, direction: tx}"
    echo "  - {name: $n, devargs: \"net_af_packet_$DPDK_TAG$n,iface=$i\", access: 10, role: $r$extra}"
  done
  cat <<EOF
telemetry:
  node_id: ${NODE[$name]}
  collector: "$REPORTS"
EOF
}
