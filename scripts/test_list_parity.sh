#!/usr/bin/env bash
# The meson build defines the tests the CMake build defines, under the same
# names and with the same labels (meson's suites): both builds' test lists are
# read from their configured build directories, nothing is built or run.
# Prints each test that only one build has, or that has other labels in the
# other, and fails on any.
#
#   scripts/test_list_parity.sh [CMAKE_BUILD_DIR] [MESON_BUILD_DIR]   (build, build-meson)
#
# system_package is CMake's alone: it installs the .deb that CPack builds, and
# meson has no packaging.
set -euo pipefail
cd "$(dirname "$0")/.."
CMAKE_BUILD="${1:-build}"
MESON_BUILD="${2:-build-meson}"
CMAKE_ONLY="system_package"
WORK=$(mktemp -d /tmp/aggswitch-tests.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# One line per test: NAME LABEL[,LABEL...], labels sorted.
ctest --test-dir "$CMAKE_BUILD" --show-only=json-v1 | CMAKE_ONLY="$CMAKE_ONLY" python3 -c '
import json, os, sys
skip = set(os.environ["CMAKE_ONLY"].split())
for t in json.load(sys.stdin)["tests"]:
    if t["name"] in skip:
        continue
    labels = [p["value"] for p in t.get("properties", []) if p["name"] == "LABELS"]
    print(t["name"], ",".join(sorted(labels[0] if labels else [])))
' | sort >"$WORK/cmake"
meson introspect --tests "$MESON_BUILD" | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    print(t["name"], ",".join(sorted(s.split(":")[-1] for s in t["suite"])))
' | sort >"$WORK/meson"

if ! diff "$WORK/cmake" "$WORK/meson" >"$WORK/diff"; then
  echo "the two builds define different tests (< CMake only, > meson only; name labels):"
  grep '^[<>]' "$WORK/diff"
  exit 1
fi
echo "test list parity: meson defines the $(wc -l <"$WORK/meson") tests CMake defines"
