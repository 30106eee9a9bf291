#!/usr/bin/env bash
# System test: in-band jobs of several nodes (docs/aggregation.md, "Several
# nodes"). Four real aggswitch processes and eight agg-worker ranks; no job is
# configured on any switch: the ranks' task info says how many ranks each
# leaf has and how many nodes take part, and the leaves' partials carry task
# info to the upper switch that each chunk's addr_low picks.
#
#     upper 0 10.0.48.1        upper 1 10.0.48.2     one port each
#              \                  /
#               mn-fab: a Linux bridge
#              /                  \
#     leaf A 10.0.48.11       leaf B 10.0.48.12      aggregation.upstreams:
#     mn-a0 .. mn-a3          mn-b4 .. mn-b7          [upper 0, upper 1]
#     w0 .. w3                w4 .. w7               ranks, 10.0.48.(rank+21)
#
# One L2 segment, VLAN 10 on every switch port, aggregation UDP port 47048.
# Every switch runs in a namespace of its own (tests/lib/tree.sh says why),
# on lcores "0,1": four poll loops share CPU 1.
#
#  1. two nodes (world 8, --nodes 2, addr_low 0): every rank gets the exact
#     global sum; each leaf sends one partial per chunk, upper 0 registers the
#     job with the two leaves as members and completes every chunk; upper 1
#     never hears of it;
#  2. one node (world 4 under leaf A, --nodes 1): exact sums, and nothing goes
#     upward: no partial, and neither upper switch sees a datagram;
#  3. addr_low picks the upper switch, the same at both leaves: addr_low 1
#     sends every chunk through upper 1; without --addr-low the client's
#     default, the allreduce's index, alternates: allreduce 0 through upper 0,
#     allreduce 1 through upper 1;
#  4. the ranks disagree on addr_low (rank 1 passes another one): leaf A
#     refuses the mismatched ones (NACK addr_low mismatch), and no rank gets a
#     result: none exits 0, and one names the reason;
#  5. the ranks disagree on the task info (rank 5 says 4 nodes): NACK task
#     info conflict, and no rank gets a result;
#  6. verify mode across the two levels: the ranks' task info asks for it,
#     the leaves pass it up with their partials, and upper 0, the root, sends
#     each complete chunk (the leaves' partials summed) as VERIFY to its
#     parameter node, agg-ps on the fabric (10.0.48.50, the upper switches'
#     aggregation.tan); only what comes back VERIFIED goes down through upper
#     0 and the leaves to the ranks, and every sum is exact.
#
# Usage: multinode_netns_test.sh AGGSWITCH AGG_WORKER AGG_PS
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
AGG_WORKER=$(realpath "$2")
AGG_PS=$(realpath "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/tree.sh
source "$HERE/../lib/tree.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"
# shellcheck source=tests/lib/switches.sh
source "$HERE/../lib/switches.sh"
CHECK_TAIL_LINES=40

WORK=$(mktemp -d /tmp/aggswitch-mn.XXXXXX)
NET=10.0.48
PORT=47048
declare -A SWITCH_IP=([up0]=$NET.1 [up1]=$NET.2 [leafa]=$NET.11 [leafb]=$NET.12)
declare -A HTTP=([up0]=19495 [up1]=19496 [leafa]=19497 [leafb]=19498)
SWITCHES=(up0 up1 leafa leafb)
LEAF_OF=(leafa leafb)
declare -A SWITCH_PID=()
PS_IP=$NET.50
PS_STATS="$WORK/ps.json"
RANK_WRAPPER=(timeout -k 5 60)
START_NS=$(date +%s%N)

topo_init mn
cleanup_all() {
  topo_cleanup
  rm -rf "$WORK" /var/run/dpdk/agg-mn-*-$$
}
trap cleanup_all EXIT

# --- Topology.
P=$TOPO_PREFIX
for s in "${SWITCHES[@]}" fab; do tree_switch_ns "$s"; done
ip -n "$P-fab" link add br0 type bridge
ip -n "$P-fab" link set br0 up
# fabric_link SWITCH IFACE: a veth pair from SWITCH's namespace (IFACE) to a
# port of the fabric's bridge.
fabric_link() {
  local ns
  ns=$(topo_ns "$1")
  ip link add "$2" netns "$ns" type veth peer name "f-$1" netns "$P-fab"
  ip netns exec "$ns" ethtool -K "$2" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  ip -n "$ns" link set "$2" up
  ip -n "$P-fab" link set "f-$1" master br0 up
}
for s in "${SWITCHES[@]}" ps; do
  [ "$s" = ps ] && tree_switch_ns ps
  fabric_link "$s" "$P-${s}f"
done
ip -n "$P-ps" addr add "$PS_IP/24" dev "$P-psf"
for r in 0 1 2 3 4 5 6 7; do
  side=$([ "$r" -lt 4 ] && echo a || echo b)
  topo_host "w$r" "$P-$side$r" && tree_into_switch "$P-$side$r" "${LEAF_OF[$((r / 4))]}"
  topo_addr "w$r" eth0 "$NET.$((r + 21))/24"
done

# --- Switch configs: nothing about any job.
# switch_config NAME MAC [LEAF INDEX]
switch_config() {
  local name="$1" mac="$2" leaf="${3:-}" r
  cat <<EOF
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: agg-mn-$name-$$
switch:
  name: mn-$name
  mac: $mac
  addresses:
    - {address: ${SWITCH_IP[$name]}/24, vlan: 10}
http: {listen: "127.0.0.1:${HTTP[$name]}"}
mempool: {mbufs: 16383}
aggregation:
  address: {address: ${SWITCH_IP[$name]}, vlan: 10}
  udp_port: $PORT
  slots: 4096
EOF
  if [ -z "$leaf" ]; then
    # The parameter node of the jobs whose root this is (verify mode).
    cat <<EOF
  tan:
    strategy: fixed
    candidates:
      - {address: $PS_IP, port: $PORT}
EOF
  fi
  if [ -n "$leaf" ]; then
    cat <<EOF
  upstreams:
    - {address: ${SWITCH_IP[up0]}, port: $PORT}
    - {address: ${SWITCH_IP[up1]}, port: $PORT}
ports:
EOF
    for r in $(seq $((4 * leaf)) $((4 * leaf + 3))); do
      echo "  - {name: w$r, devargs: \"net_af_packet_mn$r,iface=$P-$([ "$leaf" -eq 0 ] && echo a || echo b)$r\", access: 10}"
    done
    echo "  - {name: fabric, devargs: \"net_af_packet_mn$((8 + leaf)),iface=$P-${name}f\", access: 10}"
  else
    echo "ports:"
    echo "  - {name: fabric, devargs: \"net_af_packet_mn1${name#up},iface=$P-${name}f\", access: 10}"
  fi
}
switch_config up0 02:a9:9c:00:48:01 >"$WORK/up0.yaml"
switch_config up1 02:a9:9c:00:48:02 >"$WORK/up1.yaml"
switch_config leafa 02:a9:9c:00:48:11 0 >"$WORK/leafa.yaml"
switch_config leafb 02:a9:9c:00:48:12 1 >"$WORK/leafb.yaml"

# --- Processes (tests/lib/switches.sh).
start_switches || { finish; exit 1; }

# --- Counters (tests/lib/switch_counters.sh).
# job_field SWITCH JOB FIELD: a field of /api/v1/jobs/JOB ("absent" when the
# switch has no such job).
job_field() {
  local body
  body=$(sw_curl "$1" "/api/v1/jobs/$2" 2>/dev/null) || { echo absent; return; }
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$body" "$3"
}
COUNTERS=(contributions completions partials_sent partials_resent partials_missing_above partials_received
  results_down results_refused unresolved_next_hop addr_low_mismatches task_info_conflicts
  verify_sent unverified_results)
show_deltas() {
  local s line
  for s in "${SWITCHES[@]}"; do
    line=$(moved "$s")
    echo "$s:${line:- nothing}"
  done
}

# --- Runs.
declare -A RANK_PIDS=() RANK_LIST=()
# launch NAME JOB WORLD NODES RANKS [AGG-WORKER OPTIONS]: ranks RANKS of JOB,
# each sending to its leaf (rank / 4), int32 sums verified, a JSON summary
# NAME.r.json. Per-rank options from RANK_EXTRA: "RANK:OPT,VALUE,..." words;
# a --nodes there replaces NODES for that rank.
launch() {
  local name="$1" job="$2" world="$3" nodes="$4" ranks="$5" r e pids=() extra nodes_opt
  shift 5
  for r in $ranks; do
    extra=()
    for e in ${RANK_EXTRA:-}; do
      [ "${e%%:*}" = "$r" ] && IFS=, read -r -a extra <<<"${e#*:}"
    done
    nodes_opt=(--nodes "$nodes")
    [[ " ${extra[*]} " == *" --nodes "* ]] && nodes_opt=()
    ip netns exec "$(topo_ns "w$r")" "${RANK_WRAPPER[@]}" "$AGG_WORKER" --rank "$r" \
      --world "$world" "${nodes_opt[@]}" --job "$job" --key 0x48ee \
      --switch "${SWITCH_IP[${LEAF_OF[$((r / 4))]}]}:$PORT" --dtype int32 --op sum --verify \
      --quiet --json "$WORK/$name.$r.json" "$@" "${extra[@]}" >"$WORK/$name.$r.out" 2>&1 &
    pids+=($!)
    topo_track_pid $!
  done
  RANK_PIDS[$name]="${pids[*]}"
  RANK_LIST[$name]="$ranks"
}
# chunks NAME RANK: chunks that rank sent in run NAME (its summary).
chunks() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["client"]["chunks"])' \
    "$WORK/$1.$2.json"
}
# retransmissions NAME: the ranks' retransmissions in run NAME, summed.
retransmissions() {
  python3 -c 'import json, sys; print(sum(json.load(open(f))["client"]["retransmissions"] for f in sys.argv[1:]))' \
    "$WORK/$1".*.json
}
elapsed() { echo "      ($((($(date +%s%N) - START_NS) / 1000000000)) s so far)"; }

# 1. Two nodes, addr_low 0: upper 0 is the root of every chunk.
two_nodes() {
  local rc=0 n s
  snapshot
  launch two 1 8 2 "0 1 2 3 4 5 6 7" --size 256K --iterations 3 --addr-low 0
  collect two || { show_deltas; return 1; }
  n=$(chunks two 0)
  report "job 1: $n chunks per rank, every rank's sums exact"
  for s in leafa leafb; do
    # Sent again: on the slot's timer (partials_resent), or because the
    # upper switch said it lacks the partial (partials_missing_above: its
    # slot waits for it while another chunk is refused or a leaf asks).
    expect_value "$s partials sent once per chunk" \
      $(($(delta "$s" partials_sent) - $(delta "$s" partials_resent) -
        $(delta "$s" partials_missing_above))) -eq "$n" || rc=1
    expect_value "$s results from above" "$(delta "$s" results_down)" -ge "$n" || rc=1
    expect_value "$s results refused" "$(delta "$s" results_refused)" -eq 0 || rc=1
    expect_value "$s job 1 upstreams" "$(sw_curl "$s" /api/v1/jobs/1 |
      python3 -c 'import json, sys; print(len(json.load(sys.stdin)["upstreams"]))')" -eq 2 || rc=1
  done
  expect_value "up0 job 1 members (the leaves)" "$(job_field up0 1 members)" -eq 2 || rc=1
  expect_value "up0 job 1 origin" "$(job_field up0 1 origin)" = in-band || rc=1
  expect_value "up0 job 1 completions" "$(job_metric up0 completions 1)" -eq "$n" || rc=1
  expect_value "up1 job 1" "$(job_field up1 1 id)" = absent || rc=1
  expect_value "up1 partials received" "$(delta up1 partials_received)" -eq 0 || rc=1
  [ "$rc" -eq 0 ] || show_deltas
  return $rc
}
check "two nodes, no job configured: every rank gets the exact global sum through upper 0" two_nodes
elapsed

# 2. One node: the leaf is the root; nothing goes up.
one_node() {
  local rc=0 s
  snapshot
  launch one 2 4 1 "0 1 2 3" --size 256K --iterations 2
  collect one || { show_deltas; return 1; }
  report "job 2: $(chunks one 0) chunks per rank under leaf A alone"
  expect_value "leafa job 2 upstreams" "$(sw_curl leafa /api/v1/jobs/2 |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["upstreams"]))')" -eq 0 || rc=1
  expect_value "leafa partials sent" "$(delta leafa partials_sent)" -eq 0 || rc=1
  for s in up0 up1; do
    expect_value "$s contributions and partials" \
      $(($(delta "$s" contributions) + $(delta "$s" partials_received))) -eq 0 || rc=1
    expect_value "$s job 2" "$(job_field "$s" 2 id)" = absent || rc=1
  done
  [ "$rc" -eq 0 ] || show_deltas
  return $rc
}
check "node_count 1: exact sums, nothing sent upward" one_node

# 3. addr_low picks the upper switch, the same at both leaves.
addr_low_picks() {
  local rc=0 n
  snapshot
  launch low1 3 8 2 "0 1 2 3 4 5 6 7" --size 128K --iterations 2 --addr-low 1
  collect low1 || { show_deltas; return 1; }
  n=$(chunks low1 0)
  expect_value "addr_low 1: up1 job 3 completions" "$(job_metric up1 completions 3)" -eq "$n" || rc=1
  expect_value "addr_low 1: up0 job 3" "$(job_field up0 3 id)" = absent || rc=1
  # The default addr_low is the allreduce's index: 0, then 1.
  launch alternate 4 8 2 "0 1 2 3 4 5 6 7" --size 128K --iterations 2
  collect alternate || { show_deltas; return 1; }
  n=$(($(chunks alternate 0) / 2))
  expect_value "allreduce 0: up0 job 4 completions" "$(job_metric up0 completions 4)" -eq "$n" || rc=1
  expect_value "allreduce 1: up1 job 4 completions" "$(job_metric up1 completions 4)" -eq "$n" || rc=1
  report "addr_low 1: $(chunks low1 0) chunks through upper 1; default: $n through each"
  [ "$rc" -eq 0 ] || show_deltas
  return $rc
}
check "changing addr_low changes the upper switch, the same on both leaves" addr_low_picks
elapsed

# no_result NAME REASON: every rank of NAME failed (none exited 0, so none
# took a partial sum for a result), and one names REASON.
no_result() {
  local name="$1" reason="$2" pids ranks i code rc=0 named=0
  read -r -a pids <<<"${RANK_PIDS[$name]}"
  read -r -a ranks <<<"${RANK_LIST[$name]}"
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    code=$?
    grep -h '^RESULT' "$WORK/$name.${ranks[$i]}.out" | sed "s/^/[rank ${ranks[$i]}, exit $code] /"
    [ "$code" -ne 0 ] || { echo "rank ${ranks[$i]} exited 0"; rc=1; }
    grep -q "$reason" "$WORK/$name.${ranks[$i]}.out" && named=$((named + 1))
  done
  report "${#pids[@]} ranks failed, $named of them with \"$reason\""
  expect_value "ranks that name \"$reason\"" "$named" -ge 1 || rc=1
  return $rc
}

# 4. Rank 1 picks its switches by another addr_low than the others' (the
# allreduce's index, 0).
addr_low_mismatch() {
  local rc=0
  snapshot
  RANK_EXTRA="1:--addr-low,1" launch mismatch 5 8 2 "0 1 2 3 4 5 6 7" --size 64K \
    --timeout-ms 3000
  no_result mismatch "addr_low mismatch (NACK 13)" || rc=1
  expect_value "leafa addr_low mismatches" "$(delta leafa addr_low_mismatches)" -ge 1 || rc=1
  [ "$rc" -eq 0 ] || show_deltas
  return $rc
}
check "ranks that disagree on addr_low: refused, and no rank gets a result" addr_low_mismatch

# 5. Rank 5 says 4 nodes: its task info (2 ranks per node) is not the others'.
task_info_conflict() {
  local rc=0
  snapshot
  RANK_EXTRA="5:--nodes,4" launch conflict 6 8 2 "0 1 2 3 4 5 6 7" --size 64K --timeout-ms 3000
  no_result conflict "task info conflict (NACK 6)" || rc=1
  expect_value "leafb task info conflicts" "$(delta leafb task_info_conflicts)" -ge 1 || rc=1
  [ "$rc" -eq 0 ] || show_deltas
  return $rc
}
check "ranks that disagree on the task info: refused, and no rank gets a result" task_info_conflict
elapsed

# 6. Verify mode through two levels, with agg-ps as upper 0's parameter node.
ps_stat() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$PS_STATS" "$1"
}
verify_two_levels() {
  local rc=0 n s i
  rm -f "$PS_STATS"
  ip netns exec "$P-ps" "$AGG_PS" --listen "$PS_IP:$PORT" --give-up-ms 10000 \
    --stats "$PS_STATS" >"$WORK/ps.log" 2>&1 &
  PS_PID=$!
  topo_track_pid "$PS_PID"
  for i in $(seq 1 50); do [ -s "$PS_STATS" ] && break; sleep 0.1; done
  [ -s "$PS_STATS" ] || { echo "agg-ps did not start:"; cat "$WORK/ps.log"; return 1; }
  snapshot
  launch verify 7 8 2 "0 1 2 3 4 5 6 7" --size 256K --iterations 2 --addr-low 0 --verify-mode
  collect verify || { show_deltas; cat "$PS_STATS"; return 1; }
  n=$(chunks verify 0)
  sleep 0.7  # agg-ps writes its stats every 500 ms
  report "job 7: $n chunks per rank; up0:$(moved up0); agg-ps: verified $(ps_stat verified)," \
    "omissions $(ps_stat verify_omissions); the ranks: $(retransmissions verify) retransmissions"
  for s in up0 leafa leafb; do
    expect_value "$s job 7 in verify mode" "$(job_field "$s" 7 verify)" = True || rc=1
  done
  expect_value "up0 VERIFYs sent, one per chunk at least" "$(delta up0 verify_sent)" -ge "$n" || rc=1
  expect_value "agg-ps chunks verified" "$(ps_stat verified)" -ge "$n" || rc=1
  expect_value "agg-ps omissions" "$(ps_stat verify_omissions)" -eq 0 || rc=1
  expect_value "up0 VERIFIED results from agg-ps" "$(delta up0 results_down)" -ge "$n" || rc=1
  expect_value "up0 unverified results let down" "$(delta up0 unverified_results)" -eq 0 || rc=1
  for s in leafa leafb; do
    expect_value "$s VERIFYs (not the root)" "$(delta "$s" verify_sent)" -eq 0 || rc=1
    expect_value "$s results from above" "$(delta "$s" results_down)" -ge "$n" || rc=1
    expect_value "$s results refused" "$(delta "$s" results_refused)" -eq 0 || rc=1
  done
  kill -TERM "$PS_PID" 2>/dev/null
  wait "$PS_PID" 2>/dev/null
  [ "$rc" -eq 0 ] || show_deltas
  return $rc
}
check "verify mode through two levels: upper 0 has agg-ps check every chunk, and the ranks get only VERIFIED, exact sums" \
  verify_two_levels
elapsed

stop_switches() {
  local s rc=0
  for s in "${SWITCHES[@]}"; do
    kill -TERM "${SWITCH_PID[$s]}" 2>/dev/null
    wait "${SWITCH_PID[$s]}" || { echo "$s exited $?"; tail -5 "$WORK/$s.log"; rc=1; }
  done
  return $rc
}
check "the four switches stop with exit 0" stop_switches
finish
