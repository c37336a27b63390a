#!/usr/bin/env bash
# The test command: set up (scripts/setup.sh), build, run every test with ctest, then a bounded
# libFuzzer session per fuzz target (tests/fuzz.sh --ci: fixed seed and runs, about 20 s,
# both targets at once; built in build-fuzz with clang-14). Exits non-zero when any test fails
# or the fuzzers find anything (the path of the input that shows it is printed).
#   VRAMTRACE_NO_FUZZ=1 tests/test.sh     skips the fuzz session
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fuzz=1
[[ ${VRAMTRACE_NO_FUZZ:-0} == 1 ]] && fuzz=0
if ((fuzz)); then "$ROOT/scripts/setup.sh" --with-fuzz; else "$ROOT/scripts/setup.sh"; fi
status=0
(cd "$ROOT/build" && ctest --output-on-failure -j"$(nproc)") || status=1
if ((fuzz)); then
  "$ROOT/tests/fuzz.sh" --ci || status=1
fi
exit $status
