#!/usr/bin/env bash
# The main job for a new user: set up, build, and profile the bundled example
# (examples/train_sim.cu, a training-like loop) under vramtrace, writing
# out/demo/report.html and out/demo/report.json.
# On a machine with an NVIDIA GPU it runs there; without one it runs on the CPU stand-in for
# CUDA, and the report says so in its headline.
# It builds only what it runs (scripts/setup.sh --demo: the command, the library, the stand-in;
# then the example): tests/test.sh builds the rest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh" --demo
cd "$ROOT"
OUT=${1:-out/demo}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p build/examples
if nvidia-smi -L >/dev/null 2>&1; then
  echo "demo: GPU found: $(nvidia-smi -L | head -1)"
  "$CUDA_HOME/bin/nvcc" -O2 -o build/examples/train_sim examples/train_sim.cu
  build/bin/vramtrace run --force -o "$OUT" -- build/examples/train_sim
else
  echo "demo: no GPU here: running on the CPU stand-in for CUDA (the report is labelled so)"
  "$CUDA_HOME/bin/nvcc" -O2 -cudart shared -o build/examples/train_sim examples/train_sim.cu
  LD_LIBRARY_PATH="$ROOT/build/standin" VRAMTRACE_STANDIN_DEVICE_BYTES=$((2 << 30)) \
    build/bin/vramtrace run --force -o "$OUT" -- build/examples/train_sim
fi
echo "demo: open $OUT/report.html in a browser"
