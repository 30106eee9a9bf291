#!/usr/bin/env bash
# Soak: one aggswitch under a mix of everything for a bounded time (10
# minutes by default), then checks that nothing leaked or went backwards.
# Not part of the default test run (ctest never calls it): run it by hand, as
# root, on a built tree.
#
#   sudo tests/soak/run.sh [--seconds 600] [--build-dir build] [--driver net_af_packet|net_af_xdp]
#   KEEP_WORK=1 keeps the work directory (/tmp/aggswitch-soak.*): every
#   sample of /metrics, each run's logs and summaries, the switch's log.
#
#   h0 10.0.47.1 ── sk-p0 ┐
#   h1 10.0.47.2 ── sk-p1 ├─ aggswitch (10.0.47.254; aggregation 10.0.47.253)
#   h2 10.0.47.3 ── sk-p2 │        │
#   h3 10.0.47.4 ── sk-p3 ┘        └─ m0: memif server ── agg-gen (memif client,
#                                                         plugged and unplugged)
# The mix, all at once until the time is up:
#   - L2 traffic: pings h0 -> h2 and h1 -> h3, 500 a second each, 1200 bytes;
#   - four jobs of allreduces, 4 ranks each (one per host), each rank with
#     agg-worker --verify, run after run: a config job (each run starting past
#     the previous run's sequence numbers), two in-band jobs (a new id per
#     run) and a job added through the API before each run and removed after
#     it (the removal checked);
#   - SIGHUP reloads every 20 s;
#   - a memif peer: agg-gen (an in-band job of 4 emulated workers, every
#     answer checked) plugged in on m0 and killed with SIGKILL after 2-4 s,
#     so the switch sees the peer vanish under load; every third run ends on
#     its own instead (after 2-6 s), and must pass. 4 s between runs.
# The switch's worker lcore has CPU 1 to itself; everything else runs on CPU 0.
# Every 5 s the switch's /metrics is kept. At the end (the traffic stopped
# and the switch idle for in_band.idle_timeout_ms plus the stale slot time)
# it checks, and prints the figures:
#   - resident memory, mbufs in use and ring entries flat: resident memory at
#     the end no more than after the first minute of traffic (WARM_SECONDS)
#     plus RSS_MARGIN_KB, mbufs in use at the end (idle) no more than at the
#     start plus MBUF_MARGIN, and no ring entry left;
#   - no counter (a *_total series) went backwards between two samples (a
#     job removed and registered again starts its per-job series anew);
#   - every allreduce of every run was exact (every agg-worker exited 0),
#     every API removal took effect, every agg-gen run left alone passed;
#   - the switch still forwards (a ping) and stops with exit 0.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/lib/topology.sh
source "$ROOT/tests/lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$ROOT/tests/lib/check.sh"

SECONDS_TOTAL=600
BUILD_DIR="$ROOT/build"
# The switch's ports on the veths: af_packet. With net_af_xdp the ports stop
# receiving within a minute of this load (their AF_XDP fill rings run dry and
# stay dry: aggswitch_port_device_xsk_fill_empty_total climbs while
# aggswitch_port_rx_packets_total stands still), on DPDK 22.11's PMD and the
# kernel here; --driver net_af_xdp shows it.
export AGG_PORT_DRIVER=net_af_packet
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_TOTAL="$2"; shift 2 ;;
    --driver) AGG_PORT_DRIVER="$2"; shift 2 ;;
    --build-dir) BUILD_DIR=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "run.sh: needs root (namespaces, DPDK)" >&2; exit 2; }
AGGSWITCH="$BUILD_DIR/tools/aggswitch/aggswitch"
AGG_WORKER="$BUILD_DIR/tools/agg-worker/agg-worker"
AGG_GEN="$BUILD_DIR/tools/agg-gen/agg-gen"
for b in "$AGGSWITCH" "$AGG_WORKER" "$AGG_GEN"; do
  [ -x "$b" ] || { echo "run.sh: $b is not built (scripts/build.sh)" >&2; exit 2; }
done

WORK=$(mktemp -d /tmp/aggswitch-soak.XXXXXX)
HTTP_PORT=19487
API="http://127.0.0.1:$HTTP_PORT"
PREFIX="agg-soak-$$"
SWITCH_MAC=02:a9:9c:00:00:47
AGG_IP=10.0.47.253
HOSTS=4
IDLE_TIMEOUT_MS=5000   # in-band jobs of finished runs leave the table after this
STALE_SLOT_MS=3000     # and slots of killed runs give way after this
WARM_SECONDS=60        # the reference sample for "flat": after this much traffic
RSS_MARGIN_KB=8192
MBUF_MARGIN=256
STOP="$WORK/stop"
# The switch's worker lcore runs on CPU 1, as it would on a core of its own;
# everything that makes traffic runs on CPU 0.
LOAD=(taskset -c 0)

topo_init sk
cleanup_all() { touch "$STOP"; topo_cleanup; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"; }
trap cleanup_all EXIT
trap 'cleanup_all; exit 130' INT
trap 'cleanup_all; exit 143' TERM

choose_port_driver
topo_workers 10.0.47 "$HOSTS"
for w in $(seq 0 $((HOSTS - 1))); do
  ip -n "$(topo_ns "w$w")" neigh replace "$AGG_IP" lladdr "$SWITCH_MAC" dev eth0 nud permanent
done

{
  switch_head_yaml "$PREFIX" "$SWITCH_MAC" 10.0.47.254/24 "$HTTP_PORT" "$HOSTS" |
    sed "s|^http: {listen: \(.*\)}|http: {listen: \1, token_file: $WORK/api.token}|" |
    sed "s|^workers:|  - {name: m0, devargs: \"net_memif0,role=server,socket=$WORK/m0.sock,socket-abstract=no\", access: 10}\nworkers:|" |
    sed "s|rx: \[\(.*\)\]}|rx: [\1, m0]}|"
  cat <<EOF
aggregation:
  address: $AGG_IP
  in_band_registration: true
  stale_slot_ms: $STALE_SLOT_MS
  # Each run of the config job is a new process per rank, from a new UDP
  # port: taken as the same member once the last run's address is silent
  # this long.
  member_rebind_ms: 1000
  in_band: {idle_timeout_ms: $IDLE_TIMEOUT_MS}
  state_file: $WORK/jobs.json
  jobs:
    - {id: 100, key: "0x5eed", members: $HOSTS}
EOF
} >"$WORK/switch.yaml"

SWITCH_LOG="$WORK/switch.log"
if ! run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$SWITCH_LOG"; then
  fail "aggswitch came up"; finish; exit 1
fi
TOKEN=$(cat "$WORK/api.token")
START=$(date +%s)
END=$((START + SECONDS_TOTAL - 20))  # the last 20 s: drain, idle, checks
running() { [ ! -e "$STOP" ] && [ "$(date +%s)" -lt "$END" ]; }

# --- Samples: /metrics every 5 s, numbered.
sampler() {
  local n=0
  while [ ! -e "$STOP" ]; do
    curl -fsS -m 2 "$API/metrics" >"$WORK/sample.$n.prom" 2>/dev/null &&
      echo "$n $(($(date +%s) - START))" >>"$WORK/samples" && n=$((n + 1))
    sleep 5
  done
}
sampler &
topo_track_pid $!

# --- L2: flood pings between host pairs, for the whole run.
for pair in "0 2" "1 3"; do
  read -r a b <<<"$pair"
  topo_exec "w$a" "${LOAD[@]}" ping -q -i 0.002 -s 1200 -w $((END - START)) "10.0.47.$((b + 1))" >"$WORK/ping.$a.log" 2>&1 &
  topo_track_pid $!
done

# ranks JOB TASK_INFO OUT [AGG-WORKER OPTIONS]: one run of JOB, a rank on each
# host, every result verified; passes when every rank exits 0. Its rank 0's
# JSON summary is OUT.0.json.
ranks() {
  local job="$1" task="$2" out="$3" r rc=0 pids=()
  shift 3
  for r in $(seq 0 $((HOSTS - 1))); do
    topo_exec "w$r" "${LOAD[@]}" timeout -k 5 120 "$AGG_WORKER" --rank "$r" --world "$HOSTS" --job "$job" \
      --key 0x5eed --switch "$AGG_IP" --task-info "$task" --verify --quiet --timeout-ms 10000 --window 64 \
      --json "$out.$r.json" "$@" >"$out.$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || { rc=1; tail -3 "$out.$r.log" | sed "s/^/[job $job rank $r] /"; }
  done
  return $rc
}

# job_loop NAME: runs of one of the four jobs until the time is up; each run
# appends "ok" or "FAIL" and its allreduces to NAME.runs.
job_loop() {
  local name="$1" n=0 job seq=0 rc
  while running; do
    n=$((n + 1))
    local out="$WORK/$name.$n"
    case "$name" in
      config)
        ranks 100 none "$out" --dtype float32 --op sum --size 512K --iterations 20 --first-seq "$seq"
        rc=$?
        # The next run starts past every sequence number this one used.
        seq=$((seq + $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["client"]["chunks"])' "$out.0.json" 2>/dev/null || echo 1000000)))
        ;;
      inband-a)
        ranks $((2000 + n)) inband "$out" --dtype int32 --op sum --size 512K --iterations 20
        rc=$? ;;
      inband-b)
        ranks $((3000 + n)) inband "$out" --dtype bfloat16 --op max --size 256K --iterations 30
        rc=$? ;;
      api)
        job=$((4000 + n))
        if ! curl -fsS -m 5 -X POST -H "Content-Type: application/json" -H "Authorization: Bearer $TOKEN" \
             --data "{\"id\": $job, \"key\": \"0x5eed\", \"members\": $HOSTS}" "$API/api/v1/jobs" >/dev/null; then
          echo "FAIL add $job" >>"$WORK/$name.runs"; sleep 1; continue
        fi
        ranks "$job" none "$out" --dtype float16 --op sum --size 512K --iterations 10 --float-mode ordered
        rc=$?
        curl -fsS -m 5 -X DELETE -H "Authorization: Bearer $TOKEN" "$API/api/v1/jobs/$job" >/dev/null &&
          [ "$(curl -s -o /dev/null -w '%{http_code}' "$API/api/v1/jobs/$job")" = 404 ] ||
          echo "FAIL remove $job" >>"$WORK/$name.runs"
        ;;
    esac
    local done_n
    done_n=$(python3 -c 'import glob, json, sys
print(min(json.load(open(f))["completed"] for f in glob.glob(sys.argv[1] + ".*.json")))' "$out" 2>/dev/null || echo 0)
    if [ "$rc" -eq 0 ]; then echo "ok $done_n" >>"$WORK/$name.runs"; else echo "FAIL $done_n run $n" >>"$WORK/$name.runs"; fi
  done
}
for loop in config inband-a inband-b api; do
  job_loop "$loop" >"$WORK/$loop.loop.log" 2>&1 &
  topo_track_pid $!
done

# --- SIGHUP every 20 s.
reloader() {
  while running; do
    sleep 20
    running && kill -HUP "$SWITCH_PID" && echo hup >>"$WORK/hups"
  done
}
reloader &
topo_track_pid $!

# --- The memif peer, plugged and unplugged.
memif_peer() {
  local n=0 pid rc
  while running; do
    n=$((n + 1))
    local ends_itself=$((n % 3 == 0))
    local seconds=$((2 + RANDOM % 5))
    "${LOAD[@]}" "$AGG_GEN" --workers 4 --jobs 1 --job-base $((5000 + n)) --key 0x5eed0000000000a1 --task-info \
      --switch-mac "$SWITCH_MAC" --switch-ip "$AGG_IP" --src-ip 10.0.47.100 --window 16 \
      --duration "$seconds" --give-up-ms 8000 --link-timeout 10 -- \
      --lcores '0@0,1@0' --no-huge -m 256 --no-pci --no-telemetry --file-prefix "$PREFIX-gen" \
      --vdev "net_memif0,role=client,socket=$WORK/m0.sock,socket-abstract=no" \
      >"$WORK/gen.$n.log" 2>&1 &
    pid=$!
    if [ "$ends_itself" -eq 1 ]; then
      wait "$pid"
      rc=$?
      echo "$([ "$rc" -eq 0 ] && echo ok || echo FAIL) ran $seconds s, exit $rc (gen.$n.log)" >>"$WORK/gen.runs"
    else
      sleep $((1 + seconds / 2))
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      echo "unplugged after $((1 + seconds / 2)) s" >>"$WORK/gen.runs"
    fi
    sleep 4  # agg-gen polls its CPU flat out: the others get it back between runs
  done
}
memif_peer &
topo_track_pid $!

# --- Until the time is up: a line every minute.
while running; do
  sleep 10
  elapsed=$(($(date +%s) - START))
  if [ $((elapsed % 60)) -lt 10 ]; then
    echo "soak: $elapsed s, runs: $(cat "$WORK"/*.runs 2>/dev/null | grep -c '^ok'), failures: $(cat "$WORK"/*.runs 2>/dev/null | grep -c FAIL)"
  fi
done
# The loops see the time is up and finish their current run.
for _ in $(seq 1 150); do
  pgrep -f "$AGG_WORKER" >/dev/null || pgrep -f "$AGG_GEN" >/dev/null || break
  sleep 1
done
sleep $(((IDLE_TIMEOUT_MS + STALE_SLOT_MS) / 1000 + 2))
# A frame out of every port: AF_XDP ports free what they sent when they send
# next, so that the mbufs in use are counted idle.
topo_exec w0 ping -q -b -c 2 -W 1 10.0.47.255 >/dev/null 2>&1
sleep 1
curl -fsS -m 2 "$API/metrics" >"$WORK/final.prom"
touch "$STOP"

# --- Checks.
# metric FILE NAME [LABEL-MATCH]: the sum of NAME's samples in FILE whose labels contain LABEL-MATCH.
metric() {
  awk -v n="$2" -v l="${3:-}" '$1 == n || index($1, n "{") == 1 { if (l == "" || index($1, l)) s += $2 } END { printf "%.0f\n", s }' "$1"
}
warm_sample() {
  awk -v w="$WARM_SECONDS" '$2 >= w { print $1; exit }' "$WORK/samples"
}
W=$(warm_sample)
[ -n "$W" ] || W=0
WARM="$WORK/sample.$W.prom"
FIRST="$WORK/sample.0.prom"
FINAL="$WORK/final.prom"
in_use() { echo $(($(metric "$1" aggswitch_pool_capacity_buffers 'pool="mbuf"') - $(metric "$1" aggswitch_pool_available_buffers 'pool="mbuf"'))); }

flat() {
  local rss0 rssw rssf peak mb0 mbw mbf mbpeak ring ringpeak rc=0 f
  rss0=$(($(metric "$FIRST" process_resident_memory_bytes) / 1024))
  rssw=$(($(metric "$WARM" process_resident_memory_bytes) / 1024))
  rssf=$(($(metric "$FINAL" process_resident_memory_bytes) / 1024))
  peak=0; mbpeak=0; ringpeak=0
  for f in "$WORK"/sample.*.prom; do
    local v
    v=$(($(metric "$f" process_resident_memory_bytes) / 1024)); [ "$v" -gt "$peak" ] && peak=$v
    v=$(in_use "$f"); [ "$v" -gt "$mbpeak" ] && mbpeak=$v
    v=$(metric "$f" aggswitch_lcore_ring_entries); [ "$v" -gt "$ringpeak" ] && ringpeak=$v
  done
  mb0=$(in_use "$FIRST"); mbw=$(in_use "$WARM"); mbf=$(in_use "$FINAL")
  ring=$(metric "$FINAL" aggswitch_lcore_ring_entries)
  report "RSS (KiB): $rss0 at start, $rssw after ${WARM_SECONDS} s, peak $peak, $rssf at the end"
  report "mbufs in use: $mb0 at start, $mbw after ${WARM_SECONDS} s, peak $mbpeak, $mbf at the end (idle)"
  report "ring entries: peak $ringpeak, $ring at the end"
  [ "$rssf" -le $((rssw + RSS_MARGIN_KB)) ] || { echo "RSS grew: $rssw -> $rssf KiB"; rc=1; }
  [ "$mbf" -le $((mb0 + MBUF_MARGIN)) ] || { echo "mbufs in use at the end $mbf, at the start $mb0"; rc=1; }
  [ "$ring" -eq 0 ] || { echo "$ring ring entries left"; rc=1; }
  return $rc
}
check "resident memory, mbufs in use and ring entries flat" flat

monotonic() {
  python3 - "$WORK" "$SWITCH_LOG" <<'EOF'
import glob, os, re, sys
work = sys.argv[1]
# A job removed (idle in-band jobs are) and registered again restarts its
# per-job counters: its series are a new job's.
removed, readded = set(), set()
for line in open(sys.argv[2]):
    m = re.search(r"job (\d+) .*removed", line)
    if m:
        removed.add(m.group(1))
    m = re.search(r"job (\d+) added", line)
    if m and m.group(1) in removed:
        readded.add(m.group(1))
order = [l.split()[0] for l in open(os.path.join(work, "samples"))]
files = [os.path.join(work, "sample.%s.prom" % n) for n in order] + [os.path.join(work, "final.prom")]
prev, backwards, series = {}, [], 0
for f in files:
    cur = {}
    for line in open(f):
        if line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        if re.match(r"^[a-z_]+_total(\{|$)", name):
            job = re.search(r'job="(\d+)"', name)
            if job and job.group(1) in readded:
                continue
            cur[name] = float(value)
    for k, v in cur.items():
        if k in prev and v < prev[k]:
            backwards.append("%s: %s -> %s (%s)" % (k, prev[k], v, os.path.basename(f)))
    prev.update(cur)
    series = max(series, len(cur))
print("%d samples of %d counter series; %d jobs registered again after removal" % (len(files), series, len(readded)))
for b in backwards[:20]:
    print(b)
sys.exit(1 if backwards else 0)
EOF
}
check "no counter went backwards" monotonic

runs_ok() {
  local loop total=0 allreduces=0 rc=0
  for loop in config inband-a inband-b api; do
    local ok fails
    ok=$(grep -c '^ok' "$WORK/$loop.runs" 2>/dev/null)
    fails=$(grep -c FAIL "$WORK/$loop.runs" 2>/dev/null)
    allreduces=$((allreduces + $(awk '/^ok/ { s += $2 } END { print s + 0 }' "$WORK/$loop.runs" 2>/dev/null)))
    total=$((total + ok))
    report "$loop: $ok runs exact, $fails failed"
    [ "$fails" -eq 0 ] && [ "$ok" -gt 0 ] || { grep FAIL "$WORK/$loop.runs"; cat "$WORK/$loop.loop.log"; rc=1; }
  done
  report "$total runs, $allreduces allreduces, every one verified exact on every rank"
  return $rc
}
check "every allreduce of every job exact (config, in-band, API jobs)" runs_ok

gen_ok() {
  local ok unplugged fails
  ok=$(grep -c '^ok' "$WORK/gen.runs"); unplugged=$(grep -c unplugged "$WORK/gen.runs")
  fails=$(grep -c FAIL "$WORK/gen.runs")
  report "memif peer: plugged $((ok + unplugged + fails)) times, unplugged with SIGKILL $unplugged times, $ok runs to the end all answered right"
  [ "$fails" -eq 0 ] && [ "$unplugged" -gt 0 ] || { grep FAIL "$WORK/gen.runs"; return 1; }
}
check "the memif peer plugged and unplugged; its runs left alone passed" gen_ok

others() {
  local hups applied a
  hups=$(wc -l <"$WORK/hups" 2>/dev/null || echo 0)
  applied=$(grep -c "reload applied" "$SWITCH_LOG")
  report "SIGHUP: $hups sent, $applied applied"
  for a in 0 1; do report "pings from h$a: $(grep -h 'packets transmitted' "$WORK/ping.$a.log")"; done
  [ "$hups" -gt 0 ] && [ "$applied" -eq "$hups" ] || return 1
  # Pings under this load may lose a few: at most 5% of each host's.
  for a in 0 1; do
    awk '/packets transmitted/ { exit !($1 > 0 && $4 >= 0.95 * $1) }' "$WORK/ping.$a.log" || return 1
  done

}
check "reloads applied, L2 pings carried" others
check "the switch still forwards (h0 pings h3)" topo_exec w0 ping -c 3 -W 2 10.0.47.4
check "aggswitch stops with exit 0" stop_switch
finish
