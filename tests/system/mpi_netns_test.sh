#!/usr/bin/env bash
# System test: libaggswitch_mpi.so (client/mpi/, docs/mpi.md) under real
# mpirun, with programs written for plain MPI, through a running aggswitch.
# Four ranks share one namespace (several ranks may share a host address);
# each program runs without the library and with it preloaded
# (LD_PRELOAD, AGGSWITCH_SWITCH), and the answers must be equal:
#   - client/mpi/tests/allreduce_check.c: MPI_Allreduce of every supported
#     (datatype, op) pair, in place and not, MPI_Iallreduce with MPI_Wait,
#     MPI_Test and MPI_Waitall, MPI_COMM_WORLD split into two halves, and
#     MPI_PROD and MPI_DOUBLE (MPI's own);
#   - client/mpi/tests/allreduce_check.py (mpi4py and NumPy).
# Through the switch: its per-job contribution counters moved, for three
# jobs (the world's and one per half) from the C program, one from its
# nonblocking cases alone, none from a run of MPI_PROD only. An address nobody answers: the same answers, with at
# most one warning line per process; with AGGSWITCH_FALLBACK=0 the program
# fails, within a bounded time. A bad variable: an error line that names
# it, and the plain answers.
#
#   w0 10.0.49.1 (4 ranks) ── mpi-p0 ── aggswitch (10.0.49.254; aggregation address 10.0.49.253)
#
# Usage: mpi_netns_test.sh AGGSWITCH LIBAGGSWITCH_MPI ALLREDUCE_CHECK
# Needs root (namespaces), mpirun (openmpi-bin), and for the Python part
# Debian's python3-mpi4py and python3-numpy. Torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
SHIM=$(realpath "$2")
CHECK_C=$(realpath "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK_PY="$HERE/../../client/mpi/tests/allreduce_check.py"
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-mpi.XXXXXX)
HTTP_PORT=19499
METRICS="http://127.0.0.1:$HTTP_PORT/metrics"
PREFIX="agg-mpi-$$"
AGG_IP=10.0.49.253
NOBODY=10.0.49.77  # on the subnet, answered by no one
PY=/usr/bin/python3
RUN_TIMEOUT=120

topo_init mpi
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

topo_workers 10.0.49 1
in_band_switch_yaml "$PREFIX" 02:a9:9c:00:00:49 10.0.49.254/24 "$HTTP_PORT" 1 "$AGG_IP" >"$WORK/switch.yaml"

# mpi_run NAME [VAR=VALUE...] -- PROGRAM [ARGS...]: four ranks of PROGRAM in
# the namespace, shared memory between them (vader; no single-copy
# mechanism, which a container may forbid), each VAR exported to every
# rank. Each rank's stdout and stderr are in $WORK/NAME/1/rank.R/, mpirun's
# own (all ranks' too) in $WORK/NAME.mpirun. Returns mpirun's exit status
# (124: the time ran out).
mpi_run() {
  local name="$1" exports=() env=()
  shift
  while [ "$1" != "--" ]; do
    env+=("$1")
    exports+=(-x "${1%%=*}")
    shift
  done
  shift
  ip netns exec "$(topo_ns w0)" timeout -k 5 "$RUN_TIMEOUT" env "${env[@]}" \
    mpirun --allow-run-as-root --oversubscribe -np 4 --output-filename "$WORK/$name" \
    --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    "${exports[@]}" "$@" >"$WORK/$name.mpirun" 2>&1 </dev/null
}

# What the programs print: rank 0's stdout.
answers() { cat "$WORK/$1/1/rank.0/stdout"; }
# Every rank's stderr, each line after "rank R: ".
errors() {
  local f
  for f in "$WORK/$1"/1/rank.*/stderr; do
    sed "s|^|$(basename "$(dirname "$f")"): |" "$f"
  done
}

# same_answers PLAIN SHIM: both runs gave the same lines, every rank of
# every case agreed, and the library printed nothing.
same_answers() {
  if ! diff <(answers "$1") <(answers "$2"); then
    echo "the answers differ (< plain MPI, > with the library)"
    return 1
  fi
  if answers "$2" | grep -q "ranks agree: NO"; then
    echo "ranks disagree:"; answers "$2" | grep "ranks agree: NO"
    return 1
  fi
  if errors "$2" | grep -q "aggswitch-mpi"; then
    echo "the library complained:"; errors "$2"
    return 1
  fi
  report "$(answers "$2" | grep -c 'ranks agree: yes') cases, each equal to plain MPI's"
}

# run_ok NAME ...: mpi_run, failing with its output when it fails.
run_ok() {
  local name="$1"
  if ! mpi_run "$@"; then
    echo "mpirun failed ($name):"; tail -n 20 "$WORK/$name.mpirun"
    return 1
  fi
}

# "JOB CONTRIBUTIONS" per job with contributions, from the switch's metrics.
job_contributions() {
  curl -fsS -m 2 "$METRICS" | awk '
    index($1, "aggswitch_aggregation_job_contributions_total{") == 1 {
      if (match($1, /job="[0-9]+"/)) { j = substr($1, RSTART + 5, RLENGTH - 6); s[j] += $2 }
    }
    END { for (j in s) if (s[j] > 0) print j, s[j] }' | sort -n
}
snapshot() { job_contributions >"$WORK/$1.jobs"; }
# new_jobs BEFORE AFTER: the jobs whose contributions grew between the snapshots.
new_jobs() {
  awk 'FILENAME == ARGV[1] { before[$1] = $2; next }
       !($1 in before) || $2 > before[$1] { print $1 }' \
    "$WORK/$1.jobs" "$WORK/$2.jobs"
}

PRELOAD=(LD_PRELOAD="$SHIM" AGGSWITCH_SWITCH="$AGG_IP")

check "the C program under plain MPI" run_ok c_plain -- "$CHECK_C"
have_py=0
if "$PY" -c "import mpi4py, numpy" 2>/dev/null; then
  have_py=1
  check "the mpi4py program under plain MPI" run_ok py_plain -- "$PY" "$CHECK_PY"
else
  fail "mpi4py and NumPy for $PY (apt-get install python3-mpi4py python3-numpy)"
fi

if run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/switch.log"; then
  SWITCH_LOG="$WORK/switch.log"

  snapshot c0
  c_shim() { run_ok c_shim "${PRELOAD[@]}" -- "$CHECK_C" && same_answers c_plain c_shim; }
  check "the C program with the library: every case equal to plain MPI's" c_shim
  snapshot c1
  c_jobs() {
    local jobs
    jobs=$(new_jobs c0 c1 | wc -l)
    report "$jobs jobs with contributions: $(new_jobs c0 c1 | paste -sd' ')"
    [ "$jobs" -ge 3 ]
  }
  check "  ... through the switch: the world's job and one per half (3 jobs) counted contributions" c_jobs

  snapshot i0
  run_nonblocking() { run_ok nb_plain -- "$CHECK_C" --nonblocking &&
    run_ok nb_shim "${PRELOAD[@]}" -- "$CHECK_C" --nonblocking && same_answers nb_plain nb_shim; }
  check "MPI_Iallreduce alone (Wait, Test, Waitall) with the library: the plain answers" run_nonblocking
  snapshot i1
  nb_jobs() {
    report "jobs with contributions: $(new_jobs i0 i1 | paste -sd' ')"
    [ "$(new_jobs i0 i1 | wc -l)" -eq 1 ]
  }
  check "  ... through the switch: the world's job counted contributions" nb_jobs

  snapshot p0
  run_prod() { run_ok prod_plain -- "$CHECK_C" --prod && run_ok prod_shim "${PRELOAD[@]}" -- "$CHECK_C" --prod &&
    same_answers prod_plain prod_shim; }
  check "MPI_PROD with the library: the plain answers" run_prod
  snapshot p1
  prod_quiet() {
    if ! cmp -s "$WORK/p0.jobs" "$WORK/p1.jobs"; then
      echo "counters moved during the MPI_PROD run:"; diff "$WORK/p0.jobs" "$WORK/p1.jobs"
      return 1
    fi
  }
  check "  ... MPI's own: no job counter moved" prod_quiet

  if [ "$have_py" -eq 1 ]; then
    snapshot y0
    py_shim() { run_ok py_shim "${PRELOAD[@]}" -- "$PY" "$CHECK_PY" && same_answers py_plain py_shim; }
    check "the mpi4py program with the library: every case equal to plain MPI's" py_shim
    snapshot y1
    py_jobs() {
      report "jobs with contributions: $(new_jobs y0 y1 | paste -sd' ')"
      [ "$(new_jobs y0 y1 | wc -l)" -ge 1 ]
    }
    check "  ... through the switch: a job counted contributions" py_jobs
  fi

  # Nobody answers: the plain answers, and at most one warning per process.
  fallback() {
    run_ok c_nobody LD_PRELOAD="$SHIM" AGGSWITCH_SWITCH="$NOBODY" AGGSWITCH_PROBE_TIMEOUT=1 \
      -- "$CHECK_C" || return 1
    diff <(answers c_plain) <(answers c_nobody) || { echo "the answers differ"; return 1; }
    local warnings per_rank
    warnings=$(errors c_nobody | grep -c "aggswitch-mpi: warning")
    per_rank=$(errors c_nobody | grep "aggswitch-mpi: warning" | cut -d: -f1 | sort | uniq -c |
      awk '$1 > m { m = $1 } END { print m + 0 }')
    report "$warnings warning lines, at most $per_rank from one process; the first:"
    report "$(errors c_nobody | grep -m1 "aggswitch-mpi: warning")"
    if errors c_nobody | grep -v "aggswitch-mpi: warning" | grep -q .; then
      echo "other output on stderr:"; errors c_nobody; return 1
    fi
    [ "$warnings" -ge 1 ] && [ "$per_rank" -le 1 ]
  }
  check "an unreachable switch: the plain answers, one warning line per process at most" fallback

  # Every run must fail, and none hang. The error line rank 0 writes can be
  # lost when another rank's MPI_Abort (the program's answer to the error)
  # makes Open MPI kill the processes before it forwards their output (its
  # abort message says so: "You may or may not see output from other
  # processes"): it must show in one of three runs.
  fail_mode() {
    local attempt start rc
    for attempt in 1 2 3; do
      start=$SECONDS
      rc=0
      mpi_run "c_fail$attempt" LD_PRELOAD="$SHIM" AGGSWITCH_SWITCH="$NOBODY" \
        AGGSWITCH_PROBE_TIMEOUT=1 AGGSWITCH_FALLBACK=0 -- "$CHECK_C" || rc=$?
      report "exit status $rc after $((SECONDS - start)) s; $(errors "c_fail$attempt" | grep -m1 "aggswitch-mpi: error")"
      [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || return 1
      errors "c_fail$attempt" | grep -q "aggswitch-mpi: error" && return 0
    done
    echo "no error line in three runs"
    return 1
  }
  check "  ... with AGGSWITCH_FALLBACK=0 the program fails, and does not hang" fail_mode

  # A bad variable: one line naming it and what it expects, then the rule.
  bad_variable() {
    run_ok c_bad "${PRELOAD[@]}" AGGSWITCH_TIMEOUT=soon -- "$CHECK_C" || return 1
    diff <(answers c_plain) <(answers c_bad) || { echo "the answers differ"; return 1; }
    report "$(errors c_bad | grep -m1 "aggswitch-mpi")"
    errors c_bad | grep -q 'aggswitch-mpi: error: AGGSWITCH_TIMEOUT: expected seconds.*got "soon"'
  }
  check "AGGSWITCH_TIMEOUT=soon: an error line naming it, and the plain answers" bad_variable

  check "aggswitch stops with exit 0" stop_switch
else
  fail "aggswitch came up"
fi
finish
