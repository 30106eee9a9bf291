#!/usr/bin/env bash
# The data cache against its external store: the same dataset (1 GiB by
# default) loaded three ways, interleaved in one run, every host a network
# namespace on a running aggswitch (af_packet ports):
#   cache          agg-load from three agg-cached nodes (UCX over TCP, pinned
#                  with ucx_tls: tcp; one-sided gets, CRC-32C checked), the
#                  loader on a fourth node, so every item is remote;
#   store_limited  agg-load --source store from an HTTP store whose link is
#                  rate-limited with tc tbf (--rate, 100mbit by default): the
#                  remote storage a whole cluster shares;
#   store          the same store without the limit;
# and, as UCX's own ceiling on the same path, ucx_perftest's ucp_get of one
# item's size, 16 in flight as the loader keeps, between a cache node and the
# loader's namespace, through the same switch.
#
#   scripts/install-deps.sh && scripts/build.sh
#   sudo bench/cache_load.sh [--size-mib 1024] [--item-kib 1024] [--request-mib 16]
#                            [--rounds 2] [--rate 100mbit] [--build-dir build]
#                            [--out bench/results/cache-latest.txt]
#
# Prints, per method, the median over rounds of the throughput (MB/s, 10^6
# bytes) and of each round's p50 and p99 request latency, then the ratios:
#   cache / store_limited   target >= 5
#   cache / ucx_perftest    target >= 0.5
# About 4 minutes with the defaults (the limited store takes 86 s per round).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SIZE_MIB=1024
ITEM_KIB=1024
REQUEST_MIB=16
ROUNDS=2
RATE=100mbit
BUILD=build
OUT="$ROOT/bench/results/cache-latest.txt"
while [ $# -gt 0 ]; do
  case "$1" in
    --size-mib) SIZE_MIB=$2; shift 2 ;;
    --item-kib) ITEM_KIB=$2; shift 2 ;;
    --request-mib) REQUEST_MIB=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BUILD=$(cd "$ROOT" && realpath "$BUILD")
AGGSWITCH="$BUILD/tools/aggswitch/aggswitch"
AGG_CACHED="$BUILD/tools/agg-cached/agg-cached"
AGG_LOAD="$BUILD/tools/agg-load/agg-load"
for b in "$AGGSWITCH" "$AGG_CACHED" "$AGG_LOAD"; do
  [ -x "$b" ] || { echo "missing $b: run scripts/build.sh" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "missing ucx_perftest: scripts/install-deps.sh" >&2; exit 2; }
source "$ROOT/tests/lib/topology.sh"

WORK=$(mktemp -d /tmp/aggswitch-cache-bench.XXXXXX)
HTTP_PORT=19484
topo_init cb
cleanup_all() { topo_cleanup; rm -rf "$WORK" /dev/shm/aggswitch-cache.b[1-3]; }
trap cleanup_all EXIT

HOSTS=(st sl ed b1 b2 b3 ld)
declare -A ADDR=([st]=10.0.31.50 [sl]=10.0.31.51 [ed]=10.0.31.60 [b1]=10.0.31.1 [b2]=10.0.31.2
                 [b3]=10.0.31.3 [ld]=10.0.31.4)
for i in "${!HOSTS[@]}"; do
  h=${HOSTS[$i]}
  topo_host "$h" "cb-p$i"
  topo_addr "$h" eth0 "${ADDR[$h]}/24"
done
# The limited store's link: tbf on its egress (what it sends to loaders).
topo_exec sl tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 100ms

cat >"$WORK/switch.yaml" <<YAML
eal: {lcores: "0,1", main_lcore: 0, memory_mb: 1024, file_prefix: agg-cb-$$}
switch: {mac: 02:a9:9c:00:00:cb, addresses: [10.0.31.254/24]}
ports:
$(for i in "${!HOSTS[@]}"; do echo "  - {name: p$i, devargs: \"net_af_packet_cb$i,iface=cb-p$i,framecnt=4096\", access: 10}"; done)
mempool: {mbufs: 32767}
http: {listen: "127.0.0.1:$HTTP_PORT"}
YAML
run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/aggswitch.log" || exit 1

echo "writing the dataset: $SIZE_MIB MiB in items of $ITEM_KIB KiB" >&2
mkdir -p "$WORK/store/data"
python3 - "$WORK/store" "$SIZE_MIB" "$ITEM_KIB" <<'PY'
import os, sys
root, size_mib, item_kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n = size_mib * 1024 // item_kib
with open(os.path.join(root, "MANIFEST"), "w") as m:
    for i in range(n):
        name = f"data/{i:06d}.bin"
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(item_kib * 1024))
        m.write(f"{name} {item_kib * 1024}\n")
PY

for h in st sl; do
  ip netns exec "$(topo_ns $h)" python3 -m http.server 8000 --bind "${ADDR[$h]}" \
    --directory "$WORK/store" >"$WORK/http-$h.log" 2>&1 &
  topo_track_pid $!
done
ip netns exec "$(topo_ns ed)" etcd --data-dir "$WORK/etcd" --listen-client-urls http://10.0.31.60:2379 \
  --advertise-client-urls http://10.0.31.60:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster default=http://127.0.0.1:2380 >"$WORK/etcd.log" 2>&1 &
topo_track_pid $!
sleep 2

MEMORY_MIB=$(( SIZE_MIB / 3 + SIZE_MIB / 10 + 64 ))
CACHED_PIDS=()
for n in b1 b2 b3; do
  cat >"$WORK/cache-$n.yaml" <<YAML
cache:
  node: $n
  nodes: [b1, b2, b3]
  listen: ${ADDR[$n]}:7400
  memory: ${MEMORY_MIB}MiB
  store: http://10.0.31.50:8000
  dataset: bench
  records: etcd://10.0.31.60:2379
  replicas: 1
  allow: {nodes: [10.0.31.0/24]}
  ucx_tls: tcp
  metrics: 127.0.0.1:9480
YAML
  ip netns exec "$(topo_ns $n)" "$AGG_CACHED" --config "$WORK/cache-$n.yaml" >"$WORK/cached-$n.log" 2>&1 &
  topo_track_pid $!
  CACHED_PIDS+=($!)
done
echo "filling the cache from the store" >&2
filled() {
  for n in b1 b2 b3; do
    topo_exec $n curl -fsS -m 2 http://127.0.0.1:9480/metrics 2>/dev/null |
      grep -q '^aggswitch_cache_fill_complete 1' || return 1
  done
}
for _ in $(seq 1 1200); do filled && break; sleep 0.5; done
filled || { echo "the fill did not complete" >&2; tail -3 "$WORK"/cached-*.log >&2; exit 1; }

loader_yaml() {  # FILE STORE_HOST
  cat >"$1" <<YAML
loader:
  records: etcd://10.0.31.60:2379
  dataset: bench
  job: bench
  store: http://${ADDR[$2]}:8000
  request: {amount: ${REQUEST_MIB}MiB, component: cpu}
  ucx_tls: tcp
YAML
}
loader_yaml "$WORK/cache.yaml" st
loader_yaml "$WORK/store.yaml" st
loader_yaml "$WORK/limited.yaml" sl

field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2 }'; }
declare -A MBPS P50 P99
record() {  # METHOD SUMMARY_LINE
  MBPS[$1]+="$(field "$2" MBps) "
  P50[$1]+="$(field "$2" p50_ms) "
  P99[$1]+="$(field "$2" p99_ms) "
}
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

PERF_PORT=13337
ITEM_BYTES=$((ITEM_KIB * 1024))
for r in $(seq 1 "$ROUNDS"); do
  for method in cache store_limited store perftest; do
    case $method in
      cache) line=$(topo_exec ld "$AGG_LOAD" --config "$WORK/cache.yaml" | tail -1) ;;
      store_limited) line=$(topo_exec ld "$AGG_LOAD" --config "$WORK/limited.yaml" --source store | tail -1) ;;
      store) line=$(topo_exec ld "$AGG_LOAD" --config "$WORK/store.yaml" --source store | tail -1) ;;
      perftest)
        PERF_PORT=$((PERF_PORT + 1))
        ip netns exec "$(topo_ns b1)" env UCX_TLS=tcp ucx_perftest -p "$PERF_PORT" >"$WORK/perf-server.log" 2>&1 &
        perf_server=$!
        sleep 1
        # -O 16: as many gets in flight as the loader's window (loader.window).
        final=$(topo_exec ld env UCX_TLS=tcp ucx_perftest 10.0.31.1 -p "$PERF_PORT" -t ucp_get \
          -s "$ITEM_BYTES" -n $(( SIZE_MIB * 1024 / ITEM_KIB )) -w 16 -O 16 2>/dev/null | awk '/^Final:/')
        wait "$perf_server"
        # Final: iterations, latency p50/avg/overall (us), bandwidth avg/overall (MiB/s), rates
        mbps=$(awk '{ printf "%.1f", $7 * 1.048576 }' <<<"$final")
        p50=$(awk '{ printf "%.2f", $3 / 1000 }' <<<"$final")
        line="MBps=$mbps p50_ms=$p50 p99_ms=-"
        ;;
    esac
    echo "round $r $method: $line" >&2
    record $method "$line"
  done
done

{
  echo "# bench/cache_load.sh --size-mib $SIZE_MIB --item-kib $ITEM_KIB --request-mib $REQUEST_MIB --rounds $ROUNDS --rate $RATE"
  echo "# $(date -u +%FT%TZ), $(nproc) CPUs, UCX $(ucx_info -v | awk '/Version/ {print $3}'), transport $(field "$(topo_exec ld "$AGG_LOAD" --config "$WORK/cache.yaml" --requests 1 | tail -1)" transport)"
  printf '%-14s %10s %10s %10s   (medians over %s rounds; requests of %s MiB, items of %s KiB)\n' \
    method MB/s p50_ms p99_ms "$ROUNDS" "$REQUEST_MIB" "$ITEM_KIB"
  for m in cache store_limited store perftest; do
    printf '%-14s %10s %10s %10s\n' "$m" "$(median "${MBPS[$m]}")" "$(median "${P50[$m]}")" \
      "$(median "${P99[$m]}" | sed 's/^$/-/')"
  done
  c=$(median "${MBPS[cache]}")
  awk -v c="$c" -v l="$(median "${MBPS[store_limited]}")" -v s="$(median "${MBPS[store]}")" \
      -v p="$(median "${MBPS[perftest]}")" 'BEGIN {
    printf "cache / store_limited = %.1fx (target >= 5): %s\n", c / l, (c / l >= 5 ? "met" : "NOT MET")
    printf "cache / store         = %.2fx\n", c / s
    printf "cache / ucx_perftest  = %.2fx (target >= 0.5): %s\n", c / p, (c / p >= 0.5 ? "met" : "NOT MET")
  }'
} | tee "$OUT"
# The daemons first, while etcd and the switch are there to withdraw them.
kill -TERM "${CACHED_PIDS[@]}" 2>/dev/null
wait "${CACHED_PIDS[@]}" 2>/dev/null
