#!/usr/bin/env bash
# The training step of examples/train_ddp.py (DDP, 4 ranks, the same model
# and data), four ways, interleaved in one run:
#   gloo        Gloo's ring over TCP loopback, all ranks in one namespace
#               (Gloo's best case on this machine);
#   backend     the "aggswitch" process group, one rank per namespace through
#               a running aggswitch, kernel UDP;
#   backend_xdp the same over AF_XDP (AGGSWITCH_TRANSPORT=af_xdp; only when
#               the switch's ports are AF_XDP too);
#   hook        Gloo (through the switch's L2 ports) with
#               aggswitch.torch.allreduce_hook, kernel UDP.
# With AF_XDP ports the veths and the switch's ports carry 3400-byte frames
# and the clients fill them (AGGSWITCH_MTU=3400), else 1500.
# Each run trains --steps steps; the step time is the median over the steps
# after the first five (warm-up), taken on rank 0. Prints one line per run,
# then the median per method over the repeats and its ratio to Gloo's
# (above 1: slower than Gloo).
#
#   scripts/build.sh && sudo bench/train_step.sh [--repeats 3] [--steps 40]
#                                                [--width 1024] [--layers 4]
#
# The model: --layers hidden layers of --width (1024 x 4: 3.3 M parameters,
# 13 MB of float32 gradients per step, in DDP's 25 MB buckets).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD="$ROOT/build"
REPEATS=3 STEPS=40 WIDTH=1024 LAYERS=4
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --width) WIDTH=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    --build-dir) BUILD=$(realpath "$2"); shift 2 ;;
    *) echo "usage: $0 [--repeats N] [--steps N] [--width N] [--layers N] [--build-dir DIR]" >&2; exit 2 ;;
  esac
done
# shellcheck source=tests/lib/topology.sh
source "$ROOT/tests/lib/topology.sh"
PY=/usr/bin/python3
TRAIN="$ROOT/examples/train_ddp.py"
WORK=$(mktemp -d /tmp/aggswitch-train.XXXXXX)
HTTP_PORT=19486
AGG_IP=10.0.41.253
MODEL=(--width "$WIDTH" --layers "$LAYERS" --bucket-mb 25 --steps "$STEPS")

topo_init tb
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT
choose_port_driver >&2
topo_workers 10.0.41 4
in_band_switch_yaml "agg-tb-$$" 02:a9:9c:00:00:41 10.0.41.254/24 "$HTTP_PORT" 4 "$AGG_IP" >"$WORK/switch.yaml"
MTU=1500
if [ "${AGG_PORT_DRIVER:-}" = net_af_xdp ]; then
  MTU=3400
  sed -i "s/access: 10}/access: 10, mtu: $MTU}/" "$WORK/switch.yaml"
  for w in 0 1 2 3; do
    ip link set "$TOPO_PREFIX-p$w" mtu "$MTU"
    topo_exec "w$w" ip link set eth0 mtu "$MTU"
  done
fi
run_switch "$BUILD/tools/aggswitch/aggswitch" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/switch.log" ||
  { echo "aggswitch did not come up" >&2; exit 1; }

METHODS=(gloo backend hook)
[ "${AGG_PORT_DRIVER:-}" = net_af_xdp ] && METHODS=(gloo backend backend_xdp hook)

PORT=29600
# run METHOD NAME: the four ranks; prints rank 0's median step time (ms).
run() {
  local method=$1 name=$2 w pids=() ok=1 args=() env=() ns
  PORT=$((PORT + 1))
  case "$method" in
    gloo) args=(--backend gloo) ;;
    backend) args=(--backend aggswitch) ;;
    backend_xdp) args=(--backend aggswitch); env=(AGGSWITCH_TRANSPORT=af_xdp AGGSWITCH_INTERFACE=eth0) ;;
    hook) args=(--backend gloo --hook) ;;
  esac
  for w in 0 1 2 3; do
    if [ "$method" = gloo ]; then
      ns=() init="tcp://127.0.0.1:$PORT"
    else
      ns=(ip netns exec "$(topo_ns "w$w")") init="tcp://10.0.41.1:$PORT"
    fi
    "${ns[@]}" timeout -k 5 600 env PYTHONPATH="$BUILD/python" AGGSWITCH_SWITCH="$AGG_IP" AGGSWITCH_MTU="$MTU" \
      GLOO_SOCKET_IFNAME="$([ "$method" = gloo ] && echo lo || echo eth0)" OMP_NUM_THREADS=1 "${env[@]}" \
      "$PY" "$TRAIN" --rank "$w" --world 4 --init "$init" --log "$WORK/$name.$w.jsonl" \
      "${args[@]}" "${MODEL[@]}" >"$WORK/$name.$w.out" 2>&1 &
    pids+=($!)
  done
  for w in 0 1 2 3; do wait "${pids[$w]}" || ok=0; done
  if [ "$ok" -ne 1 ]; then
    echo "$name failed:" >&2; tail -5 "$WORK/$name".*.out >&2; echo nan; return
  fi
  "$PY" -c 'import json, statistics, sys
steps = [json.loads(l)["seconds"] for l in open(sys.argv[1])][5:]
print("%.2f" % (statistics.median(steps) * 1e3))' "$WORK/$name.0.jsonl"
}

declare -A TIMES
for r in $(seq "$REPEATS"); do
  for m in "${METHODS[@]}"; do
    t=$(run "$m" "$m.$r")
    TIMES[$m]+="$t "
    printf 'repeat %d  %-12s %8s ms/step\n' "$r" "$m" "$t"
  done
done

echo
echo "training step, 4 ranks, ${WIDTH}x${LAYERS} MLP, median over $REPEATS repeats of $STEPS steps (aggswitch: mtu $MTU):"
gloo=$("$PY" -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' ${TIMES[gloo]})
for m in "${METHODS[@]}"; do
  "$PY" -c 'import math, statistics, sys
name, gloo = sys.argv[1], float(sys.argv[2])
t = statistics.median(float(x) for x in sys.argv[3:])
print("  %-12s %8.2f ms/step  %5.2f x Gloo" % (name, t, t / gloo))' "$m" "$gloo" ${TIMES[$m]}
done
stop_switch >/dev/null 2>&1 || true
