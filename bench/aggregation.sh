#!/usr/bin/env bash
# aggswitch's aggregation cost and rate against testpmd io, measured in one
# interleaved run on a 2-CPU machine without NICs, with agg-gen emulating the
# workers and checking every result.
#
# Run it as root on an otherwise idle machine (about 9 minutes with the defaults):
#
#   scripts/install-deps.sh --bench      # testpmd
#   scripts/build.sh                     # build/tools/aggswitch/aggswitch, build/tools/agg-gen/agg-gen
#   sudo bench/aggregation.sh [--repeats 3] [--window 8] [--warmup 2] [--workers "4 8 16"]
#                             [--elems "64 256"] [--inflight 32] [--duts aggswitch,testpmd]
#                             [--retries 2] [--build-dir build]
#                             [--out bench/results/aggregation-latest.txt] [--keep-logs]
#
#   quick check:  sudo bench/aggregation.sh --workers 4 --elems 64 --repeats 1 --window 5
#
# What it does, for each worker count, element count and repeat, in the order
# aggswitch, testpmd (A B A B A B):
#   - starts the device under test (DUT) on CPU 1 as the memif server, one port:
#     aggswitch with config/examples/agg-bench.yaml (aggregation on, 4096 slots,
#     job id = worker count for 4, 8 and 16 workers), or testpmd
#     --forward-mode=io --port-topology=loop, which sends every frame back;
#   - starts agg-gen on CPU 0 as the memif client: W workers of one int32 sum
#     job, E elements per contribution, --inflight chunks in flight per worker.
#     Against aggswitch it checks every result against the closed-form sum;
#     against testpmd (--expect echo) a worker's own contribution coming back
#     completes it, so both loops have the same shape and packet count: one
#     contribution out and one answer back per worker and chunk;
#   - waits for the first answer, warms up, then over the window takes the
#     DUT's busy cycles and agg-gen's once-a-second rate samples;
#   - stops agg-gen's traffic (it drains, checks and reports, and keeps the
#     port open), then the DUT, then agg-gen, and checks that no process,
#     socket or DPDK runtime directory is left;
#   - runs it again (up to --retries times) if the DUT and agg-gen got less
#     than 90% of the two CPUs during the window: another process disturbed it.
#
# How to read the summary (also written to --out):
#   - "busy cycles/contrib" is the headline: TSC cycles the DUT core spent in
#     polls that returned packets, divided by the packets they returned.
#     aggswitch: busy_cycles / busy_packets of lcore 1 from /api/v1/lcores over
#     the window; its packets are the contributions, and the results it sends
#     (one per member and chunk, so one per contribution) are built and sent
#     inside those polls, so their cost is included. testpmd: its
#     --record-core-cycles figure, per packet reflected. Median of the
#     per-repeat window values. memif copies every frame on both sides, so
#     testpmd io's figure is the floor of what moving the frames costs here;
#     aggswitch's minus it is roughly what aggregation adds.
#   - "Mcontrib/s" and "Gbit/s" are agg-gen's answered contributions per second
#     (gradient: contributions/s x elems x 32 bit), medians of the 1-s samples
#     in the windows, pooled over the repeats. They cross the two CPUs (memif
#     copies), so they swing between the machine's fast and slow states
#     (/work/shared/notes/benchmarking-on-this-machine.md); compare them only
#     as the ratio within one run.
#   - "busy" is the DUT core's busy share at that rate. Well under 100%, the
#     DUT waited for agg-gen, which set the rate: agg-gen does at least a
#     reflector's work per contribution (plus writing every payload), so
#     against testpmd io it often does. testpmd io could then carry more, and
#     the aggswitch/testpmd ratio flatters aggswitch; the cycles do not.
#   - "checked" counts agg-gen runs against aggswitch with every result right
#     and every chunk answered; anything else is a bug in the switch, and the
#     summary prints it as FAIL.
#   - Repeats marked "*" got less than 90% of the two CPUs even after the
#     retries: something else ran on the machine; rerun when it is idle.
#   - PASS/MISS lines are the targets: aggswitch <= 300 busy cycles per
#     256-element contribution, and aggswitch >= 0.7 x testpmd io's rate.
# Raw per-sample data goes next to --out, as a .tsv (workers elems dut repeat metric value).
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$ROOT/bench"
# shellcheck source=bench/lib.sh
source "$BENCH/lib.sh"

REPEATS=3
WINDOW=8
WARMUP=2
WORKERS="4 8 16"
ELEMS="64 256"
INFLIGHT=32
DUTS="aggswitch,testpmd"
BUILD_DIR="$ROOT/build"
OUT="$BENCH/results/aggregation-latest.txt"
KEEP_LOGS=0
RETRIES=2

EXAMPLE="$ROOT/config/examples/agg-bench.yaml"
SWITCH_MAC=02:a9:9c:00:00:b2  # agg-bench.yaml's switch.mac: agg-gen's Ethernet destination
JOB_KEY=0x5eed0000000000a1    # agg-bench.yaml's job key
UP_TIMEOUT=30                 # seconds for a DUT to start, and for the first answer
MIN_CPU_SHARE=0.90            # of the 2 CPUs, for DUT + agg-gen in a window (as parse_stats.py)

while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS="$2"; shift 2 ;;
    --window) WINDOW="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --elems) ELEMS="$2"; shift 2 ;;
    --inflight) INFLIGHT="$2"; shift 2 ;;
    --duts) DUTS="$2"; shift 2 ;;
    --build-dir) BUILD_DIR=$(realpath -m "$2"); shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --retries) RETRIES="$2"; shift 2 ;;
    --keep-logs) KEEP_LOGS=1; shift ;;
    -h | --help) bench_usage 0 ;;
    *) bench_die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || bench_die "--repeats wants a positive integer"
[[ "$WINDOW" =~ ^[1-9][0-9]*$ ]] || bench_die "--window wants whole seconds (>= 1)"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || bench_die "--warmup wants whole seconds"
[[ "$RETRIES" =~ ^[0-9]+$ ]] || bench_die "--retries wants a count"
[[ "$INFLIGHT" =~ ^[1-9][0-9]*$ ]] || bench_die "--inflight wants a positive chunk count"
for w in $WORKERS; do
  case "$w" in 4 | 8 | 16) ;; *) bench_die "--workers: $w is not one of the jobs in $EXAMPLE (4, 8, 16)" ;; esac
done
for e in $ELEMS; do
  if ! [[ "$e" =~ ^[0-9]+$ ]] || [ "$e" -lt 1 ] || [ "$e" -gt 356 ]; then
    bench_die "--elems: $e is not an element count between 1 and 356"
  fi
done
IFS=, read -r -a DUT_LIST <<<"$DUTS"
for dut in "${DUT_LIST[@]}"; do
  case "$dut" in aggswitch | testpmd) ;; *) bench_die "--duts: unknown DUT $dut" ;; esac
done
has_dut() { [[ ",$DUTS," == *",$1,"* ]]; }

AGGSWITCH="$BUILD_DIR/tools/aggswitch/aggswitch"
AGG_GEN="$BUILD_DIR/tools/agg-gen/agg-gen"
WORK=""              # temp dir: configs, logs, snapshots of every run
PREFIX="aggbench-$$" # DPDK file prefixes: $PREFIX-gen, $PREFIX-dut
SOCK=""              # the memif socket (a file, socket-abstract=no)
RUN=""               # the current run's directory under $WORK
RESULTS=""           # workers elems dut repeat metric value, one line each
RUN_SHARE=0          # the last run's share of the 2 CPUs (DUT + agg-gen)

# --- the workers: agg-gen, memif client, CPU 0 --------------------------------
# It runs until SIGINT, then stops sending, waits for the chunks in flight,
# reports (gen.json) and keeps the port open until SIGTERM (--hold-port), so
# that the DUT stops first: the DPDK 22.11 memif PMD can crash a process whose
# lcore still polls a ring while its peer disconnects.

GEN_PID=""
GEN_STATUS=0  # agg-gen's exit status in the last run

gen_start() {
  local workers="$1" elems="$2" expect="$3"
  bench_spawn "$RUN/gen.log" stdbuf -oL "$AGG_GEN" --workers "$workers" --job-base "$workers" \
    --elems "$elems" --dtype int32 --op sum --window "$INFLIGHT" --key "$JOB_KEY" \
    --switch-mac "$SWITCH_MAC" --expect "$expect" --stats-interval 1 --json "$RUN/gen.json" \
    --hold-port -- --lcores '0@0,1@0' --no-huge -m 1024 --no-pci --no-telemetry \
    --file-prefix "$PREFIX-gen" --vdev "net_memif0,role=client,socket=$SOCK,socket-abstract=no"
  GEN_PID=$BENCH_LAST_PID
}

# Stops sending, and waits until the chunks in flight are answered and the
# report is written.
gen_pause() {
  kill -INT "$GEN_PID" 2>/dev/null || true
  bench_wait_until 15 grep -q "^agg-gen: holding" "$RUN/gen.log" ||
    bench_log "warning: agg-gen did not finish its run within 15 s of SIGINT (log: $RUN/gen.log)"
}

# Ends it; its exit status says whether every answer was right (0) or not (1).
gen_stop() {
  kill -TERM "$GEN_PID" 2>/dev/null || true
  bench_stop_pid "$GEN_PID" 10 || bench_log "warning: agg-gen had to be signalled twice to stop"
  GEN_STATUS=$BENCH_LAST_STATUS
}

# --- DUT A: aggswitch --------------------------------------------------------
# Every DUT has the same functions:
#   _check, _prepare   once, before the first run
#   _start             start it and wait until its memif port has started
#   _up                true once it is ready for agg-gen
#   _expect            what agg-gen expects back: results or echo
#   _pids              its processes, for the CPU-time check
#   _window_begin      start of the window: mark the busy-cycle counters
#   _window_end        end of the window
#   _stop              stop it cleanly
#   _cycles            busy cycles per packet over the window (after _stop)
#   _record            extra per-run figures into results.tsv (after _stop)

AGG_PID=""
AGG_HTTP=""

aggswitch_check() {
  [ -x "$AGGSWITCH" ] ||
    bench_die "$AGGSWITCH is missing: run scripts/build.sh (or pass --build-dir)"
}
aggswitch_prepare() {
  AGG_HTTP="127.0.0.1:$(bench_free_tcp_port 19478)"
  local config="$WORK/aggswitch.yaml"
  sed -e "s|socket=/run/aggswitch/agg-bench.sock|socket=$SOCK|" \
    -e "s|^\(  listen: \).*|\1$AGG_HTTP|" \
    -e "s|^\(  file_prefix: \).*|\1$PREFIX-dut|" "$EXAMPLE" >"$config"
  local expected
  for expected in "socket=$SOCK," "listen: $AGG_HTTP" "file_prefix: $PREFIX-dut" "mac: $SWITCH_MAC" \
    "{id: 4, key: \"$JOB_KEY\", members: 4}" "{id: 8, key: \"$JOB_KEY\", members: 8}" \
    "{id: 16, key: \"$JOB_KEY\", members: 16}" "slots: 4096"; do
    grep -qF "$expected" "$config" ||
      bench_die "$EXAMPLE no longer has the memif socket, http.listen, eal.file_prefix, switch MAC, jobs or slots this script relies on (missing: $expected)"
  done
  "$AGGSWITCH" --config "$config" --check-config >"$WORK/aggswitch-check.log" 2>&1 ||
    bench_die "aggswitch rejects the bench config: $(cat "$WORK/aggswitch-check.log")"
}

aggswitch_start() {
  bench_spawn "$RUN/dut.log" "$AGGSWITCH" --config "$WORK/aggswitch.yaml"
  AGG_PID=$BENCH_LAST_PID
  bench_wait_dut_up aggswitch "$AGG_PID"
}
# The HTTP server starts before the ports; "running" is logged after them.
aggswitch_up() { [ -S "$SOCK" ] && grep -q " running: " "$RUN/dut.log"; }
aggswitch_expect() { echo results; }
aggswitch_pids() { echo "$AGG_PID"; }
aggswitch_scrape() { curl -sf --max-time 2 -o "$1" "http://$AGG_HTTP/api/v1/lcores"; }
aggswitch_window_begin() { aggswitch_scrape "$RUN/window-begin.json"; }
aggswitch_window_end() { aggswitch_scrape "$RUN/window-end.json"; }
aggswitch_stop() {
  kill -TERM "$AGG_PID" 2>/dev/null || true
  if ! bench_stop_pid "$AGG_PID" 10; then
    bench_log "warning: aggswitch ignored SIGTERM for 10 s"
  elif [ "$BENCH_LAST_STATUS" -ne 0 ]; then
    bench_log "warning: aggswitch exited with status $BENCH_LAST_STATUS on SIGTERM (log: $RUN/dut.log)"
  fi
}
aggswitch_cycles() { bench_parse agg-cycles "$RUN/window-begin.json" "$RUN/window-end.json"; }
aggswitch_record() {
  local name value
  while read -r name value; do
    record "$1" "$2" aggswitch "$3" "$name" "$value"
  done < <(bench_parse agg-counters "$RUN/window-begin.json" "$RUN/window-end.json")
}

# --- DUT B: testpmd io, port-topology loop -------------------------------------
# Interactive, driven through a FIFO, so that the window can clear and show its
# forwarding statistics (CPU cycles/packet from --record-core-cycles).

PMD_PID=""

testpmd_check() { :; }
testpmd_prepare() { :; }
testpmd_start() {
  bench_spawn_fifo "$RUN/dut.log" "$RUN/dut.fifo" \
    stdbuf -oL dpdk-testpmd --lcores '0@1,1@1' --no-huge -m 1024 --no-pci \
    --file-prefix "$PREFIX-dut" --vdev "net_memif0,role=server,socket=$SOCK,socket-abstract=no" -- \
    -i -a --forward-mode=io --port-topology=loop --record-core-cycles
  PMD_PID=$BENCH_LAST_PID
  bench_wait_dut_up testpmd "$PMD_PID"
}
# The memif socket exists from the probe on, but a client that connects before
# the port has started never gets a link: wait for the line start_port prints.
testpmd_up() { [ -S "$SOCK" ] && grep -q "^Checking link statuses" "$RUN/dut.log"; }
testpmd_expect() { echo echo; }
testpmd_pids() { echo "$PMD_PID"; }
testpmd_window_begin() { bench_fifo_send "$RUN/dut.fifo" "clear fwd stats all"; }
testpmd_window_end() { bench_fifo_send "$RUN/dut.fifo" "show fwd stats all"; }
testpmd_stop() {
  bench_fifo_send "$RUN/dut.fifo" "quit"
  bench_fifo_close "$RUN/dut.fifo"
  if ! bench_stop_pid "$PMD_PID" 10; then
    bench_log "warning: testpmd ignored quit for 10 s"
  elif [ "$BENCH_LAST_STATUS" -ne 0 ]; then
    bench_log "warning: testpmd exited with status $BENCH_LAST_STATUS on quit (log: $RUN/dut.log)"
  fi
}
testpmd_cycles() { bench_parse cycles testpmd "$RUN/dut.log"; }
testpmd_record() { :; }

# --- one run -----------------------------------------------------------------

# Starts agg-gen and waits for its first answer. A memif client does not
# reconnect after a failed handshake, so an agg-gen that got no answer is
# replaced once.
start_traffic() {
  local dut="$1" workers="$2" elems="$3" attempt
  for attempt in 1 2; do
    gen_start "$workers" "$elems" "$("${dut}_expect")"
    if bench_wait_until $((UP_TIMEOUT / 2)) grep -q "^agg-gen: first answer" "$RUN/gen.log"; then
      return 0
    fi
    bench_stop_pid "$GEN_PID" 0 || true
    [ "$attempt" -eq 2 ] || {
      mv "$RUN/gen.log" "$RUN/gen-no-answer.log"
      bench_log "(no answer after $((UP_TIMEOUT / 2)) s: restarting agg-gen) "
    }
  done
  bench_dut_failed "$dut" "no answer to agg-gen through two starts (see $RUN/gen.log)"
}

# After a run: nothing of it may survive into the next one.
check_clean() {
  local pid
  for pid in "$@"; do
    ! bench_alive "$pid" || bench_die "process $pid is still running after its run"
  done
  # memif servers unlink their socket on a clean close; EAL leaves its runtime dir.
  rm -f "$SOCK"
  rm -rf "/var/run/dpdk/$PREFIX-gen" "/var/run/dpdk/$PREFIX-dut"
}

# record WORKERS ELEMS DUT REPEAT METRIC VALUE: one line of this run's results.
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RUN/results.tsv"; }

# run_once DUT WORKERS ELEMS REPEAT ATTEMPT: one measurement into $RUN/results.tsv.
# Sets RUN_SHARE, the share of the 2 CPUs the DUT and agg-gen got.
run_once() {
  local dut="$1" workers="$2" elems="$3" rep="$4" attempt="$5"
  RUN="$WORK/$workers-$elems-$rep-$dut-$attempt"
  mkdir -p "$RUN"
  printf '  %2s workers %3s elems  repeat %s/%s  %-9s ' "$workers" "$elems" "$rep" "$REPEATS" "$dut" >&2

  "${dut}_start"
  start_traffic "$dut" "$workers" "$elems"
  sleep "$WARMUP"

  local pids t0 ticks0 t1 ticks1
  read -r -a pids <<<"$GEN_PID $("${dut}_pids")"
  ticks0=$(bench_cpu_ticks "${pids[@]}")
  t0=$(bench_now)
  "${dut}_window_begin" || bench_dut_failed "$dut" "reading its counters failed at the window start"
  bench_sleep_until "$(awk -v t="$t0" -v w="$WINDOW" 'BEGIN { printf "%.6f", t + w }')"
  "${dut}_window_end" || bench_dut_failed "$dut" "reading its counters failed at the window end"
  t1=$(bench_now)
  ticks1=$(bench_cpu_ticks "${pids[@]}")

  # agg-gen stops sending and reports first, then the DUT closes, then agg-gen.
  gen_pause
  "${dut}_stop"
  gen_stop
  check_clean "${pids[@]}"

  local cycles rate check ok errors unanswered retransmits rates=()
  cycles=$("${dut}_cycles") || bench_die "$dut: no busy cycles/packet for the window (logs: $RUN)"
  RUN_SHARE=$(awk -v d="$((ticks1 - ticks0))" -v hz="$(getconf CLK_TCK)" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "%.3f", d / hz / (t1 - t0) / 2 }')
  check=$(bench_parse gen-check "$RUN/gen.json") || bench_die "$dut: agg-gen wrote no report (log: $RUN/gen.log)"
  read -r ok errors unanswered retransmits <<<"$check"
  [ "$ok" -eq 0 ] || [ "$GEN_STATUS" -eq 0 ] ||
    bench_die "agg-gen exited with status $GEN_STATUS after a run it reports as good (log: $RUN/gen.log)"
  while read -r rate; do
    rates+=("$rate")
    record "$workers" "$elems" "$dut" "$rep" contrib_per_s "$rate"
  done < <(bench_parse gen-rates "$RUN/gen.json" "$t0" "$t1")
  [ "${#rates[@]}" -ge $((WINDOW > 1 ? WINDOW - 1 : 1)) ] ||
    bench_die "$dut: ${#rates[@]} rate samples in a ${WINDOW}-s window (logs: $RUN)"
  record "$workers" "$elems" "$dut" "$rep" cycles "$cycles"
  record "$workers" "$elems" "$dut" "$rep" cpu_share "$RUN_SHARE"
  record "$workers" "$elems" "$dut" "$rep" checked_ok "$ok"
  record "$workers" "$elems" "$dut" "$rep" wrong_answers "$errors"
  record "$workers" "$elems" "$dut" "$rep" unanswered "$unanswered"
  record "$workers" "$elems" "$dut" "$rep" retransmits "$retransmits"
  "${dut}_record" "$workers" "$elems" "$rep"
  printf '%7.1f cycles/contrib  %6.3f Mcontrib/s  cpu %3.0f%%  %s\n' "$cycles" \
    "$(printf '%s\n' "${rates[@]}" | bench_median | awk '{ print $1 / 1e6 }')" \
    "$(awk -v s="$RUN_SHARE" 'BEGIN { print s * 100 }')" \
    "$([ "$ok" -eq 1 ] && echo "answers ok" || echo "WRONG: $errors wrong answers, $unanswered unanswered")" >&2
}

# --- main --------------------------------------------------------------------

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  bench_kill_all
  rm -rf "/var/run/dpdk/$PREFIX-gen" "/var/run/dpdk/$PREFIX-dut"
  [ -z "$SOCK" ] || rm -f "$SOCK"
  bench_remove_work "$rc"
  exit "$rc"
}

main() {
  [ "$(id -u)" -eq 0 ] || bench_die "needs root (DPDK vdevs); try: sudo $0"
  local tool
  for tool in dpdk-testpmd stdbuf python3 curl ss flock; do
    command -v "$tool" >/dev/null || bench_die "$tool is missing: run scripts/install-deps.sh --bench"
  done
  [ -x "$AGG_GEN" ] || bench_die "$AGG_GEN is missing: run scripts/build.sh (or pass --build-dir)"
  local dut
  for dut in "${DUT_LIST[@]}"; do "${dut}_check"; done

  # One benchmark at a time, this one or bench/l2_forwarding.sh: two would
  # share the two CPUs.
  exec {lock_fd}>/run/lock/aggswitch-agg-bench.lock
  flock -n "$lock_fd" || bench_die "another bench/aggregation.sh is running"
  exec {l2_lock_fd}>/run/lock/aggswitch-l2-bench.lock
  flock -n "$l2_lock_fd" || bench_die "bench/l2_forwarding.sh is running"

  trap cleanup EXIT
  trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM
  trap 'bench_log "error: line $LINENO: \"$BASH_COMMAND\" failed (logs: $WORK)"' ERR
  WORK=$(mktemp -d /tmp/aggbench.XXXXXX)
  SOCK="$WORK/memif.sock"
  RESULTS="$WORK/results.tsv"
  : >"$RESULTS"
  for dut in "${DUT_LIST[@]}"; do "${dut}_prepare"; done

  local busy others
  others=$(for name in dpdk-testpmd aggswitch agg-gen ovs-vswitchd ovs-vswitchd-dp; do pgrep -x "$name" || true; done | paste -sd,)
  [ -z "$others" ] || bench_log "warning: other switch or generator processes are running (pids $others): expect noise"
  busy=$(bench_cpu_busy_percent)
  [ "$busy" -lt 10 ] || bench_log "warning: the CPUs were ${busy}% busy before the start: expect noise and retries"

  local started=$SECONDS workers elems rep
  bench_log "aggregation: workers $WORKERS, elems $ELEMS, $INFLIGHT chunks in flight per worker, $REPEATS repeats of ${DUT_LIST[*]}, ${WARMUP} s warm-up + ${WINDOW} s window each"
  for workers in $WORKERS; do
    for elems in $ELEMS; do
      for ((rep = 1; rep <= REPEATS; rep++)); do
        for dut in "${DUT_LIST[@]}"; do bench_run_measured agg-gen run_once "$dut" "$workers" "$elems" "$rep"; done
      done
    done
  done
  local took=$((SECONDS - started))

  local tsc version
  # testpmd prints the TSC rate with its cycles; aggswitch's API has it too.
  tsc=$(grep -ho 'at [0-9]* MHz Clock' "$WORK"/*/dut.log 2>/dev/null | head -n1 | awk '{ print $2 }') ||
    true
  [ -n "$tsc" ] || tsc=$(grep -ho '"tsc_hz":[0-9]*' "$WORK"/*/window-begin.json 2>/dev/null |
    head -n1 | awk -F: '{ printf "%.0f", $2 / 1e6 }') || true
  if has_dut aggswitch; then version=$("$AGGSWITCH" --version | head -n1); else version="aggswitch not run"; fi
  version+=", git $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  mkdir -p "$(dirname "$OUT")"
  bench_parse agg-summary "$RESULTS" --duts "$DUTS" --repeats "$REPEATS" --window "$WINDOW" \
    --warmup "$WARMUP" --inflight "$INFLIGHT" --tsc-mhz "${tsc:-?}" \
    --header "$(date '+%Y-%m-%d %H:%M'), took $((took / 60))m$((took % 60))s; $version" |
    tee "$OUT"
  cp "$RESULTS" "${OUT%.txt}.tsv"
  bench_log "summary written to $OUT (raw samples: ${OUT%.txt}.tsv)"
}

main
