#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang-14 + ASan + UBSan) in build-fuzz and fuzzes them.
#
#   tests/fuzz.sh [SECONDS]   explore: each target for SECONDS (default 60), one after the other,
#                               starting from the seed corpus in tests/fuzz/corpus/<target>/; new
#                               inputs go to build-fuzz/corpus/<target>/ (kept between runs; the
#                               seeds in the repo are left alone); findings to build-fuzz/artifacts/.
#   tests/fuzz.sh --ci        CI (tests/test.sh): a bounded session per target, both at once:
#                               a fixed seed and number of runs (about 20 s each on the 2-core
#                               development machine, at most 60 s each), a fresh corpus from the
#                               seeds only, generous per-input limits (a slow machine never fails
#                               it, only a bug does); findings to build-fuzz/ci/artifacts/.
#   tests/fuzz.sh --build     only builds the targets (tests/test.sh: niced, while ctest runs).
# A crash, sanitizer report (UBSan included), leak, per-input timeout or out-of-memory input
# fails the script, and the path of the input that shows it is printed. Compilers: FUZZ_CC and
# FUZZ_CXX (default clang-14, clang++-14).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CI=0
BUILD_ONLY=0
if [[ ${1:-} == --ci ]]; then
  CI=1
  shift
elif [[ ${1:-} == --build ]]; then
  BUILD_ONLY=1
  shift
fi
SECONDS_EACH=${1:-60}
JOBS=${JOBS:-$(nproc)}
CC=${FUZZ_CC:-clang-14}
CXX=${FUZZ_CXX:-clang++-14}
TARGETS=(trace_reader report_json shared_recovery torch_trace)
# --ci: runs per target (fixed, so that every CI run does the same amount of work) and the seed.
declare -A CI_RUNS=([trace_reader]=3000 [report_json]=10000 [shared_recovery]=3000 [torch_trace]=3000)
CI_SEED=20261202
CI_CAP_S=60

if ! command -v "$CXX" >/dev/null || [[ -z $("$CXX" -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null | grep /) ]]; then
  echo "fuzz: needs $CXX with libFuzzer (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi
[[ -d report/web/node_modules ]] || (cd report/web && npm ci)
CC=$CC CXX=$CXX cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVRAMTRACE_BUILD_TESTS=OFF -DVRAMTRACE_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$JOBS" --target vt_fuzz_trace_reader vt_fuzz_report_json \
  vt_fuzz_shared_recovery vt_fuzz_torch_trace >/dev/null
((BUILD_ONLY)) && exit 0

dict_of() {
  [[ -f tests/fuzz/$1.dict ]] && echo "-dict=tests/fuzz/$1.dict"
  return 0
}

# Whether a finished session is clean: libFuzzer got to its end and wrote no input.
clean() {  # LOG RC
  [[ $2 -eq 0 ]] && grep -q "^Done [0-9]* runs" "$1" && ! grep -q "runtime error:" "$1" &&
    ! grep -q "Test unit written to" "$1"
}

# Says what was found and where the input is that shows it (libFuzzer's "Test unit written
# to PATH"), with the first lines of the sanitizer's report.
report_finding() {  # TARGET LOG
  echo "fuzz $1: FAILED (log: $2)" >&2
  grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error:|.*what\(\):)" "$2" | head -6 >&2 || true
  local inputs
  inputs=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$2")
  if [[ -n $inputs ]]; then
    for a in $inputs; do
      echo "fuzz $1: input that shows it: $a" >&2
      echo "fuzz $1: reproduce with: build-fuzz/bin/vt_fuzz_$1 $a" >&2
    done
  else
    echo "fuzz $1: no input was written; the end of the log:" >&2
    tail -n 30 "$2" >&2
  fi
}

if ((CI)); then
  rm -rf build-fuzz/ci
  mkdir -p build-fuzz/ci/artifacts
  declare -A pid
  for t in "${TARGETS[@]}"; do
    mkdir -p "build-fuzz/ci/corpus/$t"
    # shellcheck disable=SC2046
    build-fuzz/bin/vt_fuzz_$t $(dict_of "$t") -seed=$CI_SEED -runs="${CI_RUNS[$t]}" \
      -max_total_time=$CI_CAP_S -timeout=30 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/ci/artifacts/$t-" \
      "build-fuzz/ci/corpus/$t" "tests/fuzz/corpus/$t" >"build-fuzz/ci/$t.log" 2>&1 &
    pid[$t]=$!
  done
  status=0
  for t in "${TARGETS[@]}"; do
    rc=0
    wait "${pid[$t]}" || rc=$?
    log=build-fuzz/ci/$t.log
    if clean "$log" "$rc"; then
      runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
      secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
      cov=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | sed 's/.*cov: \([0-9]*\).*/\1/')
      note=""
      [[ $runs -lt ${CI_RUNS[$t]} ]] && note=" (stopped at the ${CI_CAP_S} s cap, of ${CI_RUNS[$t]})"
      echo "fuzz $t: $runs runs in $secs s, seed $CI_SEED, cov $cov: no finding$note"
    else
      report_finding "$t" "$log"
      status=1
    fi
  done
  exit $status
fi

mkdir -p build-fuzz/artifacts
status=0
for target in "${TARGETS[@]}"; do
  work=build-fuzz/corpus/$target
  mkdir -p "$work"
  echo "== fuzz $target for ${SECONDS_EACH}s (seeds: $(ls tests/fuzz/corpus/$target | wc -l))"
  rc=0
  # shellcheck disable=SC2046
  build-fuzz/bin/vt_fuzz_$target $(dict_of "$target") -max_total_time="$SECONDS_EACH" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/artifacts/$target- "$work" tests/fuzz/corpus/$target \
    >build-fuzz/fuzz-$target.log 2>&1 || rc=$?
  grep -E "^(#[0-9]+[[:space:]]+(DONE|INITED)|stat::)" build-fuzz/fuzz-$target.log || true
  if ! clean build-fuzz/fuzz-$target.log "$rc"; then
    report_finding "$target" build-fuzz/fuzz-$target.log
    status=1
  fi
done
exit $status
