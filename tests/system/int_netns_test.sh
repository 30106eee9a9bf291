#!/usr/bin/env bash
# System test: in-band network telemetry through three real switches
# (docs/telemetry.md). A leaf, a spine and another leaf, each an aggswitch
# process in a namespace of its own; a host under each leaf; agg-intcollector
# on the management network, which every switch reaches through a veth of
# its own (mgmt0) to a bridge in the root namespace.
#
#   h1 10.0.78.1 ── leafa (node 1) ══ spine (node 2) ══ leafb (node 3) ── h2 10.0.78.2
#        edge port     fabric ports ═══════════════════ fabric ports     edge port
#                 mgmt: 10.0.79.1, .2, .3 ── bridge ── agg-intcollector 10.0.79.254
#
# leafa watches datagrams to h2: UDP port 5000 with the latency set, 5001
# with the bandwidth set, 5002 with both; port 6000 is not watched. h1
# sends 20 datagrams to each port; captures on h1, on both fabric links
# (where the spine and leafb receive them) and on h2 record every datagram. Checks:
#   1. every datagram reaches h2's sockets, and h2 receives the bytes h1 sent
#      (every IPv4 datagram equal, bit for bit);
#   2. on both fabric links a watched datagram carries INT (the INT port,
#      24 bytes more than the original), the same length on each link, the
#      remaining hop count one less after the spine; unwatched ones are
#      unchanged;
#   3. the collector's record table: 3 hop rows per watched datagram (nodes
#      1, 2, 3 in path order, the ports it crossed) and exactly one end-of-path
#      row, none for port 6000; each instruction set's metadata present and
#      the other's absent;
#   4. the switches' counters (inserted at leafa, transit at the spine,
#      stripped at leafb, reports sent at each) and promtool on /metrics;
#   5. the collector's path: aggctl int paths shows leafa - spine - leafb;
#   6. the watch list replaced through the API (aggctl int watch): port 6000
#      watched from then on, 5000 no longer; aggctl int show lists it.
#
# Usage: int_netns_test.sh AGGSWITCH AGG_INTCOLLECTOR AGGCTL
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

WORK=$(mktemp -d /tmp/aggswitch-int.XXXXXX)
NET=10.0.78
MGMT=10.0.79
REPORTS=$MGMT.254:19542
COLLECTOR_HTTP=127.0.0.1:19543
SWITCHES=(leafa spine leafb)
declare -A NODE=([leafa]=1 [spine]=2 [leafb]=3)
declare -A HTTP=([leafa]=19544 [spine]=19545 [leafb]=19546)
declare -A SWITCH_PID=()
COLLECTOR_PID=""
TRAFFIC=(python3 "$HERE/int_traffic.py")
COUNT=20
DPDK_TAG=it

topo_init it
P=$TOPO_PREFIX
cleanup_all() {
  [ -n "$COLLECTOR_PID" ] && kill "$COLLECTOR_PID" 2>/dev/null && wait "$COLLECTOR_PID" 2>/dev/null
  topo_cleanup
  int_mgmt_cleanup
  rm -rf "$WORK" /var/run/dpdk/agg-$DPDK_TAG-*-$$
}
trap cleanup_all EXIT

# --- Topology: the switches' namespaces, the hosts, the fabric links
# (tree_uplink: leaf <-> spine), the management network.
for s in "${SWITCHES[@]}"; do tree_switch_ns "$s"; done
topo_host h1 "$P-a1" && tree_into_switch "$P-a1" leafa
topo_host h2 "$P-b1" && tree_into_switch "$P-b1" leafb
topo_addr h1 eth0 "$NET.1/24"
topo_addr h2 eth0 "$NET.2/24"
tree_uplink "$P-aup" leafa "$P-sa"
tree_uplink "$P-bup" leafb "$P-sb"
int_mgmt_network

# --- The collector, in the root namespace on the management bridge.
REPORTERS=()
for s in "${SWITCHES[@]}"; do REPORTERS+=(--reporter "${NODE[$s]}=$MGMT.${NODE[$s]}"); done
"$COLLECTOR" --listen "$REPORTS" --db "$WORK/int.db" --http "$COLLECTOR_HTTP" --interval-ms 200 \
  "${REPORTERS[@]}" \
  >"$WORK/collector.log" 2>&1 &
COLLECTOR_PID=$!
topo_track_pid "$COLLECTOR_PID"

# --- Switch configs.
int_switch_config leafa 02:a9:9c:00:78:01 "h1:$P-a1:edge" "up:$P-aup:fabric" >"$WORK/leafa.yaml"
cat >>"$WORK/leafa.yaml" <<EOF
  watch:
    - {name: latency, dst: $NET.2/32, port: 5000, instructions: latency}
    - {name: bandwidth, dst: $NET.2/32, port: 5001, instructions: bandwidth}
    - {name: both, dst: $NET.2/32, port: 5002, instructions: both}
EOF
int_switch_config spine 02:a9:9c:00:78:02 "sa:$P-sa:fabric" "sb:$P-sb:fabric" >"$WORK/spine.yaml"
int_switch_config leafb 02:a9:9c:00:78:03 "h2:$P-b1:edge" "up:$P-bup:fabric" >"$WORK/leafb.yaml"

start_switches || { finish; exit 1; }
check "agg-intcollector listens on the management network" until_collector "$COLLECTOR_HTTP"

# The hosts learn each other (ARP through the three switches), and the
# switches their MACs, before the measured traffic.
check "h1 pings h2 through leafa, the spine and leafb" topo_exec h1 ping -c 3 -i 0.2 -W 2 "$NET.2"

# --- Traffic, captured at both hosts and on both of the spine's links.
capture() {  # capture NS IFACE NAME [BIND]
  local ready="$WORK/$3.ready"
  topo_exec "$1" "${TRAFFIC[@]}" capture --iface "$2" --out "$WORK/$3.json" --seconds 10 \
    ${4:+--bind "$4"} --ready "$ready" &
  topo_track_pid $!
  CAPTURES+=($!)
}
CAPTURES=()
capture h1 eth0 h1
capture h2 eth0 h2 5000,5001,5002,6000
capture spine "$P-sa" sa
capture leafb "$P-bup" sb
for f in h1 h2 sa sb; do
  for _ in $(seq 50); do [ -f "$WORK/$f.ready" ] && break; sleep 0.1; done
done
for port in 5000 5001 5002 6000; do
  topo_exec h1 "${TRAFFIC[@]}" send --to "$NET.2" --port "$port" --count "$COUNT"
done
for pid in "${CAPTURES[@]}"; do wait "$pid"; done

# --- 1. The hosts.
host_bytes() {
  python3 - "$WORK" "$COUNT" <<'EOF'
import json, sys
work, count = sys.argv[1], int(sys.argv[2])
def lines(name):
    return [json.loads(l) for l in open(f"{work}/{name}.json")]
ports = (5000, 5001, 5002, 6000)
sent = [l["hex"] for l in lines("h1") if l.get("dir") == "out" and l.get("dport") in ports]
got = [l["hex"] for l in lines("h2") if l.get("dir") == "in" and l.get("dport") in ports]
sockets = [l for l in lines("h2") if "socket" in l]
print(f"h1 sent {len(sent)}, h2 got {len(got)} datagrams, {len(sockets)} through its sockets")
assert len(sent) == 4 * count, "h1's capture"
assert got == sent, "h2 must receive exactly the bytes h1 sent"
for port in ports:
    payloads = [bytes.fromhex(s["payload"]) for s in sockets if s["socket"] == port]
    assert len(payloads) == count, f"port {port}: {len(payloads)} datagrams"
    assert all(p.startswith(f"P{port} #".encode()) for p in payloads)
EOF
}
check "h2 receives every datagram, each bit for bit as h1 sent it" host_bytes

# --- 2. The fabric links.
links() {
  python3 - "$WORK" "$COUNT" <<'EOF'
import json, sys
work, count = sys.argv[1], int(sys.argv[2])
original = 20 + 8 + 100
seen = {}
for link in ("sa", "sb"):
    rows = [json.loads(l) for l in open(f"{work}/{link}.json")]
    # What crossed from leafa toward leafb: into the spine, and into leafb.
    # (The switches' own sockets bypass the kernel's taps: a capture sees
    # what a port receives, not what it sends.)
    rows = [r for r in rows if r["dir"] == "in" and r["hex"][32:40] == "0a004e02"]
    with_int = [r for r in rows if r["dport"] == 7700]
    plain = [r for r in rows if r["dport"] == 6000]
    print(f"{link}: {len(with_int)} with INT, lengths {sorted(set(r['len'] for r in with_int))}; "
          f"{len(plain)} unwatched, lengths {sorted(set(r['len'] for r in plain))}")
    assert len(with_int) == 3 * count and all(r["len"] == original + 24 for r in with_int)
    assert len(plain) == count and all(r["len"] == original for r in plain)
    seen[link] = [r["hex"] for r in with_int]
# The same datagrams on both links: the INT headers differ only in the
# remaining hop count (one less after the spine) and the UDP checksum.
assert len(seen["sa"]) == len(seen["sb"])
for a, b in zip(seen["sa"], seen["sb"]):
    a, b = bytes.fromhex(a), bytes.fromhex(b)
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    assert all(i in (26, 27, 35) for i in diff), diff
    assert a[35] == b[35] + 1, "the spine counted itself off the remaining hop count"
EOF
}
check "on both fabric links watched datagrams carry 24 bytes of INT, unwatched none" links

# --- 3. The collector's record table.
rows() { sqlite3 "$WORK/int.db" "$1"; }
until_rows() {
  local i
  for i in $(seq 50); do
    [ "$(rows 'SELECT count(*) FROM path_ends' 2>/dev/null)" -ge $((3 * COUNT)) ] 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
table() {
  until_rows
  report "hop_records: $(rows 'SELECT count(*) FROM hop_records'), path_ends: $(rows 'SELECT count(*) FROM path_ends')"
  [ "$(rows 'SELECT count(*) FROM hop_records')" -eq $((9 * COUNT)) ] || return 1
  [ "$(rows 'SELECT count(*) FROM path_ends')" -eq $((3 * COUNT)) ] || return 1
  # Exactly one end per datagram, and its hops 1, 2, 3 at nodes 1, 2, 3.
  [ "$(rows 'SELECT count(*) FROM (SELECT source_node, path_seq FROM path_ends
             GROUP BY source_node, path_seq HAVING count(*) = 1 AND min(hops) = 3)')" -eq $((3 * COUNT)) ] || return 1
  [ "$(rows "SELECT count(*) FROM (SELECT group_concat(node_id, ',') AS route FROM
             (SELECT * FROM hop_records ORDER BY hop_index)
             GROUP BY source_node, path_seq) WHERE route = '1,2,3'")" -eq $((3 * COUNT)) ] || return 1
  [ "$(rows "SELECT count(*) FROM hop_records WHERE last_hop = 1 AND node_id = 3")" -eq $((3 * COUNT)) ] || return 1
  [ "$(rows "SELECT DISTINCT src_ip || ' ' || dst_ip FROM hop_records")" = "$NET.1 $NET.2" ] || return 1
  [ "$(rows 'SELECT count(*) FROM hop_records WHERE dst_port = 6000')" -eq 0 ] || return 1
  # Ports: leafa in h1 (0) out up (1); the spine in sa (0) out sb (1); leafb in up (1) out h2 (0).
  [ "$(rows "SELECT DISTINCT node_id || ':' || ingress_port || '>' || egress_port FROM hop_records
             ORDER BY node_id" | tr '\n' ' ')" = "1:0>1 2:0>1 3:1>0 " ] || return 1
}
check "the collector records 3 hops and one end of path per watched datagram" table
instructions() {
  local lat bw both
  lat=$(rows "SELECT count(*) FROM hop_records WHERE dst_port = 5000 AND hop_latency_ns IS NOT NULL
              AND queue_occupancy IS NOT NULL AND tx_utilization_ppm IS NULL")
  bw=$(rows "SELECT count(*) FROM hop_records WHERE dst_port = 5001 AND hop_latency_ns IS NULL
             AND tx_utilization_ppm IS NOT NULL")
  both=$(rows "SELECT count(*) FROM hop_records WHERE dst_port = 5002 AND hop_latency_ns IS NOT NULL
               AND tx_utilization_ppm IS NOT NULL")
  report "latency set: $lat rows, bandwidth set: $bw, both: $both (of $((3 * COUNT)) each)"
  report "hop latency ns (min, avg, max): $(rows "SELECT min(hop_latency_ns), avg(hop_latency_ns),
          max(hop_latency_ns) FROM hop_records WHERE hop_latency_ns IS NOT NULL")"
  [ "$lat" -eq $((3 * COUNT)) ] && [ "$bw" -eq $((3 * COUNT)) ] && [ "$both" -eq $((3 * COUNT)) ] &&
    [ "$(rows 'SELECT count(*) FROM hop_records WHERE hop_latency_ns <= 0 OR hop_latency_ns > 50000000')" -eq 0 ]
}
check "each watch entry's instruction set: its metadata present, the other set's absent" instructions

# --- 4. The switches' counters.
int_metric() {  # SWITCH NAME [LABELS]: aggswitch_int_NAME_total
  sw_curl "$1" /metrics | awk -v m="aggswitch_int_$2_total${3:-}" '$1 == m { print $2 + 0 }'
}
counters() {
  local n=$((3 * COUNT))
  report "leafa: watched $(int_metric leafa watched), inserted $(int_metric leafa inserted), reports $(int_metric leafa reports_sent)"
  report "spine: transit $(int_metric spine transit), reports $(int_metric spine reports_sent)"
  report "leafb: transit $(int_metric leafb transit), stripped $(int_metric leafb stripped), reports $(int_metric leafb reports_sent)"
  [ "$(int_metric leafa watched)" -eq "$n" ] && [ "$(int_metric leafa inserted)" -eq "$n" ] &&
    [ "$(int_metric spine transit)" -eq "$n" ] && [ "$(int_metric spine stripped)" -eq 0 ] &&
    [ "$(int_metric leafb transit)" -eq "$n" ] && [ "$(int_metric leafb stripped)" -eq "$n" ] &&
    for s in "${SWITCHES[@]}"; do
      [ "$(int_metric "$s" reports_sent)" -eq "$n" ] || return 1
      [ "$(int_metric "$s" reports_dropped '{reason="send_failed"}')" -eq 0 ] || return 1
    done
}
check "inserted at leafa, transit at the spine, stripped at leafb, a report per hop" counters
if command -v promtool >/dev/null; then
  promtool_ok() { sw_curl leafa /metrics | promtool check metrics; }
  check "promtool check metrics accepts leafa's /metrics" promtool_ok
fi

# --- 5. The path, through aggctl.
aggctl_paths() {
  local out
  out=$("$AGGCTL" int paths --collector "$COLLECTOR_HTTP")
  echo "$out"
  grep -q "$NET.1" <<<"$out" && grep -q "$NET.2" <<<"$out"
}
check "aggctl int paths shows h1 to h2 through nodes 1, 2, 3" aggctl_paths

# --- 6. A new watch list through the API.
leafa_ctl() { topo_exec leafa "$AGGCTL" --server "127.0.0.1:${HTTP[leafa]}" --token-file "$WORK/leafa.token" "$@"; }
replace_watch() {
  echo '{"watch": [{"name": "other", "dst": "'$NET'.2/32", "port": 6000, "instructions": "both"}]}' |
    leafa_ctl int watch --file - &&
    leafa_ctl int show | tee "$WORK/int-show.txt" && grep -q "^other .*6000 .*both" "$WORK/int-show.txt"
}
check "aggctl int watch replaces leafa's watch list, aggctl int show lists it" replace_watch
after_replace() {
  local before5 before6
  before5=$(rows "SELECT count(*) FROM path_ends WHERE dst_port = 5000")
  before6=$(rows "SELECT count(*) FROM path_ends WHERE dst_port = 6000")
  topo_exec h1 "${TRAFFIC[@]}" send --to "$NET.2" --port 5000 --count 5
  topo_exec h1 "${TRAFFIC[@]}" send --to "$NET.2" --port 6000 --count 5
  local i
  for i in $(seq 50); do
    [ "$(rows "SELECT count(*) FROM path_ends WHERE dst_port = 6000")" -ge $((before6 + 5)) ] && break
    sleep 0.2
  done
  report "port 6000 ends: $before6 -> $(rows "SELECT count(*) FROM path_ends WHERE dst_port = 6000"); port 5000: $before5 -> $(rows "SELECT count(*) FROM path_ends WHERE dst_port = 5000")"
  [ "$(rows "SELECT count(*) FROM path_ends WHERE dst_port = 6000")" -eq $((before6 + 5)) ] &&
    [ "$(rows "SELECT count(*) FROM path_ends WHERE dst_port = 5000")" -eq "$before5" ]
}
check "after the replacement port 6000 is watched and 5000 is not" after_replace
refused_watch() {
  local out
  out=$(echo '{"watch": [{"name": "x", "vlan": 99}]}' | leafa_ctl int watch --file - 2>&1)
  echo "$out"
  grep -q "watch\[0\].vlan" <<<"$out" && leafa_ctl int show | grep -q "^other "
}
check "a watch list naming a VLAN no port carries is refused, naming the key; the old one stays" refused_watch

finish
