#!/usr/bin/env bash
# An allreduce of 1, 16 and 64 MiB of float32 among 4 workers on this machine,
# six ways, interleaved in one run: through aggswitch with kernel UDP workers
# and with AF_XDP workers, each at a 1500-byte MTU and at the largest frame
# (3400), with
# Gloo's ring over TCP loopback, and with Open MPI's MPI_Allreduce over its
# TCP BTL.
#
# Run it as root on an otherwise idle machine (about 5 minutes with the
# defaults, plus 1 of profiling when aggswitch misses the target; each wait
# for other work to go idle adds up to 2):
#
#   scripts/install-deps.sh --bench      # libgloo-dev, libopenmpi-dev, openmpi-bin, perf
#   scripts/build.sh                     # aggswitch, agg-worker, bench/allreduce/{gloo,mpi}_allreduce
#   sudo bench/allreduce.sh [--repeats 3] [--sizes "1M 16M 64M"]
#                           [--methods udp,udp_large,af_xdp,af_xdp_large,gloo,mpi]
#                           [--iterations N] [--window 128] [--mtu 1500] [--large-mtu 3400]
#                           [--retries 2] [--no-profile] [--build-dir build] [--quick]
#                           [--out bench/results/allreduce-latest.txt] [--keep-logs]
#                           [--switch-idle-sleep-us 0]
#
#   --switch-idle-sleep-us N: the switch's eal.idle_sleep_us (0: it busy-polls,
#   the default); with N > 0 its worker lcore sleeps N us when idle and leaves
#   the shared CPU to the ranks.
#   --quick: only 16 and 64 MiB, one repeat.
#
# What it does, for each repeat, size and method, in the order udp, udp_large,
# af_xdp, af_xdp_large, Gloo, MPI (A B C D E F A B C D E F ...):
#   - udp, udp_large, af_xdp, af_xdp_large (aggswitch): starts aggswitch on four
#     net_af_xdp ports (net_af_packet where the machine has no AF_XDP; it
#     says which), the root ends of veth pairs into network namespaces
#     ab-w0..ab-w3 (10.0.40.1-4/24; aggregation address 10.0.40.253), its
#     control and worker lcores both on CPU 1 (--lcores 0@1,1@1). One
#     agg-worker per namespace, over kernel UDP sockets (udp at --mtu,
#     udp_large at --large-mtu) or over AF_XDP on its eth0 (af_xdp at --mtu,
#     af_xdp_large at --large-mtu; the veths carry --large-mtu), first
#     allreduces once with --verify (a job
#     of its own), then runs the timed job: --iterations allreduces, float32
#     sum as int32 fixed point (the client's default), the job registered in
#     band, --window chunks in flight per worker. Its input is a file per rank
#     (--input; seeded integers as float32, written once per size), copied
#     into the buffer before each allreduce as the baselines do. Then the
#     switch stops, so that the other methods get the whole machine.
#     udp_large and af_xdp_large need AF_XDP ports (af_packet ports take
#     1500 at most).
#   - Gloo: four gloo_allreduce processes (bench/allreduce/) meet through a
#     FileStore and connect over TCP on 127.0.0.1; gloo::allreduce with the
#     ring algorithm, float32 sum, Gloo's own reduce function.
#   - MPI: mpirun -np 4 --oversubscribe --bind-to none --mca pml ob1
#     --mca btl tcp,self --mca btl_tcp_if_include lo mpi_allreduce:
#     MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM), Open MPI's default
#     algorithm choice for the size. (pml ob1 forces the BTLs; Open MPI would
#     otherwise take UCX and its shared memory.)
#   - Gloo and MPI check iteration 0 on every rank against the local sum
#     (seeded vectors that are exact in float32 in any order), then time
#     --iterations allreduces, each after a refill and a barrier. agg-worker
#     checks its verify run bit for bit (fixed point is exact). A run that
#     fails its check reports no speed: the summary says FAIL.
#   - The CPU time of every process that is not ours (nor ksoftirqd) is taken
#     from /proc over each run; a run in which it exceeds 10% of the two CPUs
#     was disturbed and runs again (up to --retries times) once the machine
#     is idle. The CPU seconds of each party over the timed allreduces, from
#     /proc, are in the summary per allreduce: the switch process, and the
#     sum of the ranks (with mpirun for MPI).
# When AF_XDP (af_xdp_large) misses the target, one more 64 MiB run of it goes
# under `perf record -a -g` with per-process CPU accounting, and the summary
# says where the two CPUs' time goes.
#
# How to read the summary (also written to --out; raw samples in the .tsv
# beside it: size method repeat metric value; the run's conditions in the
# .json beside it; bench/plot.py draws algbw against size per method into
# allreduce-bandwidth.png beside it, when Debian's python3-matplotlib is there):
#   - "time/allreduce" is the median over repeats of each run's figure: the
#     median over its timed iterations at the fastest rank. agg-worker has no
#     barrier between iterations, so a rank that starts early waits inside
#     the allreduce for the others; the fastest rank's time is the one
#     closest to the collective itself. Gloo and MPI ranks start together
#     (barrier) and differ little; the per-rank spread is in the .tsv.
#   - "algbw" is algorithm bandwidth as nccl-tests defines it: bytes / time
#     (MB = 10^6 bytes; sizes are MiB).
#   - "/ Gloo" and "/ MPI" are ratios of algbw, per aggswitch transport; the
#     summary ends with one line per size and transport:
#       ratio_vs_gloo size=64M transport=af_xdp mtu=3500 ratio=1.23
#   - PASS/MISS are the targets: AF_XDP workers (at the largest frame) >= 1.0
#     x Gloo's algbw at 16 and 64 MiB, kernel UDP workers (at the largest
#     frame the ports take: udp_large, else udp) >= 0.4 x. All
#     share the two CPUs of this machine: here aggswitch's switch busy-polls
#     one of them, which in a real deployment is a separate box.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$ROOT/bench"
# shellcheck source=bench/lib.sh
source "$BENCH/lib.sh"
# shellcheck source=tests/lib/topology.sh
source "$ROOT/tests/lib/topology.sh"

REPEATS=3
SIZES="1M 16M 64M"
METHODS="udp,udp_large,af_xdp,af_xdp_large,gloo,mpi"
ITERATIONS=""  # empty: per size, see bench_iterations_for
WINDOW=128
MTU=1500
LARGE_MTU=3400
RETRIES=2
PROFILE=1
BUILD_DIR="$ROOT/build"
OUT="$BENCH/results/allreduce-latest.txt"
KEEP_LOGS=0
SWITCH_IDLE_SLEEP_US=0

WORLD=4
SEED=7
NS=ab                         # namespaces ab-w0.., switch-side veths ab-p0..
SUBNET=10.0.40                # workers .1-.4, switch .254, aggregation address .253
AGG_IP=$SUBNET.253
SWITCH_CPU=1                  # aggswitch's lcores 0 (control) and 1 (worker) both run here
MAX_OTHER_SHARE=0.10          # of the 2 CPUs, used by processes not ours during a run
RUN_TIMEOUT=600               # seconds for one method's run, whatever happens
PORT_MTU=1500                 # the switch ports' MTU (LARGE_MTU with AF_XDP ports)
TARGET_SIZE=64M
TARGET_RATIO=1.0              # af_xdp_large vs Gloo at 16 and 64 MiB
UDP_TARGET_RATIO=0.4          # udp_large (else udp) vs Gloo

while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --methods) METHODS="$2"; shift 2 ;;
    --iterations) ITERATIONS="$2"; shift 2 ;;
    --window) WINDOW="$2"; shift 2 ;;
    --mtu) MTU="$2"; shift 2 ;;
    --large-mtu) LARGE_MTU="$2"; shift 2 ;;
    --quick) SIZES="16M 64M"; REPEATS=1; shift ;;
    --retries) RETRIES="$2"; shift 2 ;;
    --no-profile) PROFILE=0; shift ;;
    --build-dir) BUILD_DIR=$(realpath -m "$2"); shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --keep-logs) KEEP_LOGS=1; shift ;;
    --switch-idle-sleep-us) SWITCH_IDLE_SLEEP_US="$2"; shift 2 ;;
    -h | --help) bench_usage 0 ;;
    *) bench_die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || bench_die "--repeats wants a positive integer"
[[ "$RETRIES" =~ ^[0-9]+$ ]] || bench_die "--retries wants a count"
[ -z "$ITERATIONS" ] || [[ "$ITERATIONS" =~ ^[1-9][0-9]*$ ]] ||
  bench_die "--iterations wants a positive integer"
[[ "$WINDOW" =~ ^[1-9][0-9]*$ ]] || bench_die "--window wants a chunk count"
# DPDK 22.11's af_packet PMD reports a 1518-byte maximum frame, so the switch
# cannot give its ports a larger MTU (rte_eth_dev_set_mtu fails); a net_af_xdp
# port takes up to 3442 (one 4 KiB UMEM chunk per frame).
if ! [[ "$MTU" =~ ^[0-9]+$ ]] || [ "$MTU" -lt 128 ] || [ "$MTU" -gt 1500 ]; then
  bench_die "--mtu: 128..1500 (af_packet ports take no larger frames)"
fi
if ! [[ "$LARGE_MTU" =~ ^[0-9]+$ ]] || [ "$LARGE_MTU" -lt "$MTU" ] || [ "$LARGE_MTU" -gt 3442 ]; then
  bench_die "--large-mtu: --mtu..3442 (a net_af_xdp port of the switch takes no more)"
fi
for s in $SIZES; do
  [[ "$s" =~ ^[1-9][0-9]*[KM]$ ]] || bench_die "--sizes: $s is not a size such as 512K or 16M"
done
IFS=, read -r -a METHOD_LIST <<<"$METHODS"
for m in "${METHOD_LIST[@]}"; do
  case "$m" in udp | udp_large | af_xdp | af_xdp_large | gloo | mpi) ;; *) bench_die "--methods: unknown method $m" ;; esac
done
has_method() { [[ ",$METHODS," == *",$1,"* ]]; }
# Whether any method runs aggswitch.
has_aggswitch() { has_method udp || has_method udp_large || has_method af_xdp || has_method af_xdp_large; }
# The agg-worker options of an aggswitch method, and its MTU.
method_mtu() { case "$1" in *_large) echo "$LARGE_MTU" ;; *) echo "$MTU" ;; esac; }
method_worker_options() {
  case "$1" in
    udp) echo "--transport udp --mtu $MTU" ;;
    udp_large) echo "--transport udp --mtu $LARGE_MTU" ;;
    af_xdp) echo "--transport af_xdp --iface eth0 --mtu $MTU" ;;
    af_xdp_large) echo "--transport af_xdp --iface eth0 --mtu $LARGE_MTU" ;;
  esac
}

WORK=""       # temp dir: binaries, configs, logs of every run
BIN=""        # $WORK/bin: the binaries, copied so that a rebuild cannot change them mid-run
PREFIX="abench-$$"  # DPDK file prefix
HTTP=""       # aggswitch's HTTP listen address
RUN=""        # the current run's directory
RESULTS=""    # size method repeat metric value, one line each
JOB=0         # the last job id given to agg-worker; every job is new
OTHER_SHARE=0 # the last run's CPU share of processes not ours
TOPO_UP=0

# --- CPU accounting ------------------------------------------------------------
# A run is disturbed when processes that are not ours used more than
# MAX_OTHER_SHARE of the two CPUs during it. Ours: the children this shell
# reaped during the run (bash's `times`; mpirun reaps its ranks, so they
# count), the switch, which is still running when the run ends (/proc), and
# the ksoftirqd threads, which carry our traffic's softirqs when they pile up.

# User + system seconds of this shell's reaped children, from the `times` the
# caller wrote to $WORK/times: it must run in this shell, not in a
# $(subshell), whose children are not ours.
children_cpu_seconds() {
  tail -n 1 "$WORK/times" | awk '{
    t = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] }
    printf "%.3f", t }'
}
# User + nice + system seconds of all CPUs so far (task time, no irq/softirq/steal).
system_task_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { printf "%.3f", ($2 + $3 + $4) / hz; exit }' /proc/stat
}
ksoftirqd_pids() { pgrep -x 'ksoftirqd/[0-9]+' || true; }
# Seconds of CPU used by the given live processes (0 for those gone).
live_cpu_seconds() {
  awk -v t="$(bench_cpu_ticks "$@")" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", t / hz }'
}

CPU_T0="" CPU_SYS0="" CPU_CHILD0="" CPU_LIVE0="" CPU_LIVE_PIDS=() CPU_SWITCH_PIDS=() CPU_SWITCH0=0
# cpu_begin PID...: start of a run; the PIDs are our processes that will still
# be running at cpu_end (the switch).
cpu_begin() {
  CPU_SWITCH_PIDS=("$@")
  CPU_SWITCH0=$(live_cpu_seconds "$@")
  read -r -a CPU_LIVE_PIDS <<<"$* $(ksoftirqd_pids | paste -sd' ')"
  CPU_LIVE0=$(live_cpu_seconds "${CPU_LIVE_PIDS[@]}")
  times >"$WORK/times"
  CPU_CHILD0=$(children_cpu_seconds)
  CPU_SYS0=$(system_task_seconds)
  CPU_T0=$(bench_now)
}
# cpu_end ITERATIONS: sets OTHER_SHARE, and records it with our processes'
# share, and the CPU seconds per allreduce of the switch (the PIDs given to
# cpu_begin) and of the ranks (this shell's children reaped meanwhile).
cpu_end() {
  local iterations="$1" t1 sys1 child1 live1 ours switch1
  sys1=$(system_task_seconds)
  t1=$(bench_now)
  times >"$WORK/times"
  child1=$(children_cpu_seconds)
  live1=$(live_cpu_seconds "${CPU_LIVE_PIDS[@]}")
  read -r OTHER_SHARE ours <<<"$(awk -v s0="$CPU_SYS0" -v s1="$sys1" -v c0="$CPU_CHILD0" \
    -v c1="$child1" -v l0="$CPU_LIVE0" -v l1="$live1" -v t0="$CPU_T0" -v t1="$t1" 'BEGIN {
      wall = 2 * (t1 - t0); ours = (c1 - c0) + (l1 - l0); other = (s1 - s0) - ours
      if (other < 0) other = 0
      printf "%.3f %.3f", other / wall, ours / wall }')"
  record other_cpu_share "$OTHER_SHARE"
  record our_cpu_share "$ours"
  switch1=$(live_cpu_seconds "${CPU_SWITCH_PIDS[@]}")
  record switch_cpu_s_per_op "$(awk -v a="$CPU_SWITCH0" -v b="$switch1" -v n="$iterations" \
    'BEGIN { printf "%.6f", (b - a) / n }')"
  record ranks_cpu_s_per_op "$(awk -v a="$CPU_CHILD0" -v b="$child1" -v n="$iterations" \
    'BEGIN { printf "%.6f", (b - a) / n }')"
}

# --- the topology and the switch -------------------------------------------------

topology_up() {
  topo_init "$NS"
  trap cleanup EXIT  # topo_init set its own; ours calls topo_cleanup
  trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM
  local w
  for w in $(seq 0 $((WORLD - 1))); do
    topo_host "w$w" "$NS-p$w"
    topo_addr "w$w" eth0 "$SUBNET.$((w + 1))/24"
    if [ "$AGG_PORT_DRIVER" = net_af_xdp ]; then
      ip link set "$NS-p$w" mtu "$LARGE_MTU"
      topo_exec "w$w" ip link set eth0 mtu "$LARGE_MTU"
    fi
  done
  TOPO_UP=1
}

aggswitch_config() {
  local w
  cat <<EOF
# bench/allreduce.sh: $WORLD $AGG_PORT_DRIVER ports, one worker lcore; both lcores on CPU $SWITCH_CPU.
eal:
  lcores: "0@$SWITCH_CPU,1@$SWITCH_CPU"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX
  idle_sleep_us: $SWITCH_IDLE_SLEEP_US
switch:
  mac: 02:a9:9c:00:00:ab
  addresses: [$SUBNET.254/24]
ports:
EOF
  for w in $(seq 0 $((WORLD - 1))); do
    echo "  - {name: p$w, devargs: \"$(port_devargs "$NS$w" "$NS-p$w")\", access: 10, mtu: $PORT_MTU}"
  done
  cat <<EOF
workers:
  - {lcore: 1, rx: [$(seq -s ', ' -f 'p%g' 0 $((WORLD - 1)))]}
mempool: {mbufs: 32767}
http: {listen: "$HTTP"}
aggregation:
  address: $AGG_IP
  in_band_registration: true
  slots: 4096
EOF
}

SWITCH_PID=""
switch_start() {
  bench_spawn "$RUN/aggswitch.log" "$BIN/aggswitch" --config "$WORK/aggswitch.yaml"
  SWITCH_PID=$BENCH_LAST_PID
  local deadline=$((SECONDS + 30))
  until grep -q " running: " "$RUN/aggswitch.log" 2>/dev/null; do
    if ! bench_alive "$SWITCH_PID" || [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 20 "$RUN/aggswitch.log" >&2
      bench_die "aggswitch did not come up (log: $RUN/aggswitch.log)"
    fi
    sleep 0.2
  done
}
switch_stop() {
  curl -sf --max-time 2 -o "$RUN/lcores.json" "http://$HTTP/api/v1/lcores" || true
  kill -TERM "$SWITCH_PID" 2>/dev/null || true
  bench_stop_pid "$SWITCH_PID" 10 || bench_log "warning: aggswitch ignored SIGTERM for 10 s"
  rm -rf "/var/run/dpdk/$PREFIX"
}

# reap PID: waits for a child started with bench_spawn (each runs under
# `timeout`, so it ends) and returns its exit status.
reap() {
  local rc=0
  wait "$1" || rc=$?
  bench_forget_pid "$1"
  return "$rc"
}

# --- the methods ---------------------------------------------------------------
# method_run SIZE ITERATIONS: one run into $RUN; records ok (1 or 0) and, when
# ok, the timing metrics; brackets the timed part with cpu_begin / cpu_end.

# agg_workers_start NAME SIZE ITERATIONS [OPTIONS]: one rank per namespace, in
# a new job; their pids in WORKER_PIDS.
WORKER_PIDS=()
agg_workers_start() {
  local name="$1" size="$2" iterations="$3" w
  shift 3
  JOB=$((JOB + 1))
  WORKER_PIDS=()
  for w in $(seq 0 $((WORLD - 1))); do
    bench_spawn "$RUN/$name.$w.log" timeout "$RUN_TIMEOUT" ip netns exec "$NS-w$w" \
      "$BIN/agg-worker" --rank "$w" --world "$WORLD" --job "$JOB" --key 0xab5eed \
      --switch "$AGG_IP" --input "$WORK/input/$size.{rank}.f32" --dtype float32 --op sum \
      --iterations "$iterations" --window "$WINDOW" --quiet --json "$RUN/$name.$w.json" "$@"
    WORKER_PIDS+=("$BENCH_LAST_PID")
  done
}
# Waits for every rank; fails if any did.
agg_workers_wait() {
  local pid rc=0
  for pid in "${WORKER_PIDS[@]}"; do reap "$pid" || rc=1; done
  return "$rc"
}
agg_workers() {
  agg_workers_start "$@"
  agg_workers_wait
}

# The ranks' input vectors as files (agg-worker --input), one set per size:
# agg-worker then copies its vector into the buffer before each allreduce, as
# gloo_allreduce and mpi_allreduce do, instead of generating it (which costs
# more CPU than the copy, on the CPUs the allreduce runs on). Finite
# float32 from a seeded generator: integers in [-32768, 32767].
make_inputs() {
  local size bytes
  mkdir -p "$WORK/input"
  for size in $SIZES; do
    bytes=$(bench_size_bytes "$size")
    python3 - "$WORK/input/$size" "$bytes" "$WORLD" "$SEED" <<'PY'
import array, random, sys
prefix, nbytes, world, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for rank in range(world):
    ints = array.array("h", random.Random(seed * 1000 + rank).randbytes(nbytes // 2))
    with open(f"{prefix}.{rank}.f32", "wb") as f:
        array.array("f", ints).tofile(f)
PY
  done
}

# aggswitch_run METHOD SIZE ITERATIONS: the switch, and workers as METHOD says.
aggswitch_run() {
  local method="$1" size="$2" iterations="$3" options
  read -r -a options <<<"$(method_worker_options "$method")"
  switch_start
  if ! agg_workers verify "$size" 1 --verify "${options[@]}"; then
    method_failed "the verified allreduce failed" "$RUN"/verify.*.log
    switch_stop
    return
  fi
  cpu_begin "$SWITCH_PID"
  agg_workers timed "$size" "$iterations" "${options[@]}" || true
  cpu_end "$iterations"
  switch_stop
  run_results "$method" "$RUN"/timed.*.json --checks "$RUN"/verify.*.json
}
udp_run() { aggswitch_run udp "$@"; }
udp_large_run() { aggswitch_run udp_large "$@"; }
af_xdp_run() { aggswitch_run af_xdp "$@"; }
af_xdp_large_run() { aggswitch_run af_xdp_large "$@"; }

gloo_run() {
  local size="$1" iterations="$2" w pids=()
  mkdir -p "$RUN/store"
  cpu_begin
  for w in $(seq 0 $((WORLD - 1))); do
    bench_spawn "$RUN/gloo.$w.log" timeout "$RUN_TIMEOUT" "$BIN/gloo_allreduce" --rank "$w" \
      --world "$WORLD" --store "$RUN/store" --prefix run --host 127.0.0.1 --size "$size" \
      --iterations "$iterations" --seed "$SEED" --json "$RUN/gloo.{rank}.json"
    pids+=("$BENCH_LAST_PID")
  done
  for w in "${!pids[@]}"; do reap "${pids[$w]}" || true; done
  cpu_end "$iterations"
  run_results gloo "$RUN"/gloo.*.json
}

mpi_run() {
  local size="$1" iterations="$2"
  cpu_begin
  bench_spawn "$RUN/mpi.log" timeout "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe \
    --bind-to none -np "$WORLD" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
    "$BIN/mpi_allreduce" --size "$size" --iterations "$iterations" --seed "$SEED" \
    --json "$RUN/mpi.{rank}.json"
  reap "$BENCH_LAST_PID" || true
  cpu_end "$iterations"
  run_results mpi "$RUN"/mpi.*.json
}

# run_results METHOD RESULT.json... [--checks CHECK.json...]: records what the
# ranks' JSON summaries say (parse_stats.py allreduce-run), or the failure.
run_results() {
  local method="$1" metric value
  shift
  local out
  if out=$(bench_parse allreduce-run "$method" "$WORLD" "$@" 2>"$RUN/parse.err"); then
    while read -r metric value; do record "$metric" "$value"; done <<<"$out"
  else
    method_failed "$(cat "$RUN/parse.err")" "$RUN"/*.log
  fi
}

# method_failed WHY LOG...: a run that produced no trustworthy time.
method_failed() {
  local why="$1"
  shift
  record ok 0
  printf '%s\n' "$why" >"$RUN/failure"
  bench_log "    FAILED: $why (logs: $RUN)"
  local log
  for log in "$@"; do
    [ -s "$log" ] || continue
    bench_log "    --- $(basename "$log"):"
    tail -n 5 "$log" | sed 's/^/      /' >&2
  done
}

# --- one run ---------------------------------------------------------------------

RUN_SIZE="" RUN_METHOD="" RUN_REPEAT=""
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$(bench_size_bytes "$RUN_SIZE")" "$RUN_METHOD" "$RUN_REPEAT" "$1" "$2" \
    >>"$RUN/results.tsv"
}

# run_once METHOD SIZE REPEAT ATTEMPT
run_once() {
  RUN_METHOD="$1" RUN_SIZE="$2" RUN_REPEAT="$3"
  local attempt="$4" iterations
  iterations=$(bench_iterations_for "$RUN_SIZE" "$ITERATIONS")
  RUN="$WORK/$RUN_SIZE-$RUN_REPEAT-$RUN_METHOD-$attempt"
  mkdir -p "$RUN"
  : >"$RUN/results.tsv"
  printf '  %4s  repeat %s/%s  %-9s ' "$RUN_SIZE" "$RUN_REPEAT" "$REPEATS" "$RUN_METHOD" >&2
  "${RUN_METHOD}_run" "$RUN_SIZE" "$iterations"
  awk -F'\t' -v share="$OTHER_SHARE" '
    $4 == "time_s" { t = $5 } $4 == "algbw_bytes_per_s" { bw = $5 } $4 == "ok" { ok = $5 }
    END { if (ok) printf "%9.2f ms  %8.1f MB/s  other CPU %3.0f%%\n", t * 1e3, bw / 1e6, share * 100 }' \
    "$RUN/results.tsv" >&2
}

# --- where the time goes -------------------------------------------------------------
# One more aggswitch run of the target size under perf, with every process's
# CPU time; parse_stats.py allreduce-profile turns it into the explanation.

# profile_aggswitch METHOD
profile_aggswitch() {
  local method="$1" size="$TARGET_SIZE" iterations options
  iterations=$(bench_iterations_for "$size" "$ITERATIONS")
  read -r -a options <<<"$(method_worker_options "$method")"
  RUN_METHOD=$method RUN_SIZE=$size RUN_REPEAT=0
  RUN="$WORK/profile"
  mkdir -p "$RUN"
  : >"$RUN/results.tsv"
  bench_log "profile: one more $size $method run under perf record -a -g"
  bench_wait_for_idle 120
  switch_start
  agg_workers verify "$size" 1 --verify "${options[@]}" ||
    bench_log "warning: the profile's verify run failed"
  curl -sf --max-time 2 -o "$RUN/lcores-begin.json" "http://$HTTP/api/v1/lcores"
  grep -E '^aggswitch_(port|aggregation)_[a-z_]+_total' <(curl -sf --max-time 2 "http://$HTTP/metrics") \
    >"$RUN/metrics-begin.txt" || true
  local t0 t1 perf_pid
  t0=$(bench_now)
  agg_workers_start timed "$size" "$iterations" "${options[@]}"
  perf record -a -g -F 499 -o "$RUN/perf.data" -- sleep "$RUN_TIMEOUT" >"$RUN/perf.log" 2>&1 &
  perf_pid=$!
  BENCH_PIDS+=("$perf_pid")
  agg_workers_wait || bench_log "warning: the profiled run failed (logs: $RUN)"
  t1=$(bench_now)
  echo "$t0 $t1" >"$RUN/window"
  kill -INT "$perf_pid" 2>/dev/null || true
  bench_stop_pid "$perf_pid" 30 || true
  curl -sf --max-time 2 -o "$RUN/lcores-end.json" "http://$HTTP/api/v1/lcores"
  grep -E '^aggswitch_(port|aggregation)_[a-z_]+_total' <(curl -sf --max-time 2 "http://$HTTP/metrics") \
    >"$RUN/metrics-end.txt" || true
  switch_stop
  perf report -i "$RUN/perf.data" --stdio --no-children --sort comm,dso,sym -g none \
    --percent-limit 0.05 >"$RUN/perf-report.txt" 2>/dev/null ||
    bench_log "warning: perf report failed (see $RUN/perf.log)"
  bench_parse allreduce-profile --run-dir "$RUN" --t0 "$t0" --t1 "$t1" --world "$WORLD" \
    --bytes "$(bench_size_bytes "$size")" --mtu "$(method_mtu "$method")" --large-mtu "$LARGE_MTU" \
    --iterations "$iterations" \
    --method "$method" --ports "$AGG_PORT_DRIVER" >"$WORK/profile.txt" ||
    bench_log "warning: the profile could not be summarized (logs: $RUN)"
}

# --- main ----------------------------------------------------------------------------

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  bench_kill_all
  [ "$TOPO_UP" -eq 0 ] || topo_cleanup
  rm -rf "/var/run/dpdk/$PREFIX"
  bench_remove_work "$rc"
  exit "$rc"
}

main() {
  [ "$(id -u)" -eq 0 ] || bench_die "needs root (network namespaces, DPDK); try: sudo $0"
  local tool
  for tool in python3 curl ip timeout flock; do
    command -v "$tool" >/dev/null || bench_die "$tool is missing: run scripts/install-deps.sh"
  done
  # Copies of the binaries: a rebuild of the tree during the run cannot mix versions.
  WORK=$(mktemp -d /tmp/allreduce-bench.XXXXXX)
  BIN="$WORK/bin"
  mkdir -p "$BIN"
  trap cleanup EXIT
  trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM
  trap 'bench_log "error: line $LINENO: \"$BASH_COMMAND\" failed (logs: $WORK)"' ERR
  local need=()
  has_aggswitch && need+=(tools/aggswitch/aggswitch tools/agg-worker/agg-worker)
  has_method gloo && need+=(bench/allreduce/gloo_allreduce)
  has_method mpi && need+=(bench/allreduce/mpi_allreduce)
  for tool in "${need[@]}"; do
    [ -x "$BUILD_DIR/$tool" ] || bench_die "$BUILD_DIR/$tool is missing: install the --bench packages (scripts/install-deps.sh --bench) and run scripts/build.sh, or pass --build-dir"
    cp "$BUILD_DIR/$tool" "$BIN/"
  done
  if has_method mpi; then
    command -v mpirun >/dev/null || bench_die "mpirun is missing: scripts/install-deps.sh --bench"
  fi
  if [ "$PROFILE" -eq 1 ] && has_aggswitch && ! command -v perf >/dev/null; then
    bench_log "warning: perf is missing: no profile if aggswitch misses (apt-get install linux-perf)"
    PROFILE=0
  fi

  # One benchmark at a time: they would share the two CPUs.
  exec {lock_fd}>/run/lock/aggswitch-allreduce-bench.lock
  flock -n "$lock_fd" || bench_die "another bench/allreduce.sh is running"
  local other
  for other in agg l2; do
    exec {fd}>"/run/lock/aggswitch-$other-bench.lock"
    flock -n "$fd" || bench_die "another benchmark holds /run/lock/aggswitch-$other-bench.lock"
  done

  RESULTS="$WORK/results.tsv"
  : >"$RESULTS"
  if has_aggswitch; then
    choose_port_driver >&2
    PORT_MTU=$MTU
    if [ "$AGG_PORT_DRIVER" = net_af_xdp ]; then
      PORT_MTU=$LARGE_MTU
    else
      # Without AF_XDP the switch has af_packet ports and the workers UDP.
      local kept=()
      for m in "${METHOD_LIST[@]}"; do
        case "$m" in udp_large | af_xdp | af_xdp_large) bench_log "skipping $m: no AF_XDP ports here" ;; *) kept+=("$m") ;; esac
      done
      METHOD_LIST=("${kept[@]}")
      METHODS=$(IFS=,; echo "${METHOD_LIST[*]}")
    fi
    local rmem
    rmem=$(sysctl -n net.core.rmem_max)
    [ "$rmem" -ge $((4 << 20)) ] ||
      bench_log "warning: net.core.rmem_max is $rmem: agg-worker asks for 4 MiB socket buffers; results may be dropped"
    HTTP="127.0.0.1:$(bench_free_tcp_port 19711)"
    aggswitch_config >"$WORK/aggswitch.yaml"
    "$BIN/aggswitch" --config "$WORK/aggswitch.yaml" --check-config >"$WORK/check.log" 2>&1 ||
      bench_die "aggswitch rejects the bench config: $(cat "$WORK/check.log")"
    topology_up
    make_inputs
  fi

  local busy
  busy=$(bench_cpu_busy_percent)
  [ "$busy" -lt 10 ] || bench_log "warning: the CPUs were ${busy}% busy before the start: expect retries"

  local started=$SECONDS rep size method
  bench_log "allreduce: $WORLD ranks, float32 sum of $SIZES, $REPEATS repeats of ${METHOD_LIST[*]}; aggswitch: window $WINDOW, mtu $MTU (large $LARGE_MTU), ports ${AGG_PORT_DRIVER:-none}"
  for ((rep = 1; rep <= REPEATS; rep++)); do
    for size in $SIZES; do
      for method in "${METHOD_LIST[@]}"; do bench_run_measured_alone run_once "$method" "$size" "$rep"; done
    done
  done

  local verdict="" profiled=""
  for m in af_xdp_large af_xdp udp_large udp; do has_method "$m" && { profiled=$m; break; }; done
  if [ -n "$profiled" ] && has_method gloo && [[ " $SIZES " == *" $TARGET_SIZE "* ]]; then
    verdict=$(bench_parse allreduce-verdict "$RESULTS" --size "$(bench_size_bytes "$TARGET_SIZE")" \
      --method "$profiled" --ratio "$([[ "$profiled" = udp* ]] && echo "$UDP_TARGET_RATIO" || echo "$TARGET_RATIO")")
  fi
  if [ "$PROFILE" -eq 1 ] && [ "$verdict" = MISS ]; then profile_aggswitch "$profiled"; fi
  local took=$((SECONDS - started))

  local version cores header
  version=$("$BIN/aggswitch" --version 2>/dev/null | head -n1 || echo "aggswitch not run")
  version+=", git $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  cores="$(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo))"
  header="$(date '+%Y-%m-%d %H:%M'), took $((took / 60))m$((took % 60))s; $cores; $version"
  mkdir -p "$(dirname "$OUT")"
  bench_parse allreduce-summary "$RESULTS" --methods "$METHODS" --repeats "$REPEATS" \
    --world "$WORLD" --window "$WINDOW" --mtu "$MTU" --large-mtu "$LARGE_MTU" \
    --ports "${AGG_PORT_DRIVER:-none}" --target-ratio "$TARGET_RATIO" \
    --udp-target-ratio "$UDP_TARGET_RATIO" --profile "$WORK/profile.txt" --header "$header" |
    tee "$OUT"
  cp "$RESULTS" "${OUT%.txt}.tsv"
  # The conditions of the run, for bench/plot.py (the .tsv has the figures).
  python3 - "${OUT%.txt}.json" "$header" "$WORLD" "$REPEATS" "$SIZES" "$METHODS" \
    "${ITERATIONS:-per size}" "$WINDOW" "$MTU" "$LARGE_MTU" "${AGG_PORT_DRIVER:-none}" \
    "$SWITCH_IDLE_SLEEP_US" "$MAX_OTHER_SHARE" <<'PY'
import json, sys
keys = ("header", "world", "repeats", "sizes", "methods", "iterations", "window", "mtu",
        "large_mtu", "ports", "switch_idle_sleep_us", "max_other_cpu_share")
conditions = dict(zip(keys, sys.argv[2:]))
conditions["methods"] = conditions["methods"].split(",")
conditions["sizes"] = conditions["sizes"].split()
for k in ("world", "repeats", "window", "mtu", "large_mtu"):
    conditions[k] = int(conditions[k])
conditions["max_other_cpu_share"] = float(conditions["max_other_cpu_share"])
with open(sys.argv[1], "w") as f:
    json.dump(conditions, f, indent=1)
    f.write("\n")
PY
  bench_log "summary written to $OUT (raw samples: ${OUT%.txt}.tsv, conditions: ${OUT%.txt}.json)"
  local png="${OUT%.txt}"
  bench_plot allreduce "${OUT%.txt}.tsv" --conditions "${OUT%.txt}.json" --out "${png%-latest}-bandwidth.png"
  # A run that failed its check is a bug somewhere: say so in the exit status.
  ! grep -qP '\tok\t0$' "$RESULTS"
}

main
