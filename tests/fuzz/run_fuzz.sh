#!/usr/bin/env bash
# Runs one libFuzzer harness of tests/fuzz over its seeds and says what it
# did. The one place that knows how a harness is run: ctest -L fuzz (agg_fuzz()
# in cmake/AggHelpers.cmake) and scripts/fuzz.sh both call it.
#
#   tests/fuzz/run_fuzz.sh build-fuzz/tests/fuzz/wire_fuzz --seconds 30 --findings DIR
#   tests/fuzz/run_fuzz.sh BIN --seconds 600 --runs 10000000 --corpus DIR --findings DIR --log FILE
#
# The corpus fuzzed is --corpus DIR (kept, and grown, from run to run) or a
# temporary directory; either way it first gets the seeds, which are never
# written to: tests/fuzz/corpus/<harness>/ and, for config_fuzz, the example
# configs in config/examples/. libFuzzer runs every seed before it mutates
# any, so a seed that crashes (a regression input) fails the run at once.
# Crash, leak, timeout and out-of-memory inputs are saved in --findings DIR
# (default: findings/<harness>/ beside the binary, where ctest's go too).
# Arguments after -- go to libFuzzer.
#
# Prints one line, "<harness>: N execs, R execs/s, U new units, F findings",
# and on a finding libFuzzer's report (what broke, the top of the stack) and
# where the input is. Exit status 0 when nothing was found.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

bin="${1:?usage: run_fuzz.sh HARNESS [--seconds S] [--runs N] [--corpus DIR] [--findings DIR] [--log FILE] [-- FLAGS]}"
shift
name="$(basename "$bin")"
seconds=30 runs="" corpus="" findings="" log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --corpus) corpus="$2"; shift 2 ;;
    --findings) findings="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "run_fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
corpus="${corpus:-$tmp/corpus}"
findings="${findings:-$(dirname "$bin")/findings/$name}"
log="${log:-$tmp/log}"
mkdir -p "$corpus" "$findings" "$(dirname "$log")"

# Seeds kept elsewhere in the tree, by harness.
seeds=("$here/corpus/$name")
case "$name" in
  config_fuzz) seeds+=("$root/config/examples") ;;
esac

flags=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
       -artifact_prefix="$findings/")
if [ -n "$runs" ]; then flags+=(-runs="$runs"); fi
if [ -f "$here/$name.dict" ]; then flags+=(-dict="$here/$name.dict"); fi

# Readable stacks: ASan looks for llvm-symbolizer on PATH; Debian names it by version.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && ! command -v llvm-symbolizer >/dev/null; then
  for s in /usr/lib/llvm-*/bin/llvm-symbolizer; do
    if [ -x "$s" ]; then export ASAN_SYMBOLIZER_PATH="$s"; fi
  done
fi
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

status=0
start=$(date +%s%N)
"$bin" "${flags[@]}" "$@" "$corpus" "${seeds[@]}" >"$log" 2>&1 || status=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 + 1 ))

stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
execs="$(stat number_of_executed_units)"
rate="$(stat average_exec_per_sec)"
# libFuzzer divides by whole seconds: 0 for a run shorter than one.
if [ "${rate:-0}" -eq 0 ] && [ "${execs:-0}" -gt 0 ]; then rate=$((execs * 1000 / elapsed_ms)); fi
units="$(stat new_units_added)"
new_findings=()
while IFS= read -r f; do
  case "$(basename "$f")" in crash-* | leak-* | timeout-* | oom-*) new_findings+=("$f") ;; esac
done < <(sed -n 's/.*Test unit written to //p' "$log")

if [ "$status" -ne 0 ] || [ ${#new_findings[@]} -gt 0 ]; then
  kept=""
  if [ "$log" != "$tmp/log" ]; then kept=" ($log)"; fi
  # The report's first lines (what broke, the top of the stack), then the
  # end of the log (the input, where it was saved).
  first="$(grep -n -m 1 -E 'ERROR: |invariant broken|runtime error' "$log" | cut -d: -f1)"
  echo "---- $name's log$kept:"
  if [ -n "$first" ]; then sed -n "${first},$((first + 40))p" "$log"; echo "[...]"; fi
  tail -n 15 "$log"
  echo "----"
  for f in "${new_findings[@]}"; do echo "$name: finding: $f"; done
  if [ "$status" -eq 0 ]; then status=1; fi
fi
echo "$name: ${execs:-0} execs, ${rate:-0} execs/s, ${units:-0} new units, ${#new_findings[@]} findings"
exit "$status"
