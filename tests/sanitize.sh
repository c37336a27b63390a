#!/usr/bin/env bash
# Builds vramtrace with sanitizers and runs the tests under them (docs/RELIABILITY.md):
#   build-asan: ASan + UBSan, the whole ctest suite;
#   build-tsan: TSan, the unit tests, the threaded/fork/crash e2e tests, the reliability tests.
#   tests/sanitize.sh [asan|tsan]...   (default: both)   JOBS=2 by default
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
JOBS=${JOBS:-2}
[[ -d report/web/node_modules ]] || (cd report/web && npm ci)
which=("$@")
((${#which[@]})) || which=(asan tsan)

for kind in "${which[@]}"; do
  case $kind in
    asan) san=address,undefined; tests=() ;;
    # The tests with threads, fork, crashes, signals; the HTML and stand-in tests add nothing here.
    tsan) san=thread; tests=(-R "unit:|e2e:(16 threads|a fork|a target that crashes|vramtrace run|LD_PRELOAD alone)|reliability:|fuzz: replay") ;;
    *) echo "usage: $0 [asan|tsan]..." >&2; exit 2 ;;
  esac
  dir=build-$kind
  echo "== $kind: -DVRAMTRACE_SANITIZE=$san in $dir"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVRAMTRACE_SANITIZE="$san" >/dev/null
  cmake --build "$dir" -j"$JOBS"
  # halt_on_error: the first finding fails the test. detect_leaks stays on for our binaries.
  (cd "$dir" && ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=1} \
     UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
     TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} \
     ctest -j"$JOBS" --output-on-failure "${tests[@]}")
done
