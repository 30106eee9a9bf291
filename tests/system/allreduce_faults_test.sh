#!/usr/bin/env bash
# System test: allreduce through a real aggswitch with 2, 4 and 8 workers,
# every dtype, a worker killed mid-run, two jobs at once, and loss,
# duplication and reordering injected on the switch's ports (ports[].faults).
# Every agg-worker runs with --verify: a result counts only if it is bit-exact.
#
#   w0 10.0.44.1 ── af-p0 ┐
#   w1 10.0.44.2 ── af-p1 │
#   ...                   ├─ aggswitch (10.0.44.254; aggregation 10.0.44.253, UDP 47044)
#   w7 10.0.44.8 ── af-p7 ┘
#
# Clean switch: every dtype with N = 2, 4 and 8; two jobs at once, on
# separate and on shared hosts; a rank killed with SIGKILL mid-run, after
# which the others must fail cleanly in bounded time and the switch must serve
# a fresh job.
# 1% and 5% faults: loss, duplication and reordering at that rate each, in
# both directions on every port; thousands of chunks per level, all
# bit-exact, and one allreduce timed against the same one on the clean
# switch (loss recovery within RECOVERY_BOUND times the clean time).
# /metrics must show every kind of fault injected, and the clients' JSON
# summaries retransmissions and NOTICEs "held". ports[].faults is read at
# start-up, and a job whose last ACK is lost keeps its slots on the switch, so each fault
# scenario gets a switch of its own.
#
# The subnet and UDP port are the test's own: DPDK 22.11's af_packet PMD sets
# up its ring before it binds the socket to the interface, so a switch starting
# while other aggregation traffic runs on the host can take in some of that.
#
# Usage: allreduce_faults_test.sh AGGSWITCH AGG_WORKER
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
AGG_WORKER=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"
CHECK_TAIL_LINES=60

WORK=$(mktemp -d /tmp/aggswitch-af.XXXXXX)
HTTP_PORT=19481
METRICS="http://127.0.0.1:$HTTP_PORT/metrics"
PREFIX="agg-af-$$"
SWITCH_MAC=02:a9:9c:00:00:44
AGG_IP=10.0.44.253
AGG_PORT=47044
SLOTS=4096
STALE_SLOT_MS=3000  # the killed job's slots give way to the next job after this
HOSTS=8
# Every rank's agg-worker runs under this, so a client that hangs despite its
# own timeouts fails its check instead of the whole test.
RANK_WRAPPER=(timeout -k 5 120)
SWITCH_PID=""
SWITCH_LOG=/dev/null
START_NS=$(date +%s%N)

topo_init af
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

for w in $(seq 0 $((HOSTS - 1))); do
  topo_host "w$w" "af-p$w"
  topo_addr "w$w" eth0 "10.0.44.$((w + 1))/24"
done

# start_switch NAME [FAULTS]: aggswitch with every port faulty as FAULTS (a
# YAML flow map for ports[].faults), or clean; its log is NAME.log.
start_switch() {
  local name="$1" faults="${2:-}" w
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
  addresses: [10.0.44.254/24]
ports:
EOF
    for w in $(seq 0 $((HOSTS - 1))); do
      echo "  - {name: p$w, devargs: \"net_af_packet_af$w,iface=af-p$w\", access: 10${faults:+, faults: $faults}}"
    done
    cat <<EOF
workers:
  - {lcore: 1, rx: [$(seq -s ', ' -f 'p%g' 0 $((HOSTS - 1)))]}
mempool: {mbufs: 32767}
http: {listen: "127.0.0.1:$HTTP_PORT"}
aggregation:
  address: $AGG_IP
  udp_port: $AGG_PORT
  slots: $SLOTS
  in_band_registration: true
  stale_slot_ms: $STALE_SLOT_MS
  # The jobs run two at a time under faults: declared, so that the test can
  # read where their chunks land (far_apart) and keep them out of each
  # other's slots.
  jobs:
    - {id: 404, key: "0x5eed", members: 4}
    - {id: 405, key: "0x5eed", members: 4}
    - {id: 804, key: "0x5eed", members: 4}
    - {id: 805, key: "0x5eed", members: 4}
EOF
  } >"$WORK/$name.yaml"
  run_switch "$AGGSWITCH" "$WORK/$name.yaml" "$HTTP_PORT" "$SWITCH_LOG"
}

# Faults hit ARP too, and a lost ARP reply costs the kernel's one-second
# retry, which is not what this test is about: the hosts get the
# aggregation address's MAC for good.
static_arp() {
  local w
  for w in $(seq 0 $((HOSTS - 1))); do
    ip -n "$(topo_ns "w$w")" neigh replace "$AGG_IP" lladdr "$SWITCH_MAC" dev eth0 nud permanent
  done
}

# switch_state [JOB...]: on a failure, whether the switch still runs, its
# non-zero aggregation and fault counters (per job for the JOBs), and its
# last words.
switch_state() {
  local jobs
  jobs=$(IFS='|'; echo "$*")
  echo "--- switch state"
  kill -0 "$SWITCH_PID" 2>/dev/null && echo "aggswitch is running" || echo "aggswitch is gone"
  curl -fsS -m 2 "$METRICS" |
    grep -E "^aggswitch_(aggregation_[a-z_]+_total\{lcore|aggregation_slots_(busy|complete)|aggregation_job_[a-z_]+_total\{job=\"($jobs)\"|port_injected_faults_total|port_dropped_packets_total)" |
    grep -v ' 0$'
  tail -5 "$SWITCH_LOG"
}

# launch NAME WORLD JOB FIRST_HOST [AGG-WORKER OPTIONS]: starts ranks
# 0..WORLD-1 of JOB in the background, rank r in namespace w(FIRST_HOST+r mod
# 8), each with --verify and a JSON summary NAME.r.json. Their pids, in rank
# order, go to RANK_PIDS[NAME].
declare -A RANK_PIDS=()
launch() {
  local name="$1" world="$2" job="$3" first="$4" r ns pids=()
  shift 4
  for r in $(seq 0 $((world - 1))); do
    ns=$(topo_ns "w$(((first + r) % HOSTS))")
    ip netns exec "$ns" "${RANK_WRAPPER[@]}" "$AGG_WORKER" --rank "$r" --world "$world" \
      --job "$job" --key 0x5eed --switch "$AGG_IP:$AGG_PORT" --verify --quiet \
      --json "$WORK/$name.$r.json" "$@" >"$WORK/$name.$r.out" 2>&1 &
    pids+=($!)
    topo_track_pid $!
  done
  RANK_PIDS[$name]="${pids[*]}"
}

# collect NAME: waits for NAME's ranks; passes when every one exited 0. Shows
# all of a failed rank's output, and the first rank's result line.
collect() {
  local name="$1" r code rc=0 pids
  read -r -a pids <<<"${RANK_PIDS[$name]}"
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}"
    code=$?
    if [ "$code" -ne 0 ]; then
      rc=1
      sed "s/^/[$name rank $r, exit $code] /" "$WORK/$name.$r.out"
    elif [ "$r" -eq 0 ]; then
      grep -h '^RESULT' "$WORK/$name.$r.out" | sed "s/^/[$name rank $r] /"
    fi
  done
  return $rc
}

# allreduce NAME WORLD JOB [AGG-WORKER OPTIONS]: one job on w0.., verified.
allreduce() {
  local name="$1" world="$2" job="$3"
  shift 3
  launch "$name" "$world" "$job" 0 "$@"
  collect "$name" || { switch_state "$job"; return 1; }
}

# two_jobs NAME_A WORLD_A JOB_A "OPTIONS_A" NAME_B WORLD_B JOB_B "OPTIONS_B":
# both jobs at once, A's ranks from w0 up, B's from w4 up; both verified.
two_jobs() {
  local rc=0
  # shellcheck disable=SC2086 # the options are word lists
  launch "$1" "$2" "$3" 0 $4
  # shellcheck disable=SC2086
  launch "$5" "$6" "$7" 4 $8
  collect "$1" || rc=1
  collect "$5" || rc=1
  [ "$rc" -eq 0 ] || switch_state "$3" "$7"
  return $rc
}

# far_seq JOB_A JOB_B: a first sequence number for JOB_B that puts its
# chunks half their slot region away from JOB_A's (which starts at 0): both
# are config jobs, whose placement the switch shows (GET /api/v1/jobs/<id>).
far_seq() {
  local first size base_a base_b
  read -r first size base_a <<<"$(job_placement "http://127.0.0.1:$HTTP_PORT" "$1")"
  read -r _ _ base_b <<<"$(job_placement "http://127.0.0.1:$HTTP_PORT" "$2")"
  echo $(((base_a - first + size / 2 - (base_b - first) + size) % size))
}

# two_jobs_apart NAME_A WORLD_A JOB_A "OPTIONS_A" NAME_B WORLD_B JOB_B "OPTIONS_B":
# two_jobs, B starting at far_seq A B.
two_jobs_apart() {
  two_jobs "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8 --first-seq $(far_seq "$3" "$7")"
}

# json_sum FIELD NAME...: client.FIELD summed over every rank summary of the
# runs NAME...
json_sum() {
  local field="$1"
  shift
  local files=() name
  for name in "$@"; do files+=("$WORK/$name".*.json); done
  python3 -c 'import json, os, sys
print(sum(json.load(open(f))["client"][sys.argv[1]] for f in sys.argv[2:] if os.path.exists(f)))' \
    "$field" "${files[@]}"
}

# iteration_ms NAME: the time of one allreduce in run NAME, the median over
# its iterations at its fastest rank (the others started later and waited
# for it), in ms.
iteration_ms() {
  python3 -c 'import glob, json, sys
print("%.1f" % (1e3 * min(json.load(open(f))["latency_s"]["median"] for f in glob.glob(sys.argv[1] + ".*.json"))))' \
    "$WORK/$1"
}
# Loss recovery: the same allreduce (N=4, float32, 4 MiB x 5) on the clean
# switch and under 1% and 5% faults; each faulty time may be at most
# RECOVERY_BOUND[level] times the clean one. The bounds leave CI room over
# what an idle machine measures (bench/loss_recovery.sh).
TIMED_ARGS=(--dtype float32 --op sum --size 4M --iterations 5)
declare -A RECOVERY_BOUND=([1]=4 [5]=10)
CLEAN_MS=""
# recovery LEVEL NAME JOB: the timed allreduce under LEVEL% faults, against
# CLEAN_MS.
recovery() {
  allreduce "$2" 4 "$3" "${TIMED_ARGS[@]}" || return 1
  local ms
  ms=$(iteration_ms "$2")
  python3 -c 'import sys
clean, ms, bound = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
print("%s ms per allreduce against %s ms clean: %.2fx (at most %gx)" % (ms, clean, ms / clean, bound))
sys.exit(0 if ms <= bound * clean else 1)' "$CLEAN_MS" "$ms" "${RECOVERY_BOUND[$1]}" >"$WORK/recovery"
  local rc=$?
  report "$(cat "$WORK/recovery")"
  return $rc
}

# injected FAULT: aggswitch_port_injected_faults_total{fault=FAULT} summed over the ports.
injected() {
  curl -fsS -m 2 "$METRICS" | awk -v f="fault=\"$1\"" '
    /^aggswitch_port_injected_faults_total\{/ && index($1, f) { s += $2 } END { print s + 0 }'
}

# killed_member JOB: a long 4-rank run (16 MiB of float32 is 11782 chunks
# per iteration) whose rank 2 gets SIGKILL once the switch has completed 15000
# of its chunks, or after 10 s. Rank 2 must die of it; ranks 0, 1 and 3 must
# fail with exit 3 ("a member of the job stopped sending") within their
# --timeout-ms plus a margin, and not have finished the run.
killed_member() {
  local job="$1" timeout_ms=2000 margin_ms=1500 victim=2 r code rc=0 done_chunks=0 pids
  local -a RANK_WRAPPER=()  # the pid must be agg-worker itself
  launch kill 4 "$job" 0 --dtype float32 --size 16M --iterations 40 --timeout-ms "$timeout_ms"
  read -r -a pids <<<"${RANK_PIDS[kill]}"
  for _ in $(seq 1 100); do
    done_chunks=$(curl -fsS -m 2 "$METRICS" |
      awk -v m="aggswitch_aggregation_job_completions_total{job=\"$job\"}" '$1 == m {print $2}')
    [ "${done_chunks:-0}" -ge 15000 ] && break
    sleep 0.1
  done
  say "job $job: ${done_chunks:-0} chunks completed before the kill"
  kill -0 "${pids[$victim]}" || { echo "rank $victim was not running"; rc=1; }
  kill -KILL "${pids[$victim]}"
  local killed_at ms
  local -a codes
  killed_at=$(date +%s%N)
  # The clock stops when the last rank has exited, before any of the checks
  # below (each python3 start costs this machine half a second).
  for r in 0 1 2 3; do
    wait "${pids[$r]}"
    codes[r]=$?
  done
  RANKS_ENDED_NS=$(date +%s%N)
  ms=$(((RANKS_ENDED_NS - killed_at) / 1000000))
  for r in 0 1 2 3; do
    code=${codes[r]}
    if [ "$r" -eq "$victim" ]; then
      [ "$code" -eq 137 ] || { echo "rank $victim: exit $code, not SIGKILL"; rc=1; }
      continue
    fi
    grep -h '^RESULT' "$WORK/kill.$r.out" | sed "s/^/[rank $r, exit $code] /"
    [ "$code" -eq 3 ] || { echo "rank $r: exit $code, expected 3"; rc=1; }
    grep -q "a member of the job stopped sending" "$WORK/kill.$r.out" ||
      { echo "rank $r: no 'a member of the job stopped sending'"; rc=1; }
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
print("rank", sys.argv[2], "completed", d["completed"], "of", d["iterations"], "iterations")
sys.exit(0 if d["completed"] < d["iterations"] else 1)' "$WORK/kill.$r.json" "$r" >"$WORK/kill.done" || rc=1
    say "$(cat "$WORK/kill.done")"
  done
  say "the other ranks ended $ms ms after the kill (timeout $timeout_ms ms + $margin_ms ms margin)"
  [ "$ms" -le $((timeout_ms + margin_ms)) ] || rc=1
  [ "$rc" -eq 0 ] || switch_state "$job"
  return $rc
}

# note TEXT: a line of figures in the log, under the checks.
note() { echo "      $*"; }
# say TEXT: a line of a check's output that is also kept in WORK/NOTES, to be
# shown under the check when it passes.
say() { echo "$*"; echo "$*" >>"$WORK/NOTES"; }
# show_notes: shows and forgets WORK/NOTES.
show_notes() {
  local line
  [ -f "$WORK/NOTES" ] || return 0
  while read -r line; do note "$line"; done <"$WORK/NOTES"
  rm -f "$WORK/NOTES"
}
elapsed() { note "($((($(date +%s%N) - START_NS) / 1000000000)) s so far)"; }

# --- A clean switch.
if ! start_switch clean; then
  fail "aggswitch (no faults) came up"; finish; exit 1
fi
check "N=2: int32 sum, 1 MiB x 3" \
  allreduce n2-int32 2 201 --dtype int32 --op sum --size 1M --iterations 3
check "N=2: bool or, 256 KiB x 2" \
  allreduce n2-bool 2 202 --dtype bool --op or --size 256K --iterations 2
check "N=4: float16 sum, 1 MiB x 2" \
  allreduce n4-half 4 203 --dtype float16 --op sum --size 1M --iterations 2
check "N=4: bfloat16 max, 1 MiB x 2" \
  allreduce n4-bf16 4 204 --dtype bfloat16 --op max --size 1M --iterations 2
check "N=8: float32 sum as fixed point, 2 MiB x 3" \
  allreduce n8-fixed 8 205 --dtype float32 --op sum --size 2M --iterations 3
check "N=8: float32 sum in rank order (ordered), 1 MiB x 2" \
  allreduce n8-ordered 8 206 --dtype float32 --op sum --size 1M --iterations 2 --float-mode ordered
check "N=8: int32 min, 1 MiB" \
  allreduce n8-int32 8 207 --dtype int32 --op min --size 1M
check "N=8: bool and, 256 KiB" \
  allreduce n8-bool 8 208 --dtype bool --op and --size 256K
check "two jobs at once: float32 fixed point on w0-w3, bfloat16 sum on w4-w7" \
  two_jobs both-a 4 210 "--dtype float32 --op sum --size 4M --iterations 2" \
           both-b 4 211 "--dtype bfloat16 --op sum --size 2M --iterations 3"
check "two jobs at once on the same hosts: int32 on 8 ranks, float16 on 4" \
  two_jobs share-a 8 212 "--dtype int32 --op sum --size 2M --iterations 2" \
           share-b 4 213 "--dtype float16 --op sum --size 1M --iterations 3"
clean_time() {
  allreduce clean-timed 4 209 "${TIMED_ARGS[@]}" || return 1
  CLEAN_MS=$(iteration_ms clean-timed)
  report "$CLEAN_MS ms per allreduce"
}
check "N=4: float32 4 MiB x 5, the time of a clean allreduce" clean_time
check "a rank killed mid-run: the others fail with exit 3 within the timeout" killed_member 220 &&
  show_notes
rm -f "$WORK/NOTES"
# fresh_job_after_kill DEAD_JOB JOB: a new in-band job whose two iterations
# of 4 MiB of float32 (2946 chunks each) take every slot of the in-band
# region (a quarter of the $SLOTS), so also those the killed job held: they
# give way once older than aggregation.stale_slot_ms ($STALE_SLOT_MS ms). It
# starts once that long has passed since the dead job's last rank exited: a
# chunk that meets a younger slot of the dead job moves to a spare slot
# instead (a collision), so that the takeover checked below would depend on
# how fast this machine ran the checks in between. On a failure, shows what
# the dead job holds.
fresh_job_after_kill() {
  local wait_ms=$((STALE_SLOT_MS + 200 - ($(date +%s%N) - ${RANKS_ENDED_NS:-0}) / 1000000))
  [ "$wait_ms" -gt 0 ] && sleep "$(printf '%d.%03d' $((wait_ms / 1000)) $((wait_ms % 1000)))"
  allreduce after 4 "$2" --dtype float32 --op sum --size 4M --iterations 2 --timeout-ms 5000 && return 0
  echo "--- slots job $1 (the killed rank's) still holds"
  curl -fsS -m 2 "http://127.0.0.1:$HTTP_PORT/api/v1/slots?job=$1&limit=100000" | python3 -c '
import collections, json, sys
d = json.load(sys.stdin)
print(d["count"], "slots:", dict(collections.Counter(s["state"] for s in d["slots"])))'
  return 1
}
check "then a fresh job on the same switch, over every aggregation slot" fresh_job_after_kill 220 221
stale_slots_taken() {
  curl -fsS -m 2 "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk '$1 ~ /^aggswitch_aggregation_stale_slots_total/ { n += $2 } END { print n + 0; exit !(n > 0) }'
}
check "  ... taking over the killed job's stale slots (aggswitch_aggregation_stale_slots_total > 0)" \
  stale_slots_taken
check "aggswitch (no faults) still runs and stops with exit 0" stop_switch
elapsed

# --- 1% and 5% loss, duplication and reordering on every port, both ways.
declare -A TALLY=()
SEED=0
# scenario LEVEL PROBABILITY NAME WHAT COMMAND...: COMMAND on a switch of its
# own whose ports lose, duplicate and reorder frames with PROBABILITY each;
# the switch's fault counters are added to TALLY[LEVEL.<fault>], its NOTICEs
# missing sent unasked to TALLY[LEVEL.gap_notices].
scenario() {
  local level="$1" p="$2" name="$3" what="$4" f v
  shift 4
  SEED=$((SEED + 1))
  local faults="{loss: $p, duplicate: $p, reorder: $p, direction: both, seed: $SEED}"
  if ! start_switch "$name" "$faults"; then
    fail "$level% faults, $what: aggswitch came up"; return
  fi
  static_arp
  check "$level% faults, $what" "$@"
  for f in drop duplicate reorder; do
    v=$(injected "$f")
    TALLY[$level.$f]=$((${TALLY[$level.$f]:-0} + v))
  done
  v=$(curl -fsS -m 2 "$METRICS" | awk '$1 ~ /^aggswitch_aggregation_gap_notices_total/ { n += $2 } END { print n + 0 }')
  TALLY[$level.gap_notices]=$((${TALLY[$level.gap_notices]:-0} + v))
  stop_switch >/dev/null || fail "$level% faults, $what: aggswitch stops with exit 0"
}

# tally_positive LEVEL KIND...: TALLY[LEVEL.KIND] > 0 for each KIND.
tally_positive() {
  local level="$1" k rc=0
  shift
  for k in "$@"; do
    echo "$k: ${TALLY[$level.$k]:-0}"
    [ "${TALLY[$level.$k]:-0}" -gt 0 ] || rc=1
  done
  return $rc
}

# faulty_level PERCENT PROBABILITY SIZE: five scenarios, SIZE per vector in
# the bigger ones.
faulty_level() {
  local p="$1" prob="$2" size="$3" runs retx held missing
  local job=$((300 + 100 * p))
  scenario "$p" "$prob" "f$p-fixed" "N=4: float32 fixed point, $size x 3" \
    allreduce "f$p-fixed" 4 $((job + 1)) --dtype float32 --op sum --size "$size" --iterations 3
  scenario "$p" "$prob" "f$p-int32" "N=8: int32 sum, $size x 2" \
    allreduce "f$p-int32" 8 $((job + 2)) --dtype int32 --op sum --size "$size" --iterations 2
  scenario "$p" "$prob" "f$p-half" "N=2: float16 sum, 1 MiB x 4" \
    allreduce "f$p-half" 2 $((job + 3)) --dtype float16 --op sum --size 1M --iterations 4
  scenario "$p" "$prob" "f$p-two" "two jobs at once: float32 ordered and bfloat16 sum, N=4 each" \
    two_jobs_apart "f$p-ordered" 4 $((job + 4)) "--dtype float32 --op sum --size $size --iterations 2 --float-mode ordered" \
                   "f$p-bf16" 4 $((job + 5)) "--dtype bfloat16 --op sum --size $size --iterations 2"
  scenario "$p" "$prob" "f$p-bool" "N=8: bool and, 256 KiB x 2" \
    allreduce "f$p-bool" 8 $((job + 6)) --dtype bool --op and --size 256K --iterations 2
  scenario "$p" "$prob" "f$p-timed" "N=4: float32 4 MiB x 5, within ${RECOVERY_BOUND[$p]}x the clean time" \
    recovery "$p" "f$p-timed" $((job + 7))
  runs=("f$p-fixed" "f$p-int32" "f$p-half" "f$p-ordered" "f$p-bf16" "f$p-bool")
  check "$p% faults: the switch dropped, duplicated and reordered frames" \
    tally_positive "$p" drop duplicate reorder
  retx=$(json_sum retransmissions "${runs[@]}")
  check "$p% faults: the clients retransmitted" test "$retx" -gt 0
  held=$(json_sum held_notices "${runs[@]}")
  check "$p% faults: the switch told ranks that resent a chunk it held so (NOTICE held)" \
    test "$held" -gt 0
  check "$p% faults: the switch told ranks unasked which lost contribution a later chunk revealed (NOTICE missing)" \
    tally_positive "$p" gap_notices
  missing=$(json_sum missing_notices "${runs[@]}")
  check "$p% faults: the ranks resent what the switch said it lacked" test "$missing" -gt 0
  note "[$p%] injected: drop ${TALLY[$p.drop]:-0}, duplicate ${TALLY[$p.duplicate]:-0}," \
    "reorder ${TALLY[$p.reorder]:-0}; clients: chunks $(json_sum chunks "${runs[@]}")," \
    "retransmissions $retx, held $held, missing $missing (switch: ${TALLY[$p.gap_notices]:-0} unasked)," \
    "duplicate results $(json_sum duplicate_results "${runs[@]}")"
  elapsed
}
faulty_level 1 0.01 2M
faulty_level 5 0.05 512K

finish
