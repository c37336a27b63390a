#!/usr/bin/env bash
# The test command: set up (scripts/setup.sh), build, run every test with ctest, then a bounded
# libFuzzer session per fuzz target (tests/fuzz.sh --ci: fixed seed and runs, about 20 s,
# both targets at once; built in build-fuzz with clang-14). Exits non-zero when any test fails,
# the fuzz targets do not build, or the fuzzers find anything (the path of the input that shows
# it is printed).
#   VRAMTRACE_NO_FUZZ=1 tests/test.sh     skips the fuzz session
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fuzz=1
[[ ${VRAMTRACE_NO_FUZZ:-0} == 1 ]] && fuzz=0
if ((fuzz)); then "$ROOT/scripts/setup.sh" --with-fuzz; else "$ROOT/scripts/setup.sh"; fi
status=0
# The fuzz targets (about 160 CPU-s of clang with ASan) are built while ctest runs, at the lowest
# priority: many tests wait on the programs they run, and that idle CPU builds them, while the
# tests keep the CPU whenever they want it. The fuzz session itself runs after ctest, alone: its
# runs are fixed but capped in time, and a loaded machine must not cut them short.
fuzz_build=""
if ((fuzz)); then
  mkdir -p "$ROOT/build-fuzz"
  nice -n 19 "$ROOT/tests/fuzz.sh" --build >"$ROOT/build-fuzz/build.log" 2>&1 &
  fuzz_build=$!
fi
(cd "$ROOT/build" && ctest --output-on-failure -j"$(nproc)") || status=1
if ((fuzz)); then
  rc=0
  wait "$fuzz_build" || rc=$?
  if ((rc)); then
    echo "fuzz: building the targets failed (exit $rc); the end of build-fuzz/build.log:" >&2
    tail -n 40 "$ROOT/build-fuzz/build.log" >&2
    status=1
  else
    "$ROOT/tests/fuzz.sh" --ci || status=1
  fi
fi
exit $status
