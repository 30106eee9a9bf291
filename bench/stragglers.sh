#!/usr/bin/env bash
# The tail effect that motivates slot timers (docs/stragglers.md): one worker
# of an 8-rank allreduce job arrives X ms late at every iteration, on a real
# two-level tree of aggswitch processes, with the switches' slot timers off
# and on, interleaved in one run. It measures
#   (a) the delayed job's time per allreduce;
#   (b) the time per allreduce of a second 8-rank job, the companion, that
#       shares the switches (and their slot tables) with the delayed job;
#   (c) how many slots the delayed job holds in the aggregating state (waiting
#       for members; such a slot gives way to no other chunk), and how long.
# In one synchronous job every rank waits for the straggler's data either
# way, so (a) is not expected to shrink; what timers change is (c), and with
# it (b) when the slot table is small enough for the jobs to meet in it.
#
# Run it as root on an otherwise idle machine (about 4 minutes with the
# defaults; each wait for other work to go idle adds up to 2):
#
#   scripts/build.sh                     # aggswitch, agg-worker, agg-ps
#   sudo bench/stragglers.sh [--delays "0 20 100"] [--repeats 3] [--iterations 100]
#                            [--size 16K] [--slots 128] [--slots-per-job 32] [--leaf-timeout-ms 10]
#                            [--spine-timeout-ms 20] [--sample-ms 20] [--retries 2]
#                            [--build-dir build] [--out bench/results/stragglers-latest.txt]
#                            [--keep-logs] [--quick]
#
#   smoke run (under a minute):  sudo bench/stragglers.sh --quick
#   (--quick is --delays "0 100" --repeats 1 --iterations 5 --retries 0;
#   options after it override it)
#
# The tree, as in tests/system/tree_netns_test.sh: leaf A (node 100, ranks
# 0-3) and leaf B (node 101, ranks 4-7) under a spine, the root, whose TAN is
# agg-ps. Three aggswitch processes, each in a namespace of its own (af_packet
# fanout ids, see that test), veth pairs between them; each rank's namespace
# holds that rank of both jobs. All three switches use lcores "0,1": their
# control threads share CPU 0, their poll loops CPU 1.
#
# Four configured jobs, set up once: 11 (delayed) and 12 (companion) with
# timers off (timeout_ms 0), 21 and 22 with timers on (--leaf-timeout-ms at
# the leaves, --spine-timeout-ms at the spine). Each phase reuses its mode's
# jobs with new sequence numbers, chosen so that the delayed job always
# starts at the first slot of its region (the table less its spare slots) and
# the companion half way round it: on and off runs see the same slot layout. aggregation.stale_slot_ms is max(1000, 2 x the
# largest delay + 500) ms: no slot that waits for the straggler is taken over.
#
# One run (delay X, timers off or on), every rank's result verified:
#   - phase A: the delayed job alone, --iterations allreduces of --size int32
#     per rank; rank 2 (under leaf A) waits X ms before each allreduce
#     (agg-worker --delay-ms). Each switch's slot table (/api/v1/slots) is
#     sampled every --sample-ms from inside its namespace, and the switches'
#     /metrics read before and after: (a) and (c);
#   - phase B: the delayed job again, as background, and the companion job,
#     --iterations allreduces, no straggler of its own: (b). The background
#     job must still be running when the companion is done (the run fails
#     otherwise); then it is stopped.
#   - Before each phase the script waits until stale_slot_ms has passed since
#     the last one ended: a job's last chunks stay complete (not freed) at the
#     spine until then, as the final ACK of a job's last allreduce reaches the
#     leaves only, and they would hold out against the next phase's chunks.
# Runs go, for each repeat and delay, off then on (on then off in even
# repeats), so that a drift of the machine hits both alike. A run in which
# processes that are not ours used more than 10% of the two CPUs (in either
# phase) is run again, up to --retries times, once the machine is idle. One
# unrecorded warm-up of both modes comes first.
#
# How to read the summary (also written to --out, with every run's figures in
# the .json and .tsv beside it; bench/plot.py draws the medians and p99s, and
# the hold per chunk, into stragglers-tail.png beside it, when Debian's
# python3-matplotlib is there):
#   - "median" is the median over a job's 8 ranks of each rank's median time
#     per allreduce (agg-worker --json, latency_s); "p99" likewise of the
#     ranks' p99s (nearest rank: the 99th of 100 iterations; with fewer than
#     100 it is the largest). The punctual ranks' times include the wait for
#     the straggler, the straggler's exclude its delay, so the median over the
#     ranks is a punctual rank's. Each figure is the median over the repeats.
#   - "held slots": the mean number of the delayed job's slots in the
#     aggregating state in phase A, summed over the three switches.
#     "hold/chunk" turns it into a time by Little's law: held slots x phase
#     time / chunks sent, i.e. how long each chunk kept a slot aggregating,
#     summed over the switches it passed.
#   - "timeouts/it": slot timer expiries on the three switches per allreduce
#     in phase A. "companion collisions/it": the companion's datagrams whose
#     slot another chunk held, per allreduce (its per-job counter, summed over
#     the switches): each was moved to a spare slot, or refused with NACK
#     slot_busy when none was free (docs/aggregation.md, "Collisions").
#   - --slots-per-job 32 is each job's slot quota, and the partition a job
#     moves to when its chunk collides (docs/aggregation.md, "Moves"): the
#     switches run through every run, so a job that moved in the warm-up
#     stays moved (aggctl jobs on a switch shows it), and the jobs meet only
#     until then. --slots-per-job 120 (the whole region) is the table as it
#     was before jobs moved: the jobs meet whenever their windows do.
#   - --slots 128 is small on purpose: the two jobs meet in the slot table
#     (the companion, 64 slots ahead and faster, catches up with the delayed
#     job), which is what (b) is about; with a table so large that they never
#     meet during a run (4096 for the defaults), (b) cannot show any gain. At
#     64 slots the jobs also block each other without any straggler: a parent
#     switch frees a job's complete slots only when that job's next partials
#     arrive, so two jobs whose complete slots lie in each other's way wait for
#     stale_slot_ms (seconds, with the clients' backoff).
#   - "on/off" is the median over the repeats of each repeat's ratio of the on
#     run to the off run of the same delay: below 1, timers helped.
#   - A run whose ranks fail (exit status, or a result that does not verify)
#     is FAIL, and the script exits 1.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$ROOT/bench"
# shellcheck source=bench/lib.sh
source "$BENCH/lib.sh"
# shellcheck source=tests/lib/topology.sh
source "$ROOT/tests/lib/topology.sh"
# shellcheck source=tests/lib/tree.sh
source "$ROOT/tests/lib/tree.sh"

DELAYS="0 20 100"
REPEATS=3
ITERATIONS=100      # allreduces per job and phase
SIZE=16K
SLOTS=128
SLOTS_PER_JOB=32
LEAF_TIMEOUT_MS=10
SPINE_TIMEOUT_MS=20
SAMPLE_MS=20
RETRIES=2
BUILD_DIR="$ROOT/build"
OUT="$BENCH/results/stragglers-latest.txt"
KEEP_LOGS=0

NS=sg                         # namespaces sg-leafa, sg-leafb, sg-spine, sg-tan, sg-w0..sg-w7
NET=10.0.48
SPINE_IP=$NET.1
LEAF_IP=([0]=$NET.11 [1]=$NET.12)
TAN_IP=$NET.50
PORT=47047
STRAGGLER=2                   # the delayed job's late rank, under leaf A
SWITCHES=(leafa leafb spine)
declare -A HTTP_PORT=([spine]=19590 [leafa]=19591 [leafb]=19592)  # each in its own namespace
# Job ids: delayed and companion job, timers off / on.
declare -A JOB_DELAYED=([off]=11 [on]=21) JOB_COMPANION=([off]=12 [on]=22)
declare -A JOB_KEY=([11]=0x11ee [12]=0x12ee [21]=0x21ee [22]=0x22ee)
SEQ_STRIDE=$((1 << 20))       # sequence numbers each run may use, per job
MAX_OTHER_SHARE=0.10          # of the 2 CPUs, used by processes not ours during a run
RUN_TIMEOUT=300               # seconds for one rank, whatever happens

while [ $# -gt 0 ]; do
  case "$1" in
    --delays) DELAYS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --iterations) ITERATIONS="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --slots) SLOTS="$2"; shift 2 ;;
    --slots-per-job) SLOTS_PER_JOB="$2"; shift 2 ;;
    --leaf-timeout-ms) LEAF_TIMEOUT_MS="$2"; shift 2 ;;
    --spine-timeout-ms) SPINE_TIMEOUT_MS="$2"; shift 2 ;;
    --sample-ms) SAMPLE_MS="$2"; shift 2 ;;
    --retries) RETRIES="$2"; shift 2 ;;
    --build-dir) BUILD_DIR=$(realpath -m "$2"); shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --keep-logs) KEEP_LOGS=1; shift ;;
    --quick) DELAYS="0 100"; REPEATS=1; ITERATIONS=5; RETRIES=0; shift ;;
    -h | --help) bench_usage 0 ;;
    *) bench_die "unknown argument: $1 (see --help)" ;;
  esac
done
for d in $DELAYS; do
  [[ "$d" =~ ^[0-9]+$ ]] || bench_die "--delays: $d is not a number of milliseconds"
done
[ -n "${DELAYS// /}" ] || bench_die "--delays: give at least one delay"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || bench_die "--repeats wants a positive integer"
[[ "$ITERATIONS" =~ ^[1-9][0-9]*$ ]] || bench_die "--iterations wants a positive integer"
[[ "$RETRIES" =~ ^[0-9]+$ ]] || bench_die "--retries wants a count"
[[ "$SIZE" =~ ^[1-9][0-9]*[KM]?$ ]] || bench_die "--size: $SIZE is not a size such as 16K"
if ! [[ "$SLOTS" =~ ^[0-9]+$ ]] || [ "$SLOTS" -lt 64 ] || [ $((SLOTS & (SLOTS - 1))) -ne 0 ]; then
  bench_die "--slots: a power of two, at least 64 (aggregation.slots)"
fi
# The spare slots are a sixteenth of the table (the default).
if ! [[ "$SLOTS_PER_JOB" =~ ^[1-9][0-9]*$ ]] || [ "$SLOTS_PER_JOB" -gt $((SLOTS - SLOTS / 16)) ]; then
  bench_die "--slots-per-job: 1..$((SLOTS - SLOTS / 16)) chunks (the table less its spare slots)"
fi
[[ "$LEAF_TIMEOUT_MS" =~ ^[1-9][0-9]*$ ]] || bench_die "--leaf-timeout-ms wants milliseconds, at least 1"
[[ "$SPINE_TIMEOUT_MS" =~ ^[1-9][0-9]*$ ]] || bench_die "--spine-timeout-ms wants milliseconds, at least 1"
[[ "$SAMPLE_MS" =~ ^[1-9][0-9]*$ ]] || bench_die "--sample-ms wants milliseconds"
# aggregation.stale_slot_ms: above any delay, so that no slot waiting for the
# straggler is taken over; the pause between phases (see settle).
MAX_DELAY=$(tr ' ' '\n' <<<"$DELAYS" | sort -n | tail -n1)
STALE_MS=$((2 * MAX_DELAY + 500))
[ "$STALE_MS" -ge 1000 ] || STALE_MS=1000

WORK=""         # temp dir: binaries, configs, logs of every run
BIN=""          # $WORK/bin: copies of the binaries, so a rebuild cannot change them mid-run
PREFIX="sgbench-$$"  # DPDK file prefixes: $PREFIX-leafa, ...
RUN=""          # the current run's directory
RESULTS=""      # delay mode repeat metric value, one line each
TOPO_UP=0
RUN_COUNT=0     # runs so far (warm-ups and retries too): each takes new sequence numbers
FAILED_RUNS=0
declare -A SWITCH_PID=()
PS_PID=""
SAMPLER_PIDS=()
PIDS_delayed=()
PIDS_companion=()
PIDS_background=()

# --- the topology ------------------------------------------------------------------
# The tree of tests/lib/tree.sh, as in tests/system/tree_netns_test.sh.

topology_up() {
  topo_init "$NS"
  trap cleanup EXIT  # topo_init set its own; ours calls topo_cleanup
  trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM
  TOPO_UP=1
  tree_topology "$NET" "$TAN_IP"
}

# --- the switches, the TAN, the samplers ------------------------------------------------

switch_head() {
  local name="$1" mac="$2" ip="$3"
  cat <<EOF
# bench/stragglers.sh: the $name of the tree.
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX-$name
switch:
  name: stragglers-$name
  mac: $mac
  addresses:
    - {address: $ip/24, vlan: 10}
http: {listen: "127.0.0.1:${HTTP_PORT[$name]}"}
mac_table: {size: 4096, aging_seconds: 300}
mempool: {mbufs: 16383}
aggregation:
  address: {address: $ip, vlan: 10}
  udp_port: $PORT
  in_band_registration: false
  slots: $SLOTS
  slots_per_job: $SLOTS_PER_JOB
  # One secret on the three switches: a job's chunks take the same slots on
  # each, and every run lays the jobs out alike (slot_of).
  slot_secret: "0x5aa95aa95aa95aa90000000000000016"
  # Each run's ranks are new processes (new UDP ports) of the same jobs:
  # they rebind once the old ones are a moment silent.
  member_rebind_ms: 100
  max_fan_in: 16
  max_jobs: 16
  stale_slot_ms: $STALE_MS
  timeout_ms: 0
  trigger: incremental
EOF
}

# job_timeout JOB LEAF_OR_SPINE_MS: the job's threshold line (0 for the off jobs).
job_timeout() {
  if [ "$1" -ge 20 ]; then echo "      timeout_ms: $2"; else echo "      timeout_ms: 0"; fi
}

# leaf_config INDEX: leaf A (0: node 100, ranks 0-3) or leaf B (1: node 101, ranks 4-7).
leaf_config() {
  local i="$1" name=${SWITCHES[$1]} side first p j
  side=$([ "$i" -eq 0 ] && echo a || echo b)
  first=$((4 * i))
  switch_head "$name" "02:a9:9c:00:48:1$((i + 1))" "${LEAF_IP[$i]}"
  cat <<EOF
  bypass: {entries: 65536, ttl_ms: 10000}
  jobs:
EOF
  for j in 11 12 21 22; do
    cat <<EOF
    - id: $j
      key: "${JOB_KEY[$j]}"
      nodes: 3
      node_ids: ["$first-$((first + 3))"]
      upstream: {address: $SPINE_IP, port: $PORT, node: $((100 + i)), vlan: 10}
EOF
    job_timeout "$j" "$LEAF_TIMEOUT_MS"
  done
  echo "ports:"
  for p in $(seq "$first" $((first + 3))); do
    echo "  - {name: w$p, devargs: \"net_af_packet_$NS$p,iface=$NS-$side$p\", access: 10}"
  done
  echo "  - {name: uplink, devargs: \"net_af_packet_$NS$((8 + i)),iface=$NS-${side}up\", access: 10}"
  echo "workers:"
  echo "  - {lcore: 1, rx: [w$first, w$((first + 1)), w$((first + 2)), w$((first + 3)), uplink]}"
}

spine_config() {
  local j
  switch_head spine 02:a9:9c:00:48:01 "$SPINE_IP"
  cat <<EOF
  bypass: {entries: 65536, ttl_ms: 10000, subswitch: nodes}
  jobs:
EOF
  for j in 11 12 21 22; do
    cat <<EOF
    - id: $j
      key: "${JOB_KEY[$j]}"
      nodes: 3
      switches:
        - {node: 100, covers: [0-3]}
        - {node: 101, covers: [4-7]}
      tan:
        strategy: fixed
        candidates:
          - {address: $TAN_IP, port: $PORT, hops: 1}
EOF
    job_timeout "$j" "$SPINE_TIMEOUT_MS"
  done
  cat <<EOF
ports:
  - {name: leafa, devargs: "net_af_packet_${NS}10,iface=$NS-sa", access: 10}
  - {name: leafb, devargs: "net_af_packet_${NS}11,iface=$NS-sb", access: 10}
  - {name: tan, devargs: "net_af_packet_${NS}12,iface=$NS-st", access: 10}
workers:
  - {lcore: 1, rx: [leafa, leafb, tan]}
EOF
}

# sw_get SWITCH PATH: GET from the switch's HTTP API, in its namespace.
sw_get() { ip netns exec "$(topo_ns "$1")" curl -fsS -m 2 "http://127.0.0.1:${HTTP_PORT[$1]}$2"; }
switch_up() { sw_get "$1" /metrics >/dev/null; }
# sw_metric SWITCH NAME: aggswitch_aggregation_NAME(_total), summed over the lcores.
sw_metric() {
  sw_get "$1" /metrics | awk -v a="aggswitch_aggregation_$2_total" -v b="aggswitch_aggregation_$2" '
    { n = $1; sub(/\{.*/, "", n) } n == a || n == b { s += $2 } END { print s + 0 }'
}
next_hops_resolved() {
  local s
  for s in "${SWITCHES[@]}"; do [ "$(sw_metric "$s" neighbor_reports)" -gt 0 ] || return 1; done
}

switches_start() {
  local s
  for s in "${SWITCHES[@]}"; do
    bench_spawn "$WORK/$s.log" ip netns exec "$(topo_ns "$s")" "$BIN/aggswitch" \
      --config "$WORK/$s.yaml" --log-level info
    SWITCH_PID[$s]=$BENCH_LAST_PID
  done
  for s in "${SWITCHES[@]}"; do
    if ! bench_wait_until 60 switch_up "$s"; then
      tail -n 20 "$WORK/$s.log" >&2
      bench_die "aggswitch $s did not come up (log: $WORK/$s.log)"
    fi
  done
  local covers=() j
  for j in 11 12 21 22; do covers+=(--covers "$j:100=0-3" --covers "$j:101=4-7"); done
  bench_spawn "$WORK/agg-ps.log" ip netns exec "$(topo_ns tan)" "$BIN/agg-ps" \
    --listen "$TAN_IP:$PORT" --stats "$WORK/agg-ps.json" "${covers[@]}"
  PS_PID=$BENCH_LAST_PID
  bench_wait_until 10 test -s "$WORK/agg-ps.json" || bench_die "agg-ps did not start: $(cat "$WORK/agg-ps.log")"
  # The leaves ARP for the spine's address, the spine for agg-ps's, every second until answered.
  bench_wait_until 20 next_hops_resolved || bench_die "the switches did not resolve their next hops"
}

# Each switch's slot table, sampled from inside its namespace: one JSON line
# per sample, {"t": epoch seconds, "n": {"JOB:STATE": slots}} (or "error").
write_sampler() {
  cat >"$WORK/sampler.py" <<'PY'
import json, sys, time, urllib.request
url, out, interval = sys.argv[1], sys.argv[2], float(sys.argv[3]) / 1000
with open(out, "a", buffering=1) as f:
    while True:
        t = time.time()
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                slots = json.load(r)["slots"]
            n = {}
            for s in slots:
                k = "%d:%s" % (s["job"], s["state"])
                n[k] = n.get(k, 0) + 1
            f.write(json.dumps({"t": round(t, 6), "n": n}) + "\n")
        except Exception as e:  # counted, not fatal: the summary says how many
            f.write(json.dumps({"t": round(t, 6), "error": str(e)}) + "\n")
        time.sleep(max(0.0, interval - (time.time() - t)))
PY
}
samplers_start() {
  local s
  write_sampler
  for s in "${SWITCHES[@]}"; do
    bench_spawn "$WORK/sampler.$s.log" ip netns exec "$(topo_ns "$s")" python3 "$WORK/sampler.py" \
      "http://127.0.0.1:${HTTP_PORT[$s]}/api/v1/slots?limit=$SLOTS" "$WORK/slots.$s.jsonl" "$SAMPLE_MS"
    SAMPLER_PIDS+=("$BENCH_LAST_PID")
  done
}

# Everything still running, and the switches' logs when one died.
check_alive() {
  local s
  for s in "${SWITCHES[@]}"; do
    if ! bench_alive "${SWITCH_PID[$s]}"; then
      tail -n 25 "$WORK/$s.log" >&2
      bench_die "aggswitch $s exited during the benchmark (log: $WORK/$s.log)"
    fi
  done
  bench_alive "$PS_PID" || bench_die "agg-ps exited during the benchmark (log: $WORK/agg-ps.log)"
}

# --- one run -----------------------------------------------------------------------------

# placement JOB: "FIRST SIZE BASE" of JOB's slot region, from leaf A
# (GET /api/v1/jobs/JOB); the switches share aggregation.slot_secret and
# their table layout, so it is the same on each. The jobs are config jobs:
# their region is the table less its spare slots.
placement() {
  sw_get leafa "/api/v1/jobs/$1" | python3 -c 'import json, sys
p = json.load(sys.stdin)["placement"]
print(p["first"], p["size"], p["base"])'
}
# slot_of JOB SEQ: the slot of JOB's chunk SEQ (its index in the region).
slot_of() {
  local first size base
  read -r first size base <<<"$(placement "$1")"
  echo $(((base + $2) % size))
}
# first_seq JOB BASE AT: the first sequence number at or after BASE whose
# chunk lands AT (a fraction of the region: 0 its start, 0.5 its middle).
first_seq() {
  local first size base at
  read -r first size base <<<"$(placement "$1")"
  at=$(python3 -c "print(int($size * $3))")
  echo $(($2 + ((at - (base + $2) % size + size) % size)))
}

# launch NAME JOB FIRST_SEQ ITERATIONS DELAY: the job's 8 ranks; pids in PIDS_<NAME>.
launch() {
  local name="$1" job="$2" first="$3" iterations="$4" delay="$5" r extra pids=()
  for r in 0 1 2 3 4 5 6 7; do
    extra=()
    [ "$r" -eq "$STRAGGLER" ] && [ "$delay" -gt 0 ] && extra=(--delay-ms "$delay")
    bench_spawn "$RUN/$name.$r.log" timeout -k 5 "$RUN_TIMEOUT" ip netns exec "$(topo_ns "w$r")" \
      "$BIN/agg-worker" --rank "$r" --world 8 --job "$job" --key "${JOB_KEY[$job]}" \
      --switch "${LEAF_IP[$((r / 4))]}:$PORT" --task-info none --dtype int32 --op sum \
      --size "$SIZE" --iterations "$iterations" --first-seq "$first" --verify --quiet \
      --json "$RUN/$name.$r.json" "${extra[@]}"
    pids+=("$BENCH_LAST_PID")
  done
  eval "PIDS_$name=(\"\${pids[@]}\")"
}
# reap PID: waits for a child started with bench_spawn; returns its exit status.
reap() {
  local rc=0
  wait "$1" || rc=$?
  bench_forget_pid "$1"
  return "$rc"
}

# dump_state: what the switches and agg-ps hold, into $RUN/state/, after a
# failure (slots, bypass entries, jobs, counters).
dump_state() {
  local s path
  mkdir -p "$RUN/state"
  for s in "${SWITCHES[@]}"; do
    for path in /metrics "/api/v1/slots?limit=$SLOTS" "/api/v1/bypass?limit=100000" /api/v1/jobs \
      /api/v1/lcores; do
      sw_get "$s" "$path" >"$RUN/state/$s.$(basename "${path%%\?*}")" 2>&1 || true
    done
  done
  cp "$WORK/agg-ps.json" "$RUN/state/agg-ps.json" 2>/dev/null || true
}

# snapshot TAG: every switch's /metrics and agg-ps's counters into $RUN.
snapshot() {
  local s
  for s in "${SWITCHES[@]}"; do sw_get "$s" /metrics >"$RUN/metrics.$s.$1" || true; done
  cp "$WORK/agg-ps.json" "$RUN/agg-ps.$1.json" 2>/dev/null || true
}

RUN_DELAY="" RUN_MODE="" RUN_REPEAT="" OTHER_SHARE=0
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$RUN_DELAY" "$RUN_MODE" "$RUN_REPEAT" "$1" "$2" >>"$RUN/results.tsv"
}

# settle: waits until STALE_MS have passed since the last phase ended, so
# that no slot of an earlier phase holds out against this one's chunks. A
# job's last chunks stay complete at the spine until aggregation.stale_slot_ms:
# the spine frees complete slots by the ack watermark that the leaves' partials
# carry, and a job's last allreduce has no partial after it (the final ACK
# reaches the leaves only).
LAST_PHASE_END=0
settle() { bench_sleep_until "$(awk -v t="$LAST_PHASE_END" -v s="$STALE_MS" 'BEGIN { printf "%.6f", t + (s + 100) / 1000 }')"; }

# new_seqs: the next run's sequence number base, in NEXT_BASE.
NEXT_BASE=0
new_seqs() {
  RUN_COUNT=$((RUN_COUNT + 1))
  NEXT_BASE=$((RUN_COUNT * SEQ_STRIDE))
}

# run_once DELAY MODE REPEAT ATTEMPT: one run into $RUN (results.tsv); sets OTHER_SHARE.
#   phase A: the delayed job alone, --iterations allreduces: (a) and (c);
#   phase B: the delayed job again, in the background, and the companion job,
#     --iterations allreduces: (b). The background job is stopped once the
#     companion is done (it must still be running then).
run_once() {
  RUN_DELAY="$1" RUN_MODE="$2" RUN_REPEAT="$3"
  local attempt="$4" j1 j2 ta0 ta1 tb0 tb1 pid rc=0 overlap=1 s share_a
  RUN="$WORK/run-$RUN_REPEAT-${RUN_DELAY}ms-$RUN_MODE-$attempt"
  mkdir -p "$RUN"
  : >"$RUN/results.tsv"
  j1=${JOB_DELAYED[$RUN_MODE]}
  j2=${JOB_COMPANION[$RUN_MODE]}
  printf '  repeat %s/%s  delay %4s ms  timers %-3s ' "$RUN_REPEAT" "$REPEATS" "$RUN_DELAY" "$RUN_MODE" >&2

  # Phase A.
  settle
  new_seqs
  snapshot a.before
  for s in "${SWITCHES[@]}"; do stat -c %s "$WORK/slots.$s.jsonl" >"$RUN/slots.$s.offset"; done
  bench_cpu_window_begin "${SWITCH_PID[@]}" "$PS_PID" "${SAMPLER_PIDS[@]}"
  ta0=$(bench_now)
  launch delayed "$j1" "$(first_seq "$j1" "$NEXT_BASE" 0)" "$ITERATIONS" "$RUN_DELAY"
  for pid in "${PIDS_delayed[@]}"; do reap "$pid" || rc=1; done
  ta1=$(bench_now)
  bench_cpu_window_end
  LAST_PHASE_END=$ta1
  share_a=$BENCH_OTHER_SHARE
  record other_cpu_share_a "$BENCH_OTHER_SHARE"
  record our_cpu_share_a "$BENCH_OUR_SHARE"
  snapshot a.after
  check_alive

  # Phase B.
  settle
  new_seqs
  snapshot b.before
  bench_cpu_window_begin "${SWITCH_PID[@]}" "$PS_PID" "${SAMPLER_PIDS[@]}"
  tb0=$(bench_now)
  launch background "$j1" "$(first_seq "$j1" "$NEXT_BASE" 0)" $((ITERATIONS * 1000)) "$RUN_DELAY"
  launch companion "$j2" "$(first_seq "$j2" "$NEXT_BASE" 0.5)" "$ITERATIONS" 0
  for pid in "${PIDS_companion[@]}"; do reap "$pid" || rc=1; done
  tb1=$(bench_now)
  for pid in "${PIDS_background[@]}"; do bench_alive "$pid" || overlap=0; done
  for pid in "${PIDS_background[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS_background[@]}"; do reap "$pid" || true; done
  bench_cpu_window_end
  LAST_PHASE_END=$(bench_now)
  snapshot b.after
  check_alive
  record other_cpu_share_b "$BENCH_OTHER_SHARE"
  record our_cpu_share_b "$BENCH_OUR_SHARE"
  OTHER_SHARE=$(awk -v a="$share_a" -v b="$BENCH_OTHER_SHARE" 'BEGIN { print (a > b ? a : b) }')
  record other_cpu_share "$OTHER_SHARE"
  record background_outlived_companion "$overlap"
  if [ "$overlap" -eq 0 ]; then
    printf 'the background delayed job ended before the companion job: see background.*.log\n' >>"$RUN/failure"
    rc=1
  fi

  local out
  if out=$(python3 "$WORK/analyze.py" run --run "$RUN" --work "$WORK" --ta0 "$ta0" --ta1 "$ta1" \
    --tb0 "$tb0" --tb1 "$tb1" --delayed "$j1" --companion "$j2" --switches "${SWITCHES[*]}" \
    2>"$RUN/analyze.err"); then
    while read -r metric value; do record "$metric" "$value"; done <<<"$out"
  else
    rc=1
    printf 'analysis failed: %s\n' "$(cat "$RUN/analyze.err")" >>"$RUN/failure"
  fi
  if [ "$rc" -ne 0 ] || ! grep -qP '\tok\t1$' "$RUN/results.tsv"; then
    # The summary reads a run's last "ok": this one overrides the analysis's
    # "ok 1" when the run failed otherwise (a rank's exit status, the overlap).
    grep -qP '\tok\t0$' "$RUN/results.tsv" || record ok 0
    FAILED_RUNS=$((FAILED_RUNS + 1))
    dump_state
    bench_log "FAILED (logs: $RUN)"
    local log
    for log in "$RUN"/delayed.*.log "$RUN"/companion.*.log "$RUN/failure"; do
      [ -s "$log" ] || continue
      grep -q "RESULT ok" "$log" 2>/dev/null && continue
      bench_log "    --- $(basename "$log"):"
      tail -n 4 "$log" | sed 's/^/      /' >&2
    done
    return 0
  fi
  awk -F'\t' -v share="$OTHER_SHARE" '
    { v[$4] = $5 }
    END { printf "delayed %7.1f ms  held %5.1f slots  %6.1f ms/chunk  companion %7.1f ms  other CPU %3.0f%%\n",
            v["delayed_median_s"] * 1e3, v["held_slots"], v["hold_ms_per_chunk"],
            v["companion_median_s"] * 1e3, share * 100 }' "$RUN/results.tsv" >&2
}

# --- analysis ---------------------------------------------------------------------------

write_analyzer() {
  cat >"$WORK/analyze.py" <<'PY'
"""Per-run figures (run) and the summary (summary) of bench/stragglers.sh."""
import argparse, json, os, statistics, sys


def load_ranks(run, name):
    ranks = []
    for r in range(8):
        path = os.path.join(run, "%s.%d.json" % (name, r))
        if not os.path.exists(path):
            raise SystemExit("%s rank %d wrote no summary (see %s.%d.log)" % (name, r, name, r))
        with open(path) as f:
            ranks.append(json.load(f))
    return ranks


def metrics(path):
    """{series: value} of a Prometheus text file."""
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def family_sum(m, family, job=None):
    total = 0.0
    for series, v in m.items():
        name = series.split("{", 1)[0]
        if name != family:
            continue
        if job is not None and 'job="%d"' % job not in series:
            continue
        total += v
    return total


def delta(run, switches, phase, family, job=None):
    return sum(family_sum(metrics(os.path.join(run, "metrics.%s.%s.after" % (s, phase))), family, job) -
               family_sum(metrics(os.path.join(run, "metrics.%s.%s.before" % (s, phase))), family, job)
               for s in switches)


def held_slots(work, run, switches, job, t0, t1):
    """Mean aggregating slots of `job` over [t0, t1], summed over the switches."""
    total, samples, errors = 0.0, 0, 0
    for s in switches:
        with open(os.path.join(run, "slots.%s.offset" % s)) as f:
            offset = int(f.read())
        values = []
        with open(os.path.join(work, "slots.%s.jsonl" % s)) as f:
            f.seek(offset)
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if not t0 <= d["t"] <= t1:
                    continue
                if "error" in d:
                    errors += 1
                    continue
                values.append(d["n"].get("%d:aggregating" % job, 0))
        if not values:
            raise SystemExit("no slot samples of %s in [%f, %f]" % (s, t0, t1))
        total += statistics.mean(values)
        samples += len(values)
    return total, samples, errors


def job_figures(run, name, failures):
    """(ranks, figures) of a job's ranks' summaries; failures appended to."""
    ranks = load_ranks(run, name)
    for d in ranks:
        if not d["ok"]:
            failures.append("%s rank %d: %s" % (name, d["rank"], d["failure"]))
        elif d["verified"] != d["iterations"]:
            failures.append("%s rank %d: %d of %d verified" % (name, d["rank"], d["verified"],
                                                                d["iterations"]))
    it = ranks[0]["iterations"]
    return ranks, [
        ("%s_median_s" % name, statistics.median(d["latency_s"]["median"] for d in ranks)),
        ("%s_p99_s" % name, statistics.median(d["latency_s"]["p99"] for d in ranks)),
        ("%s_max_s" % name, max(d["latency_s"]["max"] for d in ranks)),
        ("%s_retransmissions_per_it" % name, sum(d["client"]["retransmissions"] for d in ranks) / it),
    ]


def run(a):
    sw = a.switches.split()
    out, failures = [], []
    # Phase A: the delayed job alone.
    ranks, figures = job_figures(a.run, "delayed", failures)
    it = ranks[0]["iterations"]
    chunks = ranks[0]["client"]["chunks"]
    out += figures
    out.append(("delayed_chunks", chunks))
    out.append(("delayed_wall_per_it_s", (a.ta1 - a.ta0) / it))
    held, samples, errors = held_slots(a.work, a.run, sw, a.delayed, a.ta0, a.ta1)
    out.append(("held_slots", held))
    # Little's law: mean occupancy = arrival rate x holding time.
    out.append(("hold_ms_per_chunk", held * (a.ta1 - a.ta0) * 1e3 / chunks))
    out.append(("slot_samples", samples))
    out.append(("slot_sample_errors", errors))
    for c in ("timeouts", "first_data_sent", "late_no_entry", "collisions"):
        out.append(("a_%s_per_it" % c, delta(a.run, sw, "a", "aggswitch_aggregation_%s_total" % c) / it))
    for c in ("missing_list_overflow", "incomplete_results"):
        out.append(("a_" + c, delta(a.run, sw, "a", "aggswitch_aggregation_%s_total" % c)))
    # Phase B: the companion job, beside the delayed job.
    ranks, figures = job_figures(a.run, "companion", failures)
    it = ranks[0]["iterations"]
    out += figures
    out.append(("companion_wall_per_it_s", (a.tb1 - a.tb0) / it))
    out.append(("companion_collisions_per_it",
                delta(a.run, sw, "b", "aggswitch_aggregation_job_collisions_total", a.companion) / it))
    held_b, _, _ = held_slots(a.work, a.run, sw, a.delayed, a.tb0, a.tb1)
    out.append(("b_held_slots_delayed", held_b))
    for c in ("timeouts",):
        out.append(("b_%s_per_it" % c, delta(a.run, sw, "b", "aggswitch_aggregation_%s_total" % c) / it))
    if failures:
        with open(os.path.join(a.run, "failure"), "a") as f:
            f.write("\n".join(failures) + "\n")
    out.append(("ok", 0 if failures else 1))
    for k, v in out:
        print("%s %s" % (k, repr(float(v)) if isinstance(v, float) else v))


def summary(a):
    rows = {}  # (delay, mode, repeat) -> {metric: value}
    for line in open(a.results):
        delay, mode, rep, metric, value = line.rstrip("\n").split("\t")
        rows.setdefault((int(delay), mode, int(rep)), {})[metric] = float(value)
    delays = [int(d) for d in a.delays.split()]
    repeats = sorted({k[2] for k in rows})
    med = lambda xs: statistics.median(xs) if xs else None

    def values(delay, mode, metric):
        return [rows[(delay, mode, r)][metric] for r in repeats
                if rows.get((delay, mode, r), {}).get("ok") == 1 and metric in rows[(delay, mode, r)]]

    def ratio(delay, metric):
        rs = []
        for r in repeats:
            on, off = rows.get((delay, "on", r), {}), rows.get((delay, "off", r), {})
            if on.get("ok") == 1 and off.get("ok") == 1 and off.get(metric):
                rs.append(on[metric] / off[metric])
        return med(rs)

    def ms(v):
        return "-" if v is None else ("%.1f" % (v * 1e3))

    def num(v, spec="%.1f"):
        return "-" if v is None else spec % v

    def rat(v):
        return "-" if v is None else "%.2f" % v

    lines = [a.header, "",
             "8 ranks per job, int32 sum of %s per rank; slot table %d slots per switch; "
             "timers on: %d ms at the leaves, %d ms at the spine; rank %d of the delayed job "
             "waits X ms before each allreduce; medians of %d repeat(s)." % (
                 a.size, a.slots, a.leaf_ms, a.spine_ms, a.straggler, len(repeats)), ""]
    head = ("| delay X | timers | delayed job median | p99 | held slots | hold/chunk | timeouts/it | "
            "companion median | p99 | companion collisions/it |")
    lines += [head, "|" + "---|" * 2 + "---:|" * 8]
    result = {"config": vars(a), "runs": [], "summary": []}
    flagged = []
    keys = ("delayed_median_s", "delayed_p99_s", "held_slots", "hold_ms_per_chunk", "a_timeouts_per_it",
            "companion_median_s", "companion_p99_s", "companion_collisions_per_it",
            "delayed_retransmissions_per_it", "companion_retransmissions_per_it",
            "a_first_data_sent_per_it", "a_collisions_per_it", "b_held_slots_delayed",
            "b_timeouts_per_it", "delayed_wall_per_it_s", "companion_wall_per_it_s")
    for d in delays:
        for mode in ("off", "on"):
            g = lambda m: med(values(d, mode, m))
            n_ok = len(values(d, mode, "delayed_median_s"))
            n_all = len([r for r in repeats if (d, mode, r) in rows])
            if n_ok < n_all:
                flagged.append("%d ms, timers %s: %d of %d runs failed" % (d, mode, n_all - n_ok, n_all))
            for r in repeats:
                v = rows.get((d, mode, r), {})
                if v.get("other_cpu_share", 0) > a.max_other:
                    flagged.append("%d ms, timers %s, repeat %d: disturbed (other processes used "
                                   "%.0f%% of the CPUs)" % (d, mode, r, 100 * v["other_cpu_share"]))
            if n_ok == 0:
                lines.append("| %d ms | %s | FAIL |%s" % (d, mode, " |" * 7))
                continue
            lines.append("| %d ms | %s | %s ms | %s ms | %s | %s ms | %s | %s ms | %s ms | %s |" % (
                d, mode, ms(g("delayed_median_s")), ms(g("delayed_p99_s")), num(g("held_slots")),
                num(g("hold_ms_per_chunk")), num(g("a_timeouts_per_it")),
                ms(g("companion_median_s")), ms(g("companion_p99_s")),
                num(g("companion_collisions_per_it"))))
            result["summary"].append({"delay_ms": d, "timers": mode, "runs_ok": n_ok,
                                      **{m: g(m) for m in keys}})
    lines += ["", "Ratios timers on / off (median of the per-repeat ratios; below 1: timers helped):", "",
              "| delay X | delayed median | delayed p99 | held slots | hold/chunk | companion median | "
              "companion p99 |", "|---|" + "---:|" * 6]
    rkeys = ("delayed_median_s", "delayed_p99_s", "held_slots", "hold_ms_per_chunk",
             "companion_median_s", "companion_p99_s")
    for d in delays:
        rs = [ratio(d, m) for m in rkeys]
        lines.append("| %d ms | %s |" % (d, " | ".join(rat(x) for x in rs)))
        result["summary"].append({"delay_ms": d, "ratio_on_off": dict(zip(rkeys, rs))})
    if flagged:
        lines += ["", "Flagged:"] + ["  - " + f for f in flagged]
    for (d, mode, r), v in sorted(rows.items()):
        result["runs"].append({"delay_ms": d, "timers": mode, "repeat": r, **v})
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("run")
    s.add_argument("--run", required=True)
    s.add_argument("--work", required=True)
    for t in ("--ta0", "--ta1", "--tb0", "--tb1"):
        s.add_argument(t, type=float, required=True)
    s.add_argument("--delayed", type=int, required=True)
    s.add_argument("--companion", type=int, required=True)
    s.add_argument("--switches", required=True)
    s = sub.add_parser("summary")
    s.add_argument("--results", required=True)
    s.add_argument("--json", required=True)
    s.add_argument("--header", required=True)
    s.add_argument("--delays", required=True)
    s.add_argument("--size", required=True)
    s.add_argument("--slots", type=int, required=True)
    s.add_argument("--leaf-ms", type=int, required=True)
    s.add_argument("--spine-ms", type=int, required=True)
    s.add_argument("--straggler", type=int, required=True)
    s.add_argument("--max-other", type=float, required=True)
    s.add_argument("--iterations", type=int, required=True)
    s.add_argument("--slots-per-job", type=int, required=True)
    a = p.parse_args()
    run(a) if a.cmd == "run" else summary(a)


main()
PY
}

# --- main ----------------------------------------------------------------------------------

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  bench_kill_all
  [ "$TOPO_UP" -eq 0 ] || topo_cleanup
  local s
  for s in "${SWITCHES[@]}"; do rm -rf "/var/run/dpdk/$PREFIX-$s"; done
  bench_remove_work "$rc"
  exit "$rc"
}

main() {
  [ "$(id -u)" -eq 0 ] || bench_die "needs root (network namespaces, DPDK); try: sudo $0"
  local tool
  for tool in python3 curl ip timeout flock ethtool; do
    command -v "$tool" >/dev/null || bench_die "$tool is missing: run scripts/install-deps.sh"
  done
  WORK=$(mktemp -d /tmp/stragglers-bench.XXXXXX)
  BIN="$WORK/bin"
  mkdir -p "$BIN"
  trap cleanup EXIT
  trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM
  trap 'bench_log "error: line $LINENO: \"$BASH_COMMAND\" failed (logs: $WORK)"' ERR
  for tool in tools/aggswitch/aggswitch tools/agg-worker/agg-worker tools/agg-ps/agg-ps; do
    [ -x "$BUILD_DIR/$tool" ] || bench_die "$BUILD_DIR/$tool is missing: run scripts/build.sh, or pass --build-dir"
    cp "$BUILD_DIR/$tool" "$BIN/"
  done

  # One benchmark at a time: they would share the two CPUs.
  exec {lock_fd}>/run/lock/aggswitch-stragglers-bench.lock
  flock -n "$lock_fd" || bench_die "another bench/stragglers.sh is running"
  local other fd
  for other in allreduce agg l2; do
    exec {fd}>"/run/lock/aggswitch-$other-bench.lock"
    flock -n "$fd" || bench_die "another benchmark holds /run/lock/aggswitch-$other-bench.lock"
  done

  leaf_config 0 >"$WORK/leafa.yaml"
  leaf_config 1 >"$WORK/leafb.yaml"
  spine_config >"$WORK/spine.yaml"
  local s
  for s in "${SWITCHES[@]}"; do
    "$BIN/aggswitch" --config "$WORK/$s.yaml" --check-config >"$WORK/check.log" 2>&1 ||
      bench_die "aggswitch rejects the $s config: $(cat "$WORK/check.log")"
  done
  write_analyzer
  RESULTS="$WORK/results.tsv"
  : >"$RESULTS"

  local busy
  busy=$(bench_cpu_busy_percent)
  [ "$busy" -lt 10 ] || bench_log "warning: the CPUs were ${busy}% busy before the start: expect retries"
  local started=$SECONDS
  bench_log "stragglers: 2 leaves + spine + agg-ps, 2 jobs of 8 ranks, $SIZE int32 per rank, $SLOTS slots;" \
    "delays ${DELAYS// /, } ms; timers off / on ($LEAF_TIMEOUT_MS ms leaves, $SPINE_TIMEOUT_MS ms spine);" \
    "$REPEATS repeat(s); $ITERATIONS allreduces per job and phase"
  topology_up
  switches_start
  samplers_start

  # Warm-up: every path once (kernel ARP in the ranks' namespaces, the
  # switches' and agg-ps's first chunks), not recorded.
  local mode pid rc
  for mode in off on; do
    RUN="$WORK/warmup-$mode"
    mkdir -p "$RUN"
    settle
    new_seqs
    launch delayed "${JOB_DELAYED[$mode]}" "$(first_seq "${JOB_DELAYED[$mode]}" "$NEXT_BASE" 0)" 3 0
    launch companion "${JOB_COMPANION[$mode]}" \
      "$(first_seq "${JOB_COMPANION[$mode]}" "$NEXT_BASE" 0.5)" 3 0
    rc=0
    for pid in "${PIDS_delayed[@]}" "${PIDS_companion[@]}"; do reap "$pid" || rc=1; done
    LAST_PHASE_END=$(bench_now)
    if [ "$rc" -ne 0 ]; then
      dump_state
      bench_die "the warm-up allreduces (timers $mode) failed: see $RUN/*.log and $RUN/state/"
    fi
  done

  local rep d order
  for ((rep = 1; rep <= REPEATS; rep++)); do
    order="off on"
    [ $((rep % 2)) -eq 0 ] && order="on off"
    for d in $DELAYS; do
      for mode in $order; do bench_run_measured_alone run_once "$d" "$mode" "$rep"; done
    done
  done
  local took=$((SECONDS - started))

  local version cores commit
  version=$("$BIN/aggswitch" --version 2>/dev/null | head -n1 || echo "aggswitch")
  commit=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)
  cores="$(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo))"
  mkdir -p "$(dirname "$OUT")"
  python3 "$WORK/analyze.py" summary --results "$RESULTS" --json "${OUT%.txt}.json" \
    --header "$(date '+%Y-%m-%d %H:%M'), took $((took / 60))m$((took % 60))s; $cores; $version, git $commit" \
    --delays "$DELAYS" --size "$SIZE" --slots "$SLOTS" --leaf-ms "$LEAF_TIMEOUT_MS" \
    --spine-ms "$SPINE_TIMEOUT_MS" --straggler "$STRAGGLER" --max-other "$MAX_OTHER_SHARE" \
    --iterations "$ITERATIONS" --slots-per-job "$SLOTS_PER_JOB" | tee "$OUT"
  cp "$RESULTS" "${OUT%.txt}.tsv"
  bench_log "summary written to $OUT (per run: ${OUT%.txt}.json, ${OUT%.txt}.tsv)"
  local png="${OUT%.txt}"
  bench_plot stragglers "${OUT%.txt}.json" --out "${png%-latest}-tail.png"
  [ "$FAILED_RUNS" -eq 0 ] || bench_die "$FAILED_RUNS run(s) failed: see above"
}

main
