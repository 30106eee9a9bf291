#!/usr/bin/env bash
# Builds the Debian packages to install on other machines (cmake/Packaging.cmake):
# a release build for /usr (binaries in /usr/bin, the unit in
# /usr/lib/systemd/system, the Python package in /usr/lib/python3.X/dist-packages),
# for any x86-64-v2 CPU rather than this machine's (the reduce kernels still
# pick AVX2 or AVX-512 at run time), without tests or benchmarks; then cpack.
#
#   scripts/package.sh [BUILD_DIR]     # default build-deb; the .deb files land in it
#   dpkg -i build-deb/aggswitch_*.deb build-deb/python3-aggswitch_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
DIR=${1:-build-deb}
scripts/build.sh "$DIR" -DCMAKE_INSTALL_PREFIX=/usr -DAGG_MARCH=x86-64-v2 \
  -DAGG_BUILD_TESTS=OFF -DAGG_BUILD_BENCH=OFF
(cd "$DIR" && cpack -G DEB)
ls -l "$DIR"/*.deb
