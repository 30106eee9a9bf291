#!/usr/bin/env bash
# Quick start, step 2: install what is missing, build, and run every test.
#
#   1. a debug build with AddressSanitizer + UBSan runs the unit and in-process
#      DPDK tests;
#   2. the meson build must build the same targets (here at -O0 without debug
#      info, which checks its definition in a quarter of a release build's time;
#      the CMake builds compile and test the code);
#   3. the libFuzzer harnesses (tests/fuzz, clang) run for 30 s each over their
#      seed corpora, regression inputs included; any finding fails;
#   4. the meson build defines the release build's tests
#      (scripts/test_list_parity.sh), and the two install the same files
#      (scripts/install_parity.sh);
#   5. the release build runs everything: unit, eal (in-process DPDK) and system
#      (network namespaces, needs root). ctest's summary is the last line.
#
#   scripts/test.sh            all of it
#   scripts/test.sh --fast     only the release build's unit tests
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

if [ "${1:-}" = "--fast" ]; then
  scripts/build.sh build
  exec ctest --test-dir build -L unit --output-on-failure
fi

echo "== debug build with address,undefined sanitizers"
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DAGG_SANITIZE=address,undefined -DAGG_BUILD_BENCH=OFF
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-asan -L 'unit|eal' --output-on-failure

echo "== meson build"
if [ ! -d build-meson ]; then meson setup build-meson --buildtype=plain >/dev/null; fi
ninja -C build-meson >/dev/null
echo "meson build: ok"

echo "== fuzz harnesses, 30 s each"
# Only what the harnesses link is built; tests/fuzz/README.md.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DAGG_FUZZ=ON -DAGG_BUILD_TESTS=OFF -DAGG_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz -j "$(nproc)"
ctest --test-dir build-fuzz -L fuzz --output-on-failure -j "$(nproc)"

echo "== release build, every test"
scripts/build.sh build
scripts/test_list_parity.sh build build-meson
scripts/install_parity.sh build build-meson
ctest --test-dir build --output-on-failure
