#!/usr/bin/env bash
# How much loss slows an allreduce through aggswitch: 4 ranks, 4 MiB of
# float32 each (fixed point, the client's default), with 0%, 1% and 5% of the
# frames lost on every switch port in both directions (ports[].faults), at
# two floors under the clients' retransmission timeout (agg-worker
# --min-rto-ms): the default 5 ms and 20 ms. Each lossy time is divided by the
# clean time at the same floor, measured in the same repeat.
#
# Run it as root on an otherwise idle machine (about 2 minutes with the
# defaults):
#
#   scripts/build.sh                     # aggswitch, agg-worker
#   sudo bench/loss_recovery.sh [--repeats 3] [--levels "0 1 5"] [--floors "5 20"]
#                               [--size 4M] [--iterations 10] [--build-dir build]
#                               [--out bench/results/loss-recovery-latest.txt] [--quick]
#
#   --quick: one repeat.
#
# One run: aggswitch on four net_af_packet ports, the root ends of veth pairs
# into namespaces lr-w0..lr-w3 (10.0.46.1-4/24; aggregation address
# 10.0.46.253), its ports losing each frame with the level's probability in
# both directions; the hosts know the aggregation address's MAC for good (a
# lost ARP reply costs the kernel's one-second retry, which is not what this
# measures). Four agg-workers, one per namespace, kernel UDP, a job of the
# run's own (registered in band), --iterations allreduces, each rank's
# results checked bit for bit (--verify). A run's time is the median over its
# iterations at its fastest rank (the others started later and waited for
# it). Each level gets a switch of its own (faults are read at start-up); the
# floors alternate within it. Repeats go round the levels again.
#
# The summary gives, per level and floor, the median over repeats of the time
# per allreduce, its ratio to the clean time, and the retransmissions and
# QUERYs and NOTICEs "held" per allreduce and rank; then one line each:
#   loss_ratio loss=5% min_rto_ms=5 ratio=2.50 target=3 PASS
# Targets: 1% loss at most 1.5x the clean time, 5% at most 3x.
set -Eeuo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPEATS=3
LEVELS="0 1 5"
FLOORS="5 20"
SIZE=4M
ITERATIONS=10
BUILD_DIR=build
OUT="$ROOT/bench/results/loss-recovery-latest.txt"
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS="$2"; shift 2 ;;
    --levels) LEVELS="$2"; shift 2 ;;
    --floors) FLOORS="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --iterations) ITERATIONS="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --quick) REPEATS=1; shift ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "run as root (network namespaces)" >&2; exit 1; }
case " $LEVELS " in *" 0 "*) ;; *) echo "--levels must include 0 (the clean time)" >&2; exit 2 ;; esac
[[ "$BUILD_DIR" = /* ]] || BUILD_DIR="$ROOT/$BUILD_DIR"
AGGSWITCH="$BUILD_DIR/tools/aggswitch/aggswitch"
AGG_WORKER="$BUILD_DIR/tools/agg-worker/agg-worker"
for b in "$AGGSWITCH" "$AGG_WORKER"; do
  [ -x "$b" ] || { echo "missing $b: run scripts/build.sh" >&2; exit 1; }
done

# shellcheck source=tests/lib/topology.sh
source "$ROOT/tests/lib/topology.sh"
WORK=$(mktemp -d /tmp/aggswitch-lr.XXXXXX)
HTTP_PORT=19483
AGG_IP=10.0.46.253
AGG_PORT=47046
SWITCH_MAC=02:a9:9c:00:00:46
RANKS=4
topo_init lr
cleanup() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup EXIT
for w in $(seq 0 $((RANKS - 1))); do
  topo_host "w$w" "lr-p$w"
  topo_addr "w$w" eth0 "10.0.46.$((w + 1))/24"
done

# start_switch LEVEL: aggswitch whose ports lose LEVEL% of the frames.
start_switch() {
  local level="$1" faults="" w
  [ "$level" = 0 ] || faults=", faults: {loss: $(awk -v p="$level" 'BEGIN { print p / 100 }'), direction: both, seed: $RANDOM}"
  {
    cat <<EOF
eal: {lcores: "0,1", main_lcore: 0, memory_mb: 512, file_prefix: agg-lr-$$}
switch: {mac: $SWITCH_MAC, addresses: [10.0.46.254/24]}
ports:
EOF
    for w in $(seq 0 $((RANKS - 1))); do
      echo "  - {name: p$w, devargs: \"net_af_packet_lr$w,iface=lr-p$w\", access: 10$faults}"
    done
    cat <<EOF
workers:
  - {lcore: 1, rx: [$(seq -s ', ' -f 'p%g' 0 $((RANKS - 1)))]}
mempool: {mbufs: 16383}
http: {listen: "127.0.0.1:$HTTP_PORT"}
aggregation: {address: $AGG_IP, udp_port: $AGG_PORT, slots: 4096, in_band_registration: true}
EOF
  } >"$WORK/switch-$level.yaml"
  run_switch "$AGGSWITCH" "$WORK/switch-$level.yaml" "$HTTP_PORT" "$WORK/switch-$level.log" >&2
  for w in $(seq 0 $((RANKS - 1))); do
    ip -n "$(topo_ns "w$w")" neigh replace "$AGG_IP" lladdr "$SWITCH_MAC" dev eth0 nud permanent
  done
}
stop_switch() {
  kill -TERM "$SWITCH_PID" 2>/dev/null || true
  wait "$SWITCH_PID" 2>/dev/null || true
}

# run NAME JOB FLOOR: one job of RANKS ranks; NAME.r.json per rank.
run() {
  local name="$1" job="$2" floor="$3" r pids=() rc=0
  for r in $(seq 0 $((RANKS - 1))); do
    ip netns exec "$(topo_ns "w$r")" timeout -k 5 300 "$AGG_WORKER" --rank "$r" --world "$RANKS" \
      --job "$job" --key 0x1055 --switch "$AGG_IP:$AGG_PORT" --dtype float32 --op sum \
      --size "$SIZE" --iterations "$ITERATIONS" --min-rto-ms "$floor" --verify --quiet \
      --json "$WORK/$name.$r.json" >"$WORK/$name.$r.out" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || rc=1; done
  if [ "$rc" -ne 0 ]; then
    echo "run $name failed:" >&2
    cat "$WORK/$name".*.out >&2
  fi
  return $rc
}

# One line per run in the samples file: repeat level floor ms, and per
# allreduce and rank: retransmissions, queries, held notices.
SAMPLES="$WORK/samples.tsv"
job=1000
for rep in $(seq 1 "$REPEATS"); do
  for level in $LEVELS; do
    start_switch "$level"
    for floor in $FLOORS; do
      job=$((job + 1))
      name="r$rep-l$level-f$floor"
      run "$name" "$job" "$floor" || exit 1
      python3 - "$WORK/$name" "$RANKS" "$ITERATIONS" "$rep" "$level" "$floor" >>"$SAMPLES" <<'EOF'
import json, sys
base, ranks, its, rep, level, floor = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
docs = [json.load(open("%s.%d.json" % (base, r))) for r in range(ranks)]
ms = 1e3 * min(d["latency_s"]["median"] for d in docs)
per = lambda k: sum(d["client"][k] for d in docs) / ranks / its
print(rep, level, floor, "%.2f" % ms, "%.1f" % per("retransmissions"), "%.1f" % per("queries"),
      "%.1f" % per("held_notices"))
EOF
      echo "repeat $rep, ${level}% loss, floor $floor ms: $(tail -1 "$SAMPLES" | awk '{print $4 " ms"}')" >&2
    done
    stop_switch
  done
done

mkdir -p "$(dirname "$OUT")"
python3 - "$SAMPLES" "$SIZE" "$ITERATIONS" <<'EOF' | tee "$OUT"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
size, its = sys.argv[2], sys.argv[3]
targets = {"1": 1.5, "5": 3.0}
med = {}
for key in sorted({(r[1], r[2]) for r in rows}, key=lambda k: (float(k[0]), -float(k[1]))):
    sel = [r for r in rows if (r[1], r[2]) == key]
    med[key] = tuple(statistics.median(float(r[i]) for r in sel) for i in (3, 4, 5, 6))
print("Loss recovery: 4 ranks x %s float32, %s allreduces per run, median over %d repeats" %
      (size, its, len({r[0] for r in rows})))
print("per allreduce and rank: retransmissions, QUERYs, NOTICEs held")
print("%-6s %-8s %14s %8s %8s %8s %8s" % ("loss", "min rto", "ms/allreduce", "x clean", "retx", "queries", "held"))
lines = []
for (level, floor), (ms, retx, queries, held) in med.items():
    clean = med.get(("0", floor), (None,))[0]
    ratio = ms / clean if clean else float("nan")
    print("%-6s %-8s %14.1f %8.2f %8.1f %8.1f %8.1f" % (level + "%", floor + " ms", ms, ratio, retx, queries, held))
    if level in targets:
        verdict = "PASS" if ratio <= targets[level] else "MISS"
        lines.append("loss_ratio loss=%s%% min_rto_ms=%s ratio=%.2f target=%g %s" %
                     (level, floor, ratio, targets[level], verdict))
print()
print("\n".join(lines))
EOF
