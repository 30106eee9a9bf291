#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
exec scripts/demo.sh build "$@"
