#!/usr/bin/env bash
# Categories, names, diagnosis and remedies on real PyTorch jobs (a ResNet-50 that dies of OOM
# under a 16 GiB per-process fraction, the same unlimited with AMP and half the batch, a GPT-2
# from a config with AdamW, an evaluation loop that keeps its graphs, a loop that catches an
# OOM in a forward and goes on, CUDA graphs and a MemPool), checked against PyTorch's own
# figures. Needs a build (BUILD, default ./build), a GPU, torch, torchvision and transformers.
# Reports under $OUT (default ./gpu-out/categories). Arguments go to the checker: `--only
# cuda-graph` runs that case alone (it needs torch only).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}/categories
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 "$ROOT/scripts/gpu/categories_check.py" --build "${BUILD:-$ROOT/build}" \
  --scripts "$ROOT/tests/gpu/real" --out "$OUT" "$@"
