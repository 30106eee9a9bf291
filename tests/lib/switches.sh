# shellcheck shell=bash
# Several aggswitch processes, each in a namespace of its own (tests/lib/tree.sh
# says why), and the ranks of jobs through them, for the system tests of trees
# (tests/system/tree_netns_test.sh, multinode_netns_test.sh): start, wait,
# query, counters, the ranks' exits. Sourced after tests/lib/topology.sh, by
# a test that defines:
#
#   AGGSWITCH, HERE       the binary, and the test's directory
#   HTTP=([NAME]=PORT)    each switch's HTTP port (127.0.0.1 in its namespace)
#   SWITCH_PID=()         filled by start_switch
#   SWITCHES=(...)        the switches' names
#   COUNTERS=(...)        the aggregation counters snapshot/delta follow
#   WORK                  the test's directory: NAME.yaml, NAME.log, and the
#                         ranks' NAME.RANK.out files
#   RANK_PIDS, RANK_LIST  per run NAME: the ranks' pids and rank numbers
#
#   start_switch leafa; switch_up leafa
#   snapshot; ...; expect leafa partials_sent -eq 12
#   collect run1 || show ...

# sw_curl SWITCH PATH: GET from the switch's HTTP API (in its namespace).
sw_curl() { topo_exec "$1" curl -fsS -m 2 "http://127.0.0.1:${HTTP[$1]}$2"; }

# start_switch NAME: aggswitch with WORK/NAME.yaml in namespace P-NAME, its
# log in WORK/NAME.log. Not through topo_exec: $! must be aggswitch itself (ip
# netns exec execs it), not a subshell, for the cleanup to stop it.
start_switch() {
  ip netns exec "$(topo_ns "$1")" "$AGGSWITCH" --config "$WORK/$1.yaml" --log-level info \
    >"$WORK/$1.log" 2>&1 &
  SWITCH_PID[$1]=$!
  topo_track_pid $!
}
# switch_up NAME: the switch started last under NAME answers on its HTTP
# port, in its namespace (wait_switch).
switch_up() { topo_exec "$1" bash -c "source '$HERE/../lib/topology.sh'; wait_switch ${SWITCH_PID[$1]} http://127.0.0.1:${HTTP[$1]} 30"; }
# start_switches: every switch of SWITCHES, then waits for each; a FAIL
# with the log of the first that does not come up, and status 1.
start_switches() {
  local s
  for s in "${SWITCHES[@]}"; do start_switch "$s"; done
  for s in "${SWITCHES[@]}"; do
    switch_up "$s" && continue
    fail "aggswitch $s came up; its log:"; cat "$WORK/$s.log"
    return 1
  done
}

# metric SWITCH NAME: aggswitch_aggregation_NAME_total (or the gauge
# aggswitch_aggregation_NAME), summed over the lcores.
metric() {
  sw_curl "$1" /metrics | awk -v a="aggswitch_aggregation_$2_total" -v b="aggswitch_aggregation_$2" '
    { n = $1; sub(/\{.*/, "", n) } n == a || n == b { s += $2 } END { print s + 0 }'
}
# job_metric SWITCH NAME JOB: aggswitch_aggregation_job_NAME_total{job="JOB"}.
job_metric() {
  sw_curl "$1" /metrics |
    awk -v m="aggswitch_aggregation_job_$2_total{job=\"$3\"}" '$1 == m { s += $2 } END { print s + 0 }'
}

declare -A SNAP=()
# snapshot: every counter of COUNTERS at every switch, for delta.
snapshot() {
  local s c
  for s in "${SWITCHES[@]}"; do
    sw_curl "$s" /metrics >"$WORK/metrics.$s"
    for c in "${COUNTERS[@]}"; do
      SNAP[$s.$c]=$(awk -v a="aggswitch_aggregation_${c}_total" '
        { n = $1; sub(/\{.*/, "", n) } n == a { s += $2 } END { print s + 0 }' "$WORK/metrics.$s")
    done
  done
}
# delta SWITCH NAME: how much the counter grew since the last snapshot.
delta() { echo $(($(metric "$1" "$2") - ${SNAP[$1.$2]:-0})); }
# moved SWITCH: the counters of COUNTERS that moved at SWITCH since the
# snapshot, " name=delta" each ("" when none).
moved() {
  local c d line=""
  for c in "${COUNTERS[@]}"; do
    d=$(delta "$1" "$c")
    [ "$d" -ne 0 ] && line+=" $c=$d"
  done
  echo "$line"
}
# expect SWITCH NAME OP VALUE: the counter's delta compares to VALUE (-gt, -eq, ...).
expect() {
  local d
  d=$(delta "$1" "$2")
  if test "$d" "$3" "$4"; then
    echo "ok:  $1 $2 +$d ($3 $4)"
  else
    echo "NOT: $1 $2 +$d, expected $3 $4"; return 1
  fi
}
# expect_value WHAT VALUE OP WANT: one line, and whether VALUE OP WANT.
expect_value() {
  if test "$2" "$3" "$4"; then
    echo "ok:  $1 = $2 ($3 $4)"
  else
    echo "NOT: $1 = $2, expected $3 $4"; return 1
  fi
}

# collect NAME: waits for NAME's ranks; passes when every one exited 0. Shows
# a failed rank's output.
collect() {
  local name="$1" code rc=0 pids ranks i
  read -r -a pids <<<"${RANK_PIDS[$name]}"
  read -r -a ranks <<<"${RANK_LIST[$name]}"
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    code=$?
    if [ "$code" -ne 0 ]; then
      rc=1
      sed "s/^/[$name rank ${ranks[$i]}, exit $code] /" "$WORK/$name.${ranks[$i]}.out" | tail -6
    fi
  done
  return $rc
}
