#!/usr/bin/env bash
# Configures and builds aggswitch with CMake + Ninja.
#
#   scripts/build.sh                 release build in build/
#   scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DAGG_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
shift || true
cmake -S . -B "$BUILD_DIR" -G Ninja "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
