#!/usr/bin/env bash
# The quick-start demo: aggswitch on the embedded default config, with four
# hosts in network namespaces on veth pairs. The switch's ports are AF_XDP
# sockets (net_af_xdp) where the machine allows, else af_packet; it says
# which. It checks that the switch switches (pings across access and trunk
# ports, and to the switch), then runs the main job: the four hosts allreduce
# a few MB of float32 through the switch with agg-worker, every rank
# verifying the result bit for bit. With AF_XDP ports the workers send over
# AF_XDP too.
#
#   demo-h0 (access 10)  10.0.10.1  ── agg-sw0 ┐
#   demo-h1 (access 10)  10.0.10.2  ── agg-sw1 │
#   demo-h2 (trunk 20, native 10) eth0 10.0.10.3, ├─ aggswitch  10.0.10.254 (also the
#                         eth0.20 10.0.20.3 ── agg-sw2 │   aggregation address), 10.0.20.254
#   demo-h3 (access 10)  10.0.10.4  ── agg-sw3 ┘   (VLAN 20)
#
#   scripts/demo.sh [BUILD_DIR] [--size 8M] [--iterations 5] [--keep]
#     --keep: leave the switch and the namespaces up until Ctrl-C
#
# Exit status: 0 only when every ping was answered and every rank verified
# every allreduce.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR="$ROOT/build"
KEEP=0
SIZE=8M
ITERATIONS=5
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) KEEP=1 ;;
    --size) SIZE="$2"; shift ;;
    --iterations) ITERATIONS="$2"; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) BUILD_DIR=$(realpath "$1") ;;
  esac
  shift
done
AGGSWITCH="$BUILD_DIR/tools/aggswitch/aggswitch"
AGGCTL="$BUILD_DIR/tools/aggctl/aggctl"
AGG_WORKER="$BUILD_DIR/tools/agg-worker/agg-worker"
METRICS=http://127.0.0.1:9477/metrics
source "$ROOT/tests/lib/topology.sh"

if [ "$(id -u)" -ne 0 ]; then echo "demo: needs root for network namespaces (try sudo)"; exit 1; fi
for bin in "$AGGSWITCH" "$AGGCTL" "$AGG_WORKER"; do
  [ -x "$bin" ] || { echo "demo: $bin is missing: build first (scripts/build.sh)"; exit 1; }
done

WORK=$(mktemp -d /tmp/aggswitch-demo.XXXXXX)
topo_init demo
trap 'topo_cleanup; rm -rf "$WORK"' EXIT
topo_host h0 agg-sw0
topo_host h1 agg-sw1
topo_host h2 agg-sw2
topo_host h3 agg-sw3
topo_addr h0 eth0 10.0.10.1/24
topo_addr h1 eth0 10.0.10.2/24
topo_addr h2 eth0 10.0.10.3/24   # VLAN 10 is the trunk's native VLAN: untagged
topo_vlan h2 20 10.0.20.3/24
topo_addr h3 eth0 10.0.10.4/24

LOG=/tmp/aggswitch-demo.log
if ! http_port_free 9477; then
  echo "demo: stop whatever holds port 9477 (an aggswitch still running?) and try again"; exit 1
fi
choose_port_driver
# start_demo_switch: the embedded default, or with AF_XDP ports the same
# config with net_af_xdp devargs and room in the pool for their fill rings.
start_demo_switch() {
  local args=()
  if [ "$AGG_PORT_DRIVER" = net_af_xdp ]; then
    sed -E -e 's/net_af_packet([0-9]),iface=/net_af_xdp\1,iface=/' -e 's/^  mbufs: [0-9]+$/  mbufs: 32767/' \
      "$ROOT/config/examples/default.yaml" >"$WORK/switch.yaml"
    args=(--config "$WORK/switch.yaml")
  fi
  "$AGGSWITCH" "${args[@]}" >"$LOG" 2>&1 &
  SWITCH_PID=$!
  topo_track_pid "$SWITCH_PID"
  wait_switch "$SWITCH_PID" "http://127.0.0.1:9477" 30
}
if ! start_demo_switch; then
  if [ "$AGG_PORT_DRIVER" != net_af_xdp ]; then
    echo "demo: aggswitch did not start; log:"; cat "$LOG"; exit 1
  fi
  echo "demo: aggswitch did not start on AF_XDP ports; falling back to af_packet. Its log:"
  grep -v '^libbpf: elf: skipping' "$LOG" | tail -5 | sed 's/^/  /'
  kill "$SWITCH_PID" 2>/dev/null; wait "$SWITCH_PID" 2>/dev/null
  AGG_PORT_DRIVER=net_af_packet
  echo "ports: net_af_packet (fallback)"
  if ! start_demo_switch; then echo "demo: aggswitch did not start; log:"; cat "$LOG"; exit 1; fi
fi
echo "aggswitch is up (log: $LOG); metrics at $METRICS"
echo

ok=0; total=0
ping_from() {
  local host="$1" dst="$2" what="$3"
  total=$((total + 1))
  if topo_exec "$host" ping -c 3 -i 0.2 -W 1 -q "$dst" >/dev/null 2>&1; then
    ok=$((ok + 1)); printf '  %-48s %s\n' "$what" "ok"
  else
    printf '  %-48s %s\n' "$what" "NO REPLY"
  fi
}
echo "Pings through the switch:"
ping_from h0 10.0.10.2 "h0 -> h1        (access -> access)"
ping_from h0 10.0.10.3 "h0 -> h2        (access -> trunk, native)"
ping_from h2 10.0.10.4 "h2 -> h3        (trunk, native -> access)"
ping_from h3 10.0.10.254 "h3 -> switch    (10.0.10.254)"
ping_from h2 10.0.20.254 "h2.20 -> switch (10.0.20.254, VLAN 20 tagged)"
echo

# --- The main job: a verified allreduce among the four hosts -----------------
HOSTS=(h0 h1 h2 h3)
TRANSPORTS=(udp udp udp udp)
if [ "$AGG_PORT_DRIVER" = net_af_xdp ]; then TRANSPORTS=(af_xdp af_xdp af_xdp af_xdp); fi
echo "Allreduce: 4 ranks (h0, h1, h2 over the trunk, h3), $SIZE of float32 each,"
echo "sum, $ITERATIONS iterations, through the switch at 10.0.10.254 (job 1, registered in-band):"
pids=()
for rank in 0 1 2 3; do
  transport=(--transport "${TRANSPORTS[$rank]}")
  [ "${TRANSPORTS[$rank]}" = af_xdp ] && transport+=(--iface eth0)
  topo_exec "${HOSTS[$rank]}" "$AGG_WORKER" --rank "$rank" --world 4 --job 1 --key 0xdec0 \
    --switch 10.0.10.254 --size "$SIZE" --dtype float32 --op sum --iterations "$ITERATIONS" \
    "${transport[@]}" --verify --quiet --json "$WORK/rank$rank.json" >"$WORK/rank$rank.log" 2>&1 &
  pids+=($!)
done
verified=0
for rank in 0 1 2 3; do
  wait "${pids[$rank]}"
  code=$?
  summary=$(python3 - "$WORK/rank$rank.json" <<'EOF' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['algbw_bytes_per_s'] * 8 / 1e9:.2f} Gbit/s algorithm bandwidth, "
      f"median {r['latency_s']['median'] * 1e3:.1f} ms per allreduce, "
      f"{r['client']['retransmissions']} retransmissions")
EOF
  )
  if [ "$code" -eq 0 ]; then
    verified=$((verified + 1))
    printf '  rank %d (%s, %s): verified   %s\n' "$rank" "${HOSTS[$rank]}" "${TRANSPORTS[$rank]}" "$summary"
  else
    printf '  rank %d (%s): FAILED (exit %d); its output:\n' "$rank" "${HOSTS[$rank]}" "$code"
    sed 's/^/      /' "$WORK/rank$rank.log" | tail -15
  fi
done
echo
"$AGGCTL" jobs show
echo
echo "A few of the metrics ($METRICS):"
curl -fsS "$METRICS" |
  grep -E '^aggswitch_aggregation_(contributions|completions|results_sent|job_completions|job_contributions)_total|^aggswitch_lcore_icmp_replies_total' |
  sed 's/^/  /'
echo
echo "demo: $ok/$total pings answered, $verified/4 ranks verified every allreduce"
if [ "$KEEP" -eq 1 ]; then
  echo "Running until Ctrl-C. Try: $AGGCTL stats   |   $AGGCTL slots   |   ip netns exec demo-h0 ping 10.0.10.3"
  wait
fi
[ "$ok" -eq "$total" ] && [ "$verified" -eq 4 ]
