#!/usr/bin/env bash
# Fuzzes at length: builds the libFuzzer harnesses (tests/fuzz) in build-fuzz
# with clang, then runs each for 10^7 inputs or 10 minutes, whichever comes
# first, and prints per harness its execs, execs/s and findings.
#
#   scripts/fuzz.sh                          every harness
#   scripts/fuzz.sh api_fuzz tan_fuzz        only these
#   scripts/fuzz.sh --minutes 2 wire_fuzz    shorter (or --runs N)
#
# Harnesses: every agg_fuzz() of tests/fuzz/CMakeLists.txt.
# Each one's corpus grows in build-fuzz/fuzz/<harness>/corpus/ from run to
# run (seeded from tests/fuzz/corpus/<harness>/); its log is
# build-fuzz/fuzz/<harness>/log. An input that crashes, leaks, hangs or runs
# out of memory is saved in build-fuzz/fuzz/<harness>/findings/ (the path is
# printed); tests/fuzz/README.md says how to turn it into a regression input.
# Exit status 0 when nothing was found.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t HARNESSES < <(sed -n 's/^agg_fuzz(NAME \([a-z_]*\) .*/\1/p' tests/fuzz/CMakeLists.txt)
minutes=10
runs=10000000
picked=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *_fuzz) picked+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument $1 (harnesses: ${HARNESSES[*]})" >&2; exit 2 ;;
  esac
done
if [ ${#picked[@]} -eq 0 ]; then picked=("${HARNESSES[@]}"); fi

cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DAGG_FUZZ=ON -DAGG_BUILD_TESTS=OFF -DAGG_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target "${picked[@]}" -j "$(nproc)"

failed=()
summary=()
for h in "${picked[@]}"; do
  out="build-fuzz/fuzz/$h"
  echo "== $h: up to $runs inputs or $minutes min"
  mkdir -p "$out"
  if ! tests/fuzz/run_fuzz.sh "build-fuzz/tests/fuzz/$h" --seconds $((minutes * 60)) --runs "$runs" \
       --corpus "$out/corpus" --findings "$out/findings" --log "$out/log" | tee "$out/result"; then
    failed+=("$h")
  fi
  summary+=("$(tail -n 1 "$out/result")")
done

echo "== summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "findings in: ${failed[*]} (inputs under build-fuzz/fuzz/<harness>/findings/)"
  exit 1
fi
