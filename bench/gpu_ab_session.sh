#!/usr/bin/env bash
# The overhead runs for one call on the GPU machine (about 7 minutes with the defaults). Needs
# `cmake --build build --target vt_bench_libs`. Each run's line is printed as it ends; the
# tables at the end of each part.
#   launch     in-process A/B on the launch-bound step (bench/gpu_ab.py, interleaved arms,
#              REPEATS processes each, VT_AB_PAIRS on/off pairs a process): the default as a
#              whole (launches stopped by the hook) and with --launches=on, the launch callbacks
#              alone, PyTorch's allocator trace as set and cheaper settings, the hook's context;
#              then the same step between processes (bench/gpu.py: none, the default,
#              --launches=on), and where the context's time goes (bench/context_cost.py)
#   alloc      PyTorch tensors from the cache (cost per tensor) with the same arms
#   gpu_bound  the GPU-bound step with the default switched (must stay x1.000)
#   bench/gpu_ab_session.sh [BUILD]     PARTS (default launch), PIN (default 4-11), REPEATS
#                                       (default 3), OUT_DIR, LAUNCH_CASES, ALLOC_CASES
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
OUT_DIR=${OUT_DIR:-$ROOT/gpu-out/ab}
PIN=${PIN:-4-11}
REPEATS=${REPEATS:-3}
PARTS=${PARTS:-launch}
export VT_AB_PAIRS=${VT_AB_PAIRS:-16}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
for part in ${PARTS//,/ }; do
  case "$part" in
    launch)
      python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --out "$OUT_DIR" --repeats "$REPEATS" \
        --pin "$PIN" --workload launch_bound_ab \
        --only "${LAUNCH_CASES:-null,default,default-launches-on,launches,history,history-state,context}"
      mkdir -p "$OUT_DIR/between"
      python3 "$ROOT/bench/gpu.py" --build "$BUILD" --bin "$OUT_DIR/between" --out "$OUT_DIR/between" \
        --repeats 2 --only launch-bound --variants "vramtrace,vramtrace --launches=on" --pin "$PIN"
      python3 "$ROOT/bench/context_cost.py" cuda 2>&1 | head -16 ;;
    alloc)
      python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --out "$OUT_DIR" --repeats "$REPEATS" \
        --pin "$PIN" --workload alloc_cached_ab --only "${ALLOC_CASES:-default,history,history-20k,history-state}" ;;
    gpu_bound)
      VT_AB_PAIRS=6 python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --out "$OUT_DIR" --repeats 2 \
        --pin "$PIN" --workload gpu_bound_ab --only null,default ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
