#!/usr/bin/env bash
# System test: the parameter store and final delivery (docs/protocol.md,
# "Store" and "Final delivery"). One aggswitch on af_packet ports; the main
# server and four workers, each in a network namespace of its own. The main
# server's port drops 10% of the frames each way (ports[].faults).
#
#   ms 10.0.10.100 ── sf-p0 (10% loss) ┐
#   w0 10.0.10.10  ── sf-p1            │
#   w1 10.0.10.11  ── sf-p2            ├─ aggswitch: job 6 mode store, job 7 mode both,
#   w2 10.0.10.12  ── sf-p3            │  job 8 aggregate; main server 10.0.10.100:45000;
#   w3 10.0.10.13  ── sf-p4            ┘  aggregation.store.per_job 8
#
# Checks:
#   1. store mode: four workers each store chunks 1 and 2; every one is
#      ACKed, the job holds 8 buffers, nothing is reduced;
#   2. a worker and the main server FETCH copies, bit for bit;
#   3. the job's share is full: a ninth contribution gets NACK store full;
#      a FETCH with RELEASE frees one, and the ninth gets in; the released
#      copy is not stored any more;
#   4. both mode: every worker gets the sum, every worker's own vector can
#      be fetched;
#   5. final delivery under 10% loss: 40 chunks marked FINAL; the main server
#      gets every one, correct, through retransmission; all ACKed, none
#      given up, the copies freed;
#   6. the API shows the modes and the store; a job added in store mode with
#      aggctl, shown by aggctl jobs show;
#   7. a host on another port that sends from the main server's address and
#      port, with the key, is refused (NACK not_main_server); the main server
#      still reads the copy; promtool; every metric the Grafana dashboard and
#      the alert rules of deploy/ query is in /metrics.
#
# Usage: store_final_netns_test.sh AGGSWITCH AGGCTL
# Needs root (namespaces). Everything is torn down on exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
AGGCTL=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-sf.XXXXXX)
HTTP_PORT=19481
PREFIX="agg-sf-$$"
MEMBER=(python3 "$HERE/agg_member.py" --switch 10.0.10.253 --key 0x5eed)
SERVER=(--main-server --bind-port 45000)

topo_init sf
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT

topo_host ms sf-p0
topo_addr ms eth0 10.0.10.100/24
for w in 0 1 2 3; do
  topo_host "w$w" "sf-p$((w + 1))"
  topo_addr "w$w" eth0 "10.0.10.$((w + 10))/24"
done

cat >"$WORK/switch.yaml" <<YAML
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX
switch:
  mac: 02:a9:9c:00:00:de
  addresses: [10.0.10.254/24]
ports:
  - {name: p0, devargs: "net_af_packet_sf0,iface=sf-p0", access: 10, faults: {loss: 0.1, seed: 7}}
$(for p in 1 2 3 4; do echo "  - {name: p$p, devargs: \"net_af_packet_sf$p,iface=sf-p$p\", access: 10}"; done)
mempool: {mbufs: 8191}
http: {listen: "127.0.0.1:$HTTP_PORT", token_file: "$WORK/api.token"}
aggregation:
  address: 10.0.10.253
  store: {buffers: 256, per_job: 8, final_timeout_ms: 5000}
  jobs:
    - {id: 6, key: "0x5eed", members: 4, mode: store, main_server: "10.0.10.100:45000"}
    - {id: 7, key: "0x5eed", members: 4, mode: both}
    - {id: 8, key: "0x5eed", members: 4, main_server: "10.0.10.100:45000"}
YAML

if ! run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/aggswitch.log"; then
  fail "aggswitch did not come up"; finish; exit 1
fi
api() { curl -fsS -m 2 "http://127.0.0.1:$HTTP_PORT$1"; }
metric() { agg_total "http://127.0.0.1:$HTTP_PORT/metrics" "$1"; }
job_store() {
  api /metrics | awk -v j="aggswitch_job_store_buffers{job=\"$1\"}" '$1 == j { print $2 }'
}
# Runs the four workers at once (extra arguments after "--" per worker: W
# is replaced by the worker's number), and waits for all.
workers() {
  local pids=() w rc=0
  for w in 0 1 2 3; do
    topo_exec "w$w" "${MEMBER[@]}" --node "$w" "${@//W/$w}" >"$WORK/w$w.out" 2>&1 &
    pids+=($!)
    topo_track_pid $!
  done
  for w in 0 1 2 3; do
    wait "${pids[$w]}" || rc=1
    cat "$WORK/w$w.out"
  done
  return $rc
}

# --- 1. Store mode.
stored() {
  workers --job 6 --seq 1 --chunks 2 --values "W,-W,1000" --expect-ack --timeout 10 || return 1
  report "stored $(metric stored), contributions $(metric contributions), job 6 holds $(job_store 6) buffers"
  [ "$(metric stored)" -eq 8 ] && [ "$(metric contributions)" -eq 0 ] && [ "$(job_store 6)" -eq 8 ]
}
check "store mode: 4 workers x 2 chunks each ACKed, 8 buffers held, nothing reduced" stored

# --- 2. FETCH from a worker and from the main server (through the loss).
fetched() {
  topo_exec w1 "${MEMBER[@]}" --job 6 --node 1 --seq 2 --fetch 3 --expect 3,-3,1000 &&
    topo_exec ms "${MEMBER[@]}" "${SERVER[@]}" --job 6 --seq 1 --fetch 0 --expect 0,0,1000 --timeout 10
}
check "a worker and the main server fetch copies bit for bit" fetched

# --- 3. The job's share is full; RELEASE makes room.
full() {
  local rc=0
  topo_exec w0 "${MEMBER[@]}" --job 6 --node 0 --seq 3 --values 9 --expect-ack --timeout 2 || rc=$?
  report "exit $rc, store_full $(metric store_full)"
  [ "$rc" -eq 3 ] && [ "$(metric store_full)" -ge 1 ] && [ "$(job_store 6)" -eq 8 ]
}
check "a ninth contribution: NACK store full, nothing kept" full
released() {
  local rc=0
  topo_exec w2 "${MEMBER[@]}" --job 6 --node 2 --seq 1 --fetch 2 --release --expect 2,-2,1000 || return 1
  topo_exec w0 "${MEMBER[@]}" --job 6 --node 0 --seq 3 --values 9 --expect-ack --timeout 5 || return 1
  topo_exec w3 "${MEMBER[@]}" --job 6 --node 3 --seq 1 --fetch 2 --timeout 2 || rc=$?
  report "fetch of the released copy: exit $rc; released $(metric store_released), misses $(metric fetch_misses)"
  [ "$rc" -eq 3 ] && [ "$(metric store_released)" -eq 1 ] && [ "$(metric fetch_misses)" -ge 1 ]
}
check "FETCH with RELEASE frees a copy: the ninth gets in, the released one is gone" released

# --- 4. Both mode.
both() {
  workers --job 7 --seq 1 --values "W,10" --expect 6,40 --timeout 10 || return 1
  local w
  for w in 0 1 2 3; do
    topo_exec w0 "${MEMBER[@]}" --job 7 --node 0 --seq 1 --fetch "$w" --expect "$w,10" || return 1
  done
  [ "$(job_store 7)" -eq 4 ]
}
check "both mode: every worker gets the sum; every worker's vector can be fetched" both

# --- 5. Final delivery through 10% loss.
final() {
  topo_exec ms "${MEMBER[@]}" "${SERVER[@]}" --job 8 --receive-final --seq 1 --chunks 40 \
    --expect 6,20 --timeout 40 >"$WORK/ms.out" 2>&1 &
  local ms=$! rc=0 i lost
  topo_track_pid $ms
  # A main server slower than the workers holds back their next final
  # chunks once 8 (the job's store quota) wait for its ACK: NACK store_full,
  # sent again, as the client library does.
  workers --job 8 --seq 1 --chunks 40 --values "W,5" --final --retry-store-full --expect 6,20 \
    --timeout 30 >"$WORK/final.out" || { rc=1; tail -5 "$WORK/final.out"; }
  wait $ms || rc=1
  cat "$WORK/ms.out"
  for i in $(seq 50); do
    [ "$(metric final_acked)" -eq 40 ] && [ "$(job_store 8)" -eq 0 ] && break
    sleep 0.2
  done
  lost=$(api /metrics | awk '$1 == "aggswitch_port_injected_faults_total{port=\"p0\",fault=\"drop\"}" { print $2 }')
  report "final deliveries $(metric final_deliveries), resends $(metric final_resends), acked $(metric final_acked), given up $(metric final_given_up), refused $(metric final_refused), deferred $(metric final_deferred), frames lost on p0 ${lost:-0}"
  [ "$rc" -eq 0 ] && [ "$(metric final_deliveries)" -eq 40 ] && [ "$(metric final_acked)" -eq 40 ] &&
    [ "$(metric final_given_up)" -eq 0 ] && [ "$(metric final_refused)" -eq 0 ] &&
    [ "$(metric final_resends)" -ge 1 ] && [ "${lost:-0}" -ge 1 ] &&
    [ "$(job_store 8)" -eq 0 ]
}
check "final delivery under 10% loss: all 40 chunks reach the main server, resent until ACKed" final

# --- 6. The API.
job_api() {
  api /api/v1/jobs/6 | grep -q '"mode":"store"' && api /api/v1/jobs/7 | grep -q '"mode":"both"' &&
    api /api/v1/jobs/6 | grep -q '"store":{"buffers":8,"quota":8}'
}
check "GET /api/v1/jobs shows each job's mode and store use" job_api
aggctl() { "$AGGCTL" --server "127.0.0.1:$HTTP_PORT" --token-file "$WORK/api.token" "$@"; }
aggctl_mode() {
  aggctl jobs add --id 9 --key 0x99 --members 2 --mode store >/dev/null &&
    aggctl jobs show 9 | grep -q "mode store: 0 of 8 store buffers held" &&
    aggctl jobs show 6 | grep -q "mode store: 8 of 8 store buffers held"
}
check "aggctl jobs add --mode store; aggctl jobs show says the mode and the store held" aggctl_mode
# --- 7. The main server is bound as a member is: w3, on another port, takes
# the main server's address as a second one and asks, with the key, from
# the main server's UDP port, for a kept vector.
spoofed() {
  local rc=0
  # The main server reads a copy, and goes quiet: quiet or not, it is
  # bound.
  topo_exec ms "${MEMBER[@]}" "${SERVER[@]}" --job 6 --seq 2 --fetch 3 --expect 3,-3,1000 --timeout 10 ||
    return 1
  topo_exec w3 ip addr add 10.0.10.100/32 dev eth0 || return 1
  topo_exec w3 "${MEMBER[@]}" --bind-address 10.0.10.100 --bind-port 45000 --job 6 --seq 2 \
    --fetch 3 --timeout 3 2>"$WORK/spoof.err" || rc=$?
  topo_exec w3 ip addr del 10.0.10.100/32 dev eth0
  report "spoofed FETCH: exit $rc, $(cat "$WORK/spoof.err"); main_server_refused $(metric main_server_refused)"
  [ "$rc" -eq 3 ] && grep -q "not main server (17)" "$WORK/spoof.err" &&
    [ "$(metric main_server_refused)" -ge 1 ] &&
    topo_exec ms "${MEMBER[@]}" "${SERVER[@]}" --job 6 --seq 2 --fetch 3 --expect 3,-3,1000 --timeout 10
}
check "a host on another port sending as the main server is refused NACK not_main_server; the main server is not" spoofed
if command -v promtool >/dev/null; then
  promtool_ok() { api /metrics | promtool check metrics; }
  check "promtool check metrics accepts /metrics" promtool_ok
fi
# The Grafana dashboard and the alert rules (deploy/) query only what a live
# switch with jobs exposes.
check_queried_metrics() {
  api /metrics >"$WORK/metrics.prom" || return 1
  /usr/bin/python3 "$HERE/../lib/queried_metrics.py" "$HERE/../../deploy/grafana/aggswitch.json" \
    "$HERE/../../deploy/prometheus/aggswitch-alerts.yml" <"$WORK/metrics.prom" >"$WORK/queried.out"
  local rc=$?
  report "$(head -1 "$WORK/queried.out")"
  cat "$WORK/queried.out"
  return $rc
}
check "every metric the Grafana dashboard and the alert rules query is in the live /metrics" check_queried_metrics

finish
