#!/usr/bin/env bash
# Overhead of vramtrace on a GPU, as ratios to the uninstrumented run in the same invocation:
# a GPU-bound transformer step, a launch-bound step, allocation-bound loops (PyTorch with
# backend:cudaMallocAsync, and raw cudaMallocAsync/cudaFreeAsync), and kernel launches; PyTorch's
# own torch.cuda.memory._record_memory_history on the same workloads as the peer. With the
# benchmark libraries built (`cmake --build build --target vt_bench_libs`) it also runs CUPTI's
# floor (the same callbacks, an empty callback) and, for the native loops, the library timing
# its own callbacks, so that the cost splits into CUPTI's part and vramtrace's.
#   bench/gpu.sh            (BUILD=build OUT_DIR=gpu-out REPEATS=3; ONLY=words of
#                                    workload names, VARIANTS=variants: subsets, comma-separated;
#                                    PIN=CPU list: every run under taskset -c on those cores)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT_DIR=${OUT_DIR:-$ROOT/gpu-out}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$OUT_DIR/bin"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
"$NVCC" -O2 -arch=${ARCH:-native} -o "$OUT_DIR/bin/gpu_native" "$ROOT/bench/gpu_native.cu" || exit 2
# What a record is made of on this machine: the clock source and a clock read, a lock.
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
"$OUT_DIR/bin/gpu_native" clock
python3 "$ROOT/bench/gpu.py" --build "$BUILD" --bin "$OUT_DIR/bin" --out "$OUT_DIR" \
  --repeats "${REPEATS:-3}" --only "${ONLY:-}" --variants "${VARIANTS:-}" --pin "${PIN:-}"
