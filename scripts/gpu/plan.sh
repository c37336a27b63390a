#!/usr/bin/env bash
# `vramtrace plan` against the real step, on models no test names (scripts/gpu/plan_job.py):
# each MODEL:BATCH is planned under a per-process fraction of LIMIT_GIB (default 16) at a batch
# that does not fit, then the same step runs for real: its reserved peak at BATCH with no cap and
# the largest batch that runs under the fraction. scripts/gpu/plan_check.py prints predicted vs
# real (whole step, error %, largest batch) and the plan's cost.
#
#   BUILD=$PWD/build-gpu OUT=/tmp/o scripts/gpu/plan.sh [MODEL:BATCH ...]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
RUNS=$OUT/plan
export LIMIT_GIB=${LIMIT_GIB:-16}
mkdir -p "$RUNS"
cases=("$@")
[[ ${#cases[@]} -eq 0 ]] && cases=(efficientnet_b0:512 resnet101:256 llama:16 bert_small:128)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
export PYTHONUNBUFFERED=1
truth=()
for c in "${cases[@]}"; do
  model=${c%%:*} batch=${c##*:}
  dir=$RUNS/$model-b$batch
  rm -rf "$dir"
  start=$(date +%s%N)
  MODEL=$model BATCH=$batch "$BUILD/bin/vramtrace" plan -o "$dir" -- \
    python3 "$ROOT/scripts/gpu/plan_job.py" run > "$dir.log" 2>&1
  rc=$?
  echo "plan $model b$batch: rc=$rc $(( ($(date +%s%N) - start) / 1000000 )) ms"
  grep -E 'vramtrace plan|PLAN|ran three steps' "$dir.log" | cut -c1-300
  guess=$(python3 -c 'import json,sys
try:
    d = json.load(open(sys.argv[1]))["plan"]["processes"][0]["devices"][0]
    print(d.get("largest_batch") or 1)
except Exception:
    print(1)' "$dir/report.json")
  truth+=("$model:$batch:$guess")
done
timeout 540 python3 "$ROOT/scripts/gpu/plan_job.py" truth "${truth[@]}" | tee "$OUT/plan-truth.txt"
python3 "$ROOT/scripts/gpu/plan_check.py" "$RUNS" "$OUT/plan-truth.txt" | tee "$OUT/plan-check.txt"
