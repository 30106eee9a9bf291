#!/usr/bin/env bash
# Runs the fabric simulator (tests/sim, docs/testing.md) over a range of
# seeds, split over the machine's cores, and prints one summary line:
#
#   sim scenarios=N failures=F scenarios_per_s=R
#
# preceded by the failing seeds, each with the command that reproduces it.
#
#   scripts/sim.sh --seeds 2000                  seeds 1..2000
#   scripts/sim.sh --seeds 1000000 --from 5000   a soak
#   scripts/sim.sh --seeds 1000000 --hours 4     as many of them as 4 hours allow
#   scripts/sim.sh --build-dir build-asan --seeds 200 --jobs 1 --limits faults=0x7
#
# Builds agg-sim in the build directory when it is not there. Exit status: 0
# when every scenario kept the promise, 1 when one did not, 2 for a bad
# command line or a build that failed.
set -u

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}

BUILD_DIR=build
SEEDS=""
FROM=1
JOBS=$(nproc)
LIMITS=""
HOURS=""
BATCH=500
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="${2:?--build-dir needs a directory}"; shift 2 ;;
    --seeds) SEEDS="${2:?--seeds needs a number}"; shift 2 ;;
    --from) FROM="${2:?--from needs a seed}"; shift 2 ;;
    --jobs) JOBS="${2:?--jobs needs a number}"; shift 2 ;;
    --limits) LIMITS="${2:?--limits needs limits}"; shift 2 ;;
    --hours) HOURS="${2:?--hours needs a number}"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "sim.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
number() { [[ "$1" =~ ^[0-9]+$ ]]; }
if [ -z "$SEEDS" ] || ! number "$SEEDS" || ! number "$FROM" || ! number "$JOBS" || [ "$JOBS" -lt 1 ]; then
  echo "sim.sh: --seeds N (and --from S, --jobs J) must be whole numbers" >&2
  usage
fi
if [ -n "$HOURS" ] && ! [[ "$HOURS" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "sim.sh: --hours must be a number, got '$HOURS'" >&2
  usage
fi

SIM="$BUILD_DIR/tests/sim/agg-sim"
if [ ! -x "$SIM" ]; then
  echo "sim.sh: building agg-sim in $BUILD_DIR" >&2
  cmake --build "$BUILD_DIR" --target agg-sim >&2 || exit 2
fi

WORK=$(mktemp -d /tmp/agg-sim-run.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s.%N)
deadline=""
[ -n "$HOURS" ] && deadline=$(awk -v s="$start" -v h="$HOURS" 'BEGIN { printf "%d", s + h * 3600 }')

ran=0
failed=0
failing=()
next=$FROM
end=$((FROM + SEEDS))
# Batches of BATCH seeds per process, JOBS processes at a time, so that a
# time limit stops within a batch's time.
while [ "$next" -lt "$end" ]; do
  if [ -n "$deadline" ] && [ "$(date +%s)" -ge "$deadline" ]; then break; fi
  pids=()
  logs=()
  for j in $(seq 1 "$JOBS"); do
    [ "$next" -lt "$end" ] || break
    # An even share of what is left, at most a batch.
    share=$(((end - next + JOBS - 1) / JOBS))
    n=$((share < BATCH ? share : BATCH))
    [ "$n" -gt $((end - next)) ] && n=$((end - next))
    log="$WORK/$next.log"
    args=(--seeds "$n" --from "$next")
    [ -n "$LIMITS" ] && args+=(--limits "$LIMITS")
    "$SIM" "${args[@]}" >"$log" 2>&1 &
    pids+=($!)
    logs+=("$log")
    next=$((next + n))
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    log="${logs[$i]}"
    summary=$(grep '^sim scenarios=' "$log" | tail -1)
    if [ -z "$summary" ] || [ "$rc" -gt 1 ]; then
      echo "sim.sh: agg-sim stopped without its summary (exit $rc); its last lines:" >&2
      tail -20 "$log" >&2
      exit 2
    fi
    s=$(sed 's/.*scenarios=\([0-9]*\).*/\1/' <<<"$summary")
    f=$(sed 's/.*failures=\([0-9]*\).*/\1/' <<<"$summary")
    ran=$((ran + s))
    failed=$((failed + f))
    if [ "$f" -gt 0 ]; then
      grep -E '^(FAIL seed|reproduce:|  job [0-9]+ run)' "$log"
      read -r -a seeds_here <<<"$(grep '^failing seeds:' "$log" | sed 's/^failing seeds://')"
      failing+=("${seeds_here[@]}")
    fi
  done
done
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.3f", e - s }')
rate=$(awk -v n="$ran" -v t="$elapsed" 'BEGIN { printf "%.2f", (t > 0 ? n / t : 0) }')
if [ "$failed" -gt 0 ]; then echo "failing seeds: ${failing[*]}"; fi
echo "sim scenarios=$ran failures=$failed scenarios_per_s=$rate"
[ "$failed" -eq 0 ]
