#!/usr/bin/env bash
# aggswitch's L2 forwarding cost and rate against two baselines, testpmd io and
# OVS-DPDK, measured in one interleaved run on a 2-CPU machine without NICs.
#
# Run it as root on an otherwise idle machine (about 5 minutes with the defaults):
#
#   scripts/install-deps.sh --bench      # testpmd, OVS-DPDK
#   scripts/build.sh                     # build/tools/aggswitch/aggswitch
#   sudo bench/l2_forwarding.sh [--repeats 3] [--window 8] [--warmup 2] [--sizes "64 1024"]
#                               [--duts aggswitch,testpmd,ovs] [--retries 2] [--build-dir build]
#                               (more DUTs: int_miss, int_miss_1k, int_all_1k; below)
#                               [--out bench/results/l2_forwarding-latest.txt] [--keep-logs]
#
# What it does, for each frame size and repeat, in the order aggswitch, testpmd,
# OVS (A B C A B C A B C):
#   - starts the device under test (DUT) on CPU 1 as the memif server, with a
#     second port net_null0,no-rx=1 as the sink: aggswitch with
#     config/examples/memif-bench.yaml (both ports access VLAN 1, a static MAC
#     entry puts 02:00:00:00:00:02 behind the sink), testpmd --forward-mode=io,
#     or OVS-DPDK with one NORMAL-mode bridge and a static FDB entry;
#   - starts a testpmd txonly generator on CPU 0 as the memif client, sending
#     to 02:00:00:00:00:02 (frame size = --txpkts + 4 bytes of FCS);
#   - waits for packets to reach the sink, warms up, then for the window samples
#     the sink's TX counter once a second and takes the busy cycles per packet
#     over the window;
#   - stops the generator's sending, then the DUT, then the generator, and
#     checks that no process, socket or DPDK runtime directory is left;
#   - runs it again (up to --retries times) if the DUT and generator got less
#     than 90% of the two CPUs during the window: another process disturbed it.
#
# In-band telemetry's cost (docs/telemetry.md) on the same path: three more
# DUTs, aggswitch with a telemetry section added to the same config:
#   int_miss      a watch list that matches nothing, sample 1: every frame is
#                 matched against it (the most an unwatched frame can pay);
#   int_miss_1k   the same list, sample 1000: unwatched frames pay the
#                 sampling countdown alone;
#   int_all_1k    a list that matches every frame, sample 1000, the sink a
#                 fabric port: 1 frame in 1000 gets INT inserted and a hop
#                 record, which the control thread sends as a report.
# The summary prints each one's busy cycles per packet over aggswitch's,
# repeat by repeat (they run interleaved), and the target: at most 2 cycles
# per frame for traffic that matches no watch entry.
#
#   sudo bench/l2_forwarding.sh --duts aggswitch,int_miss,int_miss_1k,int_all_1k --sizes 64
#
# How to read the summary (also written to --out):
#   - "busy cycles/pkt" is the headline: TSC cycles the DUT core spent in polls
#     that returned packets, divided by those packets. aggswitch: its
#     lcore_busy_* counters; testpmd: --record-core-cycles; OVS: pmd-stats-show
#     "processing cycles". It is the median of the per-repeat window values.
#     It is steadier than Mpps but not immune to the machine's state: memif RX
#     copies cache lines that the generator's CPU has just written, and such
#     cross-core transfers are what the slow state slows down. Compare DUTs
#     within one run; when the state was slow the summary prints testpmd io's
#     own figure next to the 100-cycle target.
#   - "Mpps" is the median of the 1-second samples pooled over the repeats. It
#     crosses the two CPUs (memif copies), so it swings about 3x between the
#     machine's "fast" and "slow" states; the summary names the state from
#     testpmd io's rate. Compare Mpps only as ratios within one run.
#   - "generator drops" near 0% means the generator, not the DUT, set the rate;
#     then the Mpps ratio says nothing about the DUT (the cycles still do). At
#     64 B in the fast state testpmd io (~26 Mpps) is close to that limit (the
#     generator drops only ~3%), so aggswitch/testpmd Mpps flatters aggswitch a
#     little.
#   - Repeats marked "*" got less than 90% of the two CPUs even after the
#     retries: something else ran on the machine; rerun when it is idle.
#   - PASS/MISS lines are the targets: aggswitch <= 100 busy cycles per 64-byte
#     packet, and aggswitch Mpps >= 0.8 x testpmd io in the same run.
# Raw per-sample data goes next to --out, as a .tsv (size dut repeat metric value).
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$ROOT/bench"
# shellcheck source=bench/lib.sh
source "$BENCH/lib.sh"

REPEATS=3
WINDOW=8
WARMUP=2
SIZES="64 1024"
DUTS="aggswitch,testpmd,ovs"
BUILD_DIR="$ROOT/build"
OUT="$BENCH/results/l2_forwarding-latest.txt"
KEEP_LOGS=0
RETRIES=2

OVS_VSWITCHD=/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk
OVS_SCHEMA=/usr/share/openvswitch/vswitch.ovsschema
DUT_MAC=02:00:00:00:00:02  # where the generator sends; every DUT forwards it to the sink
UP_TIMEOUT=30              # seconds for a DUT to start, and for its first packet
MIN_CPU_SHARE=0.90         # of the 2 CPUs, for DUT + generator in a window (as parse_stats.py)

while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS="$2"; shift 2 ;;
    --window) WINDOW="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
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
for size in $SIZES; do
  if ! [[ "$size" =~ ^[0-9]+$ ]] || [ "$size" -lt 64 ] || [ "$size" -gt 1518 ]; then
    bench_die "--sizes: $size is not a frame size between 64 and 1518"
  fi
done
IFS=, read -r -a DUT_LIST <<<"$DUTS"
for dut in "${DUT_LIST[@]}"; do
  case "$dut" in aggswitch | testpmd | ovs | int_miss | int_miss_1k | int_all_1k) ;;
    *) bench_die "--duts: unknown DUT $dut" ;;
  esac
done
has_dut() { [[ ",$DUTS," == *",$1,"* ]]; }

AGGSWITCH="$BUILD_DIR/tools/aggswitch/aggswitch"
WORK=""         # temp dir: configs, logs, snapshots of every run
PREFIX="l2bench-$$"  # DPDK file prefixes: $PREFIX-gen, $PREFIX-dut
SOCK=""         # the memif socket (a file, socket-abstract=no)
RUN=""          # the current run's directory under $WORK
RESULTS=""      # size dut repeat metric value, one line each
RUN_SHARE=0     # the last run's share of the 2 CPUs (DUT + generator)

# --- the traffic generator: testpmd txonly, memif client, CPU 0 --------------
# Interactive (commands through a FIFO), so that it can stop sending before the
# DUT goes away: the DPDK 22.11 memif PMD can crash a process whose lcore still
# polls a ring while its peer disconnects (seen in testpmd, ~1 stop in 10).

GEN_PID=""

gen_start() {
  local size="$1" queues="$2"
  bench_spawn_fifo "$RUN/gen.log" "$RUN/gen.fifo" \
    stdbuf -oL dpdk-testpmd --lcores '0@0,1@0' --no-huge -m 1024 --no-pci \
    --file-prefix "$PREFIX-gen" --vdev "net_memif0,role=client,socket=$SOCK,socket-abstract=no" -- \
    -i -a --forward-mode=txonly --txpkts="$((size - 4))" --eth-peer="0,$DUT_MAC" \
    --rxq="$queues" --txq="$queues" --record-core-cycles
  GEN_PID=$BENCH_LAST_PID
}

# Stops sending, and waits until its lcore has stopped and printed its totals.
gen_pause() {
  bench_fifo_send "$RUN/gen.fifo" "stop"
  bench_wait_until 10 grep -q "Accumulated forward statistics" "$RUN/gen.log" ||
    bench_log "warning: the generator did not confirm 'stop' within 10 s"
}

gen_stop() {
  bench_fifo_send "$RUN/gen.fifo" "quit"
  bench_fifo_close "$RUN/gen.fifo"
  bench_stop_pid "$GEN_PID" 10 || bench_log "warning: the generator had to be signalled to stop"
  [ "$BENCH_LAST_STATUS" -eq 0 ] ||
    bench_log "warning: the generator exited with status $BENCH_LAST_STATUS (log: $RUN/gen.log)"
}

# --- DUT A: aggswitch --------------------------------------------------------
# Every DUT has the same functions:
#   _check, _prepare   once, before the first run
#   _start             start it and wait until it listens on the memif socket
#   _up                true once it is ready for the generator
#   _gen_queues        the generator's --rxq/--txq
#   _pids              its processes, for the CPU-time check
#   _sink_tx           packets sent on the sink so far (start-up check; may be slow)
#   _window_begin      start of the window: mark the busy-cycle counters
#   _sample I          the I-th once-a-second sample of the sink's TX counter (cheap)
#   _window_end        end of the window
#   _stop              stop it cleanly
#   _cycles            busy cycles per packet over the window (after _stop)
# Samples go to $RUN; parse_stats.py rates turns them into packets/s.

AGG_PID=""
AGG_HTTP=""

aggswitch_check() {
  [ -x "$AGGSWITCH" ] ||
    bench_die "$AGGSWITCH is missing: run scripts/build.sh (or pass --build-dir)"
}
aggswitch_prepare() {
  AGG_HTTP="127.0.0.1:$(bench_free_tcp_port 19477)"
  local example="$ROOT/config/examples/memif-bench.yaml" config="$WORK/aggswitch.yaml"
  sed -e "s|socket=/run/aggswitch/bench.sock|socket=$SOCK|" \
    -e "s|^\(  listen: \).*|\1$AGG_HTTP|" \
    -e "s|^\(  file_prefix: \).*|\1$PREFIX-dut|" "$example" >"$config"
  local expected
  for expected in "socket=$SOCK," "listen: $AGG_HTTP" "file_prefix: $PREFIX-dut" "name: sink"; do
    grep -q "$expected" "$config" ||
      bench_die "$example no longer has the memif socket, http.listen, eal.file_prefix or sink port this script rewrites"
  done
  "$AGGSWITCH" --config "$config" --check-config >"$WORK/aggswitch-check.log" 2>&1 ||
    bench_die "aggswitch rejects the bench config: $(cat "$WORK/aggswitch-check.log")"
}

aggswitch_start() { agg_start aggswitch; }
# agg_start DUT: aggswitch with $WORK/DUT.yaml.
agg_start() {
  bench_spawn "$RUN/dut.log" "$AGGSWITCH" --config "$WORK/$1.yaml"
  AGG_PID=$BENCH_LAST_PID
  bench_wait_dut_up "$1" "$AGG_PID"
}
aggswitch_up() { [ -S "$SOCK" ] && curl -sf -o /dev/null --max-time 1 "http://$AGG_HTTP/metrics"; }
aggswitch_gen_queues() { echo 1; }  # one worker: one RX and one TX queue per port
aggswitch_pids() { echo "$AGG_PID"; }
aggswitch_scrape() { curl -sf --max-time 2 -o "$1" "http://$AGG_HTTP/metrics"; }
aggswitch_sink_tx() { aggswitch_scrape "$RUN/first.prom" && bench_parse sink-tx aggswitch "$RUN/first.prom" sink; }
aggswitch_window_begin() { aggswitch_scrape "$RUN/window-begin.prom"; }
aggswitch_sample() { timed_sample "$1" prom aggswitch_scrape; }
aggswitch_window_end() { aggswitch_scrape "$RUN/window-end.prom"; }
aggswitch_stop() {
  kill -TERM "$AGG_PID" 2>/dev/null || true
  if ! bench_stop_pid "$AGG_PID" 10; then
    bench_log "warning: aggswitch ignored SIGTERM for 10 s"
  elif [ "$BENCH_LAST_STATUS" -ne 0 ]; then
    bench_log "warning: aggswitch exited with status $BENCH_LAST_STATUS on SIGTERM (log: $RUN/dut.log)"
  fi
}
aggswitch_cycles() { bench_parse cycles aggswitch "$RUN/window-begin.prom" "$RUN/window-end.prom"; }

# --- DUTs int_*: aggswitch with in-band telemetry ------------------------------
# The generator's frames are UDP 198.18.0.1 -> 198.18.0.2 (testpmd txonly);
# 192.0.2.0/24 (TEST-NET-1) is nowhere. Reports go to the discard port.

# int_prepare DUT SAMPLE DST [FABRIC_SINK]: $WORK/DUT.yaml, aggswitch's config
# with a telemetry section (and the sink a fabric port).
int_prepare() {
  [ -f "$WORK/aggswitch.yaml" ] || aggswitch_prepare
  local config="$WORK/$1.yaml"
  if [ -n "${4:-}" ]; then
    sed -e 's|^\(    devargs: net_null0,no-rx=1\)$|\1\n    role: fabric|' "$WORK/aggswitch.yaml" >"$config"
    grep -q "role: fabric" "$config" || bench_die "the sink port of $config did not become a fabric port"
  else
    cp "$WORK/aggswitch.yaml" "$config"
  fi
  cat >>"$config" <<EOF
telemetry:
  node_id: 1
  collector: "127.0.0.1:9"
  watch:
    - {name: bench, dst: $3, sample: $2}
EOF
  "$AGGSWITCH" --config "$config" --check-config >"$WORK/$1-check.log" 2>&1 ||
    bench_die "aggswitch rejects $config: $(cat "$WORK/$1-check.log")"
}
# dut_kind DUT: whose counters DUT's samples are (parse_stats.py's kind).
dut_kind() { case "$1" in int_*) echo aggswitch ;; *) echo "$1" ;; esac; }
int_miss_prepare() { int_prepare int_miss 1 192.0.2.0/24; }
int_miss_1k_prepare() { int_prepare int_miss_1k 1000 192.0.2.0/24; }
int_all_1k_prepare() { int_prepare int_all_1k 1000 0.0.0.0/0 fabric; }
for dut in int_miss int_miss_1k int_all_1k; do
  eval "${dut}_start() { agg_start $dut; }"
  for fn in check up gen_queues pids scrape sink_tx window_begin sample window_end stop cycles; do
    eval "${dut}_${fn}() { aggswitch_${fn} \"\$@\"; }"
  done
done

# --- DUT B: testpmd io -------------------------------------------------------
# Interactive, driven through a FIFO, so that the window can clear and show its
# forwarding statistics (CPU cycles/packet from --record-core-cycles).

PMD_PID=""

testpmd_check() { :; }
testpmd_prepare() { :; }
testpmd_start() {
  bench_spawn_fifo "$RUN/dut.log" "$RUN/dut.fifo" \
    stdbuf -oL dpdk-testpmd --lcores '0@1,1@1' --no-huge -m 1024 --no-pci \
    --file-prefix "$PREFIX-dut" --vdev "net_memif0,role=server,socket=$SOCK,socket-abstract=no" \
    --vdev net_null0,no-rx=1 -- -i -a --forward-mode=io --record-core-cycles
  PMD_PID=$BENCH_LAST_PID
  bench_wait_dut_up testpmd "$PMD_PID"
}
# The memif socket exists from the probe on, but a client that connects before
# the port has started never gets a link: wait for the line start_port prints.
testpmd_up() { [ -S "$SOCK" ] && grep -q "^Checking link statuses" "$RUN/dut.log"; }
testpmd_gen_queues() { echo 1; }
testpmd_pids() { echo "$PMD_PID"; }
# Port 1 is the sink (the second --vdev).
testpmd_sink_tx() {
  bench_parse telemetry "$PREFIX-dut" "/ethdev/stats,1" >"$RUN/first.json" &&
    bench_parse sink-tx testpmd "$RUN/first.json" 1
}
testpmd_window_begin() { bench_fifo_send "$RUN/dut.fifo" "clear fwd stats all"; }
# testpmd times the interval itself and prints Tx-pps "since last show" to its
# log. (A telemetry query from python would cost CPU 0 ~0.1 s per sample.)
testpmd_sample() { bench_fifo_send "$RUN/dut.fifo" "show port stats 1"; }
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

# --- DUT C: OVS-DPDK ---------------------------------------------------------
# Its own ovsdb-server, database and run directory under $RUN/ovs. The main
# threads run on CPU 0; the one PMD thread on CPU 1 (pmd-cpu-mask).

OVS_DIR=""
OVSDB_PID=""
VSWITCHD_PID=""

ovs_vsctl() { ovs-vsctl --db="unix:$OVS_DIR/db.sock" --timeout=30 "$@"; }
ovs_appctl() { ovs-appctl --timeout=10 -t "$OVS_DIR/vswitchd.ctl" "$@"; }

ovs_check() {
  [ -x "$OVS_VSWITCHD" ] || bench_die "$OVS_VSWITCHD is missing: run scripts/install-deps.sh --bench"
}
ovs_prepare() { :; }

ovs_start() {
  OVS_DIR="$RUN/ovs"
  mkdir -p "$OVS_DIR"
  local env=(env "OVS_RUNDIR=$OVS_DIR" "OVS_LOGDIR=$OVS_DIR" "OVS_DBDIR=$OVS_DIR")
  ovsdb-tool create "$OVS_DIR/conf.db" "$OVS_SCHEMA" || bench_dut_failed ovs "did not come up: ovsdb-tool create failed"
  bench_spawn "$RUN/ovsdb.log" "${env[@]}" taskset -c 0 ovsdb-server "$OVS_DIR/conf.db" \
    --remote="punix:$OVS_DIR/db.sock" --unixctl="$OVS_DIR/ovsdb.ctl"
  OVSDB_PID=$BENCH_LAST_PID
  bench_wait_until 10 test -S "$OVS_DIR/db.sock" || bench_dut_failed ovs "did not come up: ovsdb-server did not start"
  # Without --legacy-mem, OVS adds --in-memory, which --no-huge rejects.
  ovs_vsctl --no-wait init -- set Open_vSwitch . other_config:dpdk-init=true \
    "other_config:dpdk-extra=--no-huge --legacy-mem -m 1024 --no-pci --file-prefix $PREFIX-dut" \
    other_config:pmd-cpu-mask=0x2 || bench_dut_failed ovs "did not come up: ovs-vsctl init failed"
  bench_spawn "$RUN/dut.log" "${env[@]}" taskset -c 0 "$OVS_VSWITCHD" "unix:$OVS_DIR/db.sock" \
    --unixctl="$OVS_DIR/vswitchd.ctl"
  VSWITCHD_PID=$BENCH_LAST_PID
  bench_wait_until "$UP_TIMEOUT" test -S "$OVS_DIR/vswitchd.ctl" ||
    bench_dut_failed ovs "did not come up: ovs-vswitchd-dpdk did not open its control socket"
  # OVS must be the memif server. Its PMD sends on TX queue 1, so the memif port
  # needs two queues (and the generator --rxq=2 --txq=2).
  ovs_vsctl add-br br0 -- set bridge br0 datapath_type=netdev \
    -- add-port br0 bench -- set Interface bench type=dpdk \
    "options:dpdk-devargs=net_memif0,role=server,socket=$SOCK,socket-abstract=no" options:n_rxq=2 \
    -- add-port br0 sink -- set Interface sink type=dpdk options:dpdk-devargs=net_null0,no-rx=1 ||
    bench_dut_failed ovs "did not come up: ovs-vsctl could not create the bridge"
  local port error
  for port in bench sink; do
    error=$(ovs_vsctl --bare --columns=error list Interface "$port")
    [ -z "$error" ] || bench_dut_failed ovs "did not come up: interface $port: $error"
  done
  # Known unicast, like aggswitch's static MAC entry: no flooding to br0's tap.
  ovs_appctl fdb/add br0 sink 0 "$DUT_MAC" >/dev/null || bench_dut_failed ovs "did not come up: fdb/add failed"
  bench_wait_dut_up ovs "$VSWITCHD_PID"
}
ovs_up() { [ -S "$SOCK" ]; }
ovs_gen_queues() { echo 2; }
ovs_pids() { echo "$VSWITCHD_PID $OVSDB_PID"; }
# The database's interface statistics are refreshed only every 5 s or more
# (other_config:stats-update-interval has a 5000 ms floor), so read the
# datapath's own port counters instead.
ovs_dpctl_show() { ovs_appctl dpctl/show -s >"$1"; }
ovs_sink_tx() { ovs_dpctl_show "$RUN/first.txt" && bench_parse sink-tx ovs "$RUN/first.txt" sink; }
ovs_window_begin() { ovs_appctl dpif-netdev/pmd-stats-clear >/dev/null; }
ovs_sample() { timed_sample "$1" txt ovs_dpctl_show; }
ovs_window_end() { ovs_appctl dpif-netdev/pmd-stats-show >"$RUN/pmd-stats.txt"; }
ovs_stop() {
  ovs_appctl exit >/dev/null 2>&1 || true
  if ! bench_stop_pid "$VSWITCHD_PID" 10; then
    bench_log "warning: ovs-vswitchd ignored 'exit' for 10 s"
  elif [ "$BENCH_LAST_STATUS" -ne 0 ]; then
    bench_log "warning: ovs-vswitchd exited with status $BENCH_LAST_STATUS (log: $RUN/dut.log)"
  fi
  kill -TERM "$OVSDB_PID" 2>/dev/null || true
  bench_stop_pid "$OVSDB_PID" 5 || bench_log "warning: ovsdb-server ignored SIGTERM for 5 s"
}
ovs_cycles() { bench_parse cycles ovs "$RUN/pmd-stats.txt"; }

# timed_sample I EXT CMD: CMD writes sample I to the file it is given; the
# time it returned goes into $RUN/times.
timed_sample() {
  local file="$RUN/sample-$1.$2"
  "$3" "$file" && echo "$(bench_now) $file" >>"$RUN/times"
}

# --- one run -----------------------------------------------------------------

# Starts the generator and polls the sink's TX counter until the first
# forwarded packet. A memif client does not reconnect after a failed
# handshake, so a generator that got no link is replaced once.
start_traffic() {
  local dut="$1" size="$2" attempt sent deadline
  for attempt in 1 2; do
    gen_start "$size" "$("${dut}_gen_queues")"
    deadline=$((SECONDS + UP_TIMEOUT / 2))
    while [ "$SECONDS" -lt "$deadline" ]; do
      sent=$("${dut}_sink_tx" 2>/dev/null) || sent=0
      [ "$sent" -eq 0 ] || return 0
      bench_alive "$GEN_PID" || break
      sleep 0.5
    done
    gen_stop
    [ "$attempt" -eq 2 ] || {
      mv "$RUN/gen.log" "$RUN/gen-no-link.log"
      bench_log "(no packet at the sink after $((UP_TIMEOUT / 2)) s: restarting the generator) "
    }
  done
  bench_dut_failed "$dut" "did not come up: no packet reached the sink through two generator starts (see $RUN/gen.log)"
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

# record SIZE DUT REPEAT METRIC VALUE: one line of this run's results.
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RUN/results.tsv"; }

# run_once DUT SIZE REPEAT ATTEMPT: one measurement into $RUN/results.tsv.
# Sets RUN_SHARE, the share of the 2 CPUs the DUT and generator got.
run_once() {
  local dut="$1" size="$2" rep="$3" attempt="$4"
  RUN="$WORK/$size-$rep-$dut-$attempt"
  mkdir -p "$RUN"
  printf '  %-4s B  repeat %s/%s  %-9s ' "$size" "$rep" "$REPEATS" "$dut" >&2

  "${dut}_start"
  start_traffic "$dut" "$size"
  sleep "$WARMUP"

  local pids t0 ticks0 t1 ticks1 i
  read -r -a pids <<<"$GEN_PID $("${dut}_pids")"
  ticks0=$(bench_cpu_ticks "${pids[@]}")
  t0=$(bench_now)
  "${dut}_window_begin"
  for ((i = 0; i <= WINDOW; i++)); do
    bench_sleep_until "$(awk -v t="$t0" -v i="$i" 'BEGIN { printf "%.6f", t + i }')"
    "${dut}_sample" "$i" || bench_dut_failed "$dut" "reading its counters failed mid-run"
  done
  "${dut}_window_end"
  t1=$(bench_now)
  ticks1=$(bench_cpu_ticks "${pids[@]}")

  # The generator stops sending first, then the DUT closes, then the generator.
  gen_pause
  "${dut}_stop"
  gen_stop
  check_clean "${pids[@]}"

  local cycles drops rate mpps=()
  cycles=$("${dut}_cycles") || bench_die "$dut: no busy cycles/packet for the window (logs: $RUN)"
  RUN_SHARE=$(awk -v d="$((ticks1 - ticks0))" -v hz="$(getconf CLK_TCK)" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "%.3f", d / hz / (t1 - t0) / 2 }')
  drops=$(bench_parse gen-drops "$RUN/gen.log") || drops=""
  while read -r rate; do
    mpps+=("$(awk -v r="$rate" 'BEGIN { printf "%.3f", r / 1e6 }')")
    record "$size" "$dut" "$rep" mpps "${mpps[-1]}"
  done < <(bench_parse rates "$(dut_kind "$dut")" "$RUN" "$WINDOW")
  [ "${#mpps[@]}" -eq "$WINDOW" ] || bench_die "$dut: ${#mpps[@]} rate samples, expected $WINDOW (logs: $RUN)"
  record "$size" "$dut" "$rep" cycles "$cycles"
  record "$size" "$dut" "$rep" cpu_share "$RUN_SHARE"
  [ -z "$drops" ] || record "$size" "$dut" "$rep" gen_drops "$drops"
  printf '%7.1f cycles/pkt  %6.2f Mpps  cpu %3.0f%%  generator drops %3.0f%%\n' "$cycles" \
    "$(printf '%s\n' "${mpps[@]}" | bench_median)" "$(awk -v s="$RUN_SHARE" 'BEGIN { print s * 100 }')" \
    "$(awk -v d="${drops:-0}" 'BEGIN { print d * 100 }')" >&2
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
  [ "$(id -u)" -eq 0 ] || bench_die "needs root (DPDK vdevs, OVS); try: sudo $0"
  local tool
  for tool in dpdk-testpmd stdbuf python3 curl ss taskset ovs-vsctl ovs-appctl ovsdb-tool ovsdb-server; do
    command -v "$tool" >/dev/null || bench_die "$tool is missing: run scripts/install-deps.sh --bench"
  done
  local dut
  for dut in "${DUT_LIST[@]}"; do "${dut}_check"; done

  # One benchmark at a time: two would share the two CPUs.
  exec {lock_fd}>/run/lock/aggswitch-l2-bench.lock
  flock -n "$lock_fd" || bench_die "another bench/l2_forwarding.sh is running"

  trap cleanup EXIT
  trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM
  trap 'bench_log "error: line $LINENO: \"$BASH_COMMAND\" failed (logs: $WORK)"' ERR
  WORK=$(mktemp -d /tmp/l2bench.XXXXXX)
  SOCK="$WORK/memif.sock"
  RESULTS="$WORK/results.tsv"
  : >"$RESULTS"
  for dut in "${DUT_LIST[@]}"; do "${dut}_prepare"; done

  local busy others
  others=$(for name in dpdk-testpmd aggswitch ovs-vswitchd ovs-vswitchd-dp; do pgrep -x "$name" || true; done | paste -sd,)
  [ -z "$others" ] || bench_log "warning: other switch processes are running (pids $others): expect noise"
  busy=$(bench_cpu_busy_percent)
  [ "$busy" -lt 10 ] || bench_log "warning: the CPUs were ${busy}% busy before the start: expect noise and retries"

  local started=$SECONDS size rep
  bench_log "l2_forwarding: sizes $SIZES, $REPEATS repeats of ${DUT_LIST[*]}, ${WARMUP} s warm-up + ${WINDOW} s window each"
  for size in $SIZES; do
    for ((rep = 1; rep <= REPEATS; rep++)); do
      for dut in "${DUT_LIST[@]}"; do bench_run_measured generator run_once "$dut" "$size" "$rep"; done
    done
  done
  local took=$((SECONDS - started))

  local tsc version
  tsc=$(grep -ho 'at [0-9]* MHz Clock' "$WORK"/*/gen.log | head -n1 | awk '{ print $2 }')
  if has_dut aggswitch; then version=$("$AGGSWITCH" --version | head -n1); else version="aggswitch not run"; fi
  version+=", git $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  mkdir -p "$(dirname "$OUT")"
  bench_parse summary "$RESULTS" --duts "$DUTS" --repeats "$REPEATS" --window "$WINDOW" \
    --warmup "$WARMUP" --tsc-mhz "${tsc:-?}" \
    --header "$(date '+%Y-%m-%d %H:%M'), took $((took / 60))m$((took % 60))s; $version" |
    tee "$OUT"
  cp "$RESULTS" "${OUT%.txt}.tsv"
  bench_log "summary written to $OUT (raw samples: ${OUT%.txt}.tsv)"
}

main
