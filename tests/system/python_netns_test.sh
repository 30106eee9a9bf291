#!/usr/bin/env bash
# System test: the Python package (python/aggswitch) through a running
# aggswitch. Four worker namespaces each run python/tests/client_check.py
# with Debian's /usr/bin/python3 and PYTHONPATH at the build's package: the
# bad options and arguments raise the documented errors, every dtype and op
# is exact against NumPy, in place on NumPy arrays, CPU torch tensors
# (bfloat16 too) and a memoryview, async allreduces waited out of order, the
# GIL released while waiting. The job registers itself in-band; its per-job
# counters at the switch must move.
#
#   w0 10.0.48.1 ── py-p0 ┐
#   w1 10.0.48.2 ── py-p1 ├─ aggswitch (10.0.48.254; aggregation address 10.0.48.253)
#   w2 10.0.48.3 ── py-p2 │
#   w3 10.0.48.4 ── py-p3 ┘
#
# Usage: python_netns_test.sh AGGSWITCH PYTHON_PACKAGE_DIR
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
PY_PATH=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK_SCRIPT="$HERE/../../python/tests/client_check.py"
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-py.XXXXXX)
HTTP_PORT=19497
METRICS="http://127.0.0.1:$HTTP_PORT/metrics"
PREFIX="agg-py-$$"
AGG_IP=10.0.48.253
JOB=48
PY=/usr/bin/python3

topo_init py
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

topo_workers 10.0.48 4
in_band_switch_yaml "$PREFIX" 02:a9:9c:00:00:48 10.0.48.254/24 "$HTTP_PORT" 4 "$AGG_IP" >"$WORK/switch.yaml"

check "import aggswitch with $PY (PYTHONPATH=$PY_PATH)" \
  env PYTHONPATH="$PY_PATH" "$PY" -c "import aggswitch; print(aggswitch.Client.__doc__)"

if run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/switch.log"; then
  ranks() {
    local w pids=() rc=0
    for w in 0 1 2 3; do
      ip netns exec "$(topo_ns "w$w")" timeout -k 5 120 env PYTHONPATH="$PY_PATH" "$PY" \
        "$CHECK_SCRIPT" --switch "$AGG_IP" --job "$JOB" --key 0x5eed --rank "$w" --world 4 \
        >"$WORK/rank$w.out" 2>&1 &
      pids+=($!)
      topo_track_pid $!
    done
    for w in 0 1 2 3; do
      wait "${pids[$w]}" || { rc=1; echo "--- rank $w:"; cat "$WORK/rank$w.out"; }
    done
    [ "$rc" -eq 0 ] && report "$(cat "$WORK/rank0.out")"
    return $rc
  }
  check "four ranks in Python: errors, every dtype and op exact against NumPy, buffers, async, the GIL" \
    ranks
  job_counters() {
    local contributions
    contributions=$(curl -fsS -m 2 "$METRICS" |
      awk -v m="aggswitch_aggregation_job_contributions_total{job=\"$JOB\"}" '$1 == m { s += $2 } END { print s + 0 }')
    report "job $JOB: $contributions contributions counted at the switch"
    [ "$contributions" -gt 0 ]
  }
  check "  ... through the switch: the job's contribution counter moved" job_counters
  check "aggswitch stops with exit 0" stop_switch
else
  fail "aggswitch came up"
fi
finish
