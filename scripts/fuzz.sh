#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang-14 + ASan + UBSan) in build-fuzz and runs each
# for SECONDS (default 60), starting from the seed corpus in tests/fuzz/corpus/<target>/. New
# inputs go to build-fuzz/corpus/<target>/ (the seeds in the repo are left alone); a crash, leak,
# timeout or out-of-memory input is written to build-fuzz/artifacts/ and fails the script.
#   scripts/fuzz.sh [SECONDS]        CI: scripts/fuzz.sh 10
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SECONDS_EACH=${1:-60}
JOBS=${JOBS:-2}
CC=${CC:-clang-14}
CXX=${CXX:-clang++-14}
if ! command -v "$CXX" >/dev/null || [[ -z $("$CXX" -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null | grep /) ]]; then
  echo "fuzz: needs $CXX with libFuzzer (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi
[[ -d report/web/node_modules ]] || (cd report/web && npm ci)
CC=$CC CXX=$CXX cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVRAMTRACE_BUILD_TESTS=OFF -DVRAMTRACE_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$JOBS" --target vt_fuzz_trace_reader vt_fuzz_report_json
mkdir -p build-fuzz/artifacts
status=0
for target in trace_reader report_json; do
  work=build-fuzz/corpus/$target
  mkdir -p "$work"
  echo "== fuzz $target for ${SECONDS_EACH}s (seeds: $(ls tests/fuzz/corpus/$target | wc -l))"
  dict=()
  [[ -f tests/fuzz/$target.dict ]] && dict=(-dict=tests/fuzz/$target.dict)
  if ! build-fuzz/bin/vt_fuzz_$target "${dict[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 \
       -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix=build-fuzz/artifacts/$target- "$work" tests/fuzz/corpus/$target \
       2>&1 | tee build-fuzz/fuzz-$target.log | grep -E "^(#[0-9]+ +(DONE|INITED)|stat::|==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)"; then
    :
  fi
  if ! grep -q "Done [0-9]* runs" build-fuzz/fuzz-$target.log ||
     grep -q "runtime error:" build-fuzz/fuzz-$target.log; then
    echo "fuzz $target: FAILED (see build-fuzz/fuzz-$target.log and build-fuzz/artifacts/)" >&2
    status=1
  fi
done
exit $status
