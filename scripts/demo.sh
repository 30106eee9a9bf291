#!/usr/bin/env bash
# The quick-start demo: aggswitch on the embedded default config, forwarding
# between three network namespaces over af_packet/veth ports.
#
#   demo-h0 (access 10)  10.0.10.1  ── agg-sw0 ┐
#   demo-h1 (access 10)  10.0.10.2  ── agg-sw1 ├─ aggswitch  10.0.10.254, 10.0.20.254 (VLAN 20)
#   demo-h2 (trunk 10,20) eth0.10 10.0.10.3,   │
#                         eth0.20 10.0.20.3 ── agg-sw2 ┘
#
#   scripts/demo.sh [BUILD_DIR] [--keep]   --keep: leave it running until Ctrl-C
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR="$ROOT/build"
KEEP=0
for arg in "$@"; do
  case "$arg" in
    --keep) KEEP=1 ;;
    *) BUILD_DIR=$(realpath "$arg") ;;
  esac
done
AGGSWITCH="$BUILD_DIR/tools/aggswitch/aggswitch"
AGGCTL="$BUILD_DIR/tools/aggctl/aggctl"
source "$ROOT/tests/lib/topology.sh"

if [ "$(id -u)" -ne 0 ]; then echo "demo: needs root for network namespaces (try sudo)"; exit 1; fi

topo_init demo
topo_host h0 agg-sw0
topo_host h1 agg-sw1
topo_host h2 agg-sw2
topo_addr h0 eth0 10.0.10.1/24
topo_addr h1 eth0 10.0.10.2/24
topo_vlan h2 10 10.0.10.3/24
topo_vlan h2 20 10.0.20.3/24

LOG=/tmp/aggswitch-demo.log
"$AGGSWITCH" >"$LOG" 2>&1 &
topo_track_pid $!
if ! wait_http http://127.0.0.1:9477/metrics 30; then
  echo "demo: aggswitch did not start; log:"; cat "$LOG"; exit 1
fi
echo "aggswitch is up (log: $LOG); metrics at http://127.0.0.1:9477/metrics"
echo

ok=0; total=0
ping_from() {
  local host="$1" dst="$2" what="$3"
  total=$((total + 1))
  if topo_exec "$host" ping -c 3 -i 0.2 -W 1 -q "$dst" >/dev/null 2>&1; then
    ok=$((ok + 1)); printf '  %-40s %s\n' "$what" "ok"
  else
    printf '  %-40s %s\n' "$what" "NO REPLY"
  fi
}
echo "Pings through the switch:"
ping_from h0 10.0.10.2 "h0 -> h1        (access -> access)"
ping_from h0 10.0.10.3 "h0 -> h2.10     (access -> trunk)"
ping_from h2 10.0.10.2 "h2.10 -> h1     (trunk -> access)"
ping_from h0 10.0.10.254 "h0 -> switch    (10.0.10.254)"
ping_from h2 10.0.20.254 "h2.20 -> switch (10.0.20.254, VLAN 20)"
echo
"$AGGCTL" ports
echo
"$AGGCTL" mac
echo
echo "A few of the metrics:"
curl -fsS http://127.0.0.1:9477/metrics |
  grep -E '^aggswitch_(port_rx_packets_total|port_tx_packets_total|lcore_arp_replies_total|lcore_icmp_replies_total|mac_table_entries)|^aggswitch_port_dropped_packets_total.* [1-9]' |
  sed 's/^/  /'
echo "  (drops on p2 are h2's own IPv6 chatter: untagged on a trunk without native VLAN is"
echo "   vlan_not_allowed, and VLAN 20 multicast has no other port to go to: no_egress)"
echo
echo "demo: $ok/$total pings answered"
if [ "$KEEP" -eq 1 ]; then
  echo "Running until Ctrl-C. Try: $AGGCTL stats   |   ip netns exec demo-h0 ping 10.0.10.3"
  wait
fi
[ "$ok" -eq "$total" ]
