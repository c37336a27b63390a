#!/usr/bin/env bash
# The test command: set up (scripts/setup.sh), build, and run every test with ctest.
# Exits non-zero when any test fails.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
cd "$ROOT/build"
ctest --output-on-failure -j"$(nproc)"
