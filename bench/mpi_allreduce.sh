#!/usr/bin/env bash
# MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM) among 4 ranks of one
# unmodified MPI program, two ways, interleaved in one run: through
# aggswitch with libaggswitch_mpi.so preloaded (docs/mpi.md), and plain Open
# MPI. Sizes 1, 16 and 64 MiB.
#
# Run it as root on an otherwise idle machine (about 3 minutes with the
# defaults):
#
#   cmake --build build --target aggswitch aggswitch_mpi mpi_allreduce_bench
#   sudo bench/mpi_allreduce.sh [--repeats 3] [--sizes "1M 16M 64M"] [--iterations N]
#                               [--btl self,vader] [--mtu N] [--build-dir build] [--keep-logs]
#                               [--switch-idle-sleep-us 0]
#
# What it does, for each repeat and size, in the order shim, mpi (A B A B ...):
#   - shim: starts aggswitch on one port (net_af_xdp where the machine allows,
#     else net_af_packet; it says which), the root end of a veth pair into the
#     namespace mb-w0 (10.0.53.1/24; aggregation address 10.0.53.253), its
#     control and worker lcores both on CPU 1. Then, in the namespace,
#       mpirun -np 4 --bind-to none --mca btl BTL -x LD_PRELOAD=libaggswitch_mpi.so
#              -x AGGSWITCH_SWITCH=10.0.53.253 mpi_allreduce_bench --size S ...
#     The four ranks share the namespace's address; each communicates with
#     the switch over kernel UDP (the library's transport) in datagrams of
#     --mtu bytes (AGGSWITCH_MTU; the veth and the switch's port carry it;
#     default 3400 with net_af_xdp ports, 1500 with net_af_packet's), float32 sums as
#     int32 fixed point (exact), a job per communicator registered in band.
#     Then the switch stops, so that plain MPI gets the whole machine.
#   - mpi: the same mpirun without the library: Open MPI's MPI_Allreduce over
#     --btl (self,vader: shared memory, what one host gets by default; vader's
#     single-copy mechanism off, which containers may forbid).
#   - mpi_allreduce_bench (client/mpi/) refills its buffer with small integers
#     and passes an MPI_Barrier before each allreduce, checks the first
#     warm-up result, and prints the median over --iterations timed
#     allreduces of the slowest rank's time. The warm-ups (2) also set up
#     the library's job and probe.
# The summary gives, per size, the median over repeats of each method's
# figure, its algorithm bandwidth (bytes / time, MB = 10^6 bytes) and the
# ratio of times, shim / mpi (below 1: the switch is faster). Both share the
# two CPUs of this machine with everything else: here the switch busy-polls
# one of them, which in a deployment is a box of its own.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$ROOT/bench"
# shellcheck source=bench/lib.sh
source "$BENCH/lib.sh"
# shellcheck source=tests/lib/topology.sh
source "$ROOT/tests/lib/topology.sh"

REPEATS=3
SIZES="1M 16M 64M"
ITERATIONS=""  # empty: per size, see bench_iterations_for
BTL=self,vader
BUILD_DIR="$ROOT/build"
KEEP_LOGS=0
SWITCH_IDLE_SLEEP_US=0
MTU=""  # empty: 3400 with net_af_xdp ports, else 1500

WORLD=4
NS=mb
SUBNET=10.0.53
AGG_IP=$SUBNET.253
SWITCH_CPU=1
RUN_TIMEOUT=600

while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --iterations) ITERATIONS="$2"; shift 2 ;;
    --btl) BTL="$2"; shift 2 ;;
    --mtu) MTU="$2"; shift 2 ;;
    --build-dir) BUILD_DIR=$(realpath -m "$2"); shift 2 ;;
    --keep-logs) KEEP_LOGS=1; shift ;;
    --switch-idle-sleep-us) SWITCH_IDLE_SLEEP_US="$2"; shift 2 ;;
    -h | --help) bench_usage 0 ;;
    *) bench_die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || bench_die "--repeats wants a positive integer"
[ -z "$ITERATIONS" ] || [[ "$ITERATIONS" =~ ^[1-9][0-9]*$ ]] ||
  bench_die "--iterations wants a positive integer"
for s in $SIZES; do
  [[ "$s" =~ ^[1-9][0-9]*[KM]$ ]] || bench_die "--sizes: $s is not a size such as 512K or 16M"
done

WORK=""
BIN=""
PREFIX="mbench-$$"
HTTP=""
SWITCH_PID=""
TOPO_UP=0

aggswitch_config() {
  cat <<EOF
# bench/mpi_allreduce.sh: one $AGG_PORT_DRIVER port, one worker lcore; both lcores on CPU $SWITCH_CPU.
eal:
  lcores: "0@$SWITCH_CPU,1@$SWITCH_CPU"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX
  idle_sleep_us: $SWITCH_IDLE_SLEEP_US
switch:
  mac: 02:a9:9c:00:00:53
  addresses: [$SUBNET.254/24]
ports:
  - {name: p0, devargs: "$(port_devargs "${NS}0" "$NS-p0")", access: 10, mtu: $MTU}
workers:
  - {lcore: 1, rx: [p0]}
mempool: {mbufs: 32767}
http: {listen: "$HTTP"}
aggregation:
  address: $AGG_IP
  in_band_registration: true
  slots: 4096
EOF
}

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
  kill -TERM "$SWITCH_PID" 2>/dev/null || true
  bench_stop_pid "$SWITCH_PID" 10 || bench_log "warning: aggswitch ignored SIGTERM for 10 s"
  rm -rf "/var/run/dpdk/$PREFIX"
}

# mpi_bench NAME SIZE ITERATIONS [VAR=VALUE...]: mpirun of the benchmark in
# the namespace, each VAR exported to the ranks; its line in $RUN/NAME.log.
mpi_bench() {
  local name="$1" size="$2" iterations="$3" env=() exports=()
  shift 3
  for v in "$@"; do env+=("$v"); exports+=(-x "${v%%=*}"); done
  bench_spawn "$RUN/$name.log" timeout -k 5 "$RUN_TIMEOUT" ip netns exec "$NS-w0" env "${env[@]}" \
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$WORLD" --mca btl "$BTL" \
    --mca btl_vader_single_copy_mechanism none "${exports[@]}" \
    "$BIN/mpi_allreduce_bench" --size "$size" --iterations "$iterations" --warmup 2
  local rc=0
  wait "$BENCH_LAST_PID" || rc=$?
  bench_forget_pid "$BENCH_LAST_PID"
  return "$rc"
}

# run_once METHOD SIZE REPEAT: one run; appends "size method repeat seconds"
# to $RESULTS, or says why there is none.
run_once() {
  local method="$1" size="$2" repeat="$3" iterations seconds
  iterations=$(bench_iterations_for "$size" "$ITERATIONS")
  RUN="$WORK/$size-$repeat-$method"
  mkdir -p "$RUN"
  bench_wait_for_idle 60
  printf '  %4s  repeat %s/%s  %-5s ' "$size" "$repeat" "$REPEATS" "$method" >&2
  local ok=0
  if [ "$method" = shim ]; then
    switch_start
    mpi_bench run "$size" "$iterations" LD_PRELOAD="$BIN/libaggswitch_mpi.so" AGGSWITCH_SWITCH="$AGG_IP" \
      AGGSWITCH_MTU="$MTU" &&
      ok=1
    switch_stop
    # The library falls back to MPI's own, with a warning, when the switch
    # does not answer: such a run measured MPI, not the switch.
    if grep -q "aggswitch-mpi" "$RUN/run.log"; then ok=0; fi
  else
    mpi_bench run "$size" "$iterations" && ok=1
  fi
  seconds=$(sed -n 's/.*median_s=\([0-9.]*\).*/\1/p' "$RUN/run.log")
  if [ "$ok" -eq 0 ] || [ -z "$seconds" ]; then
    bench_log "FAILED (logs: $RUN)"
    tail -n 5 "$RUN/run.log" | sed 's/^/      /' >&2
    FAILED=1
    return
  fi
  printf '%s %s %s %s\n' "$size" "$method" "$repeat" "$seconds" >>"$RESULTS"
  awk -v t="$seconds" -v b="$(bench_size_bytes "$size")" \
    'BEGIN { printf "%9.2f ms  %8.1f MB/s\n", t * 1e3, b / t / 1e6 }' >&2
}

summary() {
  local size method t_shim t_mpi b
  printf '%-5s  %-24s  %-24s  %s\n' size "through aggswitch (shim)" "plain Open MPI ($BTL)" "time ratio shim/mpi"
  for size in $SIZES; do
    b=$(bench_size_bytes "$size")
    t_shim=$(awk -v s="$size" '$1 == s && $2 == "shim" { print $4 }' "$RESULTS" | bench_median)
    t_mpi=$(awk -v s="$size" '$1 == s && $2 == "mpi" { print $4 }' "$RESULTS" | bench_median)
    awk -v s="$size" -v a="$t_shim" -v m="$t_mpi" -v b="$b" 'BEGIN {
      f = "%8.2f ms %7.1f MB/s    "
      sa = a == "" ? sprintf("%-24s", "failed") : sprintf(f, a * 1e3, b / a / 1e6)
      sm = m == "" ? sprintf("%-24s", "failed") : sprintf(f, m * 1e3, b / m / 1e6)
      r = (a == "" || m == "") ? "-" : sprintf("%.2f", a / m)
      printf "%-5s  %s  %s  %s\n", s, sa, sm, r }'
  done
}

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
  for tool in mpirun curl ip timeout flock; do
    command -v "$tool" >/dev/null || bench_die "$tool is missing (openmpi-bin, scripts/install-deps.sh)"
  done
  WORK=$(mktemp -d /tmp/mpi-allreduce-bench.XXXXXX)
  BIN="$WORK/bin"
  mkdir -p "$BIN"
  trap cleanup EXIT
  trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM
  # Copies of the binaries: a rebuild during the run cannot mix versions.
  for tool in tools/aggswitch/aggswitch client/mpi/libaggswitch_mpi.so client/mpi/mpi_allreduce_bench; do
    [ -e "$BUILD_DIR/$tool" ] ||
      bench_die "$BUILD_DIR/$tool is missing: cmake --build $BUILD_DIR --target aggswitch aggswitch_mpi mpi_allreduce_bench (needs libopenmpi-dev), or pass --build-dir"
    cp "$BUILD_DIR/$tool" "$BIN/"
  done

  # One benchmark at a time: they would share the two CPUs.
  local lock_fd fd other
  exec {lock_fd}>/run/lock/aggswitch-allreduce-bench.lock
  flock -n "$lock_fd" || bench_die "another allreduce benchmark is running"
  for other in agg l2; do
    exec {fd}>"/run/lock/aggswitch-$other-bench.lock"
    flock -n "$fd" || bench_die "another benchmark holds /run/lock/aggswitch-$other-bench.lock"
  done

  choose_port_driver >&2
  if [ -z "$MTU" ]; then
    MTU=1500
    [ "$AGG_PORT_DRIVER" = net_af_xdp ] && MTU=3400
  fi
  # A net_af_packet port takes no frame above 1500; a net_af_xdp one 3442.
  [[ "$MTU" =~ ^[0-9]+$ ]] && [ "$MTU" -ge 576 ] && [ "$MTU" -le 3442 ] ||
    bench_die "--mtu: 576..3442 (1500 at most with net_af_packet ports)"
  HTTP="127.0.0.1:$(bench_free_tcp_port 19721)"
  aggswitch_config >"$WORK/aggswitch.yaml"
  "$BIN/aggswitch" --config "$WORK/aggswitch.yaml" --check-config >"$WORK/check.log" 2>&1 ||
    bench_die "aggswitch rejects the bench config: $(cat "$WORK/check.log")"
  topo_init "$NS"
  trap cleanup EXIT
  trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM
  topo_host w0 "$NS-p0"
  topo_addr w0 eth0 "$SUBNET.1/24"
  ip link set "$NS-p0" mtu "$MTU"
  topo_exec w0 ip link set eth0 mtu "$MTU"
  TOPO_UP=1

  RESULTS="$WORK/results.txt"
  : >"$RESULTS"
  FAILED=0
  local started=$SECONDS rep size
  bench_log "mpi_allreduce: $WORLD ranks, MPI_FLOAT MPI_SUM of $SIZES, $REPEATS repeats of shim, mpi (btl $BTL); switch ports $AGG_PORT_DRIVER, mtu $MTU"
  for ((rep = 1; rep <= REPEATS; rep++)); do
    for size in $SIZES; do
      run_once shim "$size" "$rep"
      run_once mpi "$size" "$rep"
    done
  done
  local took=$((SECONDS - started))
  echo "# $(date '+%Y-%m-%d %H:%M'), took $((took / 60))m$((took % 60))s; $(nproc) CPUs; $WORLD ranks; median of $REPEATS repeats of each run's median allreduce time (slowest rank)"
  summary
  [ "$FAILED" -eq 0 ]
}

main
