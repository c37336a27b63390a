#!/usr/bin/env bash
# `vramtrace whatif` against real runs on a GPU: self-replay of every recorded run (reserved peak
# within 1 %, the OOM at the same request), expandable_segments and max_split_size_mb on a
# fragmentation OOM, lower limits through set_per_process_memory_fraction, half and double the
# batch (reserved peak within 5 %), and the largest batch at 0.95x / 1.05x of the predicted one.
# Needs a build (BUILD, default ./build), a GPU, torch and torchvision (transformers for GPT-2's
# self-replay). Runs and whatif answers under $OUT (default ./gpu-out/whatif); prints the checks
# and the accuracy table for docs/WHATIF.md. Arguments go to the checker: `--only batch,limit`.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}/whatif
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
python3 "$ROOT/scripts/gpu/whatif_check.py" --build "${BUILD:-$ROOT/build}" \
  --scripts "$ROOT/tests/gpu/real" --out "$OUT" "$@" 2>&1 | tee "$OUT/check.log"
exit "${PIPESTATUS[0]}"
