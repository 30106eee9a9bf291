#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and run aggswitch.
# Idempotent: installed packages are left alone, and apt is only asked when
# something is missing.
#
#   scripts/install-deps.sh            build + test + run
#   scripts/install-deps.sh --bench    also the benchmark baselines (OVS-DPDK, Gloo, perf) and
#                                      matplotlib for their plots
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build meson pkg-config git python3
  libdpdk-dev dpdk dpdk-dev                 # DPDK 22.11, testpmd, dpdk-telemetry.py
  libyaml-cpp-dev libcli11-dev libcivetweb-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  iproute2 iputils-ping ethtool curl procps # system tests and the demo
  prometheus                                # promtool and a real scrape in the system test
  tshark                                    # the Wireshark dissector test
  clang libclang-rt-14-dev llvm-14          # tests/fuzz (libFuzzer, llvm-symbolizer); the XDP program
  libxdp-dev libbpf-dev                     # the client's AF_XDP transport
  python3-dev python3-pybind11 python3-numpy  # the Python package (python/) and its tests
  python3-torch libtorch-dev                # the PyTorch backend and comm hook, and their tests
  libopenmpi-dev openmpi-bin python3-mpi4py # libaggswitch_mpi.so and its tests
  libsqlite3-dev sqlite3                     # agg-intcollector's record table
  libucx-dev ucx-utils                      # the data cache's RDMA transport (UCX; ucx_perftest)
  libcurl4-openssl-dev                      # the data cache's etcd gateway and HTTP(S) store
  etcd-server etcd-client                   # the data cache's record service, in its tests
  python3-yaml                              # the data cache's loader config, from Python
  libsystemd-dev                            # sd_notify: readiness and the watchdog under systemd
  help2man                                  # the man pages, from each program's --help
  dpkg-dev                                  # cpack's dpkg-shlibdeps: the .deb's dependencies
)
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(openvswitch-switch-dpdk)
  PACKAGES+=(libgloo-dev linux-perf)  # bench/allreduce.sh
  PACKAGES+=(python3-matplotlib)      # bench/plot.py: the benchmarks' PNG plots
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
