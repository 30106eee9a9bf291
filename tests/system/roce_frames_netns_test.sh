#!/usr/bin/env bash
# System test: RoCEv2 frames through aggswitch's L2 path, byte for byte.
#
#   h0 (access 10)    ── rf-p0 ┐
#   h1 (access 10)    ── rf-p1 ├─ aggswitch (plain L2: no aggregation section)
#   h2 (trunk 10,20)  ── rf-p2 │
#   h3 (trunk 10,20)  ── rf-p3 ┘
#
# h0, h2 and h3 send ten flows of RoCEv2 frames at once (UDP to 4791, a BTH
# whose PSN counts the flow's frames, a RETH on RDMA WRITEs, a payload, the
# ICRC), from raw AF_PACKET sockets, each flow with its own DSCP and ECN and,
# tagged, its own PCP and DEI, interleaved with broadcasts and other UDP;
# h0, h1, h2 and h3 capture what arrives. Every frame must arrive exactly
# once, in its flow's order, at its destination only, equal byte for byte to
# the frame sent with the tag change its path makes (roce_frames.py holds the
# flows and says which). The kernel here may lack 8021q, so tags are written
# and read on raw sockets: on receive the kernel moves the tag into
# PACKET_AUXDATA, and the capture puts it back, TCI and all.
#
# Usage: roce_frames_netns_test.sh AGGSWITCH [FRAMES_PER_FLOW]
# Needs root (namespaces, AF_PACKET). Everything is torn down on exit, pass
# or fail.
set -u
AGGSWITCH=$(realpath "$1")
FRAMES=${2:-400}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-rf.XXXXXX)
HTTP_PORT=19486
PREFIX="agg-rf-$$"
ROCE="$HERE/roce_frames.py"
HOSTS=(h0 h1 h2 h3)
SENDERS=(h0 h2 h3)

topo_init rf
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

for i in 0 1 2 3; do
  topo_host "h$i" "rf-p$i"
  # No IPv6 and no addresses: the hosts' kernels stay quiet, and the only
  # frames on the wire are the test's.
  topo_exec "h$i" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.eth0.disable_ipv6=1
done

cat >"$WORK/switch.yaml" <<EOF
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX
switch:
  mac: 02:a9:9c:00:00:01
ports:
  - {name: p0, devargs: "net_af_packet_rf0,iface=rf-p0,framecnt=2048", access: 10}
  - {name: p1, devargs: "net_af_packet_rf1,iface=rf-p1,framecnt=2048", access: 10}
  - {name: p2, devargs: "net_af_packet_rf2,iface=rf-p2,framecnt=2048", trunk: [10, 20]}
  - {name: p3, devargs: "net_af_packet_rf3,iface=rf-p3,framecnt=2048", trunk: [10, 20]}
workers:
  - {lcore: 1, rx: [p0, p1, p2, p3]}
mac_table: {size: 1024, aging_seconds: 300}
mempool: {mbufs: 16383}
http: {listen: "127.0.0.1:$HTTP_PORT"}
EOF

check "config validates" "$AGGSWITCH" --config "$WORK/switch.yaml" --check-config
if ! run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/aggswitch.log"; then
  fail "aggswitch did not come up"; finish; exit 1
fi
# shellcheck disable=SC2034 # stop_switch shows its tail
SWITCH_LOG="$WORK/aggswitch.log"

MACS=()
for h in "${HOSTS[@]}"; do MACS+=(--mac "$h=$(topo_mac "$h")"); done

# Every host announces itself in its VLANs, so that the frames of the flows
# go as known unicast, not floods.
topo_exec h0 python3 "$ROCE" learn
topo_exec h1 python3 "$ROCE" learn
topo_exec h2 python3 "$ROCE" learn --vlans 10,20
topo_exec h3 python3 "$ROCE" learn --vlans 10,20
# learned: the MAC table has each host in each of its VLANs on its port.
learned() {
  local i
  for i in $(seq 1 50); do
    curl -fsS "http://127.0.0.1:$HTTP_PORT/api/v1/mac" | python3 -c '
import json, sys
want = set(sys.argv[1:])
have = {"%s/%s/%s" % (e["mac"].lower(), e["vlan"], e["port"]) for e in json.load(sys.stdin)["entries"]}
missing = sorted(want - have)
if missing:
    sys.exit(f"not learned (MAC/VLAN/port): {missing}")' \
      "$(topo_mac h0)/10/p0" "$(topo_mac h1)/10/p1" \
      "$(topo_mac h2)/10/p2" "$(topo_mac h2)/20/p2" "$(topo_mac h3)/10/p3" "$(topo_mac h3)/20/p3" &&
      return 0
    sleep 0.1
  done
  return 1
}
check "the switch learned every host in its VLANs" learned

# Captures first, then the three senders at once.
CAPTURES=()
for h in "${HOSTS[@]}"; do
  ip netns exec "$(topo_ns "$h")" python3 "$ROCE" recv --out "$WORK/got.$h" \
    --ready "$WORK/ready.$h" >"$WORK/recv.$h.log" 2>&1 &
  CAPTURES+=($!)
  topo_track_pid $!
done
captures_ready() {
  local h i
  for h in "${HOSTS[@]}"; do
    for i in $(seq 1 50); do [ -e "$WORK/ready.$h" ] && break; sleep 0.1; done
    [ -e "$WORK/ready.$h" ] || { echo "no capture on $h"; cat "$WORK/recv.$h.log"; return 1; }
  done
}
check "captures run on every host" captures_ready

send_all() {
  local h pids=() rc=0
  for h in "${SENDERS[@]}"; do
    topo_exec "$h" python3 "$ROCE" send --host "$h" "${MACS[@]}" --frames "$FRAMES" \
      --out "$WORK/sent.$h" >"$WORK/send.$h.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { rc=1; echo "sender ${SENDERS[$i]} failed:"; }
    cat "$WORK/send.${SENDERS[$i]}.log"
    report "$(tail -1 "$WORK/send.${SENDERS[$i]}.log")"
  done
  return $rc
}
check "h0, h2 and h3 send $FRAMES RoCEv2 frames per flow at once, with other traffic" send_all

# The frames in flight land; then the captures write what they saw.
sleep 1
for pid in "${CAPTURES[@]}"; do kill -TERM "$pid" 2>/dev/null; done
for pid in "${CAPTURES[@]}"; do wait "$pid"; done

compare() {
  local sent=() got=() h
  for h in "${SENDERS[@]}"; do sent+=(--sent "$h=$WORK/sent.$h"); done
  for h in "${HOSTS[@]}"; do got+=(--got "$h=$WORK/got.$h"); done
  python3 "$ROCE" check "${sent[@]}" "${got[@]}" >"$WORK/check.out" 2>&1
  local rc=$?
  grep -v -E '^(ok |NOT|total:)' "$WORK/check.out"
  while read -r line; do report "$line"; done < <(grep -E '^(ok |NOT|total:)' "$WORK/check.out")
  return $rc
}
CHECK_TAIL_LINES=40 check "every RoCEv2 frame arrived once, in order, byte for byte, DSCP/ECN and PCP/DEI as expected" compare

# The switch's own view: no frame dropped on the way.
no_drops() {
  curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" >"$WORK/metrics.txt" || return 1
  awk '/^aggswitch_port_(dropped_packets|device_missed_packets|device_tx_errors)_total\{/ && $2 != 0' "$WORK/metrics.txt" |
    grep . && return 1
  return 0
}
check "the switch dropped and missed nothing" no_drops

check "SIGTERM stops aggswitch with exit 0" stop_switch

finish
