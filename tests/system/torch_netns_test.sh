#!/usr/bin/env bash
# System test: PyTorch through a running aggswitch. Four ranks, one per
# namespace, train examples/train_ddp.py (DDP, 20 steps) three times: on
# Gloo (the baseline), on the "aggswitch" process group, and on Gloo with
# aggswitch.torch.allreduce_hook. Rendezvous, Gloo's traffic and the switch's
# all cross the switch's L2 ports.
#   - After every step the parameters are bit-identical on all ranks (the
#     fixed-point sums are the same integers everywhere).
#   - The global mean loss of every step matches Gloo's within a relative
#     1e-4: fixed point keeps 30 - 2 bits of the largest gradient of each
#     bucket (2^-28, about 4e-9 of it, per rank), float32 keeps 24 bits of
#     each sum; the difference is rounding, far below what 20 SGD steps of a
#     small MLP amplify to 1e-4.
#   - The gradients went through the switch: the job counters moved.
#   - python/tests/torch_check.py on the process group: all_reduce of every
#     dtype and op the switch takes, exact; a strided view; async Works and
#     their futures; what Gloo does (float64, PRODUCT, broadcast, all_gather,
#     barrier); a group of two ranks is a job of its own.
#   - A rank killed mid-run makes the others raise within the timeout
#     (AGGSWITCH_TIMEOUT=3 s) instead of hanging.
#
#   w0 10.0.46.1 ── th-p0 ┐
#   w1 10.0.46.2 ── th-p1 ├─ aggswitch (10.0.46.254; aggregation address 10.0.46.253)
#   w2 10.0.46.3 ── th-p2 │
#   w3 10.0.46.4 ── th-p3 ┘
#
# Usage: torch_netns_test.sh AGGSWITCH PYTHON_PACKAGE_DIR
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
PY_PATH=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN="$HERE/../../examples/train_ddp.py"
COLLECTIVES="$HERE/../../python/tests/torch_check.py"
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-torch.XXXXXX)
HTTP_PORT=19496
METRICS="http://127.0.0.1:$HTTP_PORT/metrics"
PREFIX="agg-th-$$"
AGG_IP=10.0.46.253
PY=/usr/bin/python3
STEPS=20

topo_init th
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

topo_workers 10.0.46 4
in_band_switch_yaml "$PREFIX" 02:a9:9c:00:00:46 10.0.46.254/24 "$HTTP_PORT" 4 "$AGG_IP" >"$WORK/switch.yaml"

# start_ranks NAME PORT SCRIPT [ARGS...]: SCRIPT's four ranks, one per
# namespace, meeting at rank 0's PORT; "@RANK@" in an argument is the rank.
# RANK_PIDS: their pids; NAME.<rank>.out: their output. The words of
# RANK_ENV (VAR=VALUE) go to each rank's environment.
RANK_ENV=()
start_ranks() {
  local name="$1" port="$2" script="$3" w
  shift 3
  RANK_PIDS=()
  for w in 0 1 2 3; do
    ip netns exec "$(topo_ns "w$w")" timeout -k 5 240 env PYTHONPATH="$PY_PATH" \
      AGGSWITCH_SWITCH="$AGG_IP" GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 "${RANK_ENV[@]}" \
      "$PY" "$script" --rank "$w" --world 4 --init "tcp://10.0.46.1:$port" "${@//@RANK@/$w}" \
      >"$WORK/$name.$w.out" 2>&1 &
    RANK_PIDS+=($!)
    topo_track_pid $!
  done
}

# wait_ranks NAME: fails, with the output's tail, when any rank did.
wait_ranks() {
  local w rc=0
  for w in 0 1 2 3; do
    wait "${RANK_PIDS[$w]}" || { rc=1; echo "--- $1 rank $w:"; tail -20 "$WORK/$1.$w.out"; }
  done
  return $rc
}

# train NAME PORT [TRAIN_DDP OPTIONS]: the four ranks; NAME.<rank>.jsonl.
train() {
  start_ranks "$1" "$2" "$TRAIN" --log "$WORK/$1.@RANK@.jsonl" "${@:3}"
  wait_ranks "$1"
}

# compare NAME: NAME's ranks agree on the parameters after every step, and
# its mean losses are Gloo's within a relative 1e-4.
compare() {
  local line rc
  line=$(compare_runs "$1")
  rc=$?
  report "$line"
  return $rc
}
compare_runs() {
  "$PY" - "$WORK" "$1" "$STEPS" <<'EOF'
import json, sys
work, name, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(run):
    return [[json.loads(l) for l in open(f"{work}/{run}.{r}.jsonl")] for r in range(4)]
runs, gloo = load(name), load("gloo")
ok = all(len(r) == steps for r in runs)
worst = 0.0
for s in range(steps):
    digests = {r[s]["params"] for r in runs}
    if len(digests) != 1:
        print(f"step {s}: the ranks' parameters differ: {sorted(digests)}"); ok = False
    a, b = runs[0][s]["mean_loss"], gloo[0][s]["mean_loss"]
    rel = abs(a - b) / abs(b)
    worst = max(worst, rel)
    if rel > 1e-4:
        print(f"step {s}: mean loss {a!r} against Gloo's {b!r} (relative {rel:.2e})"); ok = False
print(f"{name}: {steps} steps, parameters bit-identical on all ranks after each; loss "
      f"{runs[0][0]['mean_loss']:.5f} -> {runs[0][-1]['mean_loss']:.5f}, at most {worst:.1e} from Gloo's")
sys.exit(0 if ok else 1)
EOF
}

# jobs_with_contributions: the jobs the switch counted contributions for,
# one id a line.
jobs_with_contributions() {
  curl -fsS -m 2 "$METRICS" |
    sed -n 's/^aggswitch_aggregation_job_contributions_total{job="\([0-9]*\)"} \([0-9]*\)$/\1 \2/p' |
    awk '$2 > 0 { print $1 }' | sort -u
}

job_contributions() {
  curl -fsS -m 2 "$METRICS" |
    awk '$1 ~ /^aggswitch_aggregation_job_contributions_total/ { s += $2 } END { print s + 0 }'
}

# moved BEFORE: the switch counted contributions since BEFORE.
moved() {
  local now
  now=$(job_contributions)
  report "contributions at the switch: $((now - $1))"
  [ "$now" -gt "$1" ]
}

check "import aggswitch.torch registers the \"aggswitch\" backend" \
  env PYTHONPATH="$PY_PATH" "$PY" -c \
  "import torch.distributed as d, aggswitch.torch; assert 'AGGSWITCH' in d.Backend._plugins"

# bad_env VAR [VAR=VALUE...]: with only these AGGSWITCH_ variables, the
# process group refuses to start with an InvalidArgumentError naming VAR.
bad_env() {
  local var="$1" out
  shift
  out=$(env -u AGGSWITCH_SWITCH PYTHONPATH="$PY_PATH" "$@" "$PY" -c '
import datetime, torch.distributed as d, aggswitch, aggswitch.torch
try:
    d.init_process_group("aggswitch", store=d.HashStore(), rank=0, world_size=1,
                         timeout=datetime.timedelta(seconds=5))
    print("accepted")
except aggswitch.InvalidArgumentError as e:
    print(e)' 2>&1)
  report "$out"
  [[ "$out" == "$var: "* ]]
}
check "no AGGSWITCH_SWITCH: refused, naming it" bad_env AGGSWITCH_SWITCH
check "AGGSWITCH_MTU=jumbo: refused, naming it" bad_env AGGSWITCH_MTU AGGSWITCH_SWITCH=10.0.46.253 AGGSWITCH_MTU=jumbo
check "AGGSWITCH_TRANSPORT=rdma: refused, naming it" \
  bad_env AGGSWITCH_TRANSPORT AGGSWITCH_SWITCH=10.0.46.253 AGGSWITCH_TRANSPORT=rdma

if run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/switch.log"; then
  check "Gloo: 4 ranks, $STEPS steps" train gloo 29501 --backend gloo --steps "$STEPS"

  backend() {
    local before
    before=$(job_contributions)
    train backend 29502 --backend aggswitch --steps "$STEPS" && compare backend && moved "$before"
  }
  check "the aggswitch process group: bit-identical parameters, Gloo's loss, through the switch" backend

  hook() {
    local before
    before=$(job_contributions)
    train hook 29503 --backend gloo --hook --steps "$STEPS" && compare hook && moved "$before"
  }
  check "Gloo with aggswitch.torch.allreduce_hook: bit-identical parameters, Gloo's loss, through the switch" hook

  collectives() {
    local rc=0 new
    jobs_with_contributions >"$WORK/jobs.before"
    start_ranks collectives 29506 "$COLLECTIVES"
    wait_ranks collectives || rc=1
    new=$(jobs_with_contributions | comm -13 "$WORK/jobs.before" - | wc -l)
    [ "$rc" -eq 0 ] && report "$(cat "$WORK/collectives.0.out")"
    report "new jobs with contributions at the switch: $new (the world's and the pair's)"
    [ "$new" -eq 2 ] || rc=1
    return $rc
  }
  check "the process group's collectives: every dtype and op exact, Gloo's part, a group of two its own job" \
    collectives

  # killed MODE...: rank 3 is killed after its third step; the other ranks
  # must fail (not hang) within the timeout plus the time to unwind.
  killed() {
    local name="killed$1" w rc=0 start elapsed
    RANK_ENV=(AGGSWITCH_TIMEOUT=3)
    start_ranks "$name" "$1" "$TRAIN" --timeout 20 --steps 100000 --log "$WORK/$name.@RANK@.jsonl" "${@:2}"
    RANK_ENV=()
    for _ in $(seq 600); do
      [ "$(wc -l <"$WORK/$name.3.jsonl" 2>/dev/null || echo 0)" -ge 3 ] && break
      sleep 0.1
    done
    pkill -KILL -f -- "--rank 3 --world 4 --init tcp://10.0.46.1:$1" || return 1
    start=$(date +%s)
    for w in 0 1 2; do
      if wait "${RANK_PIDS[$w]}"; then rc=1; echo "rank $w finished although rank 3 was killed"; fi
    done
    elapsed=$(($(date +%s) - start))
    # What each raised: the switch's error, or Gloo's when rank 3 died in
    # one of its calls (the loss's all_reduce, on the hook's run).
    report "ranks 0-2 raised ${elapsed} s after the kill: $(for w in 0 1 2; do grep -E "^[A-Za-z_.]*(Error|Exception)\b" "$WORK/$name.$w.out" | tail -1 | cut -c1-160; done | sort | uniq -c | tr '\n' ' ')"
    for w in 0 1 2; do grep -q '^Traceback' "$WORK/$name.$w.out" || rc=1; done
    [ "$elapsed" -le 30 ] || rc=1
    return $rc
  }
  check "the process group: rank 3 killed, the others raise within the timeout" killed 29504 --backend aggswitch
  check "the hook: rank 3 killed, the others raise within the timeout" killed 29505 --backend gloo --hook
  check "aggswitch stops with exit 0" stop_switch
else
  fail "aggswitch came up"
fi
finish
