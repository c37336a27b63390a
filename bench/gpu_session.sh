#!/usr/bin/env bash
# The launch and allocation overhead runs that belong together, for one call on the GPU machine: the
# launch-bound step with CUPTI's floor (REPEATS_LAUNCH, default 5), the native loops with the
# self-timing library, and PyTorch with backend:cudaMallocAsync. Needs the build with
# `cmake --build build --target vt_bench_libs`. Writes OUT_DIR/*.log.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT_DIR=${OUT_DIR:-$ROOT/gpu-out}
mkdir -p "$OUT_DIR"
ONLY=launch-bound VARIANTS="cupti floor,vramtrace,vramtrace --torch=off" REPEATS=${REPEATS_LAUNCH:-5} PIN=${PIN:-} \
  OUT_DIR="$OUT_DIR/launch" "$ROOT/bench/gpu.sh" 2>&1 | tee "$OUT_DIR/launch.log"
ONLY=native REPEATS=3 OUT_DIR="$OUT_DIR/native" "$ROOT/bench/gpu.sh" 2>&1 | tee "$OUT_DIR/native.log"
ONLY=backend:cudaMallocAsync VARIANTS="cupti floor,vramtrace" REPEATS=3 OUT_DIR="$OUT_DIR/async" \
  "$ROOT/bench/gpu.sh" 2>&1 | tee "$OUT_DIR/async.log"
