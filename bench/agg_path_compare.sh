#!/usr/bin/env bash
# The aggregation path's cost per contribution (agg_path_bench) of two
# builds, measured in turns in one script, so that both see the same
# machine: BASE, NEW, BASE, NEW, ... Prints each run's figure, then the
# median of each build and their ratio, NEW / BASE:
#
#   agg_path_compare case=members=8,elems=256,int32 base=223 new=225 ratio=1.009
#
# Usage: bench/agg_path_compare.sh BASE_BENCH NEW_BENCH [--turns N] [--huge]
#        [-- AGG_PATH_BENCH OPTIONS]
# The two arguments are agg_path_bench binaries (build one from an older
# commit: git worktree add /tmp/base <commit>; cmake -S /tmp/base -B
# /tmp/base/build -G Ninja; cmake --build /tmp/base/build --target
# agg_path_bench). Each turn runs both with the same options (default:
# --members 8 --elems 256 --dtypes int32 --rounds 400).
set -u
if [ $# -lt 2 ]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
fi
BASE=$1
NEW=$2
shift 2
TURNS=9
HUGE=()
while [ $# -gt 0 ]; do
  case "$1" in
    --turns) TURNS="${2:?--turns needs a number}"; shift 2 ;;
    --huge) HUGE=(--huge); shift ;;
    --) shift; break ;;
    *) echo "agg_path_compare.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
OPTS=("$@")
[ ${#OPTS[@]} -eq 0 ] && OPTS=(--members 8 --elems 256 --dtypes int32 --rounds 400)

# One run's cycles per contribution.
run() {
  "$1" "${HUGE[@]}" "${OPTS[@]}" 2>/dev/null |
    sed -n 's/^agg_path .*cycles_per_contribution=\([0-9]*\).*/\1/p' | head -1
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

base_runs=()
new_runs=()
for turn in $(seq 1 "$TURNS"); do
  b=$(run "$BASE")
  n=$(run "$NEW")
  if [ -z "$b" ] || [ -z "$n" ]; then
    echo "agg_path_compare.sh: a run printed no figure (turn $turn)" >&2
    exit 1
  fi
  echo "turn $turn: base $b new $n"
  base_runs+=("$b")
  new_runs+=("$n")
done
mb=$(printf '%s\n' "${base_runs[@]}" | median)
mn=$(printf '%s\n' "${new_runs[@]}" | median)
label=$(echo "${OPTS[*]}" | sed 's/--\([a-z]*\) \([^ ]*\)/\1=\2/g; s/ /,/g')
echo "agg_path_compare case=$label base=$mb new=$mn ratio=$(awk -v b="$mb" -v n="$mn" 'BEGIN { printf "%.3f", n / b }')"
