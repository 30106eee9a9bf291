#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, install the Python
# package, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
# The Python package, for Debian's /usr/bin/python3 (under /usr/local).
cmake --install build --component python >/dev/null
/usr/bin/python3 -c 'import aggswitch, aggswitch.torch' &&
  echo "quickstart: the Python package is installed: python3 -c 'import aggswitch'"
exec scripts/demo.sh build "$@"
