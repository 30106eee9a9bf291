#!/usr/bin/env bash
# System test: allreduce through a running aggswitch with the client library.
# Four worker namespaces run agg-worker over kernel UDP sockets, then over
# AF_XDP, every result checked bit for bit against the local reduction
# (--verify). The switch's ports are AF_XDP sockets where the machine allows
# (choose_port_driver), else af_packet.
#
#   w0 10.0.10.1 ── ar-p0 ┐
#   w1 10.0.10.2 ── ar-p1 ├─ aggswitch (10.0.10.254; aggregation address 10.0.10.253)
#   w2 10.0.10.3 ── ar-p2 │
#   w3 10.0.10.4 ── ar-p3 ┘
#
# Usage: allreduce_netns_test.sh AGGSWITCH AGG_WORKER
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
AGG_WORKER=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-ar.XXXXXX)
HTTP_PORT=19478
PREFIX="agg-ar-$$"
AGG_IP=10.0.10.253

topo_init ar
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT
choose_port_driver

topo_workers 10.0.10 4

{
  switch_head_yaml "$PREFIX" 02:a9:9c:00:00:01 10.0.10.254/24 "$HTTP_PORT" 4
  cat <<EOF
aggregation:
  address: $AGG_IP
  in_band_registration: true
  jobs: [{id: 5, key: "0x5eed", members: 4}, {id: 6, key: "0x5eed", members: 4}]
EOF
} >"$WORK/switch.yaml"

if ! run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/aggswitch.log"; then
  fail "aggswitch did not come up"; finish; exit 1
fi

# allreduce NAME WORLD JOB [AGG-WORKER OPTIONS]: ranks 0..WORLD-1 in w0.., each
# with --verify; passes when every rank exits 0. Each rank's output is shown.
allreduce() {
  local name="$1" world="$2" job="$3"; shift 3
  local r pids=() rc=0
  for r in $(seq 0 $((world - 1))); do
    topo_exec "w$r" "$AGG_WORKER" --rank "$r" --world "$world" --job "$job" --key 0x5eed \
      --switch "$AGG_IP" --verify --quiet --json "$WORK/$name.$r.json" "$@" \
      >"$WORK/$name.$r.out" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || rc=1
    sed "s/^/[rank $r] /" "$WORK/$name.$r.out"
  done
  [ "$rc" -eq 0 ] || switch_state
  return $rc
}

# On a failure: whether the switch still runs, its counters and its last words.
switch_state() {
  kill -0 "$SWITCH_PID" 2>/dev/null && echo "aggswitch is running" || echo "aggswitch is gone"
  curl -fsS -m 2 "http://127.0.0.1:$HTTP_PORT/metrics" |
    grep -E '^aggswitch_aggregation_[a-z_]+_total\{lcore' | grep -v ' 0$'
  tail -5 "$WORK/aggswitch.log"
}

# json_at_least NAME RANK FIELD MIN: the rank's JSON summary has client.FIELD >= MIN.
json_at_least() {
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1]));
v = d["client"][sys.argv[2]]; print(sys.argv[2], "=", v); sys.exit(0 if v >= int(sys.argv[3]) else 1)' \
    "$WORK/$1.$2.json" "$3" "$4"
}

# matrix LABEL BASE CONFIG_JOB [AGG-WORKER OPTIONS]: every dtype and op, both
# task-info modes and the job from the config (CONFIG_JOB), every float mode;
# jobs BASE+1.., result files named after LABEL.
matrix() {
  local label="$1" base="$2" config_job="$3"; shift 3
  local t="${label:+$label: }" n="${label:-}"
  check "${t}int32 sum, 1 MiB x 3, job registered in band" \
    allreduce "int32$n" 4 $((base + 1)) --dtype int32 --op sum --size 1M --iterations 3 "$@"
  check "${t}float32 sum as fixed point, 4 MiB x 3, bit-exact" \
    allreduce "fixed$n" 4 $((base + 2)) --dtype float32 --op sum --size 4M --iterations 3 "$@"
  check "${t}float32 fixed point without headroom: overflowed chunks redone as float32" \
    allreduce "redo$n" 4 $((base + 3)) --dtype float32 --op sum --size 256K --headroom 0 "$@"
  check "${t}  ... and chunks were redone" json_at_least "redo$n" 0 overflow_redos 1
  check "${t}float16 sum (ordered), job announced by rank 0 (control unit)" \
    allreduce "announce$n" 4 $((base + 4)) --dtype float16 --op sum --size 1M --task-info announce "$@"
  check "${t}bfloat16 max on the job from the switch's config, no task info" \
    allreduce "config$n" 4 "$config_job" --dtype bfloat16 --op max --size 512K --task-info none "$@"
  check "${t}float32 sum in rank order (ORDERED flag), bit-exact" \
    allreduce "ordered$n" 4 $((base + 6)) --dtype float32 --op sum --size 1M --float-mode ordered "$@"
  check "${t}float32 sum in arrival order, within rounding" \
    allreduce "float$n" 4 $((base + 7)) --dtype float32 --op sum --size 1M --float-mode float "$@"
  check "${t}bool and / int32 or on two ranks" \
    allreduce "bool$n" 2 $((base + 8)) --dtype bool --op and --size 64K --iterations 2 "$@"
  check "${t}int32 or, two ranks" allreduce "or$n" 2 $((base + 9)) --dtype int32 --op or --size 64K "$@"
}
matrix "" 100 5
# The same over AF_XDP workers, each on its namespace's veth (the switch's
# ports are whatever choose_port_driver picked).
if [ "$AGG_PORT_DRIVER" = net_af_xdp ]; then
  matrix af_xdp 200 6 --transport af_xdp --iface eth0
  check "af_xdp: the ranks really ran over AF_XDP" grep -q "over af_xdp eth0 queue 0" "$WORK/int32af_xdp.0.out"
else
  echo "SKIP af_xdp workers: this machine has no AF_XDP (see ports: above)"
fi

# A job run again under its id by new processes with new data (--seed): each
# rank draws a new incarnation, the switch starts a new run at once, and
# --verify checks that every sum is the new data's, never a result the switch
# kept from the run before (same job ids, same sequence numbers).
check "a config job run again under its id gets its own sums" \
  allreduce "config-rerun" 4 5 --dtype bfloat16 --op max --size 512K --task-info none --seed 2
check "an in-band job run again under its id gets its own sums" \
  allreduce "inband-rerun" 4 101 --dtype int32 --op sum --size 1M --iterations 3 --seed 3
check "  ... the switch started the new runs" \
  bash -c "grep -q 'job 5: node .* a new run' '$WORK/aggswitch.log' && grep -q 'job 101: node .* a new run' '$WORK/aggswitch.log'"

# Old and new ranks at once: two ranks of job 120 run slowly; a new run of
# the job starts beside them. The new run completes, and the old ranks fail
# with an error that says their run ended.
old_and_new_runs() {
  local r pids=() rc=0
  for r in 0 1; do
    topo_exec "w$r" "$AGG_WORKER" --rank "$r" --world 2 --job 120 --key 0x5eed --switch "$AGG_IP" \
      --size 64K --iterations 100 --delay-ms 50 --timeout-ms 3000 --quiet >"$WORK/old.$r.out" 2>&1 &
    pids+=($!)
  done
  sleep 1
  allreduce new-run 2 120 --dtype int32 --op sum --size 64K --iterations 3 --seed 9 || rc=1
  for r in 0 1; do
    wait "${pids[$r]}"
    local code=$?
    sed "s/^/[old rank $r, exit $code] /" "$WORK/old.$r.out"
    [ "$code" -ne 0 ] || rc=1
    grep -q "run ended (NACK 21)" "$WORK/old.$r.out" || rc=1
  done
  return $rc
}
check "old ranks beside a new run of their job: the new run completes, the old ranks are told their run ended" \
  old_and_new_runs

# A member that never comes: the others fail with a clear error once nothing
# has been answered for --timeout-ms, and exit 3.
missing_member() {
  local start end r pids=() rc=0
  start=$(date +%s%N)
  for r in 0 1 2; do
    topo_exec "w$r" "$AGG_WORKER" --rank "$r" --world 4 --job 110 --key 0x5eed --switch "$AGG_IP" \
      --size 64K --timeout-ms 1500 --quiet >"$WORK/missing.$r.out" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2; do
    wait "${pids[$r]}"
    local code=$?
    sed "s/^/[rank $r, exit $code] /" "$WORK/missing.$r.out"
    [ "$code" -eq 3 ] || rc=1
    grep -q "a member of the job stopped sending" "$WORK/missing.$r.out" || rc=1
  done
  end=$(date +%s%N)
  echo "took $(((end - start) / 1000000)) ms"
  [ $(((end - start) / 1000000)) -lt 6000 ] || rc=1
  return $rc
}
check "a missing member: the others fail within the timeout, exit 3" missing_member

unreachable_switch() {
  topo_exec w0 "$AGG_WORKER" --rank 0 --world 1 --job 111 --switch 10.0.10.252 --size 4K \
    --timeout-ms 1000 --quiet
  [ $? -eq 3 ]
}
check "no switch at the address: fails within the timeout, exit 3" unreachable_switch

check "the switch still serves a new job afterwards" \
  allreduce after 4 112 --dtype float32 --op sum --size 1M

job_metric_at_least() {
  local v
  v=$(curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk -v m="aggswitch_aggregation_job_$1_total{job=\"$2\"}" '$1 == m {print $2}')
  echo "aggswitch_aggregation_job_$1_total{job=\"$2\"} = ${v:-none}"
  [ -n "$v" ] && [ "$v" -ge "$3" ]
}
# 4 MiB of float32 is 2946 chunks, three times, plus one exponent exchange each.
check "metrics: the switch completed every chunk of job 102" job_metric_at_least completions 102 8841
check "aggswitch is still running" kill -0 "$SWITCH_PID"

# The same allreduce through a switch with two worker lcores, one on each
# CPU, on af_packet ports. Every port has two RX queues (AF_PACKET fanout by flow hash, as a
# NIC's RSS spreads flows), one polled by each worker; a chunk's slot belongs
# to one worker, so contributions cross to their slot's owner through the
# hand-off rings.
kill -TERM "$SWITCH_PID" && wait "$SWITCH_PID"
sed -e 's/lcores: "0,1"/lcores: "0@0,1@1,2@0"/' \
    -e 's/net_af_xdp_/net_af_packet_/' -e 's/iface=\(ar-p[0-3]\)"/iface=\1,qpairs=2"/' \
    -e 's/  - {lcore: 1, rx: \[p0, p1, p2, p3\]}/  - {lcore: 1, rx: ["p0:0", "p1:0", "p2:0", "p3:0"]}\n  - {lcore: 2, rx: ["p0:1", "p1:1", "p2:1", "p3:1"]}/' \
    "$WORK/switch.yaml" >"$WORK/switch2.yaml"
two_workers_up() {
  grep -E 'lcores|qpairs|lcore: 2' "$WORK/switch2.yaml"
  run_switch "$AGGSWITCH" "$WORK/switch2.yaml" "$HTTP_PORT" "$WORK/aggswitch2.log"
}
check "aggswitch with two worker lcores comes up" two_workers_up
check "two workers: int32 sum, 1 MiB x 3, job registered in band" \
  allreduce int32w2 4 121 --dtype int32 --op sum --size 1M --iterations 3
check "two workers: float32 sum in rank order, bit-exact" \
  allreduce orderedw2 4 122 --dtype float32 --op sum --size 1M --float-mode ordered

# lcore_total NAME: aggswitch_aggregation_NAME_total summed over the lcores.
lcore_total() {
  curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk -v m="aggswitch_aggregation_$1_total{lcore=" 'index($1, m) == 1 {s += $2} END {print s + 0}'
}
handed_off() {
  local handoffs full completions
  handoffs=$(lcore_total handoffs)
  full=$(lcore_total handoff_full)
  completions=$(lcore_total completions)
  curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" | grep -E '^aggswitch_aggregation_(handoffs|handoff_full|completions)_total'
  [ "$handoffs" -gt 0 ] && [ "$full" -eq 0 ] && [ "$completions" -gt 0 ]
}
check "two workers: contributions crossed to their slot's owner, none lost" handed_off
check "aggswitch with two workers is still running" kill -0 "$SWITCH_PID"

finish
