#!/usr/bin/env bash
# The GPU suite: the same test programs as the stand-in tests, built with plain nvcc (static
# cudart) and with -cudart shared, plus a PyTorch training loop with three allocator settings,
# all under vramtrace on a real GPU. Prints a table of figures and writes it to
# $OUT_DIR/gpu-results.md. Needs a build of vramtrace (BUILD, default ./build) and nvcc.
#
#   scripts/gpu/test.sh            # from the repository root, on a machine with a GPU
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT_DIR=${OUT_DIR:-$ROOT/gpu-out}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${ARCH:-native}
mkdir -p "$OUT_DIR/bin"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || {
  echo "gpu-test: no GPU visible (nvidia-smi failed)" >&2; exit 2; }
"$NVCC" --version | tail -1

for p in basic oom oom_death apis crash threads forker workers rank_alloc share_gpu two_devices; do
  extra=""
  [[ $p == apis ]] && extra="-lcuda"
  "$NVCC" -O2 -arch="$ARCH" -I"$ROOT/tests/programs" -o "$OUT_DIR/bin/$p-static" \
    "$ROOT/tests/programs/$p.cu" $extra || exit 2
  "$NVCC" -O2 -arch="$ARCH" -cudart shared -I"$ROOT/tests/programs" -o "$OUT_DIR/bin/$p-shared" \
    "$ROOT/tests/programs/$p.cu" $extra || exit 2
done

# The stacks checks name functions, files and lines: callchain with debug information.
"$NVCC" -g -O0 -arch="$ARCH" -I"$ROOT/tests/programs" -o "$OUT_DIR/bin/callchain-static" \
  "$ROOT/tests/programs/callchain.cu" || exit 2
"$NVCC" -g -O0 -arch="$ARCH" -cudart shared -I"$ROOT/tests/programs" \
  -o "$OUT_DIR/bin/callchain-shared" "$ROOT/tests/programs/callchain.cu" || exit 2

python3 "$ROOT/scripts/gpu/check.py" --build "$BUILD" --bin "$OUT_DIR/bin" --out "$OUT_DIR" \
  --torch-script "$ROOT/tests/gpu/torch_train.py" \
  --torch-peak-script "$ROOT/tests/gpu/torch_peak.py"
status=$?
# The allocator's view: fragmentation, growth across iterations, another process.
python3 "$ROOT/scripts/gpu/check_allocator.py" --build "$BUILD" --out "$OUT_DIR" \
  --scripts "$ROOT/tests/gpu" || status=1
exit $status
