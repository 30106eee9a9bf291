#!/usr/bin/env bash
# System test: a two-level aggregation tree (docs/stragglers.md) of three real
# aggswitch processes, eight agg-worker ranks and agg-ps as the timeout
# aggregation node (TAN).
#
#          spine 10.0.47.1, the root ── tr-st ── agg-ps 10.0.47.50 (TAN)
#          tr-sa /           \ tr-sb
#               |             |          veth pairs with an af_packet port of
#          tr-aup             tr-bup     a switch on each end
#   leaf A 10.0.47.11      leaf B 10.0.47.12
#   node 100               node 101
#   tr-a0 .. tr-a3         tr-b4 .. tr-b7
#   w0 .. w3               w4 .. w7      workers 10.0.47.(rank+1), node id = rank
#
# One L2 segment: VLAN 10 on access ports, 10.0.47.0/24, aggregation UDP port
# 47047 everywhere. The switches answer ARP on their aggregation addresses;
# the leaves resolve the spine's with ARP, the spine resolves agg-ps's.
#
# Jobs 7, 8 and 9 are configured on all three switches: leaf A has ranks 0-3,
# leaf B ranks 4-7, both with the spine as upstream; the spine has the two
# leaves as members (covering 0-3 and 4-7) and agg-ps as its fixed TAN. Slot
# thresholds: 100 ms at the leaves, 200 ms at the spine (job 9: 1 s and 2 s).
#
#  0. ARP: the leaves resolve the spine's address, the spine agg-ps's;
#  1. no straggler: partials up, results down, no timeout, nothing at the TAN;
#  2. one straggler under leaf A: a bypass entry there, its data LATE through
#     the spine (which does not reduce it) to the TAN, exact results;
#  3. two stragglers under different leaves;
#  4. forwarded slots give way: while job 7 waits 2.5 s for a straggler, job 8
#     completes on the very slots job 7's chunk used on all three switches;
#  5. ordered floats, random per-rank delays below the thresholds, 20 runs:
#     every result (captured on the wire) bit-identical, and equal to the
#     tree-order reduction ((w0+w1+w2+w3) + (w4+w5+w6+w7));
#  6. a straggler that never comes: the TAN gives up, the others fail in
#     bounded time with exit 3.
#
# Each switch runs in a namespace of its own, see "Topology" below. All three
# use lcores "0,1": their control threads share CPU 0 and their poll loops CPU
# 1 (the test machine may have only two), so a poll loop gets a third of a
# CPU and a chunk's round trip takes tens of ms; the thresholds leave room.
#
# Usage: tree_netns_test.sh AGGSWITCH AGG_WORKER AGG_PS
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
AGG_WORKER=$(realpath "$2")
AGG_PS=$(realpath "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"
CHECK_TAIL_LINES=60

WORK=$(mktemp -d /tmp/aggswitch-tr.XXXXXX)
NET=10.0.47
SPINE_IP=$NET.1
LEAF_IP=([0]=$NET.11 [1]=$NET.12)
TAN_IP=$NET.50
PORT=47047
SLOTS=4096
LEAF_TIMEOUT_MS=100
SPINE_TIMEOUT_MS=200
# id:key:leaf threshold override (ms; the spine's is twice it; empty: none).
JOBS=("7:0x7ee:" "8:0x8ee:" "9:0x9ee:1000")
declare -A JOB_KEY=([7]=0x7ee [8]=0x8ee [9]=0x9ee)
SWITCHES=(leafa leafb spine)
declare -A HTTP=([spine]=19490 [leafa]=19491 [leafb]=19492)
declare -A SWITCH_PID=()
PS_PID=""
PS_STATS=""
# Every agg-worker runs under this, so a client that hangs despite its own
# timeouts fails its check instead of the whole test.
RANK_WRAPPER=(timeout -k 5 60)
START_NS=$(date +%s%N)

topo_init tr
cleanup_all() {
  topo_cleanup
  rm -rf "$WORK" /var/run/dpdk/agg-tr-*-$$
}
trap cleanup_all EXIT

# --- Topology.
# Each switch runs in a namespace of its own (tr-leafa, tr-leafb, tr-spine).
# DPDK 22.11's af_packet PMD puts each socket in the PACKET_FANOUT group
# (pid ^ ifindex) & 0xffff, and fanout groups are per network namespace: two
# switch processes in one namespace collide whenever their pids and ifindexes
# XOR alike (consecutive pids and ifindexes often do), and the second fails to
# probe the port ("could not set PACKET_FANOUT ... Invalid argument"). Their
# own namespaces also keep a starting switch's sockets, open but not yet bound
# to their interface, from taking in another switch's traffic. Two switches
# on the two ends of one veth pair work.
# switch_ns NAME: the namespace tr-NAME; no IPv6 on the ports moved into it
# (the kernel would send ND/MLD there, which af_packet captures).
switch_ns() {
  local ns; ns=$(topo_ns "$1")
  ip netns del "$ns" 2>/dev/null || true
  ip netns add "$ns"
  TOPO_NAMESPACES+=("$ns")
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
}
# into_switch IFACE SWITCH: moves a switch-side veth end into the switch's
# namespace and brings it up there.
into_switch() {
  ip link set "$1" netns "$(topo_ns "$2")"
  ip -n "$(topo_ns "$2")" link set "$1" up
}
# uplink LEAF_IFACE LEAF SPINE_IFACE: a veth pair from a leaf's namespace to
# the spine's.
uplink() {
  local a b
  a=$(topo_ns "$2")
  b=$(topo_ns spine)
  ip link add "$1" netns "$a" type veth peer name "$3" netns "$b"
  ip netns exec "$a" ethtool -K "$1" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  ip netns exec "$b" ethtool -K "$3" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  ip -n "$a" link set "$1" up
  ip -n "$b" link set "$3" up
}

for s in "${SWITCHES[@]}"; do switch_ns "$s"; done
for r in 0 1 2 3 4 5 6 7; do
  if [ "$r" -lt 4 ]; then
    topo_host "w$r" "tr-a$r" && into_switch "tr-a$r" leafa
  else
    topo_host "w$r" "tr-b$r" && into_switch "tr-b$r" leafb
  fi
  topo_addr "w$r" eth0 "$NET.$((r + 1))/24"
done
topo_host tan tr-st && into_switch tr-st spine
topo_addr tan eth0 "$TAN_IP/24"
uplink tr-aup leafa tr-sa
uplink tr-bup leafb tr-sb

# --- Switch configs.
switch_head() {
  local name="$1" mac="$2" ip="$3" timeout="$4"
  cat <<EOF
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: agg-tr-$name-$$
switch:
  name: tree-$name
  mac: $mac
  addresses:
    - {address: $ip/24, vlan: 10}
http: {listen: "127.0.0.1:${HTTP[$name]}"}
mac_table: {size: 4096, aging_seconds: 300}
mempool: {mbufs: 16383}
aggregation:
  address: {address: $ip, vlan: 10}
  udp_port: $PORT
  in_band_registration: false
  slots: $SLOTS
  max_fan_in: 16
  max_jobs: 16
  timeout_ms: $timeout
  trigger: incremental
EOF
}

# leaf_config INDEX: leaf A (0: node 100, ranks 0-3) or leaf B (1: node 101, ranks 4-7).
leaf_config() {
  local i="$1" name=${SWITCHES[$1]} side first p j id key t
  side=$([ "$i" -eq 0 ] && echo a || echo b)
  first=$((4 * i))
  switch_head "$name" "02:a9:9c:00:47:1$((i + 1))" "${LEAF_IP[$i]}" "$LEAF_TIMEOUT_MS"
  cat <<EOF
  bypass: {entries: 65536, ttl_ms: 10000}
  jobs:
EOF
  for j in "${JOBS[@]}"; do
    IFS=: read -r id key t <<<"$j"
    cat <<EOF
    - id: $id
      key: "$key"
      nodes: 3
      node_ids: ["$first-$((first + 3))"]
      upstream: {address: $SPINE_IP, port: $PORT, node: $((100 + i)), vlan: 10}
EOF
    [ -n "$t" ] && echo "      timeout_ms: $t"
  done
  echo "ports:"
  for p in $(seq "$first" $((first + 3))); do
    echo "  - {name: w$p, devargs: \"net_af_packet_tr$p,iface=tr-$side$p\", access: 10}"
  done
  echo "  - {name: uplink, devargs: \"net_af_packet_tr$((8 + i)),iface=tr-${side}up\", access: 10}"
  echo "workers:"
  echo "  - {lcore: 1, rx: [w$first, w$((first + 1)), w$((first + 2)), w$((first + 3)), uplink]}"
}

spine_config() {
  local j id key t
  switch_head spine 02:a9:9c:00:47:01 "$SPINE_IP" "$SPINE_TIMEOUT_MS"
  cat <<EOF
  bypass: {entries: 65536, ttl_ms: 10000, subswitch: nodes}
  jobs:
EOF
  for j in "${JOBS[@]}"; do
    IFS=: read -r id key t <<<"$j"
    cat <<EOF
    - id: $id
      key: "$key"
      nodes: 3
      switches:
        - {node: 100, covers: [0-3]}
        - {node: 101, covers: [4-7]}
      tan:
        strategy: fixed
        candidates:
          - {address: $TAN_IP, port: $PORT, hops: 1}
EOF
    [ -n "$t" ] && echo "      timeout_ms: $((2 * t))"
  done
  cat <<EOF
ports:
  - {name: leafa, devargs: "net_af_packet_tr10,iface=tr-sa", access: 10}
  - {name: leafb, devargs: "net_af_packet_tr11,iface=tr-sb", access: 10}
  - {name: tan, devargs: "net_af_packet_tr12,iface=tr-st", access: 10}
workers:
  - {lcore: 1, rx: [leafa, leafb, tan]}
EOF
}

leaf_config 0 >"$WORK/leafa.yaml"
leaf_config 1 >"$WORK/leafb.yaml"
spine_config >"$WORK/spine.yaml"

# --- Processes.
# sw_curl SWITCH PATH: GET from the switch's HTTP API (in its namespace).
sw_curl() { topo_exec "$1" curl -fsS -m 2 "http://127.0.0.1:${HTTP[$1]}$2"; }

# start_switch NAME: aggswitch with WORK/NAME.yaml in namespace tr-NAME, its
# log in WORK/NAME.log. Not through topo_exec: $! must be aggswitch itself (ip
# netns exec execs it), not a subshell, for the cleanup to stop it.
start_switch() {
  ip netns exec "$(topo_ns "$1")" "$AGGSWITCH" --config "$WORK/$1.yaml" --log-level info \
    >"$WORK/$1.log" 2>&1 &
  SWITCH_PID[$1]=$!
  topo_track_pid $!
}
# switch_up NAME: /metrics answers while the process runs.
switch_up() {
  local i
  for i in $(seq 1 300); do
    kill -0 "${SWITCH_PID[$1]}" 2>/dev/null || return 1
    sw_curl "$1" /metrics >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# start_ps [AGG-PS OPTIONS]: a fresh agg-ps in the TAN namespace (the
# previous one stopped), its stats in PS_STATS.
PS_RUNS=0
start_ps() {
  stop_ps
  PS_RUNS=$((PS_RUNS + 1))
  PS_STATS="$WORK/ps.$PS_RUNS.json"
  ip netns exec "$(topo_ns tan)" "$AGG_PS" --listen "$TAN_IP:$PORT" --stats "$PS_STATS" \
    --covers 7:100=0-3 --covers 7:101=4-7 --covers 8:100=0-3 --covers 8:101=4-7 \
    --covers 9:100=0-3 --covers 9:101=4-7 "$@" >"$WORK/ps.$PS_RUNS.log" 2>&1 &
  PS_PID=$!
  topo_track_pid "$PS_PID"
  local i
  for i in $(seq 1 50); do [ -s "$PS_STATS" ] && return 0; sleep 0.1; done
  echo "agg-ps did not write its stats; its log:"; cat "$WORK/ps.$PS_RUNS.log"
  return 1
}
stop_ps() {
  [ -n "$PS_PID" ] || return 0
  kill -TERM "$PS_PID" 2>/dev/null
  wait "$PS_PID" 2>/dev/null
  PS_PID=""
}
# ps_stat FIELD: the field in agg-ps's stats file. ps_fresh waits for the
# next write (every 500 ms).
ps_stat() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$PS_STATS" "$1"
}
ps_fresh() { sleep 0.7; }

for s in "${SWITCHES[@]}"; do start_switch "$s"; done
for s in "${SWITCHES[@]}"; do
  if ! switch_up "$s"; then
    fail "aggswitch $s came up; its log:"; cat "$WORK/$s.log"
    finish; exit 1
  fi
done
if ! start_ps; then fail "agg-ps came up"; finish; exit 1; fi

# --- Counters.
# metric SWITCH NAME: aggswitch_aggregation_NAME_total (or the gauge
# aggswitch_aggregation_NAME), summed over the lcores.
metric() {
  sw_curl "$1" /metrics | awk -v a="aggswitch_aggregation_$2_total" -v b="aggswitch_aggregation_$2" '
    { n = $1; sub(/\{.*/, "", n) } n == a || n == b { s += $2 } END { print s + 0 }'
}
# job_metric SWITCH NAME JOB: aggswitch_aggregation_job_NAME_total{job="JOB"}.
job_metric() {
  sw_curl "$1" /metrics |
    awk -v m="aggswitch_aggregation_job_$2_total{job=\"$3\"}" '$1 == m { s += $2 } END { print s + 0 }'
}
COUNTERS=(contributions completions partials_sent partials_received partials_resent
  first_data_sent timeouts late_flagged late_no_entry late_self_flagged late_forwarded late_no_tan
  results_down results_refused unresolved_next_hop missing_list_overflow bypass_created
  bypass_matched bypass_expired bypass_full collisions nacks_sent)
declare -A SNAP=()
# snapshot: every counter of every switch, for delta.
snapshot() {
  local s c v
  for s in "${SWITCHES[@]}"; do
    sw_curl "$s" /metrics >"$WORK/metrics.$s"
    for c in "${COUNTERS[@]}"; do
      v=$(awk -v a="aggswitch_aggregation_${c}_total" '
        { n = $1; sub(/\{.*/, "", n) } n == a { s += $2 } END { print s + 0 }' "$WORK/metrics.$s")
      SNAP[$s.$c]=$v
    done
  done
}
# delta SWITCH NAME: how much the counter grew since the last snapshot.
delta() { echo $(($(metric "$1" "$2") - ${SNAP[$1.$2]:-0})); }
# show_deltas: the counters that moved since the snapshot, the live bypass
# entries, and agg-ps's counters.
show_deltas() {
  local s c d line
  for s in "${SWITCHES[@]}"; do
    line=""
    for c in "${COUNTERS[@]}"; do
      d=$(delta "$s" "$c")
      [ "$d" -ne 0 ] && line+=" $c=$d"
    done
    echo "$s:${line:- nothing} (bypass_entries now $(metric "$s" bypass_entries))"
  done
  echo "agg-ps: $(tr -d '\n' <"$PS_STATS")"
}
# expect SWITCH NAME OP VALUE: the counter's delta compares to VALUE (-gt, -eq, ...).
expect() {
  local d
  d=$(delta "$1" "$2")
  if test "$d" "$3" "$4"; then
    echo "ok:  $1 $2 +$d ($3 $4)"
  else
    echo "NOT: $1 $2 +$d, expected $3 $4"; return 1
  fi
}
# expect_gauge SWITCH NAME OP VALUE: the gauge (or counter) now.
expect_gauge() {
  local v
  v=$(metric "$1" "$2")
  if test "$v" "$3" "$4"; then
    echo "ok:  $1 $2 = $v ($3 $4)"
  else
    echo "NOT: $1 $2 = $v, expected $3 $4"; return 1
  fi
}
# expect_ps FIELD OP VALUE: agg-ps's counter compares to VALUE.
expect_ps() {
  local v
  v=$(ps_stat "$1")
  if test "$v" "$2" "$3"; then
    echo "ok:  agg-ps $1 = $v ($2 $3)"
  else
    echo "NOT: agg-ps $1 = $v, expected $2 $3"; return 1
  fi
}

# --- Runs.
# Every run of a job starts past the previous run's sequence numbers: the
# switches and the TAN remember a configured job's finished chunks.
declare -A NEXT_SEQ=([7]=0 [8]=0 [9]=0)
SEQ_STRIDE=100000
declare -A RANK_PIDS=() RANK_LIST=() RUN_FIRST_SEQ=()
# launch NAME JOB RANKS [AGG-WORKER OPTIONS]: starts the ranks RANKS ("0 1 2
# ...") of JOB (world 8) in their namespaces, sending to their leaf, with
# --verify unless VERIFY is empty, and a JSON summary NAME.r.json. Per-rank
# options come from RANK_EXTRA: "RANK:OPT,VALUE,..." words. FIRST_SEQ, when
# set, is the run's first sequence number (at or past NEXT_SEQ[JOB]).
launch() {
  local name="$1" job="$2" ranks="$3" r e first pids=() extra verify=()
  shift 3
  [ "${VERIFY---verify}" = --verify ] && verify=(--verify)
  first=${FIRST_SEQ:-${NEXT_SEQ[$job]}}
  NEXT_SEQ[$job]=$((first + SEQ_STRIDE))
  RUN_FIRST_SEQ[$name]=$first
  for r in $ranks; do
    extra=()
    for e in ${RANK_EXTRA:-}; do
      [ "${e%%:*}" = "$r" ] && IFS=, read -r -a extra <<<"${e#*:}"
    done
    ip netns exec "$(topo_ns "w$r")" "${RANK_WRAPPER[@]}" "$AGG_WORKER" --rank "$r" --world 8 \
      --job "$job" --key "${JOB_KEY[$job]}" --switch "${LEAF_IP[$((r / 4))]}:$PORT" \
      --task-info none "${verify[@]}" --quiet --first-seq "$first" \
      --json "$WORK/$name.$r.json" "$@" "${extra[@]}" >"$WORK/$name.$r.out" 2>&1 &
    pids+=($!)
    topo_track_pid $!
  done
  RANK_PIDS[$name]="${pids[*]}"
  RANK_LIST[$name]="$ranks"
}

# collect NAME: waits for NAME's ranks; passes when every one exited 0. Shows
# a failed rank's output.
collect() {
  local name="$1" code rc=0 pids ranks i
  read -r -a pids <<<"${RANK_PIDS[$name]}"
  read -r -a ranks <<<"${RANK_LIST[$name]}"
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    code=$?
    if [ "$code" -ne 0 ]; then
      rc=1
      sed "s/^/[$name rank ${ranks[$i]}, exit $code] /" "$WORK/$name.${ranks[$i]}.out" | tail -6
    fi
  done
  return $rc
}

# allreduce NAME JOB [AGG-WORKER OPTIONS]: all eight ranks, every one verified.
allreduce() {
  local name="$1" job="$2"
  shift 2
  launch "$name" "$job" "0 1 2 3 4 5 6 7" "$@"
  collect "$name" || { show_deltas; return 1; }
}

# with VAR=VALUE COMMAND...: runs COMMAND (a function too) with VAR set.
with() {
  local -x "$1"
  shift
  "$@"
}

# chunks NAME: chunks per rank in run NAME (rank 0's summary).
chunks() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["client"]["chunks"])' \
    "$WORK/$1.0.json"
}

note() { echo "      $*"; }
# say TEXT: a line of a check's output that is also shown when it passes.
say() { echo "$*"; echo "$*" >>"$WORK/NOTES"; }
show_notes() {
  local line
  [ -f "$WORK/NOTES" ] || return 0
  while read -r line; do note "$line"; done <"$WORK/NOTES"
  rm -f "$WORK/NOTES"
}
elapsed() { note "($((($(date +%s%N) - START_NS) / 1000000000)) s so far)"; }

# --- Next hops: the control threads ARP for the upstream (the leaves, for
# the spine's address) and the TAN (the spine, for agg-ps's) every second
# until answered; the replies are counted as neighbor_reports.
next_hops_resolved() {
  local s t0 rc
  t0=$(date +%s%N)
  for _ in $(seq 1 50); do
    rc=0
    for s in "${SWITCHES[@]}"; do [ "$(metric "$s" neighbor_reports)" -gt 0 ] || rc=1; done
    [ "$rc" -eq 0 ] && break
    sleep 0.1
  done
  for s in "${SWITCHES[@]}"; do
    say "$s: ARP requests sent $(metric "$s" control_tx), replies $(metric "$s" neighbor_reports)"
  done
  say "after $((($(date +%s%N) - t0) / 1000000)) ms"
  return $rc
}
check "ARP: the leaves resolved the spine's address, the spine agg-ps's" next_hops_resolved &&
  show_notes
rm -f "$WORK/NOTES"

# --- 1. No straggler.
snapshot
check "no straggler: int32 sum, 8 ranks, 64 KiB x 3, all verified" \
  allreduce plain-int32 7 --dtype int32 --size 64K --iterations 3
check "no straggler: float32 sum (fixed point), 64 KiB x 3, all verified" \
  allreduce plain-fixed 7 --dtype float32 --size 64K --iterations 3
no_straggler_counters() {
  local rc=0 s
  ps_fresh
  expect leafa partials_sent -gt 0 || rc=1
  expect leafb partials_sent -gt 0 || rc=1
  expect spine partials_received -gt 0 || rc=1
  expect spine completions -gt 0 || rc=1
  expect leafa results_down -gt 0 || rc=1
  for s in "${SWITCHES[@]}"; do
    expect "$s" timeouts -eq 0 || rc=1
    expect "$s" bypass_created -eq 0 || rc=1
  done
  expect spine first_data_sent -eq 0 || rc=1
  expect_ps first_data -eq 0 || rc=1
  [ "$rc" -eq 0 ] || show_deltas
  say "$(show_deltas | head -3 | tr '\n' ';')"
  return $rc
}
check "no straggler: partials up, results down; no timeout, no bypass entry, nothing at the TAN" \
  no_straggler_counters && show_notes
rm -f "$WORK/NOTES"
elapsed

# --- 2 and 3. Stragglers.
# straggler_counters NAME LEAVES: after run NAME, whose chunks each had one
# straggler under each of LEAVES (leafa, leafb), the counters of the bypass
# path: timeouts and bypass entries at those leaves, the late data forwarded
# by the spine without being counted (two contributions per chunk there: the
# leaves' partials), merged by the TAN; no entry left.
straggler_counters() {
  local name="$1" leaves="$2" rc=0 n s late=0 punctual=0
  n=$(chunks "$name")
  ps_fresh
  say "$n chunks per rank; $(show_deltas | tr '\n' ';')"
  for s in $leaves; do
    late=$((late + 1))
    expect "$s" timeouts -ge "$n" || rc=1
    expect "$s" bypass_created -ge "$n" || rc=1
    expect "$s" bypass_matched -ge "$n" || rc=1
    expect "$s" late_flagged -ge "$n" || rc=1
    expect "$s" late_forwarded -ge "$n" || rc=1
  done
  for s in leafa leafb; do
    # A leaf counts its punctual members only: 3 per chunk under a straggler, else 4.
    punctual=$([[ " $leaves " == *" $s "* ]] && echo 3 || echo 4)
    expect "$s" contributions -eq $((punctual * n)) || rc=1
  done
  expect spine contributions -eq $((2 * n)) || rc=1
  expect spine late_forwarded -ge $((late * n)) || rc=1
  expect spine first_data_sent -ge "$n" || rc=1
  expect spine timeouts -eq 0 || rc=1
  expect_ps first_data -gt 0 || rc=1
  expect_ps merged -eq $((late * n)) || rc=1
  expect_ps completed -eq "$n" || rc=1
  expect_ps gave_up -eq 0 || rc=1
  for s in "${SWITCHES[@]}"; do
    expect "$s" bypass_created -eq "$(($(delta "$s" bypass_matched) + $(delta "$s" bypass_expired)))" || rc=1
    expect_gauge "$s" bypass_entries -eq 0 || rc=1
  done
  return $rc
}
start_ps
snapshot
check "one straggler (rank 2, 500 ms late): int32 sum, 16 KiB x 2, every rank verified" \
  with RANK_EXTRA="2:--delay-ms,500" allreduce one 7 --dtype int32 --size 16K --iterations 2
check "  ... leaf A timed out and bypassed it, the spine forwarded it unreduced, the TAN merged it" \
  straggler_counters one leafa && show_notes
rm -f "$WORK/NOTES"
elapsed

start_ps
snapshot
check "two stragglers (rank 1 400 ms, rank 6 600 ms late): int32 sum, 16 KiB, every rank verified" \
  with RANK_EXTRA="1:--delay-ms,400 6:--delay-ms,600" allreduce two 7 --dtype int32 --size 16K
check "  ... both leaves bypassed theirs, the TAN merged two lates per chunk" \
  straggler_counters two "leafa leafb" && show_notes
rm -f "$WORK/NOTES"
elapsed

# --- 4. A forwarded slot gives way while its straggler is still missing.
# slot_of JOB SEQ: aggregator::SlotIndex.
slot_of() {
  local mix=$((($1 * 0x9e3779b1) & 0xffffffff))
  echo $((($2 + (mix ^ (mix >> 16))) & (SLOTS - 1)))
}
# slot_holder SWITCH INDEX: "job J seq S count/expected state" of the slot, or "free".
slot_holder() {
  sw_curl "$1" "/api/v1/slots?limit=100000" | python3 -c '
import json, sys
d = json.load(sys.stdin)
s = [s for s in d["slots"] if s["index"] == int(sys.argv[1])]
print("job %d seq %d %d/%d %s" % (s[0]["job"], s[0]["seq"], s[0]["count"], s[0]["expected"], s[0]["state"]) if s else "free")' "$2"
}
slot_reuse() {
  local rc=0 s7 s8 target t0 pid alive=0
  s7=${NEXT_SEQ[7]}
  target=$(slot_of 7 "$s7")
  s8=${NEXT_SEQ[8]}
  s8=$((s8 + ((target - $(slot_of 8 "$s8") + SLOTS) % SLOTS)))
  say "job 7 seq $s7 and job 8 seq $s8 both use slot $target"
  t0=$(date +%s%N)
  # One chunk (256 int32); rank 2 comes 2.5 s late.
  with RANK_EXTRA="2:--delay-ms,2500" launch slow 7 "0 1 2 3 4 5 6 7" --dtype int32 --size 1K
  for _ in $(seq 1 40); do
    [ "$(delta spine first_data_sent)" -gt 0 ] && break
    sleep 0.05
  done
  say "after $((($(date +%s%N) - t0) / 1000000)) ms: leaf A timeouts +$(delta leafa timeouts)," \
    "spine first data +$(delta spine first_data_sent); slot $target holds: leaf A" \
    "$(slot_holder leafa "$target"), spine $(slot_holder spine "$target")"
  expect leafa timeouts -eq 1 || rc=1
  expect spine first_data_sent -ge 1 || rc=1
  expect_gauge leafa slot_timers -eq 0 || rc=1
  with FIRST_SEQ="$s8" allreduce quick 8 --dtype int32 --size 1K || { echo "job 8 failed"; rc=1; }
  say "job 8 done after $((($(date +%s%N) - t0) / 1000000)) ms; slot $target holds: leaf A" \
    "$(slot_holder leafa "$target"), leaf B $(slot_holder leafb "$target"), spine" \
    "$(slot_holder spine "$target")"
  for pid in ${RANK_PIDS[slow]}; do kill -0 "$pid" 2>/dev/null && alive=$((alive + 1)); done
  say "job 7 ranks still waiting then: $alive of 8"
  [ "$alive" -eq 8 ] || { echo "job 7 ended before its straggler came"; rc=1; }
  for s in leafa leafb spine; do
    [ "$(job_metric "$s" completions 8)" -ge 1 ] || { echo "$s: no completion of job 8"; rc=1; }
  done
  collect slow || { echo "job 7 failed after its slot was reused"; show_deltas; rc=1; }
  say "job 7 done after $((($(date +%s%N) - t0) / 1000000)) ms"
  ps_fresh
  say "$(show_deltas | tr '\n' ';')"
  expect_ps completed -ge 1 || rc=1
  expect_ps gave_up -eq 0 || rc=1
  return $rc
}
start_ps
snapshot
check "while job 7 waits 2.5 s for a straggler, job 8 completes on the same slots; then job 7 completes, verified" \
  slot_reuse && show_notes
rm -f "$WORK/NOTES"
elapsed

# --- 5. Ordered floats: bit-identical whatever the arrival order.
# The results are taken off the wire in rank 0's namespace (agg-worker prints
# no result bits): every RESULT of the job, by sequence number.
cat >"$WORK/sniff.py" <<'EOF'
import json, signal, socket, struct, sys
iface, job, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.bind((iface, 0))
s.settimeout(0.1)
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
results = {}  # seq -> {payload hex: flags}
open(out + ".ready", "w").close()
while not stop:
    try:
        frame, addr = s.recvfrom(65535)
    except (socket.timeout, InterruptedError):
        continue
    if addr[2] == socket.PACKET_OUTGOING:
        continue
    off, eth = 14, struct.unpack("!H", frame[12:14])[0]
    if eth == 0x8100:
        off, eth = 18, struct.unpack("!H", frame[16:18])[0]
    if eth != 0x0800 or frame[off + 9] != 17:
        continue
    a = off + (frame[off] & 0xF) * 4 + 8
    if len(frame) < a + 48:
        continue
    magic, _, opcode, flags, _, job_id, seq = struct.unpack("!HBBHHII", frame[a:a + 16])
    if magic != 0xA65C or opcode != 3 or job_id != job:
        continue
    elems = struct.unpack("!H", frame[a + 38:a + 40])[0]
    p = a + 48 + 2 * frame[a + 43]
    results.setdefault(str(seq), {})[frame[p:p + 4 * elems].hex()] = flags
json.dump(results, open(out, "w"))
EOF
# Eight vectors of 1024 float32 over a wide range of magnitudes: sums in
# different orders differ in their last bits.
python3 - "$WORK" <<'EOF'
import random, struct, sys
random.seed(47)
for r in range(8):
    v = [random.uniform(-1, 1) * 2.0 ** random.randint(-14, 14) for _ in range(1024)]
    open("%s/in.%d.f32" % (sys.argv[1], r), "wb").write(struct.pack("<1024f", *v))
EOF
ORDERED_RUNS=20
ordered_runs() {
  local k r extra rc=0 sniff line
  ip netns exec "$(topo_ns w0)" python3 "$WORK/sniff.py" eth0 9 "$WORK/sniffed.json" &
  sniff=$!
  topo_track_pid "$sniff"
  for _ in $(seq 1 50); do [ -e "$WORK/sniffed.json.ready" ] && break; sleep 0.1; done
  : >"$WORK/ordered.seqs"
  for k in $(seq 1 "$ORDERED_RUNS"); do
    extra=""
    for r in 0 1 2 3 4 5 6 7; do extra+=" $r:--delay-ms,$((RANDOM % 150))"; done
    with VERIFY="" with RANK_EXTRA="$extra" launch "ord$k" 9 "0 1 2 3 4 5 6 7" \
      --dtype float32 --float-mode ordered --input "$WORK/in.{rank}.f32"
    collect "ord$k" || { echo "run $k failed"; rc=1; }
    echo "${RUN_FIRST_SEQ[ord$k]}" >>"$WORK/ordered.seqs"
  done
  kill -TERM "$sniff"
  wait "$sniff"
  python3 - "$WORK" >"$WORK/ordered.out" <<'EOF' || rc=1
import json, struct, sys
w = sys.argv[1]
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
vec = [struct.unpack("<1024f", open("%s/in.%d.f32" % (w, r), "rb").read()) for r in range(8)]
def ordered(ranks, i):
    ranks = list(ranks)
    acc = vec[ranks[0]][i]
    for r in ranks[1:]:
        acc = f32(acc + vec[r][i])
    return acc
tree = [f32(ordered(range(4), i) + ordered(range(4, 8), i)) for i in range(1024)]
flat = [ordered(range(8), i) for i in range(1024)]
tree_bits = struct.pack("<1024f", *tree)
print("the tree order differs from the flat rank order in %d of 1024 elements"
      % sum(a != b for a, b in zip(tree, flat)))
got = json.load(open(w + "/sniffed.json"))
firsts = [int(x) for x in open(w + "/ordered.seqs").read().split()]
rc, runs = 0, []
for k, first in enumerate(firsts, 1):
    data, seq = b"", first
    while len(data) < 4096 and str(seq) in got:
        variants = got[str(seq)]
        if len(variants) != 1:
            print("run %d seq %d: %d different results" % (k, seq, len(variants))); rc = 1
        data += bytes.fromhex(sorted(variants)[0])
        seq += 1
    if len(data) != 4096:
        print("run %d: only %d of 4096 result bytes captured" % (k, len(data))); rc = 1
    runs.append(data)
distinct = len(set(runs))
print("%d runs, %d distinct results" % (len(runs), distinct))
if distinct != 1:
    rc = 1
for k, data in enumerate(runs, 1):
    if data != tree_bits:
        n = len(data) // 4
        bad = [i for i in range(n) if data[4 * i:4 * i + 4] != tree_bits[4 * i:4 * i + 4]]
        print("run %d: %d elements differ from the tree order reduction%s" % (k, len(bad),
              ", e.g. element %d: got %r, want %r (flat order %r)" % (bad[0],
              struct.unpack("<f", data[4 * bad[0]:4 * bad[0] + 4])[0], tree[bad[0]], flat[bad[0]])
              if bad else ""))
        rc = 1
sys.exit(rc)
EOF
  while read -r line; do say "$line"; done <"$WORK/ordered.out"
  expect leafa timeouts -eq 0 || rc=1
  expect leafb timeouts -eq 0 || rc=1
  expect spine first_data_sent -eq 0 || rc=1
  return $rc
}
snapshot
check "ordered float32, random delays 0-150 ms (threshold 1 s), $ORDERED_RUNS runs: results bit-identical, in tree order" \
  ordered_runs && show_notes
rm -f "$WORK/NOTES"
elapsed

# --- 6. A straggler that never comes.
never_comes() {
  local rc=0 t0 ms pids i code ranks
  t0=$(date +%s%N)
  launch never 7 "0 1 2 3 4 5 6" --dtype int32 --size 4K --timeout-ms 8000
  read -r -a pids <<<"${RANK_PIDS[never]}"
  read -r -a ranks <<<"${RANK_LIST[never]}"
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    code=$?
    [ "$code" -eq 3 ] || { echo "rank ${ranks[$i]}: exit $code, expected 3"; rc=1; }
    grep -q "without the contributions of 1 members" "$WORK/never.${ranks[$i]}.out" ||
      { echo "rank ${ranks[$i]}: no 'without the contributions of 1 members'"; rc=1; }
  done
  ms=$((($(date +%s%N) - t0) / 1000000))
  say "$(grep -h -m1 'failed' "$WORK/never.0.out")"
  say "the ranks ended after $ms ms (agg-ps gives up after 1500 ms; their own timeout is 8000 ms)"
  [ "$ms" -lt 5000 ] || rc=1
  ps_fresh
  expect_ps gave_up -gt 0 || rc=1
  expect_ps completed -eq 0 || rc=1
  expect leafb timeouts -gt 0 || rc=1
  [ "$rc" -eq 0 ] || { show_deltas; for i in 0 4; do tail -3 "$WORK/never.$i.out"; done; }
  return $rc
}
start_ps --give-up-ms 1500
snapshot
check "rank 7 never comes: the TAN gives up, the other ranks fail with exit 3 in bounded time" \
  never_comes && show_notes
rm -f "$WORK/NOTES"

# stop_switch NAME: SIGTERM; passes when it exits 0 within 10 s.
stop_switch() {
  local pid=${SWITCH_PID[$1]}
  kill -TERM "$pid" 2>/dev/null || { echo "aggswitch $1 is gone"; tail -20 "$WORK/$1.log"; return 1; }
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  wait "$pid"
}
if [ "$FAILED" -ne 0 ]; then
  for s in "${SWITCHES[@]}"; do echo "--- the last lines of $s's log"; tail -8 "$WORK/$s.log"; done
  echo "--- the last lines of agg-ps's log"; tail -8 "$WORK/ps.$PS_RUNS.log"
fi
stop_ps
for s in "${SWITCHES[@]}"; do
  check "aggswitch $s still runs and stops with exit 0" stop_switch "$s"
done
elapsed
finish
