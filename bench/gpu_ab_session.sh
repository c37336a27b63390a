#!/usr/bin/env bash
# The in-process A/B runs of the launch overhead for one call on the GPU machine: what each switched thing
# costs per cached PyTorch tensor (alloc_cached_ab) and per launch on the launch-bound step
# (launch_bound_ab). Needs `cmake --build build --target vt_bench_libs`. Each run's line is
# printed as it ends; the tables at the end of each part.
#   bench/gpu_ab_session.sh [BUILD]     PIN (default 4-11), REPEATS (default 2), OUT_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
OUT_DIR=${OUT_DIR:-$ROOT/gpu-out/ab}
PIN=${PIN:-4-11}
REPEATS=${REPEATS:-2}
python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --out "$OUT_DIR" --repeats "$REPEATS" \
  --pin "$PIN" --workload alloc_cached_ab --only "${ALLOC_CASES:-vramtrace,history,history-20k,history-state}"
python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --out "$OUT_DIR" --repeats "$REPEATS" \
  --pin "$PIN" --workload launch_bound_ab \
  --only "${LAUNCH_CASES:-floor,vramtrace,vramtrace-nolaunch,history,history-20k}"
