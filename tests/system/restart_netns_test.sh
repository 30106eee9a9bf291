#!/usr/bin/env bash
# System test: the switch killed with SIGKILL in the middle of three running
# allreduce jobs, and started again on the same config. Every rank of every
# job must finish every allreduce, each result checked bit for bit
# (agg-worker --verify), with no allreduce failing its --timeout-ms.
#
#   w0 10.0.46.1 ── rs-p0 ┐
#   w1 10.0.46.2 ── rs-p1 ├─ aggswitch (10.0.46.254; aggregation 10.0.46.253, UDP 47046)
#   w2 10.0.46.3 ── rs-p2 │
#   w3 10.0.46.4 ── rs-p3 ┘
#
# The three jobs come back to the new process three ways:
#   - job 601 is declared in the config (aggregation.jobs);
#   - job 602 registers itself in-band, from the task info in each chunk;
#   - job 603 was added through the API before the first start, and the
#     switch adds it again from aggregation.state_file.
# Job 604, added through the API too, runs nothing: the TAN the API gave it
# must be its TAN after every restart.
# The ranks keep what the dead switch had not answered and retransmit it; a
# chunk whose result reached only some ranks before the kill is resent by the
# ranks that had it when the new switch says it lacks their data.
#
# The switch is killed KILLS times, each once every job has moved on since
# the restart before.
#
# Usage: restart_netns_test.sh AGGSWITCH AGG_WORKER
# Needs root (namespaces). Everything is torn down on exit, pass or fail;
# KEEP_WORK=1 keeps the logs and summaries (the work directory is printed
# by nothing: /tmp/aggswitch-rs.*).
set -u
AGGSWITCH=$(realpath "$1")
AGG_WORKER=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/topology.sh
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"
CHECK_TAIL_LINES=60

WORK=$(mktemp -d /tmp/aggswitch-rs.XXXXXX)
HTTP_PORT=19483
API="http://127.0.0.1:$HTTP_PORT"
METRICS="$API/metrics"
PREFIX="agg-rs-$$"
SWITCH_MAC=02:a9:9c:00:00:46
AGG_IP=10.0.46.253
AGG_PORT=47046
HOSTS=4
KILLS=${KILLS:-3}
# Allreduces of 2 MiB per rank and job: each kill and restart takes a few of
# them, and the runs go on well past the last.
ITERATIONS=80
# Each allreduce fails when no result arrives for this long: the switch must
# be back, and the jobs moving again, well within it.
TIMEOUT_MS=10000
SWITCH_PID=""
SWITCH_LOG=/dev/null
JOBS=(601 602 603)
declare -A TASK_INFO=([601]=none [602]=inband [603]=none)
declare -A HOW=([601]="config" [602]="in-band" [603]="API")
declare -A DTYPE=([601]="--dtype float32 --op sum" [602]="--dtype int32 --op sum"
                  [603]="--dtype bfloat16 --op sum")

topo_init rs
cleanup_all() { topo_cleanup; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"; }
trap cleanup_all EXIT

choose_port_driver
for w in $(seq 0 $((HOSTS - 1))); do
  topo_host "w$w" "rs-p$w"
  topo_addr "w$w" eth0 "10.0.46.$((w + 1))/24"
done

{
  # The API takes changes with a token only.
  switch_head_yaml "$PREFIX" "$SWITCH_MAC" 10.0.46.254/24 "$HTTP_PORT" "$HOSTS" |
    sed "s|^http: {listen: \(.*\)}|http: {listen: \1, token_file: $WORK/api.token}|"
  cat <<EOF
aggregation:
  address: $AGG_IP
  udp_port: $AGG_PORT
  in_band_registration: true
  state_file: $WORK/jobs.json
  jobs:
    - {id: 601, key: "0x5eed", members: $HOSTS}
EOF
} >"$WORK/switch.yaml"

# start_switch NAME: aggswitch on the test's config, its log NAME.log.
start_switch() {
  SWITCH_LOG="$WORK/$1.log"
  run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$SWITCH_LOG"
}

# completions JOB: chunks of JOB the running switch completed.
completions() {
  curl -fsS -m 2 "$METRICS" |
    awk -v m="aggswitch_aggregation_job_completions_total{job=\"$1\"}" '$1 == m { n += $2 } END { print n + 0 }'
}

# job_known JOB: the running switch has JOB (GET /api/v1/jobs/JOB answers 200).
job_known() { curl -fsS -m 2 -o /dev/null "$API/api/v1/jobs/$1"; }

# The ranks: each job has a rank on every host; long enough runs that every
# kill lands in the middle of all three.
declare -A RANK_PIDS=()
launch() {
  local job="$1" r pids=()
  for r in $(seq 0 $((HOSTS - 1))); do
    # shellcheck disable=SC2086 # DTYPE holds options
    topo_exec "w$r" timeout -k 5 300 "$AGG_WORKER" --rank "$r" --world "$HOSTS" --job "$job" \
      --key 0x5eed --switch "$AGG_IP:$AGG_PORT" --task-info "${TASK_INFO[$job]}" \
      ${DTYPE[$job]} --size 2M --iterations "$ITERATIONS" --timeout-ms "$TIMEOUT_MS" --verify --quiet \
      --json "$WORK/$job.$r.json" >"$WORK/$job.$r.out" 2>&1 &
    pids+=($!)
    topo_track_pid $!
  done
  RANK_PIDS[$job]="${pids[*]}"
}

# wait_moving MIN: until every job has MIN completions at the running switch
# (at most 30 s).
wait_moving() {
  local job n
  for _ in $(seq 1 300); do
    for job in "${JOBS[@]}"; do
      n=$(completions "$job")
      [ "$n" -ge "$1" ] || continue 2
    done
    return 0
  done
  for job in "${JOBS[@]}"; do echo "job $job: $(completions "$job") chunks completed"; done
  return 1
}

# --- Before: the API job, kept in the state file.
if ! start_switch first; then
  fail "aggswitch came up"; finish; exit 1
fi
# api_post PATH BODY: POST to the API with the token.
api_post() {
  curl -fsS -m 5 -X POST -H "Content-Type: application/json" \
    -H "Authorization: Bearer $(cat "$WORK/api.token")" --data "$2" "$API$1" >/dev/null
}
add_api_jobs() {
  api_post /api/v1/jobs '{"id": 603, "key": "0x5eed", "members": '"$HOSTS"'}' &&
    api_post /api/v1/jobs '{"id": 604, "key": "0x604", "members": 2}' &&
    api_post /api/v1/jobs/604/tan '{"candidates": [{"address": "10.0.46.50", "port": 47100}]}' &&
    python3 -c 'import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
print("state file:", [j["id"] for j in jobs], "job 604 tan:", jobs[-1].get("tan"))
sys.exit(0 if [j["id"] for j in jobs] == [603, 604] and
         jobs[1]["tan"]["candidates"][0]["address"] == "10.0.46.50" else 1)' "$WORK/jobs.json"
}
check "jobs 603 and 604 added through the API, 604 given a TAN, kept in aggregation.state_file" \
  add_api_jobs

# tan_kept: job 604's TAN at the running switch is the one the API chose.
tan_kept() {
  curl -fsS -m 2 "$API/api/v1/jobs/604/tan" | python3 -c 'import json, sys
t = json.load(sys.stdin)
ok = (t["mode"], t["address"], t["port"], t["chosen_by"]) == ("remote", "10.0.46.50", 47100, "api")
sys.exit(0 if ok else "job 604 tan: %s" % t)'
}

for job in "${JOBS[@]}"; do launch "$job"; done
check "the three jobs run through the switch (config, in-band and API job)" wait_moving 2000

# kill_and_restart N: SIGKILL to the switch while the three jobs run, then
# the same config again; the new process must have every job back and
# complete chunks of each.
kill_and_restart() {
  local n="$1" job before
  before=$(for job in "${JOBS[@]}"; do echo -n "$job: $(completions "$job") "; done)
  kill -KILL "$SWITCH_PID" || return 1
  wait "$SWITCH_PID" 2>/dev/null
  local killed_at
  killed_at=$(date +%s%N)
  report "killed with $before chunks completed"
  start_switch "restart$n" || return 1
  report "back after $((($(date +%s%N) - killed_at) / 1000000)) ms"
  job_known 601 || { echo "job 601 (config) is not back"; return 1; }
  job_known 603 || { echo "job 603 (API, state file) is not back"; return 1; }
  tan_kept || { echo "job 604 is not back with the TAN the API gave it"; return 1; }
  wait_moving 500 || return 1
  job_known 602 || { echo "job 602 (in-band) did not register again"; return 1; }
  report "$(for job in "${JOBS[@]}"; do echo -n "$job: $(completions "$job") "; done)chunks completed since;" \
    "$(agg_total "$METRICS" resync_notices) chunks asked again of members that had their result"
}
for n in $(seq 1 "$KILLS"); do
  check "kill $n: SIGKILL mid-allreduce, restarted on the same config, every job moves again (604 with its TAN)" \
    kill_and_restart "$n"
done

# switch_view JOB: what the running switch has of JOB, for a failure: each
# member's watermark, the job's placement and counters, the slots it holds
# that have no result yet, and the aggregation counters that are not 0.
switch_view() {
  curl -fsS -m 5 "$API/api/v1/jobs/$1" | python3 -c 'import json, sys
j = json.load(sys.stdin)
print("switch: job %d placement %s counters %s" % (j["id"], j["placement"], j["counters"]))
for m in j["learned_members"]:
    print("switch:   member %d at %s:%d (%s, port %s) watermark %s" % (
          m["node"], m["ip"], m["udp_port"], m["mac"], m["port"], m["ack_watermark"]))' || true
  curl -fsS -m 5 "$API/api/v1/slots?limit=100000&job=$1" | python3 -c 'import json, sys
slots = [s for s in json.load(sys.stdin)["slots"] if s["state"] != "complete"]
print("switch: %d slots of the job without a result" % len(slots))
for s in sorted(slots, key=lambda s: s["seq"])[:12]:
    print("  ", s)' || true
  curl -fsS -m 5 "$METRICS" |
    awk '/^aggswitch_aggregation_[a-z_]*_total/ && $NF != 0 { sub(/\{.*/, "", $1); n[$1] += $NF }
         /^aggswitch_port_dropped_packets_total/ && $NF != 0 {
           match($1, /reason="[a-z_]*"/); n["dropped " substr($1, RSTART, RLENGTH)] += $NF }
         /^aggswitch_port_(device_[a-z_]*|rx_packets|tx_packets)_total/ && $NF != 0 { print "switch: " $0 }
         /^aggswitch_pool_available_buffers/ { print "switch: " $0 }
         END { for (k in n) printf "switch: %s %d\n", k, n[k] }' | sort | head -100
}

# collect JOB: every rank exited 0, every allreduce verified.
collect() {
  local job="$1" r code rc=0 pids
  read -r -a pids <<<"${RANK_PIDS[$job]}"
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}"
    code=$?
    if [ "$code" -ne 0 ]; then
      rc=1
      sed "s/^/[job $job rank $r, exit $code] /" "$WORK/$job.$r.out" | tail -20
    fi
  done
  if [ "$rc" -ne 0 ]; then
    switch_view "$job"
    return 1
  fi
  local summary
  summary=$(python3 -c 'import json, sys
d = [json.load(open(f)) for f in sys.argv[1:]]
c = lambda k: sum(x["client"][k] for x in d)
print("%d/%d allreduces on every rank, verified; retransmissions %d, answered chunks resent %d" % (
    min(x["completed"] for x in d), d[0]["iterations"], c("retransmissions"), c("answered_resends")))
sys.exit(0 if all(x["completed"] == x["iterations"] for x in d) else 1)' "$WORK/$job".*.json)
  code=$?
  report "$summary"
  return $code
}
for job in "${JOBS[@]}"; do
  check "job $job (${HOW[$job]}): every rank completed every allreduce, exact" collect "$job"
done
check "aggswitch stops with exit 0" stop_switch
finish
