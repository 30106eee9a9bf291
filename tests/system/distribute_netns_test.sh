#!/usr/bin/env bash
# System test: distribution from a job's main server (docs/protocol.md,
# "Distribution"). One aggswitch on af_packet ports; the main server and
# four workers, each in a network namespace of its own, on VLAN 10.
#
#   ms 10.0.10.100 ── dt-p0 ┐
#   w0 10.0.10.10  ── dt-p1 │
#   w1 10.0.10.11  ── dt-p2 ├─ aggswitch (job 5: 4 members, main_server 10.0.10.100:45000)
#   w2 10.0.10.12  ── dt-p3 │
#   w3 10.0.10.13  ── dt-p4 ┘
#
# Checks:
#   1. before any worker has sent, the main server's DISTRIBUTE is refused
#      with NACK members unbound (not now) and no worker gets anything;
#   2. the workers allreduce once (which binds them), then wait; the main
#      server's DISTRIBUTE, sent again, reaches all four bit for bit without
#      the key, and its ACK says 4 copies;
#   3. the same datagram from a worker's address is refused: NACK not main
#      server;
#   4. the counters and the job's main_server in the API; promtool.
#
# Usage: distribute_netns_test.sh AGGSWITCH
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-dt.XXXXXX)
HTTP_PORT=19480
PREFIX="agg-dt-$$"
MEMBER=(python3 "$HERE/agg_member.py" --switch 10.0.10.253 --job 5 --key 0x5eed)

topo_init dt
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

topo_host ms dt-p0
topo_addr ms eth0 10.0.10.100/24
for w in 0 1 2 3; do
  topo_host "w$w" "dt-p$((w + 1))"
  topo_addr "w$w" eth0 "10.0.10.$((w + 10))/24"
done

cat >"$WORK/switch.yaml" <<EOF
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX
switch:
  mac: 02:a9:9c:00:00:dd
  addresses: [10.0.10.254/24]
ports:
$(for p in 0 1 2 3 4; do echo "  - {name: p$p, devargs: \"net_af_packet_dt$p,iface=dt-p$p\", access: 10}"; done)
mempool: {mbufs: 8191}
http: {listen: "127.0.0.1:$HTTP_PORT", token_file: "$WORK/api.token"}
aggregation:
  address: 10.0.10.253
  jobs: [{id: 5, key: "0x5eed", members: 4, main_server: "10.0.10.100:45000"}]
EOF

if ! run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/aggswitch.log"; then
  fail "aggswitch did not come up"; finish; exit 1
fi
api() { curl -fsS -m 2 "http://127.0.0.1:$HTTP_PORT$1"; }
metric() { agg_total "http://127.0.0.1:$HTTP_PORT/metrics" "$1"; }

# --- 1. Nobody bound yet: refused, not now.
unbound() {
  local rc=0
  topo_exec ms "${MEMBER[@]}" --main-server --seq 9 --values 1,2,3 --bind-port 45000 --timeout 1 || rc=$?
  report "main server exit $rc; distribute_refused $(metric distribute_refused), distributions $(metric distributions)"
  [ "$rc" -eq 2 ] && [ "$(metric distribute_refused)" -ge 1 ] && [ "$(metric distributions)" -eq 0 ]
}
check "a DISTRIBUTE before the workers have sent is refused (members unbound), again and again" unbound

# --- 2. The workers allreduce once, then wait for the distribution.
WORKERS=()
for w in 0 1 2 3; do
  topo_exec "w$w" "${MEMBER[@]}" --node "$w" --members 4 --seq 1 --values "$((w + 1))" --expect 10 \
    --then-receive-distribute 9 --expect-distribute 7,-8,9,2147483647 --timeout 15 \
    >"$WORK/w$w.out" 2>&1 &
  WORKERS+=($!)
  topo_track_pid $!
done
distribute() {
  topo_exec ms "${MEMBER[@]}" --main-server --seq 9 --values 7,-8,9,2147483647 --bind-port 45000 \
    --expect-copies 4 --timeout 10
}
check "the main server's DISTRIBUTE is ACKed once every member has sent: 4 copies" distribute
received() {
  local w rc=0
  for w in 0 1 2 3; do
    wait "${WORKERS[$w]}" || rc=1
    cat "$WORK/w$w.out"
  done
  return $rc
}
check "every worker got the allreduce's result, then the distribution bit for bit, without the key" received

# --- 3. Not from the main server.
impostor() {
  local rc=0
  topo_exec w0 "${MEMBER[@]}" --main-server --seq 10 --values 1 --bind-port 45000 --timeout 2 || rc=$?
  [ "$rc" -eq 3 ]
}
check "the same from a worker's address: NACK not main server" impostor

# --- 4. Counters and the API.
counters() {
  report "distributions $(metric distributions), copies $(metric distribution_copies), refused $(metric distribute_refused)"
  [ "$(metric distributions)" -eq 1 ] && [ "$(metric distribution_copies)" -eq 4 ] &&
    [ "$(metric distribute_refused)" -ge 2 ]
}
check "counters: one distribution, four copies, the refusals" counters
job_api() { api /api/v1/jobs/5 | grep -q '"main_server":"10.0.10.100:45000"'; }
check "GET /api/v1/jobs/5 shows the main server" job_api
if command -v promtool >/dev/null; then
  promtool_ok() { api /metrics | promtool check metrics; }
  check "promtool check metrics accepts /metrics" promtool_ok
fi

finish
