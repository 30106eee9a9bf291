#!/usr/bin/env bash
# System test: the parameter node (docs/parameter-node.md). One aggswitch,
# four worker namespaces and agg-ps in a fifth as the jobs' TAN, so their
# parameter node. Every agg-worker runs with --verify: a result counts only
# if it is bit-exact.
#
#   w0 10.0.45.1 ── ps-p0 ┐
#   w1 10.0.45.2 ── ps-p1 │
#   w2 10.0.45.3 ── ps-p2 ├─ aggswitch (10.0.45.254; aggregation 10.0.45.253, UDP 47045)
#   w3 10.0.45.4 ── ps-p3 │
#   ps 10.0.45.50 ─ ps-p4 ┘  agg-ps
#
#  1. Loss: 2% of the frames on every worker port are lost, both ways; the
#     workers mark what they resend for the parameter node (--resend-to-ps).
#     Resends that find their chunk partly aggregated release the slot to the
#     parameter node, the others go there unreduced; it completes those
#     chunks, and every rank gets exact results.
#  2. Conflicts: two jobs at once on a 64-slot table without spare slots:
#     chunks that find their slot held by the other job go to the parameter
#     node marked CONFLICT, and it reduces them; nobody is refused slot_busy,
#     every result exact.
#  2b. Moves: the same two jobs placed on one partition of 32 slots (their
#     slot quota) of a 128-slot table: their chunks meet at once, the job
#     whose chunk collides moves to a partition of its own
#     (docs/aggregation.md, "Moves"), the API shows where, and every result
#     is exact.
#  3. Under the same loss, a job whose root is its own TAN (so has no
#     parameter node) refuses data marked for one: the rank fails, naming
#     the reason.
#  4. Verify mode: every complete chunk of job 10 goes to the parameter node
#     as VERIFY and comes back VERIFIED before any rank receives it. The
#     overflow example in job 11 (not in verify mode): float32 1.5e9, 1.0e9,
#     1.5e9 and 1.0e9 as fixed point without headroom (scale 1) are integers
#     whose sum, 2.5e9, saturates at the switch; the parameter node answers
#     EXCEPTION_RETRANSMIT, the ranks redo the chunks in float32 for it, and
#     every rank receives 5e9.
#
# Usage: ps_netns_test.sh AGGSWITCH AGG_WORKER AGG_PS
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
CHECK_TAIL_LINES=40

WORK=$(mktemp -d /tmp/aggswitch-ps.XXXXXX)
HTTP_PORT=19483
METRICS="http://127.0.0.1:$HTTP_PORT/metrics"
PREFIX="agg-ps-$$"
SWITCH_MAC=02:a9:9c:00:00:45
AGG_IP=10.0.45.253
AGG_PORT=47045
PS_IP=10.0.45.50
PS_STATS="$WORK/ps.json"
RANK_WRAPPER=(timeout -k 5 120)
SWITCH_PID=""
SWITCH_LOG=/dev/null
PS_PID=""

topo_init ps
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

for w in 0 1 2 3; do
  topo_host "w$w" "ps-p$w"
  topo_addr "w$w" eth0 "10.0.45.$((w + 1))/24"
done
topo_host ps ps-p4
topo_addr ps eth0 "$PS_IP/24"

# start_switch NAME FAULTS AGGREGATION: aggswitch whose worker ports are
# faulty as FAULTS (a YAML flow map for ports[].faults; empty: clean), with
# AGGREGATION's lines added to its aggregation section; its log is NAME.log.
start_switch() {
  local name="$1" faults="$2" extra="$3" w
  SWITCH_LOG="$WORK/$name.log"
  {
    cat <<EOF
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX
switch:
  mac: $SWITCH_MAC
  addresses: [10.0.45.254/24]
ports:
EOF
    for w in 0 1 2 3; do
      echo "  - {name: p$w, devargs: \"net_af_packet_ps$w,iface=ps-p$w\", access: 10${faults:+, faults: $faults}}"
    done
    cat <<EOF
  - {name: p4, devargs: "net_af_packet_ps4,iface=ps-p4", access: 10}
workers:
  - {lcore: 1, rx: [p0, p1, p2, p3, p4]}
mempool: {mbufs: 32767}
http: {listen: "127.0.0.1:$HTTP_PORT"}
aggregation:
  address: $AGG_IP
  udp_port: $AGG_PORT
  in_band_registration: false
  tan:
    strategy: fixed
    candidates:
      - {address: $PS_IP, port: $AGG_PORT}
$extra
EOF
  } >"$WORK/$name.yaml"
  run_switch "$AGGSWITCH" "$WORK/$name.yaml" "$HTTP_PORT" "$SWITCH_LOG"
}

# start_ps: agg-ps in the ps namespace, its stats in PS_STATS (fresh).
start_ps() {
  stop_ps
  rm -f "$PS_STATS"
  ip netns exec "$(topo_ns ps)" "$AGG_PS" --listen "$PS_IP:$AGG_PORT" --give-up-ms 10000 \
    --stats "$PS_STATS" >>"$WORK/ps.log" 2>&1 &
  PS_PID=$!
  topo_track_pid "$PS_PID"
  local i
  for i in $(seq 1 50); do [ -s "$PS_STATS" ] && return 0; sleep 0.1; done
  echo "agg-ps did not write its stats; its log:"; cat "$WORK/ps.log"
  return 1
}
stop_ps() {
  [ -n "$PS_PID" ] || return 0
  kill -TERM "$PS_PID" 2>/dev/null
  wait "$PS_PID" 2>/dev/null
  PS_PID=""
}
# ps_stat FIELD: agg-ps's counter, from its stats file (written every 500 ms).
ps_stat() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$PS_STATS" "$1"
}

# total NAME: aggswitch_aggregation_NAME_total summed over the lcores.
total() { agg_total "$METRICS" "$1"; }

# switch_state: on a failure, whether the switch and agg-ps still run, their
# non-zero counters, and the switch's last words.
switch_state() {
  echo "--- switch state"
  kill -0 "$SWITCH_PID" 2>/dev/null && echo "aggswitch is running" || echo "aggswitch is gone"
  curl -fsS -m 2 "$METRICS" |
    grep -E '^aggswitch_(aggregation_[a-z_]+_total\{lcore|port_injected_faults_total)' |
    grep -v ' 0$'
  tail -5 "$SWITCH_LOG"
  echo "--- agg-ps: $(cat "$PS_STATS" 2>/dev/null)"
}

# allreduce NAME JOB [AGG-WORKER OPTIONS]: four ranks, each with --verify;
# passes when every rank exits 0. Each rank's output is shown.
allreduce() {
  local name="$1" job="$2"; shift 2
  local r pids=() rc=0
  for r in 0 1 2 3; do
    topo_exec "w$r" "${RANK_WRAPPER[@]}" "$AGG_WORKER" --rank "$r" --world 4 --job "$job" \
      --key 0x5eed --switch "$AGG_IP:$AGG_PORT" --verify --quiet --task-info none \
      "$@" >"$WORK/$name.$r.out" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || rc=1
    sed "s/^/[rank $r] /" "$WORK/$name.$r.out"
  done
  [ "$rc" -eq 0 ] || switch_state
  return $rc
}

# two_jobs NAME [AGG-WORKER OPTIONS]: jobs 7 and 8 at once on the same hosts.
two_jobs() {
  local name="$1"; shift
  allreduce "$name-7" 7 "$@" >"$WORK/$name-7.all" 2>&1 &
  local a=$!
  allreduce "$name-8" 8 "$@" >"$WORK/$name-8.all" 2>&1 &
  local b=$! rc=0
  wait "$a" || rc=1
  wait "$b" || rc=1
  cat "$WORK/$name-7.all" "$WORK/$name-8.all"
  return $rc
}

if ! start_ps; then fail "agg-ps came up"; finish; exit 1; fi

JOBS="  jobs:
    - {id: 7, key: \"0x5eed\", members: 4}
    - {id: 8, key: \"0x5eed\", members: 4}
    - {id: 9, key: \"0x5eed\", members: 4, tan: {strategy: self}}"

# --- 1. Loss, resends for the parameter node.
if start_switch loss "{loss: 0.02, direction: both, seed: 45}" "$JOBS"; then
  # A lost ARP reply costs the kernel's one-second retry: the hosts get the
  # aggregation address's MAC for good.
  for w in 0 1 2 3; do
    ip -n "$(topo_ns "w$w")" neigh replace "$AGG_IP" lladdr "$SWITCH_MAC" dev eth0 nud permanent
  done
  check "2% loss, resends marked for the parameter node: int32 sum, 1 MiB x 3, exact" \
    allreduce loss-int 7 --dtype int32 --op sum --size 1M --iterations 3 --resend-to-ps
  check "2% loss, resends marked for the parameter node: float32 as fixed point, 1 MiB x 2, exact" \
    allreduce loss-fixed 8 --dtype float32 --op sum --size 1M --iterations 2 --resend-to-ps
  sleep 0.7  # agg-ps writes its stats every 500 ms
  released=$(total released_to_ps)
  forwarded=$(total at_ps_forwarded)
  echo "      switch: released_to_ps=$released at_ps_forwarded=$forwarded" \
    "late_flagged=$(total late_flagged) first_data_sent=$(total first_data_sent)"
  echo "      agg-ps: $(cat "$PS_STATS")"
  check "  ... resends released partly aggregated slots, or went to the parameter node unreduced" \
    test $((released + forwarded)) -gt 0
  check "  ... agg-ps completed chunks from the switch's partials and the resends" \
    test $(($(ps_stat completed) + $(ps_stat direct_reduced))) -gt 0
  check "  ... and gave up on none" test "$(ps_stat gave_up)" -eq 0 -a "$(ps_stat direct_gave_up)" -eq 0
  # --- 3. Job 9 is its own switch's TAN: it has no parameter node.
  no_parameter_node() {
    if allreduce none 9 --dtype int32 --op sum --size 1M --resend-to-ps --timeout-ms 3000; then
      echo "every rank succeeded"
      return 1
    fi
    echo "      switch: no_parameter_node=$(total no_parameter_node)"
    grep -l "no parameter node" "$WORK"/none.*.out >/dev/null && test "$(total no_parameter_node)" -gt 0
  }
  check "2% loss, job without a parameter node: a resend marked for one is refused (NACK no_parameter_node), and its rank says so" \
    no_parameter_node
  check "aggswitch (loss) stops with exit 0" stop_switch
else
  fail "2% loss: aggswitch came up"
fi

# --- 2. Conflicts: two jobs on a table that cannot hold both windows.
start_ps || fail "agg-ps came up again"
if start_switch conflicts "" "  slots: 64
  spare_slots: 0
$JOBS"; then
  check "two jobs at once on 64 slots, no spare slot: int32 sums, 256 KiB x 4 each, exact" \
    two_jobs conflicts --dtype int32 --op sum --size 256K --iterations 4 --window 16 --resend-to-ps
  sleep 0.7
  conflicts=$(total conflicts_to_ps)
  echo "      switch: collisions=$(total collisions) conflicts_to_ps=$conflicts" \
    "slot_busy=$(total slot_busy) released_to_ps=$(total released_to_ps)"
  echo "      agg-ps: $(cat "$PS_STATS")"
  check "  ... chunks whose slot the other job held went to the parameter node (CONFLICT)" \
    test "$conflicts" -gt 0
  check "  ... agg-ps took them" test "$(ps_stat conflicts)" -gt 0
  check "  ... nobody was refused slot_busy" test "$(total slot_busy)" -eq 0
  check "aggswitch (conflicts) stops with exit 0" stop_switch
else
  fail "conflicts: aggswitch came up"
fi

# --- 2b. Moves: two jobs on one partition, in a table with room for both.
start_ps || fail "agg-ps came up again"
if start_switch moves "" "  slots: 128
  spare_slots: 8
  slots_per_job: 32
  jobs:
    - {id: 7, key: \"0x5eed\", members: 4, placement_hint: 0}
    - {id: 8, key: \"0x5eed\", members: 4, placement_hint: 0}"; then
  check "two jobs at once on one partition of 32 slots: int32 sums, 256 KiB x 4 each, exact" \
    two_jobs moves --dtype int32 --op sum --size 256K --iterations 4 --window 16 --resend-to-ps
  moves=$(curl -fsS -m 2 "$METRICS" |
    awk '$1 == "aggswitch_aggregation_job_moves_total" { print $2 + 0 }')
  echo "      switch: job_moves=$moves collisions=$(total collisions) moved=$(total moved)" \
    "relocated=$(total relocated) conflicts_to_ps=$(total conflicts_to_ps)"
  check "  ... a job whose chunk collided moved to a partition of its own" test "${moves:-0}" -ge 1
  check "  ... its chunks went there from their home slots" test "$(total moved)" -gt 0
  check "  ... the API shows the move (placement.moved: a partition clear of slots 0..31)" \
    python3 -c '
import json, sys, urllib.request
jobs = json.load(urllib.request.urlopen(sys.argv[1]))["jobs"]
moved = [j["placement"]["moved"] for j in jobs if j["placement"].get("moved")]
assert moved, "no job shows a move"
for m in moved:
    assert m["span"] == 32 and 32 <= m["base"] <= 120 - 32, m
' "http://127.0.0.1:$HTTP_PORT/api/v1/jobs"
  check "aggswitch (moves) stops with exit 0" stop_switch
else
  fail "moves: aggswitch came up"
fi

# --- 4. Verify mode, and the overflow redo at the parameter node.
start_ps || fail "agg-ps came up again"
for r in 0 1 2 3; do
  python3 -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("<f", float(sys.argv[1])) * 3000)' \
    "$(echo 1.5e9 1.0e9 1.5e9 1.0e9 | cut -d' ' -f$((r + 1)))" >"$WORK/big.$r"
done
if start_switch verify "" "  jobs:
    - {id: 10, key: \"0x5eed\", members: 4, verify: true}
    - {id: 11, key: \"0x5eed\", members: 4}"; then
  check "verify mode: int32 sum, 1 MiB x 2, exact" \
    allreduce verify 10 --dtype int32 --op sum --size 1M --iterations 2
  sleep 0.7
  echo "      switch: verify_sent=$(total verify_sent) results_down=$(total results_down)" \
    "unverified_results=$(total unverified_results)"
  echo "      agg-ps: $(cat "$PS_STATS")"
  check "  ... every chunk was checked by the parameter node and came back VERIFIED" \
    test "$(total verify_sent)" -gt 0 -a "$(ps_stat verified)" -gt 0 \
    -a "$(total results_down)" -ge "$(ps_stat verified)" -a "$(ps_stat verify_omissions)" -eq 0
  check "  ... no unchecked result reached a rank" test "$(total unverified_results)" -eq 0
  check "overflow redo: 1.5e9, 1.0e9, 1.5e9, 1.0e9 as fixed point without headroom saturate (2.5e9 at scale 1); redone in float32 at the parameter node, every rank gets 5e9" \
    allreduce overflow 11 --dtype float32 --op sum --input "$WORK/big.{rank}" --headroom 0 \
    --resend-to-ps
  sleep 0.7
  echo "      switch: verify_sent=$(total verify_sent) exceptions_down=$(total exceptions_down)" \
    "saturated_sums=$(total saturated_sums)"
  echo "      agg-ps: $(cat "$PS_STATS")"
  check "  ... the parameter node answered the saturated sums with EXCEPTION_RETRANSMIT" \
    test "$(ps_stat verify_overflows)" -gt 0 -a "$(total exceptions_down)" -gt 0
  check "  ... and summed the ranks' float32 redos itself" test "$(ps_stat direct_reduced)" -gt 0
  check "  ... every rank redid its saturated chunks" \
    test "$(grep -l "overflow redos [1-9]" "$WORK"/overflow.*.out | wc -l)" -eq 4
  check "aggswitch (verify) stops with exit 0" stop_switch
else
  fail "verify mode: aggswitch came up"
fi

stop_ps
finish
