#!/usr/bin/env bash
# System test: agg-intcollector as a process. Telemetry Reports from
# tests/system/int_reports.py (the report's bytes written independently of
# the C++ builder) over real UDP; the record file read with the sqlite3
# command, as an operator would; paths and decisions over HTTP; /metrics
# checked by promtool.
#
# Usage: intcollector_test.sh AGG_INTCOLLECTOR AGGCTL
set -u
COLLECTOR=$(realpath "$1")
AGGCTL=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-intc.XXXXXX)
UDP=127.0.0.1:19530
HTTP=127.0.0.1:19531
DB="$WORK/int.db"
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

send() { python3 "$HERE/int_reports.py" --to "$UDP" "$@"; }
api() { curl -fsS -m 2 "http://$HTTP$1"; }
# stat KEY: a number of /api/v1/stats.
stat() { api /api/v1/stats | python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
rows() { sqlite3 "$DB" "$1"; }
# until_at_least N CMD...: waits up to 5 s for CMD's output to reach N.
until_at_least() {
  local n="$1" i
  shift
  for i in $(seq 50); do
    [ "$("$@")" -ge "$n" ] 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$* is $("$@"), expected $n"
  return 1
}
# until_stat KEY N: waits for the collector's counter KEY to reach N.
until_stat() { until_at_least "$2" stat "$1"; }
# until_rows SQL N: waits for the count SQL to reach N (the collector commits
# its rows in batches, after it counted them).
until_rows() { until_at_least "$2" rows "$1"; }
# decision SRC DST RULE: the nodes of the flow's decided path, comma-separated.
decision() {
  api /api/v1/decisions | python3 -c 'import json, sys
src, dst, rule = sys.argv[1:4]
for f in json.load(sys.stdin)["flows"]:
    if f["src"] == src and f["dst"] == dst:
        d = f["decisions"][rule]
        print("none" if d is None else ",".join(str(h["node"]) for h in d["route"]))' "$@"
}

bad_listen() {
  local out rc
  out=$("$COLLECTOR" --listen 127.0.0.1 --db "$WORK/x.db" 2>&1)
  rc=$?
  echo "$out"
  [ "$rc" -eq 2 ] && grep -q -- '--listen: expected ADDR:PORT' <<<"$out"
}
check "a bad --listen is refused with exit code 2 and names the option" bad_listen

# The switches of these reports, every one sending from this host.
REPORTERS=()
for n in 1 2 3 4 7 8 9; do REPORTERS+=(--reporter "$n=127.0.0.1"); done
"$COLLECTOR" --listen "$UDP" --http "$HTTP" --db "$DB" --interval-ms 100 --window 60 \
  "${REPORTERS[@]}" >"$WORK/collector.log" 2>&1 &
PID=$!
up() {
  local i
  for i in $(seq 50); do api /api/v1/stats >/dev/null 2>&1 && return 0; sleep 0.1; done
  cat "$WORK/collector.log"
  return 1
}
if ! check "agg-intcollector comes up" up; then finish; exit 1; fi

two_paths() {
  send path --nodes 1,2,4 --hop-ns 13333 --util-ppm 800000 --count 5 --first-seq 0 &&
    send path --nodes 1,3,4 --hop-ns 8333 --util-ppm 200000 --count 5 --first-seq 100 &&
    until_stat hop_records 30 || return 1
  until_rows 'SELECT count(*) FROM hop_records' 30
  until_rows 'SELECT count(*) FROM path_ends' 10
  report "hop_records: $(rows 'SELECT count(*) FROM hop_records'), path_ends: $(rows 'SELECT count(*) FROM path_ends')"
  [ "$(rows 'SELECT count(*) FROM hop_records')" -eq 30 ] &&
    [ "$(rows 'SELECT count(*) FROM path_ends')" -eq 10 ] &&
    [ "$(rows "SELECT group_concat(node_id) FROM (SELECT node_id FROM hop_records
               WHERE source_node = 1 AND path_seq = 100 ORDER BY hop_index)")" = "1,3,4" ] &&
    [ "$(rows "SELECT DISTINCT src_ip || ' ' || dst_ip || ' ' || dst_port FROM hop_records")" = \
      "10.0.0.1 10.0.0.2 47000" ]
}
check "two 3-hop paths, 5 datagrams each: a row per hop, one end-of-path row per datagram (sqlite3)" two_paths

equal_hops() {
  until_stat traversals 10 || return 1
  local lat hops bw
  lat=$(decision 10.0.0.1 10.0.0.2 min_latency)
  hops=$(decision 10.0.0.1 10.0.0.2 fewest_hops)
  bw=$(decision 10.0.0.1 10.0.0.2 max_bandwidth)
  report "min_latency: $lat, fewest_hops: $hops, max_bandwidth: $bw"
  [ "$lat" = "1,3,4" ] && [ "$hops" = "1,3,4" ] && [ "$bw" = "1,3,4" ]
}
check "equal hops, 40 us against 25 us: the 25 us path (also the wider bottleneck)" equal_hops

two_against_three() {
  send path --src 10.0.1.1 --dst 10.0.1.2 --nodes 1,4 --hop-ns 30000 --count 3 --first-seq 200 &&
    send path --src 10.0.1.1 --dst 10.0.1.2 --nodes 1,2,4 --hop-ns 5000 --count 3 --first-seq 300 &&
    until_stat traversals 16 || return 1
  local hops lat
  hops=$(decision 10.0.1.1 10.0.1.2 fewest_hops)
  lat=$(decision 10.0.1.1 10.0.1.2 min_latency)
  report "fewest_hops: $hops, min_latency: $lat"
  [ "$hops" = "1,4" ] && [ "$lat" = "1,2,4" ]
}
check "2 hops against 3: fewest hops takes the 2-hop path, min latency the faster 3-hop one" two_against_three

missing_hop() {
  send path --src 10.0.2.1 --dst 10.0.2.2 --nodes 1,2,4 --hop-ns 1000 --count 2 --first-seq 400 --skip-hop 2 &&
    until_stat path_ends 18 || return 1
  sleep 0.3  # an analysis after the notices
  [ "$(decision 10.0.2.1 10.0.2.2 min_latency)" = "" ] && [ "$(stat traversals)" -eq 16 ]
}
check "a datagram whose middle hop never reported is no traversal" missing_hop

garbage() {
  send garbage || return 1
  local i m
  for i in $(seq 50); do
    m=$(api /metrics)
    grep -q 'aggswitch_intcollector_reports_total{result="not_int"} 1' <<<"$m" && break
    sleep 0.1
  done
  grep 'reports_total' <<<"$m"
  grep -q 'aggswitch_intcollector_reports_total{result="truncated"} 1' <<<"$m" &&
    grep -q 'aggswitch_intcollector_reports_total{result="bad_version"} 1' <<<"$m" &&
    grep -q 'aggswitch_intcollector_reports_total{result="not_int"} 1' <<<"$m" &&
    [ "$(rows 'SELECT count(*) FROM hop_records WHERE node_id = 9')" -eq 0 ]
}
check "bad reports are counted by reason and dropped" garbage

# 6,000 reports of one path id (2,000 copies of a 3-hop path): they take
# three rows, the analysis keeps its pace, and real reports sent after them
# are all recorded.
duplicate_flood() {
  send path --src 10.0.5.1 --dst 10.0.5.2 --nodes 7,8,9 --hop-ns 1000 --count 2000 \
    --first-seq 5000 --same-path || return 1
  send path --src 10.0.6.1 --dst 10.0.6.2 --nodes 1,2 --hop-ns 1000 --count 1000 \
    --first-seq 7000 --rate 4000 || return 1
  until_rows "SELECT count(*) FROM hop_records WHERE src_ip = '10.0.6.1'" 2000 || return 1
  local dup
  dup=$(rows "SELECT count(*) FROM hop_records WHERE source_node = 7")
  report "rows of the repeated path: $dup; real reports recorded: 2000"
  [ "$dup" -le 3 ] && until_stat traversals 1017
}
check "a flood of 6,000 reports of one path id: 3 rows, and 2,000 real reports after it recorded" duplicate_flood

# Node 5 is no switch the collector knows: its reports are counted and
# dropped, and its sequence numbers count no loss.
unknown_sender() {
  local before lost
  before=$(api /api/v1/stats | python3 -c 'import json, sys; print(json.load(sys.stdin)["reports"]["unknown_sender"])')
  lost=$(stat reports_lost)
  send path --src 10.0.8.1 --dst 10.0.8.2 --nodes 5 --hop-ns 1000 --count 3 --first-seq 9000 || return 1
  local i n
  for i in $(seq 50); do
    n=$(api /api/v1/stats | python3 -c 'import json, sys; print(json.load(sys.stdin)["reports"]["unknown_sender"])')
    [ "$n" -ge $((before + 3)) ] && break
    sleep 0.1
  done
  report "unknown_sender: $before -> $n"
  [ "$n" -eq $((before + 3)) ] && [ "$(stat reports_lost)" -eq "$lost" ] &&
    [ "$(rows "SELECT count(*) FROM hop_records WHERE node_id = 5")" -eq 0 ]
}
check "reports from a node no --reporter names are counted unknown_sender and not recorded" unknown_sender

aggctl_paths() {
  local out
  out=$("$AGGCTL" int paths --collector "$HTTP") || return 1
  echo "$out"
  # The 25 us path of the first pair: three hops, five samples, decided by every rule.
  grep -q '^10.0.0.1 -> 10.0.0.2$' <<<"$out" &&
    grep -Eq '^  1 +3 +5 +25\.0 us +80\.0% +1:1>3 3:1>4 4:1>0 +fewest_hops, max_bandwidth, min_latency$' <<<"$out"
}
check "aggctl int paths shows the paths and what each rule decided" aggctl_paths

promtool_ok() { api /metrics | promtool check metrics; }
check "promtool check metrics accepts /metrics" promtool_ok

stops() {
  local start ms
  start=$(date +%s%N)
  kill -TERM "$PID"
  wait "$PID"
  local rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  PID=""
  report "exit code $rc after ${ms} ms"
  [ "$rc" -eq 0 ] && [ "$ms" -lt 1000 ]
}
check "SIGTERM stops it with exit code 0 within a second" stops

# A second collector keeping at most 20 rows a table: the oldest go, and
# /metrics counts them.
capped() {
  local db="$WORK/capped.db" udp=127.0.0.1:19532 http=127.0.0.1:19533 i m n
  "$COLLECTOR" --listen "$udp" --http "$http" --db "$db" --max-rows 20 --interval-ms 100 --any-reporter \
    >"$WORK/capped.log" 2>&1 &
  PID=$!
  for i in $(seq 50); do curl -fsS -m 2 "http://$http/metrics" >/dev/null 2>&1 && break; sleep 0.1; done
  python3 "$HERE/int_reports.py" --to "$udp" path --nodes 1,2 --hop-ns 1000 --count 30 || return 1
  for i in $(seq 50); do
    m=$(curl -fsS -m 2 "http://$http/metrics")
    grep -q 'rows_deleted_total{table="hop_records",reason="cap"} 40' <<<"$m" && break
    sleep 0.1
  done
  grep 'rows_deleted_total' <<<"$m"
  n=$(sqlite3 "$db" 'SELECT count(*) FROM hop_records')
  report "hop_records rows: $n"
  [ "$n" -eq 20 ] && [ "$(sqlite3 "$db" 'SELECT min(path_seq) FROM hop_records')" -eq 20 ] &&
    grep -q 'rows_deleted_total{table="hop_records",reason="cap"} 40' <<<"$m" &&
    grep -q 'rows_deleted_total{table="path_ends",reason="cap"} 10' <<<"$m" &&
    grep -q 'rows_deleted_total{table="hop_records",reason="retention"} 0' <<<"$m"
}
check "--max-rows 20: 60 hop rows become the latest 20, and the deletions are counted" capped
finish
