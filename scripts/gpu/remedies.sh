#!/usr/bin/env bash
# The report's remedies against the same remedies applied for real: each job of
# scripts/gpu/first_step_job.py (no cap) is recorded under vramtrace (with
# VRAMTRACE_TORCH_PREDICT=always: a run that did not run out of memory weighs its remedies on
# fake tensors only when asked), then run for real as it is,
# at half the batch, under bf16 autocast and with its repeated blocks checkpointed
# (scripts/gpu/first_step_truth.py --remedies). The runs are packed into
# $OUT/remedies-runs.tar.gz; `vramtrace report`/`whatif` of them are compared with the real
# figures by scripts/gpu/first_step_check.py (docs/WHATIF.md's table).
#
#   BUILD=/abs/build OUT=/tmp/out [TRUTH=0] scripts/gpu/remedies.sh [MODEL:BATCH ...]
# TRUTH=0 records only (the real runs are slow and do not change with vramtrace). PREDICT=on
# records as a run does by default: the remedies weighed at exit on the model's copy as shapes,
# within VRAMTRACE_TORCH_PREDICT_BUDGET of the run's time (these runs are short: set it).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
RUNS=$OUT/remedies
mkdir -p "$RUNS"
cases=("$@")
[[ ${#cases[@]} -eq 0 ]] && cases=(resnet50:128 vit_b_16:64 gpt2:8)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
export PYTHONUNBUFFERED=1
for c in "${cases[@]}"; do
  model=${c%%:*} batch=${c##*:}
  dir=$RUNS/$model-b$batch
  rm -rf "$dir"
  VRAMTRACE_TORCH_PREDICT=${PREDICT:-always} MODEL=$model BATCH=$batch LIMIT_GIB=0 STEPS=3 \
    "$BUILD/bin/vramtrace" run -o "$dir" -- python3 "$ROOT/scripts/gpu/first_step_job.py" \
    > "$dir.log" 2>&1
  echo "record $model b$batch: rc=$?"
  grep -E 'torch-figures|weigh|fake steps' "$dir.log"
done
(cd "$OUT" && tar -czf remedies-runs.tar.gz --exclude='*.html' --exclude='report.json' remedies \
  && rm -rf remedies)
[[ ${TRUTH:-1} == 0 ]] && exit 0
timeout 300 python3 "$ROOT/scripts/gpu/first_step_truth.py" --remedies "${cases[@]}" \
  | tee "$OUT/remedies-truth.txt"
