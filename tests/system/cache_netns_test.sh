#!/usr/bin/env bash
# System test: the data cache (docs/cache.md) across a running aggswitch.
# Every host is a network namespace on an af_packet port of the switch, so
# all cache traffic (UCX over TCP, pinned with ucx_tls), the records (etcd)
# and the store (HTTP) cross it.
#
#   st  10.0.30.50  python3 http.server: the external store (request log)
#   ed  10.0.30.60  etcd: the records
#   n1  10.0.30.1   agg-cached ┐ cache nodes, replicas 2,
#   n2  10.0.30.2   agg-cached ├ allow.nodes 10.0.30.0/28,
#   n3  10.0.30.3   agg-cached ┘ allow.jobs [train]; n3's region on hugepages
#   n4  10.0.30.4   loaders only (every item is remote)
#   rg  10.0.30.99  a loader outside allow.nodes
#
# Checks:
#   1. fill: every item recorded with two holders and the source's length,
#      the nodes' fill complete, their bytes twice the dataset's;
#   2. a load into CPU memory on n4 is byte-identical to the source, and no
#      request reaches the store during it (counted at the server);
#   3. a load on n1 takes the local path for n1's items;
#   4. the config interface: changing request.amount in the file changes
#      the next requests;
#   5. a miss (a record deleted) reads through and the owner fills it again;
#      with miss: fail it is an error;
#   6. eight loaders at once (four on n4, four on n2), all verified, each
#      through the dataset;
#   7. a node and a job outside the allow lists are refused and counted,
#      and read from the store instead;
#   8. an owner killed (SIGKILL) mid-load: the load completes from replicas,
#      verified, no store reads, each request within the owner timeout;
#   9. the gpu component is refused as unsupported on this host;
#  10. the switch carried the bytes; promtool accepts agg-cached's /metrics.
#
#  11. Python (with PYTHON_DIR): aggswitch.cache's Loader, CacheDataset
#      under a DataLoader with worker processes, CacheBatches, all verified.
#
# Usage: cache_netns_test.sh AGGSWITCH AGG_CACHED AGG_LOAD [PYTHON_DIR]
# Needs root, etcd (etcd-server) and python3. Everything is torn down on
# exit, pass or fail.
set -u
AGGSWITCH=$(realpath "$1")
AGG_CACHED=$(realpath "$2")
AGG_LOAD=$(realpath "$3")
PY_PATH=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-cache.XXXXXX)
HTTP_PORT=19483
PREFIX="agg-ca-$$"
ITEMS=96

topo_init ca
# n3's region is on hugepages: a hugetlbfs mount of the test's own, and 48
# more 2 MiB pages reserved for the test (given back at the end).
HUGE_BEFORE=$(cat /proc/sys/vm/nr_hugepages)
mkdir -p "$WORK/huge"
cleanup_all() {
  topo_cleanup
  umount "$WORK/huge" 2>/dev/null
  echo "$HUGE_BEFORE" >/proc/sys/vm/nr_hugepages
  rm -rf "$WORK" /dev/shm/aggswitch-cache.n[1-3]
}
trap cleanup_all EXIT
echo $((HUGE_BEFORE + 48)) >/proc/sys/vm/nr_hugepages
mount -t hugetlbfs -o pagesize=2M none "$WORK/huge"

HOSTS=(st ed n1 n2 n3 n4 rg)
declare -A ADDR=([st]=10.0.30.50 [ed]=10.0.30.60 [n1]=10.0.30.1 [n2]=10.0.30.2 [n3]=10.0.30.3
                 [n4]=10.0.30.4 [rg]=10.0.30.99)
for i in "${!HOSTS[@]}"; do
  h=${HOSTS[$i]}
  topo_host "$h" "ca-p$i"
  topo_addr "$h" eth0 "${ADDR[$h]}/24"
done

cat >"$WORK/switch.yaml" <<YAML
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $PREFIX
switch:
  mac: 02:a9:9c:00:00:ca
  addresses: [10.0.30.254/24]
ports:
$(for i in "${!HOSTS[@]}"; do echo "  - {name: p$i, devargs: \"net_af_packet_ca$i,iface=ca-p$i,framecnt=2048\", access: 10}"; done)
mempool: {mbufs: 16383}
http: {listen: "127.0.0.1:$HTTP_PORT"}
YAML
if ! run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/aggswitch.log"; then
  fail "aggswitch did not come up"; finish; exit 1
fi

# The dataset: ITEMS objects of 16 KiB to 1 MiB, random bytes, and a MANIFEST.
mkdir -p "$WORK/store/train"
python3 - "$WORK/store" "$ITEMS" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(3)
lines = []
for i in range(n):
    name = f"train/{i:05d}.bin"
    data = rng.randbytes(rng.randint(16 << 10, 1 << 20))
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)
    lines.append(f"{name} {len(data)}\n")
with open(os.path.join(root, "MANIFEST"), "w") as f:
    f.writelines(lines)
PY
SOURCE_BYTES=$(awk '{s += $2} END {print s}' "$WORK/store/MANIFEST")

# Background processes run under `ip netns exec` directly (it execs them),
# so that $! is their own pid, which the cleanup and the kill below need.
ip netns exec "$(topo_ns st)" python3 -m http.server 8000 --bind 10.0.30.50 --directory "$WORK/store" \
  >"$WORK/store.log" 2>&1 &
topo_track_pid $!
ip netns exec "$(topo_ns ed)" etcd --data-dir "$WORK/etcd" --listen-client-urls http://10.0.30.60:2379 \
  --advertise-client-urls http://10.0.30.60:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster default=http://127.0.0.1:2380 >"$WORK/etcd.log" 2>&1 &
topo_track_pid $!
ETCDCTL=(topo_exec ed env ETCDCTL_API=3 etcdctl --endpoints http://10.0.30.60:2379)
for _ in $(seq 1 100); do "${ETCDCTL[@]}" endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
# The store serves before a daemon lists it (a HEAD: store_gets counts GETs).
for _ in $(seq 1 100); do
  topo_exec st curl -fsS -I -m 1 -o /dev/null http://10.0.30.50:8000/MANIFEST 2>/dev/null && break
  sleep 0.1
done
# Store GETs so far (the server logs one line per request).
store_gets() { grep -c '"GET /' "$WORK/store.log"; }

declare -A CACHED_PID
start_cached() {  # NODE
  cat >"$WORK/cache-$1.yaml" <<YAML
cache:
  node: $1
  nodes: [n1, n2, n3]
  listen: ${ADDR[$1]}:7400
  memory: 64MiB
  store: http://10.0.30.50:8000
  dataset: train-set
  records: etcd://10.0.30.60:2379
  replicas: 2
  allow: {nodes: [10.0.30.0/28], jobs: [train]}
  ucx_tls: tcp
  metrics: 127.0.0.1:9480
  lease_ttl_s: 3
$([ "$1" = n3 ] && printf '  hugepages: true\n  region_dir: %s\n' "$WORK/huge")
YAML
  ip netns exec "$(topo_ns "$1")" "$AGG_CACHED" --config "$WORK/cache-$1.yaml" \
    >"$WORK/cached-$1.log" 2>&1 &
  CACHED_PID[$1]=$!
  topo_track_pid $!
}
cache_metric() {  # NODE NAME[{labels}]
  topo_exec "$1" curl -fsS -m 2 http://127.0.0.1:9480/metrics | awk -v m="$2" '$1 == m { print $2 }'
}
loader_yaml() {  # FILE NODE JOB MISS AMOUNT
  cat >"$1" <<YAML
loader:
  records: etcd://10.0.30.60:2379
  dataset: train-set
$([ -n "$2" ] && echo "  node: $2")
  job: $3
  store: http://10.0.30.50:8000
  miss: $4
  request: {amount: $5, component: cpu}
  owner_timeout_ms: 1000
  ucx_tls: tcp
YAML
}
# load HOST CONFIG [agg-load args]: runs agg-load in HOST, its output in $WORK/load.out.
load() {
  local host="$1" config="$2"; shift 2
  topo_exec "$host" "$AGG_LOAD" --config "$config" --verify-against "$WORK/store" "$@" \
    >"$WORK/load.out" 2>"$WORK/load.err"
  local rc=$?
  tail -1 "$WORK/load.out"
  return $rc
}
field() { tail -1 "$WORK/load.out" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }

for n in n1 n2 n3; do start_cached $n; done

# 1. Fill.
fill_done() {
  for n in n1 n2 n3; do [ "$(cache_metric $n aggswitch_cache_fill_complete)" = 1 ] || return 1; done
}
check_fill() {
  local i
  for i in $(seq 1 600); do fill_done && break; sleep 0.1; done
  fill_done || { echo "fill not complete"; tail -n 5 "$WORK"/cached-n*.log; return 1; }
  local recorded filled errors
  recorded=$("${ETCDCTL[@]}" get --prefix /aggswitch/cache/items/train-set/ --print-value-only |
    python3 -c '
import json, sys
recs = [json.loads(l) for l in sys.stdin if l.strip()]
bad = [r["item"] for r in recs if len(r["holders"]) != 2 or r["owner"] != r["holders"][0]["node"]
       or any(h["addr"] == 0 or h["rkey"] == 0 for h in r["holders"])]
print(len(recs), sum(r["length"] for r in recs), len(bad))')
  filled=0; errors=0
  for n in n1 n2 n3; do
    filled=$((filled + $(cache_metric $n aggswitch_cache_filled_bytes_total)))
    errors=$((errors + $(cache_metric $n aggswitch_cache_fill_errors_total)))
  done
  report "records (items, bytes, malformed): $recorded; source $ITEMS items, $SOURCE_BYTES bytes"
  report "filled $filled bytes over 3 nodes (replicas 2), $errors errors"
  report "n3's region: $(ls "$WORK/huge"), $(awk '/HugePages_Total|HugePages_Free/ {printf "%s %s ", $1, $2}' /proc/meminfo)"
  [ -f "$WORK/huge/aggswitch-cache.n3" ] || return 1
  [ "$recorded" = "$ITEMS $SOURCE_BYTES 0" ] && [ "$filled" -eq $((2 * SOURCE_BYTES)) ] && [ "$errors" -eq 0 ]
}
check "fill: every item recorded with two holders, the cached bytes twice the source's" check_fill

# 2. Remote load into CPU memory, no store requests during it.
loader_yaml "$WORK/n4.yaml" "" train read_through 4MiB
check_remote_load() {
  local before after
  before=$(store_gets)
  load n4 "$WORK/n4.yaml" || return 1
  after=$(store_gets)
  report "$(tail -1 "$WORK/load.out")"
  report "store GETs during the load: $((after - before))"
  [ "$(field mismatches)" = 0 ] && [ "$(field items)" = "$ITEMS" ] && [ "$(field store)" = 0 ] &&
    [ "$(field owner)" = "$ITEMS" ] && [ "$((after - before))" -eq 0 ] &&
    field transport | grep -q '^tcp/eth0'
}
check "load into CPU memory on n4: byte-identical, all from owners over tcp/eth0, 0 store requests" check_remote_load

# 3. The local path.
loader_yaml "$WORK/n1.yaml" n1 train read_through 4MiB
check_local_load() {
  load n1 "$WORK/n1.yaml" || return 1
  report "$(tail -1 "$WORK/load.out")"
  local held
  held=$("${ETCDCTL[@]}" get --prefix /aggswitch/cache/items/train-set/ --print-value-only |
    grep -c '"node":"n1"')
  report "n1 holds $held items"
  [ "$(field mismatches)" = 0 ] && [ "$(field local)" = "$held" ] && [ "$held" -gt 0 ] &&
    [ "$(field store)" = 0 ]
}
check "load on n1: n1's items by the local path, the rest remote, byte-identical" check_local_load

# 4. The config interface: the file changes between requests.
check_config_interface() {
  loader_yaml "$WORK/live.yaml" "" train read_through 1MiB
  ip netns exec "$(topo_ns n4)" "$AGG_LOAD" --config "$WORK/live.yaml" --requests 12 --interval-ms 250 \
    --print-requests >"$WORK/live.out" 2>&1 &
  local pid=$!
  sleep 1.2
  sed -i 's/amount: 1MiB/amount: 8MiB/' "$WORK/live.yaml"
  wait $pid || { tail -3 "$WORK/live.out"; return 1; }
  local first last
  first=$(grep -m1 '^request 1:' "$WORK/live.out")
  last=$(grep '^request 12:' "$WORK/live.out")
  report "$first"
  report "$last"
  report "$(tail -1 "$WORK/live.out" | tr ' ' '\n' | grep config_reloads)"
  echo "$first" | grep -q 'amount=1048576' && echo "$last" | grep -q 'amount=8388608' &&
    [ "$(echo "$last" | sed 's/.* items=\([0-9]*\).*/\1/')" -gt "$(echo "$first" | sed 's/.* items=\([0-9]*\).*/\1/')" ] &&
    tail -1 "$WORK/live.out" | grep -q 'config_reloads=1 .*mismatches=0'
}
check "config interface: request.amount changed in the file changes the next requests" check_config_interface

# 5. A miss.
MISSING=train/00007.bin
check_miss() {
  "${ETCDCTL[@]}" del "/aggswitch/cache/items/train-set/$MISSING" >/dev/null || return 1
  local before
  before=$(grep -c "GET /$MISSING" "$WORK/store.log")
  load n4 "$WORK/n4.yaml" || return 1
  report "$(tail -1 "$WORK/load.out")"
  local i
  for i in $(seq 1 50); do
    "${ETCDCTL[@]}" get "/aggswitch/cache/items/train-set/$MISSING" | grep -q holders && break
    sleep 0.1
  done
  local gets=$(( $(grep -c "GET /$MISSING" "$WORK/store.log") - before ))
  report "store GETs of $MISSING: $gets (the loader's read-through and the owner's refill)"
  [ "$(field misses)" = 1 ] && [ "$(field store)" = 1 ] && [ "$(field fills_requested)" = 1 ] &&
    [ "$(field mismatches)" = 0 ] && [ "$gets" -eq 2 ] &&
    "${ETCDCTL[@]}" get "/aggswitch/cache/items/train-set/$MISSING" | grep -q holders
}
check "miss: read through from the store, byte-identical, and the owner fills it again" check_miss
check_miss_fail() {
  "${ETCDCTL[@]}" del "/aggswitch/cache/items/train-set/$MISSING" >/dev/null || return 1
  loader_yaml "$WORK/strict.yaml" "" train fail 4MiB
  if load n4 "$WORK/strict.yaml"; then return 1; fi
  report "$(cat "$WORK/load.err" | tail -1)"
  grep -q "item $MISSING is not readable from the cache (miss: fail)" "$WORK/load.err"
}
check "miss with miss: fail: the request fails and names the item" check_miss_fail

# 5b. A record written by somebody other than a daemon: its owner's address
# 64 MiB on (past the end of the owner's region), its replica a node that is
# no node of the cache. Neither is read; the item comes from the store, and
# the record as the daemons wrote it comes back after.
FORGED=train/00011.bin
check_forged() {
  local key="/aggswitch/cache/items/train-set/$FORGED" truth
  truth=$("${ETCDCTL[@]}" get "$key" --print-value-only) || return 1
  python3 -c '
import json, sys
r = json.loads(sys.argv[1])
r["holders"][0]["addr"] += 64 << 20
r["holders"][1]["node"] = "n9"
print(json.dumps(r))' "$truth" | "${ETCDCTL[@]}" put "$key" >/dev/null || return 1
  load n4 "$WORK/n4.yaml"
  local rc=$?
  report "$(tail -1 "$WORK/load.out")"
  printf '%s' "$truth" | "${ETCDCTL[@]}" put "$key" >/dev/null
  [ "$rc" -eq 0 ] && [ "$(field forged)" -ge 2 ] && [ "$(field mismatches)" = 0 ] &&
    [ "$(field store)" -ge 1 ]
}
check "a forged record (an address past the owner's region, a node of no cache) is refused, counted, and read from the store" check_forged

# 6. Eight loaders at once. Each makes progress while the others run: every
# loader has served its first request before the first of them is done.
check_concurrent() {
  local pids=() h i rc=0 first last latest_first=0 earliest_last=
  for i in 0 1 2 3 4 5 6 7; do
    h=n4; [ "$i" -ge 4 ] && h=n2
    loader_yaml "$WORK/c$i.yaml" "$h" train read_through 2MiB
    ip netns exec "$(topo_ns "$h")" "$AGG_LOAD" --config "$WORK/c$i.yaml" --verify-against "$WORK/store" \
      --print-requests >"$WORK/c$i.out" 2>&1 &
    pids+=($!)
  done
  for i in 0 1 2 3 4 5 6 7; do wait "${pids[$i]}" || rc=1; done
  for i in 0 1 2 3 4 5 6 7; do
    report "loader $i: $(tail -1 "$WORK/c$i.out" | tr ' ' '\n' | grep -E '^(items|mismatches|MBps|p99_ms)=' | tr '\n' ' ')"
    tail -1 "$WORK/c$i.out" | grep -q "items=$ITEMS " || rc=1
    tail -1 "$WORK/c$i.out" | grep -q "mismatches=0 " || rc=1
    first=$(grep -m1 '^request ' "$WORK/c$i.out" | sed 's/.* at_ms=\([0-9]*\).*/\1/')
    last=$(grep '^request ' "$WORK/c$i.out" | tail -1 | sed 's/.* at_ms=\([0-9]*\).*/\1/')
    [ -n "$first" ] && [ -n "$last" ] || { rc=1; continue; }
    [ "$first" -gt "$latest_first" ] && latest_first=$first
    if [ -z "$earliest_last" ] || [ "$last" -lt "$earliest_last" ]; then earliest_last=$last; fi
  done
  report "the last loader's first request at $latest_first ms, the first loader done at ${earliest_last:-?} ms"
  [ -n "$earliest_last" ] && [ "$latest_first" -le "$earliest_last" ] || rc=1
  return $rc
}
check "eight concurrent loaders: each loads the whole dataset, none corrupted, each makes progress while the others run" check_concurrent

# 7. Refused: a node outside allow.nodes, a job outside allow.jobs.
check_refused() {
  loader_yaml "$WORK/rg.yaml" "" train read_through 8MiB
  load rg "$WORK/rg.yaml" || return 1
  report "rogue node: $(tail -1 "$WORK/load.out" | tr ' ' '\n' | grep -E '^(owner|store|holder_failures|mismatches)=' | tr '\n' ' ')"
  [ "$(field owner)" = 0 ] && [ "$(field store)" = "$ITEMS" ] && [ "$(field mismatches)" = 0 ] || return 1
  loader_yaml "$WORK/job.yaml" "" inference read_through 8MiB
  load n4 "$WORK/job.yaml" || return 1
  [ "$(field owner)" = 0 ] && [ "$(field store)" = "$ITEMS" ] || return 1
  local by_addr=0 by_job=0 n
  for n in n1 n2 n3; do
    by_addr=$((by_addr + $(cache_metric $n 'aggswitch_cache_refused_total{reason="address"}')))
    by_job=$((by_job + $(cache_metric $n 'aggswitch_cache_refused_total{reason="job"}')))
  done
  report "refused by address $by_addr, by job $by_job"
  [ "$by_addr" -ge 3 ] && [ "$by_job" -ge 3 ] && grep -q 'refused a connection from 10.0.30.99' "$WORK"/cached-n*.log
}
check "a node outside allow.nodes and a job outside allow.jobs are refused, counted, and read the store" check_refused

# 11 (before a node is killed). Python, with Debian's python3 (torch, numpy).
if [ -n "$PY_PATH" ]; then
  check_python() {
    loader_yaml "$WORK/py.yaml" n2 train read_through 4MiB
    topo_exec n2 env PYTHONPATH="$PY_PATH" /usr/bin/python3 "$HERE/../../python/tests/cache_check.py" \
      --config "$WORK/py.yaml" --verify-against "$WORK/store" >"$WORK/py.out" 2>&1
    local rc=$?
    while read -r line; do report "$line"; done <"$WORK/py.out"
    return $rc
  }
  check "Python: aggswitch.cache Loader, CacheDataset under a DataLoader, CacheBatches, byte-identical" check_python
fi

# 8. An owner killed mid-load.
check_owner_killed() {
  loader_yaml "$WORK/kill.yaml" "" train read_through 2MiB
  local before
  before=$(store_gets)
  ip netns exec "$(topo_ns n4)" "$AGG_LOAD" --config "$WORK/kill.yaml" --verify-against "$WORK/store" --requests 60 \
    --interval-ms 40 >"$WORK/kill.out" 2>&1 &
  local pid=$!
  sleep 1
  kill -KILL "${CACHED_PID[n1]}"
  wait $pid || { tail -3 "$WORK/kill.out"; return 1; }
  cp "$WORK/kill.out" "$WORK/load.out"
  report "$(tail -1 "$WORK/kill.out")"
  report "store GETs during the load: $(( $(store_gets) - before ))"
  [ "$(field mismatches)" = 0 ] && [ "$(field store)" = 0 ] && [ "$(field holder_failures)" -ge 1 ] &&
    [ "$(field replica)" -gt 0 ] &&
    awk -v p="$(field p99_ms)" 'BEGIN { exit !(p < 2500) }'
}
check "owner killed mid-load: the replicas serve, byte-identical, no store reads, p99 under 2.5 s" check_owner_killed

# 9. GPU.
check_gpu() {
  if load n4 "$WORK/n4.yaml" --component gpu --requests 1; then return 1; fi
  report "$(tail -1 "$WORK/load.err")"
  grep -q 'request.component gpu is unsupported on this host' "$WORK/load.err"
}
check "the gpu component is refused: unsupported on this host" check_gpu

# 10. Through the switch; metrics.
check_switch_carried() {
  local tx
  tx=$(curl -fsS -m 2 "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk '/^aggswitch_port_tx_bytes_total/ && /port="p5"/ { print $2 }')
  report "aggswitch sent $tx bytes to n4's port; the dataset is $SOURCE_BYTES bytes"
  [ -n "$tx" ] && awk -v t="$tx" -v s="$SOURCE_BYTES" 'BEGIN { exit !(t > 3 * s) }'
}
check "aggswitch carried the cache traffic (n4's port sent more than 3 passes' worth)" check_switch_carried
check_promtool() {
  topo_exec n2 curl -fsS -m 2 http://127.0.0.1:9480/metrics >"$WORK/cache.prom" || return 1
  promtool check metrics <"$WORK/cache.prom"
}
check "promtool check metrics accepts agg-cached's /metrics" check_promtool

# A clean stop: SIGTERM, exit 0, the node out of its records and the node list.
check_clean_stop() {
  kill -TERM "${CACHED_PID[n2]}"
  local i
  for i in $(seq 1 100); do kill -0 "${CACHED_PID[n2]}" 2>/dev/null || break; sleep 0.1; done
  wait "${CACHED_PID[n2]}"
  local rc=$? left
  left=$("${ETCDCTL[@]}" get --prefix /aggswitch/cache/ --print-value-only | grep -c '"node":"n2"')
  report "agg-cached on n2 exited $rc; records still naming n2: $left; $(grep -o 'withdrawn from .*' "$WORK/cached-n2.log")"
  [ "$rc" -eq 0 ] && [ "$left" -eq 0 ]
}
check "agg-cached stops on SIGTERM with exit 0, withdrawn from its records" check_clean_stop
kill -TERM "${CACHED_PID[n3]}" 2>/dev/null

finish
