#!/usr/bin/env bash
# System test: a running aggswitch on af_packet ports, three hosts in network
# namespaces, real pings, a real Prometheus scrape.
#
#   h0 (access 10)  ── st-p0 ┐
#   h1 (access 20)  ── st-p1 ├─ aggswitch (10.0.10.254 on every VLAN, 10.0.20.254 on VLAN 20)
#   h2 (trunk 10,20) ─ st-p2 ┘   h2 has eth0.10 and eth0.20
#
# Usage: l2_netns_test.sh AGGSWITCH AGGCTL
# Needs root (namespaces), promtool and prometheus. Everything is torn down on
# exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
AGGCTL=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-st.XXXXXX)
HTTP_PORT=19477
PROM_PORT=19090
PREFIX="agg-st-$$"

topo_init st
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

topo_host h0 st-p0
topo_host h1 st-p1
topo_host h2 st-p2
topo_addr h0 eth0 10.0.10.1/24
topo_addr h0 eth0 10.0.20.1/24   # same subnet as VLAN 20, but h0 sits in VLAN 10
topo_addr h1 eth0 10.0.20.2/24
topo_vlan h2 10 10.0.10.3/24
topo_vlan h2 20 10.0.20.3/24

write_config() {  # $1: extra static entries (YAML list items) for mac_table.static
  cat >"$WORK/switch.yaml" <<EOF
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX
switch:
  mac: 02:a9:9c:00:00:01
  addresses:
    - 10.0.10.254/24
    - {address: 10.0.20.254/24, vlan: 20}
ports:
  - {name: p0, devargs: "net_af_packet_st0,iface=st-p0", access: 10}
  - {name: p1, devargs: "net_af_packet_st1,iface=st-p1", access: 20}
  - {name: p2, devargs: "net_af_packet_st2,iface=st-p2", trunk: [10, 20]}
workers:
  - {lcore: 1, rx: [p0, p1, p2]}
mac_table:
  size: 1024
  aging_seconds: 300
  static: [$1]
mempool: {mbufs: 8191}
http: {listen: "127.0.0.1:$HTTP_PORT", token_file: "$WORK/api.token"}
aggregation:
  address: 10.0.10.253
  jobs: [{id: 5, key: "0x5eed", members: 2}]
EOF
}
write_config ""

check "config validates" "$AGGSWITCH" --config "$WORK/switch.yaml" --check-config

if ! run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/aggswitch.log"; then
  fail "aggswitch did not come up"; finish; exit 1
fi
# aggctl's changes (jobs add/rm) carry the token the switch created.
export AGGCTL_TOKEN_FILE="$WORK/api.token"

ping1() { topo_exec "$1" ping -c 2 -i 0.2 -W 1 "$2"; }

# L2 forwarding, access <-> trunk in each VLAN.
check "h0 (access 10) pings h2.10 (trunk)" ping1 h0 10.0.10.3
check "h1 (access 20) pings h2.20 (trunk)" ping1 h1 10.0.20.3
check "h2.20 (trunk) pings h1 (access 20)" ping1 h2 10.0.20.2
# Isolation: h0 has an address in 10.0.20.0/24, but its frames are in VLAN 10.
check_not "no leak: h0 (VLAN 10) cannot reach h1 (VLAN 20)" ping1 h0 10.0.20.2
check_not "no leak: h0 (VLAN 10) cannot reach h2.20" ping1 h0 10.0.20.3
# The switch's own addresses.
check "h0 pings the switch 10.0.10.254" ping1 h0 10.0.10.254
check "h2.10 pings the switch 10.0.10.254" ping1 h2 10.0.10.254
check "h1 pings the switch 10.0.20.254 (bound to VLAN 20)" ping1 h1 10.0.20.254
check_not "10.0.20.254 is not answered in VLAN 10" ping1 h0 10.0.20.254

H0_MAC=$(topo_mac h0)
H1_MAC=$(topo_mac h1)
# mac_entry_count MAC VLAN PORT: how many MAC table entries match (PORT "*" for any).
mac_entry_count() {
  "$AGGCTL" --server "127.0.0.1:$HTTP_PORT" --json mac | python3 -c '
import json, sys
mac, vlan, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(sum(1 for e in json.load(sys.stdin)["entries"]
          if e["mac"] == mac and e["vlan"] == vlan and port in ("*", e["port"])))' "$@"
}
mac_present() { [ "$(mac_entry_count "$@")" = 1 ]; }
mac_absent() { [ "$(mac_entry_count "$@")" = 0 ]; }
check "MAC table has h0 in VLAN 10 on p0" mac_present "$H0_MAC" 10 p0
check "MAC table never saw h0 in VLAN 20" mac_absent "$H0_MAC" 20 "*"

# Operator views.
aggctl() { "$AGGCTL" --server "127.0.0.1:$HTTP_PORT" "$@"; }
aggctl_shows() { local pattern="$1"; shift; aggctl "$@" | grep -qi -- "$pattern"; }
check "aggctl ports lists the trunk" aggctl_shows "trunk 10,20" ports
check "aggctl stats shows p1" aggctl_shows p1 stats
check "aggctl mac shows h1" aggctl_shows "$H1_MAC" mac

# Allreduce through the switch: h0 (access 10) and h2.10 (trunk) each send one
# int32 chunk of job $1, seq $2, from a kernel UDP socket to the aggregation
# address; both must get the sum back. Further arguments go to both members.
allreduce_pair() {
  local member="$HERE/agg_member.py" job="$1" seq="$2"
  shift 2
  topo_exec h0 python3 "$member" --switch 10.0.10.253 --job "$job" --key 0x5eed --node 0 --members 2 \
    --seq "$seq" --values 1,2,-3 --expect 11,22,-33 "$@" >"$WORK/agg0.out" 2>&1 &
  local p0=$!
  topo_exec h2 python3 "$member" --switch 10.0.10.253 --job "$job" --key 0x5eed --node 1 --members 2 \
    --seq "$seq" --values 10,20,-30 --expect 11,22,-33 "$@" >"$WORK/agg1.out" 2>&1
  local r1=$?
  wait "$p0"
  local r0=$?
  cat "$WORK/agg0.out" "$WORK/agg1.out"
  [ "$r0" -eq 0 ] && [ "$r1" -eq 0 ]
}
check "allreduce of job 5 through the switch (access + trunk member)" allreduce_pair 5 1
check "a second chunk of job 5" allreduce_pair 5 2
check "job 31 registers in-band from the task info in its contributions" allreduce_pair 31 1 --task-info
nacked_unknown_job() {
  topo_exec h0 python3 "$HERE/agg_member.py" --switch 10.0.10.253 --job 77 --key 0x77 --node 0 \
    --members 2 --values 1 --expect 1 --timeout 2 >"$WORK/agg77.out" 2>&1
  local rc=$?
  cat "$WORK/agg77.out"
  [ "$rc" -eq 3 ] && grep -q "NACK: unknown job" "$WORK/agg77.out"
}
check "a job without task info that the switch does not know is NACKed" nacked_unknown_job
completions_are() {
  curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" |
    grep -qx "aggswitch_aggregation_completions_total{lcore=\"1\"} $1"
}
check "metrics count the completions" completions_are 3
job_metric_is() {
  curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" |
    grep -qx "aggswitch_aggregation_job_$1_total{job=\"$2\"} $3"
}
check "per-job metrics: job 5 completed 2 chunks" job_metric_is completions 5 2
check "per-job metrics: job 31 reduced 2 x 12 bytes" job_metric_is reduced_bytes 31 24
check "metrics: one in-band registration admitted" \
  grep -q 'aggswitch_aggregation_registrations_total{result="admitted"} 1' <(curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics")
# The members never acknowledge, so the switch keeps both results of job 5;
# the running workers copy their slots out for aggctl.
slots_of_job5() { [ "$(aggctl slots --job 5 | grep -c ' complete ')" -eq 2 ]; }
check "aggctl slots shows job 5's two completed chunks, held for the acks" slots_of_job5

# Jobs: one from the config, one added and removed through the API.
check "aggctl jobs show lists the config job" aggctl_shows "config" jobs show 5
check "aggctl jobs show lists the in-band job" aggctl_shows "in-band" jobs show 31
check "aggctl jobs add" aggctl jobs add --id 9 --key 0x99 --members 4
check "aggctl jobs show lists the API job" aggctl_shows "api" jobs show 9
check_not "a second add of job 9 is refused" aggctl jobs add --id 9 --key 0x99 --members 4
check "aggctl jobs rm" aggctl jobs rm 9
check_not "job 9 is gone" aggctl jobs show 9

# Metrics: exposition format and content.
curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" >"$WORK/metrics.txt"
promtool_accepts() { promtool check metrics <"$1"; }
check "promtool check metrics accepts /metrics" promtool_accepts "$WORK/metrics.txt"
check "metrics count p0 rx packets" grep -Eq '^aggswitch_port_rx_packets_total\{port="p0"\} [1-9]' "$WORK/metrics.txt"
check "metrics count ARP replies" grep -Eq '^aggswitch_lcore_arp_replies_total\{lcore="1"\} [1-9]' "$WORK/metrics.txt"
check "metrics report busy cycles" grep -Eq '^aggswitch_lcore_busy_cycles_total\{lcore="1"\} [1-9]' "$WORK/metrics.txt"

# A real Prometheus server scrapes once; we query a counter back.
cat >"$WORK/prometheus.yml" <<EOF
global: {scrape_interval: 1s}
scrape_configs:
  - job_name: aggswitch
    static_configs: [{targets: ["127.0.0.1:$HTTP_PORT"]}]
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
topo_track_pid $!
prom_query() {
  for _ in $(seq 1 60); do
    if curl -fsS "http://127.0.0.1:$PROM_PORT/api/v1/query" \
        --data-urlencode 'query=aggswitch_port_rx_packets_total{port="p0"}' 2>/dev/null |
        python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; sys.exit(0 if r and float(r[0]["value"][1]) > 0 else 1)'; then
      return 0
    fi
    sleep 0.5
  done
  tail -5 "$WORK/prometheus.log"; return 1
}
check "Prometheus scraped aggswitch and returns p0 rx packets" prom_query

# DPDK telemetry shows the switch's own commands.
telemetry_shows() { printf '%s\n' "$1" | dpdk-telemetry.py -f "$PREFIX" | grep -q -- "$2"; }
check "dpdk-telemetry.py /aggswitch/port_stats,p0" telemetry_shows /aggswitch/port_stats,p0 rx_packets

# SIGHUP: a new static entry appears; a restart-only change is reported.
write_config "{mac: \"02:00:00:00:be:ef\", vlan: 20, port: p1}"
sed -i 's/mbufs: 8191/mbufs: 4095/' "$WORK/switch.yaml"
kill -HUP "$SWITCH_PID"
reloaded() {
  for _ in $(seq 1 50); do
    aggctl_shows 02:00:00:00:be:ef mac && return 0
    sleep 0.1
  done
  return 1
}
check "SIGHUP adds the new static MAC" reloaded
check "SIGHUP names the key that needs a restart" grep -q "'mempool' changed but needs a restart" "$WORK/aggswitch.log"

# Clean stop.
kill -TERM "$SWITCH_PID"
stopped_cleanly() {
  for _ in $(seq 1 100); do kill -0 "$SWITCH_PID" 2>/dev/null || break; sleep 0.1; done
  wait "$SWITCH_PID"
}
check "SIGTERM stops aggswitch with exit 0" stopped_cleanly
check "log says stopped" grep -q "stopped" "$WORK/aggswitch.log"

finish
