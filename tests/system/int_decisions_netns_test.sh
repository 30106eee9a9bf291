#!/usr/bin/env bash
# System test: path decisions applied (docs/telemetry.md, "Decisions
# applied"). Two leaves, two spines and a direct link between the leaves,
# each switch an aggswitch process in a namespace of its own; each leaf's
# three links toward the other leaf are one uplink group. agg-intcollector
# sits on the management network and reaches every switch's API there.
#
#                     ┌══ s1 ══ spine1 (node 2, +40 ms toward leafb) ══ s1 ══┐
#   h1 10.0.80.1 ── leafa (1) ══ s2 ══ spine2 (node 3) ══ s2 ══ leafb (4) ── h2 10.0.80.2
#                     └══ direct (+20 ms out of leafa) ═══════════ direct ═══┘
#
# leafa watches every UDP datagram to h2. Checks:
#   1. with no decision, the flow hash spreads 48 flows over the three
#      members: the collector sees all three paths, two of 3 hops (via each
#      spine) and one of 2 (direct), and flooding never loops;
#   2. the collector, started with --apply min_latency, decides for spine2
#      (neither delayed) and pushes the decision to every switch of the path;
#      leafa and spine2 show it in GET /api/v1/int/decisions;
#   3. from then on every datagram to h2 leaves leafa by s2 (the decided
#      counter of s2, none on the others) and the new traversals all run
#      leafa - spine2 - leafb;
#   4. restarted with --apply fewest_hops, it decides the 2-hop direct link
#      over the 3-hop paths (though slower than spine2), and the traffic
#      moves there;
#   5. h2 receives every datagram of every phase;
#   6. aggctl int decisions shows leafa's group and decision, and a
#      decision naming a port leafa does not have is refused.
#
# Usage: int_decisions_netns_test.sh AGGSWITCH AGG_INTCOLLECTOR AGGCTL
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
COLLECTOR=$(realpath "$2")
AGGCTL=$(realpath "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/tree.sh
source "$HERE/../lib/tree.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"
# shellcheck source=tests/lib/switches.sh
source "$HERE/../lib/switches.sh"
# shellcheck source=tests/lib/int_mgmt.sh
source "$HERE/../lib/int_mgmt.sh"
CHECK_TAIL_LINES=40

WORK=$(mktemp -d /tmp/aggswitch-intd.XXXXXX)
NET=10.0.80
MGMT=10.0.81
REPORTS=$MGMT.254:19552
COLLECTOR_HTTP=127.0.0.1:19553
SWITCHES=(leafa spine1 spine2 leafb)
declare -A NODE=([leafa]=1 [spine1]=2 [spine2]=3 [leafb]=4)
declare -A HTTP=([leafa]=19554 [spine1]=19555 [spine2]=19556 [leafb]=19557)
declare -A SWITCH_PID=()
COLLECTOR_PID=""
TRAFFIC=(python3 "$HERE/int_traffic.py")
FLOWS=48
DPDK_TAG=id

topo_init id
P=$TOPO_PREFIX
cleanup_all() {
  [ -n "$COLLECTOR_PID" ] && kill "$COLLECTOR_PID" 2>/dev/null && wait "$COLLECTOR_PID" 2>/dev/null
  topo_cleanup
  int_mgmt_cleanup
  rm -rf "$WORK" /var/run/dpdk/agg-$DPDK_TAG-*-$$
}
trap cleanup_all EXIT

# --- Topology.
link() {  # link IFACE_A SWITCH_A IFACE_B SWITCH_B: a veth pair between two switches
  local a b
  a=$(topo_ns "$2")
  b=$(topo_ns "$4")
  ip link add "$1" netns "$a" type veth peer name "$3" netns "$b"
  ip netns exec "$a" ethtool -K "$1" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  ip netns exec "$b" ethtool -K "$3" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  ip -n "$a" link set "$1" up
  ip -n "$b" link set "$3" up
}
for s in "${SWITCHES[@]}"; do tree_switch_ns "$s"; done
topo_host h1 "$P-a0" && tree_into_switch "$P-a0" leafa
topo_host h2 "$P-b0" && tree_into_switch "$P-b0" leafb
topo_addr h1 eth0 "$NET.1/24"
topo_addr h2 eth0 "$NET.2/24"
link "$P-as1" leafa "$P-1a" spine1
link "$P-bs1" leafb "$P-1b" spine1
link "$P-as2" leafa "$P-2a" spine2
link "$P-bs2" leafb "$P-2b" spine2
link "$P-ad" leafa "$P-bd" leafb
int_mgmt_network

# --- Switch configs.
int_switch_config leafa 02:a9:9c:00:80:01 "h1:$P-a0:edge" "s1:$P-as1:fabric:up" "s2:$P-as2:fabric:up" \
  "direct:$P-ad:fabric:up:20000" >"$WORK/leafa.yaml"
echo "  watch: [{name: to-h2, dst: $NET.2/32, instructions: latency}]" >>"$WORK/leafa.yaml"
int_switch_config spine1 02:a9:9c:00:80:02 "a:$P-1a:fabric" "b:$P-1b:fabric::40000" >"$WORK/spine1.yaml"
int_switch_config spine2 02:a9:9c:00:80:03 "a:$P-2a:fabric" "b:$P-2b:fabric" >"$WORK/spine2.yaml"
int_switch_config leafb 02:a9:9c:00:80:04 "h2:$P-b0:edge" "s1:$P-bs1:fabric:up" "s2:$P-bs2:fabric:up" \
  "direct:$P-bd:fabric:up" >"$WORK/leafb.yaml"

start_switches || { finish; exit 1; }

# start_collector [ARGS...]: agg-intcollector on the management bridge, the
# one running stopped first; the record file is kept across restarts.
start_collector() {
  if [ -n "$COLLECTOR_PID" ]; then
    kill "$COLLECTOR_PID" 2>/dev/null && wait "$COLLECTOR_PID" 2>/dev/null
  fi
  "$COLLECTOR" --listen "$REPORTS" --db "$WORK/int.db" --http "$COLLECTOR_HTTP" \
    --interval-ms 200 --window 120 "${REPORTERS[@]}" "$@" >>"$WORK/collector.log" 2>&1 &
  COLLECTOR_PID=$!
  topo_track_pid "$COLLECTOR_PID"
  until_collector "$COLLECTOR_HTTP"
}
REPORTERS=()
for s in "${SWITCHES[@]}"; do REPORTERS+=(--reporter "${NODE[$s]}=$MGMT.${NODE[$s]}"); done
APPLY_TO=()
for s in "${SWITCHES[@]}"; do
  APPLY_TO+=(--switch "${NODE[$s]}=$MGMT.${NODE[$s]}:${HTTP[$s]},token-file=$WORK/$s.token")
done
check "agg-intcollector listens on the management network" start_collector

check "h1 pings h2 across the fabric" topo_exec h1 ping -c 3 -i 0.2 -W 2 "$NET.2"

rows() { sqlite3 "$WORK/int.db" "$1"; }
# routes PORT: each traversal of datagrams to PORT as "n1,n2,...", counted:
# "count route" lines.
routes() {
  rows "SELECT count(*) || ' ' || route FROM (SELECT group_concat(node_id, ',') AS route FROM
        (SELECT * FROM hop_records WHERE dst_port = $1 ORDER BY hop_index)
        GROUP BY source_node, path_seq) GROUP BY route ORDER BY route"
}
# send_phase PORT COUNT: COUNT datagrams from each of FLOWS flows to h2:PORT,
# received by a socket on h2; waits until the collector has every end of path.
send_phase() {
  local port="$1" count="$2" i
  topo_exec h2 "${TRAFFIC[@]}" capture --iface eth0 --out "$WORK/h2.$port.json" --seconds 8 \
    --bind "$port" --ready "$WORK/h2.$port.ready" &
  local cap=$!
  topo_track_pid "$cap"
  for i in $(seq 50); do [ -f "$WORK/h2.$port.ready" ] && break; sleep 0.1; done
  topo_exec h1 "${TRAFFIC[@]}" send --to "$NET.2" --port "$port" --count "$count" --flows "$FLOWS"
  for i in $(seq 50); do
    [ "$(rows "SELECT count(*) FROM path_ends WHERE dst_port = $port")" -ge $((count * FLOWS)) ] && break
    sleep 0.2
  done
  wait "$cap"
}
# received PORT COUNT: h2's socket took every datagram of the phase.
received() {
  local got
  got=$(grep -c "\"socket\": $1" "$WORK/h2.$1.json")
  report "h2 received $got of $(($2 * FLOWS)) datagrams to port $1"
  [ "$got" -eq $(($2 * FLOWS)) ]
}
# port_metric SWITCH PORT NAME: aggswitch_port_NAME_total{port="PORT"}.
port_metric() {
  sw_curl "$1" /metrics | awk -v m="aggswitch_port_$3_total{port=\"$2\"}" '$1 == m { print $2 + 0 }'
}
declare -A BEFORE=()
remember() {  # the decided counters of leafa's members
  local m
  for m in s1 s2 direct; do BEFORE[$m]=$(port_metric leafa "$m" uplink_decided_packets); done
}
decided_delta() { echo $(($(port_metric leafa "$1" uplink_decided_packets) - ${BEFORE[$1]})); }

# --- 1. No decision: the hash spreads the flows, three paths.
send_phase 5000 3
spread() {
  local out
  out=$(routes 5000)
  report "$(tr '\n' ';' <<<"$out")"
  grep -qx "[0-9]* 1,2,4" <<<"$out" && grep -qx "[0-9]* 1,3,4" <<<"$out" && grep -qx "[0-9]* 1,4" <<<"$out" &&
    [ "$(rows "SELECT count(*) FROM path_ends WHERE dst_port = 5000")" -eq $((3 * FLOWS)) ]
}
check "48 flows by the hash: the collector sees the paths via spine1, via spine2 and direct" spread
check "h2 receives every datagram" received 5000 3
no_loop() {
  local flooded
  flooded=$(($(port_metric leafb s1 flooded_packets) + $(port_metric leafb s2 flooded_packets) +
             $(port_metric leafb direct flooded_packets)))
  report "frames leafb flooded from its group: $flooded; leafa flooded out s2: $(port_metric leafa s2 tx_packets) sent in all"
  [ "$flooded" -lt 50 ]
}
check "no flood loop through the two spines" no_loop

# --- 2. Minimum latency applied.
decision_at() {  # decision_at SWITCH PORT: the switch's decision for h2 names PORT
  local i out
  for i in $(seq 50); do
    out=$(sw_curl "$1" /api/v1/int/decisions)
    python3 -c 'import json,sys; d=json.loads(sys.argv[1])["decisions"]; sys.exit(0 if [x for x in d if x["dst"]==sys.argv[2] and x["port"]==sys.argv[3]] else 1)' \
      "$out" "$NET.2/32" "$2" && { echo "$1: $out"; return 0; }
    sleep 0.2
  done
  echo "$1: $out"
  return 1
}
check "agg-intcollector --apply min_latency runs" start_collector --apply min_latency "${APPLY_TO[@]}"
check "leafa takes the min-latency decision: to h2 by s2 (spine2)" decision_at leafa s2
check "spine2 takes its part of it: on to leafb" decision_at spine2 b
check "leafb takes its part: to h2's edge port" decision_at leafb h2
none_at_spine1() { [ "$(sw_curl spine1 /api/v1/int/decisions)" = '{"groups":[],"decisions":[]}' ]; }
check "spine1, off the decided path, has none" none_at_spine1
applied() {
  local out
  out=$(curl -fsS "http://$COLLECTOR_HTTP/api/v1/applied")
  echo "$out"
  python3 -c 'import json,sys; a=json.loads(sys.argv[1]); assert a["rule"]=="min_latency"; assert all(s["error"] is None for s in a["switches"])' "$out"
}
check "the collector's /api/v1/applied: every switch took its set" applied

remember
send_phase 5001 2
moved_to() {  # moved_to MEMBER ROUTE PORT: every datagram took MEMBER and ROUTE
  local out
  out=$(routes "$3")
  report "decided: s1 +$(decided_delta s1), s2 +$(decided_delta s2), direct +$(decided_delta direct); routes: $(tr '\n' ';' <<<"$out")"
  [ "$(decided_delta "$1")" -eq $((2 * FLOWS)) ] &&
    for m in s1 s2 direct; do [ "$m" = "$1" ] || [ "$(decided_delta "$m")" -eq 0 ] || return 1; done &&
    [ "$out" = "$((2 * FLOWS)) $2" ]
}
check "every flow to h2 now leaves leafa by s2 and runs leafa - spine2 - leafb" moved_to s2 1,3,4 5001
check "h2 receives every datagram" received 5001 2

# --- 3. Fewest hops applied: the 2-hop direct link over the 3-hop paths.
check "agg-intcollector --apply fewest_hops runs" start_collector --apply fewest_hops "${APPLY_TO[@]}"
check "leafa takes the fewest-hops decision: to h2 by the direct link" decision_at leafa direct
remember
send_phase 5002 2
check "every flow to h2 now takes the direct link: leafa - leafb" moved_to direct 1,4 5002
check "h2 receives every datagram" received 5002 2
leafa_ctl() { topo_exec leafa "$AGGCTL" --server "127.0.0.1:${HTTP[leafa]}" --token-file "$WORK/leafa.token" "$@"; }
ctl_show() {
  local out
  out=$(leafa_ctl int decisions)
  echo "$out"
  grep -q "^uplink groups: up (s1 s2 direct)" <<<"$out" && grep -q "^$NET.2/32 *direct *3 *up" <<<"$out"
}
check "aggctl int decisions shows leafa's group and its decision" ctl_show
ctl_refused() {
  local out
  out=$(echo '{"decisions": [{"dst": "'$NET'.2/32", "port": "s9"}]}' | leafa_ctl int decisions --file - 2>&1)
  echo "$out"
  grep -q 'decisions\[0\].port' <<<"$out" && leafa_ctl int decisions | grep -q "^$NET.2/32 *direct"
}
check "a decision naming a port leafa does not have is refused, naming the key; the old one stays" ctl_refused
latencies() {
  report "$(rows "SELECT route || ': ' || round(avg(total) / 1e6, 2) || ' ms' FROM
           (SELECT group_concat(node_id, ',') AS route, sum(hop_latency_ns) AS total FROM
            (SELECT * FROM hop_records ORDER BY hop_index) GROUP BY source_node, path_seq)
           GROUP BY route" | tr '\n' ';')"
}
check "mean path latencies" latencies

finish
