#!/usr/bin/env bash
# run.sh BUILD_DIR - build and run the stand-in smoke tests.
#
# BUILD_DIR is the CMake binary dir of the project; the stand-in libraries
# must be (or are built here) in BUILD_DIR/standin.  Test programs go to
# BUILD_DIR/tests/standin.  Exits non-zero on the first failure.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STANDIN=$BUILD/standin
OUT=$BUILD/tests/standin
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
mkdir -p "$OUT"

if [[ -f $BUILD/CMakeCache.txt ]]; then
  cmake --build "$BUILD" --target vt_standin_cuda vt_standin_cudart vt_standin_cupti
fi
for lib in libcuda.so.1 libcudart.so.13 libcupti.so.13; do
  [[ -f $STANDIN/$lib ]] || { echo "FAIL: missing $STANDIN/$lib" >&2; exit 1; }
done

echo "== building test programs in $OUT"
"$NVCC" -cudart shared -o "$OUT/smoke" "$HERE/smoke.cu"
g++ -std=c++17 -Wall -shared -fPIC -I"$CUDA_HOME/include" -o "$OUT/libprobe.so" \
    "$HERE/callback_probe.cpp" -L"$STANDIN" -lcupti -lcuda
g++ -std=c++17 -Wall -I"$CUDA_HOME/include" -o "$OUT/driver_check" \
    "$HERE/driver_check.cpp" -L"$STANDIN" -lcupti -lcuda

export LD_LIBRARY_PATH=$STANDIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
LOG=$OUT/last.log

# run NAME EXPECTED-PATTERN... -- COMMAND...: runs COMMAND (stdout+stderr to
# $LOG), requires exit 0 and every pattern (grep -F) in the output.
run() {
  local name=$1; shift
  local patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  echo "== $name"
  if ! "$@" >"$LOG" 2>&1; then
    cat "$LOG"; echo "FAIL: $name (exit status)" >&2; exit 1
  fi
  cat "$LOG"
  for p in "${patterns[@]}"; do
    grep -qF -- "$p" "$LOG" || { echo "FAIL: $name: missing '$p'" >&2; exit 1; }
  done
}

run "smoke" "smoke ok" -- "$OUT/smoke"

# The probe sees 3 cuMemAlloc_v2 (1, 2, 4 MiB), 1 cuMemFree_v2, the launch of
# fill<int>, and two contexts: the first and the one recreated after
# cudaDeviceReset.  The over-capacity cudaMalloc fails at the driver too.
run "smoke + CUPTI probe" "smoke ok" \
    "probe: alloc=3 free=1 launch=1 ctx=2" \
    "probe: sizes=1048576,2097152,4194304" \
    "probe: alloc_failed=1 ctx_destroy=1" \
    "probe: symbol=_Z4fillIiEvPT_S0_i" -- \
    env CUDA_INJECTION64_PATH="$OUT/libprobe.so" "$OUT/smoke"

run "10 MiB capacity, 16 MiB cudaMalloc fails" "smoke ok" \
    "10485760 bytes" "cudaMalloc(16777216) failed as expected" -- \
    env VRAMTRACE_STANDIN_DEVICE_BYTES=10485760 SMOKE_OOM_BYTES=16777216 "$OUT/smoke"

run "two devices" "smoke ok" "2 device(s)" "two devices have independent capacity" -- \
    env VRAMTRACE_STANDIN_DEVICES=2 SMOKE_EXPECT_DEVICES=2 "$OUT/smoke"

run "CUPTI held by another tool" "smoke ok" "probe: cupti busy, held by othertool" -- \
    env VRAMTRACE_STANDIN_CUPTI_BUSY=othertool CUDA_INJECTION64_PATH="$OUT/libprobe.so" "$OUT/smoke"

run "driver checks" "driver_check ok" -- "$OUT/driver_check"

echo "standin smoke: all passed"
