#!/usr/bin/env bash
# Tenants that meet in the slot table (docs/aggregation.md, "Collisions" and
# "Moves"; docs/parameter-node.md): N jobs of 4 ranks each allreduce at once
# through one aggswitch, on a slot table small enough that their chunks
# collide, and, as the baseline, on one so large that they never meet. A job
# whose chunk collides moves to a partition of its own when the table has
# room; otherwise a collided chunk moves to a spare slot (a relocation) or,
# with none free, goes to the jobs' parameter node (agg-ps) marked CONFLICT;
# nothing is refused or dropped. The baseline table has 16384 slots (1024
# spare), where the jobs' windows rarely meet; its collision count says
# whether they did.
#
# Each job's slot quota (slots_per_job) is 2 x --window: the chunks in
# flight and the results held until every rank acknowledged them. The
# colliding table (--slots fit, the default) is the smallest power of two
# that holds every job's quota and the --spare slots: the jobs fit, but hash
# placement makes their windows meet. --slots N runs a table of N slots for
# every N jobs instead: with --slots 64, 4 or 8 jobs need more slots than
# there are, and most collided chunks go to agg-ps.
#
# For N in --jobs (2, 4, 8), --repeats times, colliding then apart (apart
# then colliding in even repeats, so that a drift of the machine hits both
# alike), every rank verified:
#   - each job's median and p99 time per allreduce (from its rank 0);
#   - the switch's relocations (chunks sent on to spare slots), conflicts
#     sent to the parameter node, collisions and slot_busy refusals;
#   - the aggregate rate: bytes allreduced by all jobs over the wall time
#     from the first start to the last exit;
# and per N the ratio of the colliding rate to the apart one (target: at
# least 0.7), the median over the repeats.
#
# The summary goes to --out, every run's figures to the .json beside it, and
# bench/plot.py draws the rates and their ratio into multitenant-rates.png
# beside it (when Debian's python3-matplotlib is there).
#
# Run it as root on an otherwise idle machine (about 3 minutes with the
# defaults):
#
#   scripts/build.sh
#   sudo bench/multitenant.sh [--jobs "2 4 8"] [--repeats 2] [--iterations 20]
#                             [--size 256K] [--window 16] [--slots fit] [--spare 8]
#                             [--placement hash] [--build-dir build]
#                             [--out bench/results/multitenant-latest.txt]
#
# --placement round_robin (or random) places each job in a partition of its
# quota (aggregation.placement; docs/aggregation.md, "Placement") instead of
# hashing it over the region: with round_robin, jobs whose partitions fit
# the table never meet.
#
# One aggswitch in the root namespace (lcores "0,1"), af_packet ports on the
# veths of four worker namespaces and of agg-ps's; each worker namespace holds
# that rank of every job.
set -u
BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
# shellcheck source=bench/lib.sh
source "$BENCH/lib.sh"
# shellcheck source=tests/lib/topology.sh
source "$ROOT/tests/lib/topology.sh"

JOBS_LIST="2 4 8"
REPEATS=2
ITERATIONS=20
SIZE=256K
WINDOW=16
SLOTS=fit
SPARE=8
PLACEMENT=hash
BUILD=build
OUT="$ROOT/bench/results/multitenant-latest.txt"
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS_LIST="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --iterations) ITERATIONS="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --window) WINDOW="$2"; shift 2 ;;
    --slots) SLOTS="$2"; shift 2 ;;
    --spare) SPARE="$2"; shift 2 ;;
    --placement) PLACEMENT="$2"; shift 2 ;;
    --build-dir) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) bench_die "unknown option $1 (see the header of $0)" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || bench_die "run as root (network namespaces)"
BIN="$ROOT/$BUILD/tools"
for b in aggswitch/aggswitch agg-worker/agg-worker agg-ps/agg-ps; do
  [ -x "$BIN/$b" ] || bench_die "$BIN/$b is missing: run scripts/build.sh"
done
MAX_JOBS=0
for n in $JOBS_LIST; do [ "$n" -gt "$MAX_JOBS" ] && MAX_JOBS=$n; done

WORK=$(mktemp -d /tmp/aggswitch-multitenant.XXXXXX)
HTTP_PORT=19487
METRICS="http://127.0.0.1:$HTTP_PORT/metrics"
SWITCH_MAC=02:a9:9c:00:00:47
AGG_IP=10.0.47.253
AGG_PORT=47047
PS_IP=10.0.47.50
PREFIX="agg-mt-$$"
SWITCH_PID=""
SWITCH_LOG=/dev/null
cleanup() { topo_cleanup; bench_kill_all; rm -rf "$WORK"; }
topo_init mt
trap cleanup EXIT
for w in 0 1 2 3; do
  topo_host "w$w" "mt-p$w"
  topo_addr "w$w" eth0 "10.0.47.$((w + 1))/24"
done
topo_host ps mt-p4
topo_addr ps eth0 "$PS_IP/24"

# start_ps NAME: a fresh agg-ps for one run (the runs reuse the jobs' ids
# and sequence numbers: one that kept an earlier run's chunks would answer
# with their results); its stats in NAME.ps.json.
PS_PID=""
start_ps() {
  bench_spawn "$WORK/agg-ps.log" ip netns exec "$(topo_ns ps)" "$BIN/agg-ps/agg-ps" \
    --listen "$PS_IP:$AGG_PORT" --give-up-ms 10000 --quiet --stats "$1.ps.json"
  PS_PID=$BENCH_LAST_PID
  topo_track_pid "$PS_PID"
}
stop_ps() {
  kill -TERM "$PS_PID" 2>/dev/null
  bench_stop_pid "$PS_PID" 5
}

# start_switch SLOTS SPARE: aggswitch with jobs 1..MAX_JOBS configured.
start_switch() {
  local slots="$1" spare="$2" w j
  SWITCH_LOG="$WORK/switch.$slots.log"
  {
    cat <<EOF
eal: {lcores: "0,1", main_lcore: 0, memory_mb: 512, file_prefix: $PREFIX}
switch: {mac: $SWITCH_MAC, addresses: [10.0.47.254/24]}
ports:
EOF
    for w in 0 1 2 3 4; do
      echo "  - {name: p$w, devargs: \"net_af_packet_mt$w,iface=mt-p$w\", access: 10}"
    done
    cat <<EOF
workers:
  - {lcore: 1, rx: [p0, p1, p2, p3, p4]}
mempool: {mbufs: 32767}
http: {listen: "127.0.0.1:$HTTP_PORT"}
aggregation:
  address: $AGG_IP
  udp_port: $AGG_PORT
  in_band_registration: false
  slots: $slots
  spare_slots: $spare
  placement: $PLACEMENT
  slots_per_job: $((2 * WINDOW))
  tan: {strategy: fixed, candidates: [{address: $PS_IP, port: $AGG_PORT}]}
  jobs:
EOF
    for j in $(seq 1 "$MAX_JOBS"); do echo "    - {id: $j, key: \"0x5eed\", members: 4}"; done
  } >"$WORK/switch.yaml"
  run_switch "$BIN/aggswitch/aggswitch" "$WORK/switch.yaml" "$HTTP_PORT" "$SWITCH_LOG"
}
total() { agg_total "$METRICS" "$1"; }
moves() {
  curl -fsS -m 2 "$METRICS" |
    awk '$1 == "aggswitch_aggregation_job_moves_total" { print $2 + 0; found = 1 } END { if (!found) print 0 }'
}
# fit_slots N: the smallest power of two, at least 64, that holds N jobs'
# quotas and the spare slots.
fit_slots() {
  local need=$(($1 * 2 * WINDOW + SPARE)) slots=64
  while [ "$slots" -lt "$need" ]; do slots=$((slots * 2)); done
  echo "$slots"
}

# run N MODE SLOTS SPARE REPEAT: N jobs at once; appends one line to
# $WORK/results, and its figures as one JSON line to $WORK/runs.jsonl.
run() {
  local n="$1" mode="$2" slots="$3" spare="$4" rep="$5" j r pids=() rc=0
  local dir="$WORK/$mode-$n"
  mkdir -p "$dir"
  start_ps "$dir/agg-ps"
  start_switch "$slots" "$spare" || bench_die "aggswitch did not come up (log: $SWITCH_LOG)"
  for w in 0 1 2 3; do
    ip -n "$(topo_ns "w$w")" neigh replace "$AGG_IP" lladdr "$SWITCH_MAC" dev eth0 nud permanent
  done
  local start end
  start=$(bench_now)
  for j in $(seq 1 "$n"); do
    for r in 0 1 2 3; do
      topo_exec "w$r" timeout -k 5 300 "$BIN/agg-worker/agg-worker" --rank "$r" --world 4 \
        --job "$j" --key 0x5eed --switch "$AGG_IP:$AGG_PORT" --task-info none --verify --quiet \
        --dtype int32 --op sum --size "$SIZE" --iterations "$ITERATIONS" --window "$WINDOW" \
        --resend-to-ps --json "$dir/$j.$r.json" >"$dir/$j.$r.out" 2>&1 &
      pids+=($!)
    done
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  end=$(bench_now)
  local counters
  counters="slots=$slots collisions=$(total collisions) job_moves=$(moves) relocations=$(total relocated)"
  counters+=" conflicts_to_ps=$(total conflicts_to_ps) slot_busy=$(total slot_busy)"
  stop_switch || rc=1
  stop_ps
  counters+=" ps_conflicts=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["conflicts"], "ps_gave_up=%d" % (d["gave_up"] + d["direct_gave_up"]))' "$dir/agg-ps.ps.json")"
  if [ "$rc" -ne 0 ]; then
    tail -n 5 "$dir"/*.out >&2
    bench_die "$mode, $n jobs: a rank failed (its output above)"
  fi
  python3 - "$dir" "$n" "$mode" "$start" "$end" "$counters" "$rep" "$spare" "$WORK/runs.jsonl" \
    >>"$WORK/results" <<'EOF'
import json, sys
d, n, mode, start, end, counters, rep, spare, jsonl = sys.argv[1:]
n = int(n)
wall = float(end) - float(start)
total = 0
per_job, jobs = [], []
for j in range(1, n + 1):
    s = json.load(open(f"{d}/{j}.0.json"))
    total += s["bytes"] * s["completed"]
    lat = s["latency_s"]
    per_job.append(f"job {j} {lat['median'] * 1e3:.1f}/{lat['p99'] * 1e3:.1f}")
    jobs.append({"job": j, "median_s": lat["median"], "p99_s": lat["p99"]})
rate = total / wall / 1e6
print(f"{n} {mode} {rate:.2f} | wall {wall:.2f} s, {counters} | "
      f"median/p99 ms: {', '.join(per_job)}")
# The same figures for the .json beside --out: the counters are "name=value" words.
run = {"jobs": n, "mode": mode, "repeat": int(rep), "rate_mb_s": round(rate, 2), "wall_s": wall,
       "bytes": total, "spare": int(spare), "per_job": jobs}
run.update((k, int(float(v))) for k, v in (c.split("=") for c in counters.split()))
with open(jsonl, "a") as f:
    f.write(json.dumps(run) + "\n")
EOF
  bench_log "$(tail -n 1 "$WORK/results")"
}

: >"$WORK/results"
: >"$WORK/runs.jsonl"
started=$SECONDS
for rep in $(seq 1 "$REPEATS"); do
  for n in $JOBS_LIST; do
    slots=$SLOTS
    [ "$slots" = fit ] && slots=$(fit_slots "$n")
    if [ $((rep % 2)) -eq 1 ]; then
      run "$n" colliding "$slots" "$SPARE" "$rep"
      run "$n" apart 16384 1024 "$rep"
    else
      run "$n" apart 16384 1024 "$rep"
      run "$n" colliding "$slots" "$SPARE" "$rep"
    fi
  done
done
took=$((SECONDS - started))
COMMAND="bench/multitenant.sh --jobs \"$JOBS_LIST\" --repeats $REPEATS --iterations $ITERATIONS"
COMMAND+=" --size $SIZE --window $WINDOW --slots $SLOTS --spare $SPARE --placement $PLACEMENT"
MACHINE="$(date '+%Y-%m-%d %H:%M'), took $((took / 60))m$((took % 60))s;"
MACHINE+=" $(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo));"
MACHINE+=" $("$BIN/aggswitch/aggswitch" --version 2>/dev/null | head -n1 || echo aggswitch),"
MACHINE+=" git $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"

mkdir -p "$(dirname "$OUT")"
{
  echo "$COMMAND"
  echo "$MACHINE"
  echo "N jobs x 4 ranks, int32 sum of $SIZE per rank; rate = MB allreduced per second, all jobs"
  sed 's/^/  /' "$WORK/results"
  # The summary lines, and every run's figures in the .json beside --out.
  python3 - "$WORK/runs.jsonl" "${OUT%.txt}.json" "$COMMAND" "$MACHINE" "$SIZE" "$WINDOW" \
    "$SLOTS" "$SPARE" "$PLACEMENT" "$ITERATIONS" "$REPEATS" <<'EOF'
import json, statistics, sys
jsonl, out, command, machine, size, window, slots, spare, placement, iterations, repeats = sys.argv[1:]
runs = [json.loads(line) for line in open(jsonl)]
rates = {}  # jobs -> mode -> repeat -> MB/s
for r in runs:
    rates.setdefault(r["jobs"], {}).setdefault(r["mode"], {})[r["repeat"]] = r["rate_mb_s"]
summary = []
for n in sorted(rates):
    c, a = rates[n]["colliding"], rates[n]["apart"]
    ratio = statistics.median(c[rep] / a[rep] for rep in sorted(c) if rep in a)
    summary.append({"jobs": n, "colliding_mb_s": statistics.median(c.values()),
                    "apart_mb_s": statistics.median(a.values()), "ratio": ratio})
    print(f"{n} jobs: colliding {statistics.median(c.values()):.2f} MB/s, apart "
          f"{statistics.median(a.values()):.2f} MB/s, ratio {ratio:.2f} (target >= 0.70)")
config = {"command": command, "machine": machine, "ranks_per_job": 4, "size": size,
          "window": int(window), "slots": slots, "spare": int(spare), "placement": placement,
          "iterations": int(iterations), "repeats": int(repeats), "apart_slots": 16384,
          "apart_spare": 1024, "target_ratio": 0.7}
with open(out, "w") as f:
    json.dump({"config": config, "runs": runs, "summary": summary}, f, indent=1)
    f.write("\n")
EOF
} | tee "$OUT"
bench_log "summary written to $OUT (per run: ${OUT%.txt}.json)"
png="${OUT%.txt}"
bench_plot multitenant "${OUT%.txt}.json" --out "${png%-latest}-rates.png"
