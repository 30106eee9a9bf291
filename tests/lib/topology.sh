# Helpers to build and tear down small test topologies: network namespaces
# with kernel networking, joined by veth pairs to af_packet ports of a switch
# running in the root namespace. Sourced by the system tests and the demo.
#
#   source tests/lib/topology.sh
#   topo_init demo                       # names everything "demo-*", registers cleanup
#   topo_host h0 agg-sw0                 # netns demo-h0, veth agg-sw0 <-> eth0
#   topo_addr h0 eth0 10.0.10.1/24
#   topo_vlan h2 20 10.0.20.3/24         # eth0.20 inside demo-h2
#   topo_exec h0 ping -c1 10.0.10.254
#   topo_cleanup                         # also runs on EXIT, INT and TERM

TOPO_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOPO_PREFIX=""
TOPO_NAMESPACES=()
TOPO_LINKS=()
TOPO_PIDS=()

topo_init() {
  TOPO_PREFIX="$1"
  trap topo_cleanup EXIT
  trap 'topo_cleanup; exit 130' INT
  trap 'topo_cleanup; exit 143' TERM
}

topo_ns() { echo "${TOPO_PREFIX}-$1"; }

# topo_host NAME SWITCH_IFACE: a namespace whose eth0 is the peer of SWITCH_IFACE.
topo_host() {
  local ns; ns=$(topo_ns "$1")
  local sw_if="$2"
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$sw_if" 2>/dev/null || true
  ip netns add "$ns"
  TOPO_NAMESPACES+=("$ns")
  ip link add "$sw_if" type veth peer name eth0 netns "$ns"
  TOPO_LINKS+=("$sw_if")
  # The switch side is a wire into the switch, not a host: without IPv6 the
  # kernel sends no ND/MLD of its own there, which af_packet would capture.
  sysctl -qw "net.ipv6.conf.$sw_if.disable_ipv6=1" 2>/dev/null || true
  ip link set "$sw_if" up
  # No offloads on the switch side: af_packet must see complete frames and checksums.
  if command -v ethtool >/dev/null; then
    ethtool -K "$sw_if" tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
    ip netns exec "$ns" ethtool -K eth0 tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  fi
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
}

topo_addr() { ip -n "$(topo_ns "$1")" addr add "$3" dev "$2"; }

# topo_vlan NAME VID ADDR: an 802.1Q sub-interface eth0.VID with ADDR. Uses the
# kernel's VLAN driver where there is one, else a userspace TAP relay
# (vlan_tap.py), which kernels built without 8021q need.
topo_vlan() {
  local ns; ns=$(topo_ns "$1")
  local dev="eth0.$2"
  if ! ip -n "$ns" link add link eth0 name "$dev" type vlan id "$2" 2>/dev/null; then
    ip netns exec "$ns" python3 "$TOPO_LIB_DIR/vlan_tap.py" eth0 "$2" &
    topo_track_pid $!
    local i
    for i in $(seq 1 50); do ip -n "$ns" link show "$dev" >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  ip -n "$ns" link set "$dev" up
  ip -n "$ns" addr add "$3" dev "$dev"
}

# topo_workers NET N: hosts w0..w(N-1), each with eth0 on the switch's port
# PREFIX-p<i> (PREFIX: topo_init's) and address NET.(i+1)/24.
topo_workers() {
  local w
  for w in $(seq 0 $(($2 - 1))); do
    topo_host "w$w" "$TOPO_PREFIX-p$w"
    topo_addr "w$w" eth0 "$1.$((w + 1))/24"
  done
}

# switch_head_yaml FILE_PREFIX MAC ADDRESS HTTP_PORT N: the start of a config
# for one aggswitch (lcores 0 and 1) with N ports p<i> on topo_workers' veths
# (port_devargs: af_packet, or choose_port_driver's), access VLAN 10, polled
# by one worker lcore, and its HTTP API on 127.0.0.1:HTTP_PORT. The caller
# adds its aggregation section.
switch_head_yaml() {
  local w ports=()
  cat <<YAML
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 512
  file_prefix: $1
switch:
  mac: $2
  addresses: [$3]
ports:
YAML
  for w in $(seq 0 $(($5 - 1))); do
    echo "  - {name: p$w, devargs: \"$(port_devargs "$TOPO_PREFIX$w" "$TOPO_PREFIX-p$w")\", access: 10}"
    ports+=("p$w")
  done
  local list
  printf -v list '%s, ' "${ports[@]}"
  cat <<YAML
workers:
  - {lcore: 1, rx: [${list%, }]}
mempool: {mbufs: 32767}
http: {listen: "127.0.0.1:$4"}
YAML
}

# in_band_switch_yaml FILE_PREFIX MAC ADDRESS HTTP_PORT N AGG_IP: a whole
# config, switch_head_yaml's with an aggregation address AGG_IP at which
# jobs register themselves in-band.
in_band_switch_yaml() {
  switch_head_yaml "$1" "$2" "$3" "$4" "$5"
  cat <<YAML
aggregation:
  address: $6
  in_band_registration: true
YAML
}

topo_mac() { ip -n "$(topo_ns "$1")" link show "${2:-eth0}" | awk '/link\/ether/ {print $2}'; }

topo_exec() {
  local ns; ns=$(topo_ns "$1"); shift
  ip netns exec "$ns" "$@"
}

# Remembers a background process to stop at cleanup.
topo_track_pid() { TOPO_PIDS+=("$1"); }

topo_cleanup() {
  local pid ns link
  for pid in "${TOPO_PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  TOPO_PIDS=()
  for ns in "${TOPO_NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  TOPO_NAMESPACES=()
  for link in "${TOPO_LINKS[@]}"; do ip link del "$link" 2>/dev/null || true; done
  TOPO_LINKS=()
}

# http_port_free PORT: nothing listens on 127.0.0.1:PORT (of this
# namespace). A test checks before it starts its switch, so that a port
# another process holds fails it at once, not checks later.
http_port_free() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
    echo "127.0.0.1:$1 is taken by another process:"
    ss -ltnp "sport = :$1" 2>/dev/null | tail -n +2
    return 1
  fi
}

# answering_pid URL: the pid of the aggswitch that answers at URL
# (http://host:port), from its /api/v1/stats; nothing when none answers.
answering_pid() {
  curl -fsS -m 2 "$1/api/v1/stats" 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["process"]["pid"])' 2>/dev/null
}

# wait_switch PID URL [SECONDS]: polls until the aggswitch with PID answers
# at URL. Fails at once when PID exits or another process answers there: a
# test must talk to the switch it started.
wait_switch() {
  local pid="$1" url="$2" limit="${3:-30}" i answered
  for i in $(seq 1 $((limit * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "aggswitch (pid $pid) exited before it answered at $url"
      return 1
    fi
    answered=$(answering_pid "$url")
    if [ -n "$answered" ]; then
      [ "$answered" = "$pid" ] && return 0
      echo "pid $answered answers at $url, not the aggswitch this test started (pid $pid)"
      return 1
    fi
    sleep 0.1
  done
  echo "aggswitch (pid $pid) did not answer at $url within $limit s"
  return 1
}

# run_switch AGGSWITCH CONFIG PORT LOG: starts aggswitch on CONFIG in the
# background (tracked for the cleanup) with its HTTP API on 127.0.0.1:PORT and
# its output in LOG, and waits until that very process answers there
# (wait_switch). Sets SWITCH_PID. Returns 1, saying why and showing the log,
# when the port is taken by another process or the switch does not come up.
run_switch() {
  local aggswitch="$1" config="$2" port="$3" log="$4"
  http_port_free "$port" || return 1
  "$aggswitch" --config "$config" --log-level info >"$log" 2>&1 &
  SWITCH_PID=$!
  topo_track_pid "$SWITCH_PID"
  if ! wait_switch "$SWITCH_PID" "http://127.0.0.1:$port" 30; then
    echo "aggswitch did not come up; its log:"
    cat "$log"
    return 1
  fi
}

# agg_total METRICS_URL NAME: aggswitch_aggregation_NAME_total summed over
# the lcores, from the switch's /metrics at METRICS_URL.
agg_total() {
  curl -fsS -m 2 "$1" |
    awk -v m="aggswitch_aggregation_$2_total{" 'index($1, m) == 1 { s += $2 } END { print s + 0 }'
}

# stop_switch: SIGTERM to run_switch's SWITCH_PID; passes when it exits 0
# (it has 10 s to). When it is gone already, says so with the end of
# SWITCH_LOG.
stop_switch() {
  if ! kill -TERM "$SWITCH_PID" 2>/dev/null; then
    echo "aggswitch is gone; its log:"; tail -20 "${SWITCH_LOG:-/dev/null}"
    return 1
  fi
  for _ in $(seq 1 100); do kill -0 "$SWITCH_PID" 2>/dev/null || break; sleep 0.1; done
  wait "$SWITCH_PID"
}

# job_placement URL JOB: "FIRST SIZE BASE" of JOB at the switch at URL (its
# slot region and the slot of its sequence number 0, GET /api/v1/jobs/JOB):
# chunk s takes slot FIRST + (BASE - FIRST + s) mod SIZE.
job_placement() {
  curl -fsS -m 2 "$1/api/v1/jobs/$2" | python3 -c '
import json, sys
p = json.load(sys.stdin)["placement"]
print(p["first"], p["size"], p["base"])'
}

# choose_port_driver: picks how switches reach their veths and how workers
# send, and says which and why. Sets AGG_PORT_DRIVER to net_af_xdp (the
# switch's ports are AF_XDP sockets, and workers may use --transport af_xdp)
# when this is root, the kernel has AF_XDP sockets, DPDK has the net_af_xdp
# driver and bpffs is mounted (libxdp keeps its programs there; mounted here
# when missing); else to net_af_packet. AGG_PORT_DRIVER=net_af_packet in the
# environment keeps af_packet.
choose_port_driver() {
  local why=""
  if [ "${AGG_PORT_DRIVER:-}" = net_af_packet ]; then
    why="AGG_PORT_DRIVER=net_af_packet"
  elif [ "$(id -u)" -ne 0 ]; then
    why="not root"
  elif ! ls "$(pkg-config --variable=libdir libdpdk 2>/dev/null || echo /usr/lib)"/librte_net_af_xdp.so* >/dev/null 2>&1; then
    why="DPDK has no net_af_xdp driver"
  elif ! python3 -c 'import socket; socket.socket(44, socket.SOCK_RAW)' 2>/dev/null; then
    why="the kernel has no AF_XDP sockets"
  elif ! mountpoint -q /sys/fs/bpf && ! mount -t bpf bpf /sys/fs/bpf 2>/dev/null; then
    why="bpffs is not mounted and cannot be"
  fi
  if [ -z "$why" ]; then
    AGG_PORT_DRIVER=net_af_xdp
    echo "ports: net_af_xdp (AF_XDP sockets on the veths)"
  else
    AGG_PORT_DRIVER=net_af_packet
    echo "ports: net_af_packet ($why)"
  fi
}

# port_devargs NAME IFACE: the DPDK devargs of a switch port on IFACE with the
# driver choose_port_driver picked.
port_devargs() { echo "${AGG_PORT_DRIVER:-net_af_packet}_$1,iface=$2"; }

# wait_http URL [SECONDS]: polls until URL answers 200.
wait_http() {
  local url="$1" limit="${2:-30}" i
  for i in $(seq 1 $((limit * 10))); do
    curl -fsS -o /dev/null "$url" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
