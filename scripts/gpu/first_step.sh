#!/usr/bin/env bash
# A batch too big for the card, on real models: each job of scripts/gpu/first_step_job.py dies in
# its first step under a 16 GiB per-process fraction; vramtrace records it (the start-up hook runs
# the rest of the step on fake tensors at exit) and `whatif` predicts the whole step, the half
# batch and the largest batch; scripts/gpu/first_step_truth.py then runs the same jobs for real.
# scripts/gpu/first_step_check.py puts the two side by side (the table of docs/WHATIF.md).
#
#   BUILD=/abs/build OUT=/tmp/out scripts/gpu/first_step.sh [MODEL:BATCH ...]
#   PARTS="record truth" (default both)
# The runs' traces are packed into $OUT/first-step-runs.tar.gz.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
RUNS=$OUT/first-step
PARTS=${PARTS:-record truth}
mkdir -p "$RUNS"
cases=("$@")
[[ ${#cases[@]} -eq 0 ]] && cases=(resnet50:256 vit_b_16:384 gpt2:32 bert:96)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
export PYTHONUNBUFFERED=1
if [[ " $PARTS " == *" record "* ]]; then
  for c in "${cases[@]}"; do
    model=${c%%:*} batch=${c##*:}
    dir=$RUNS/$model-b$batch
    rm -rf "$dir"
    start=$(date +%s%N)
    MODEL=$model BATCH=$batch LIMIT_GIB=16 STEPS=3 \
      "$BUILD/bin/vramtrace" run -o "$dir" -- python3 "$ROOT/scripts/gpu/first_step_job.py" \
      > "$dir.log" 2>&1
    rc=$?
    echo "record $model b$batch: rc=$rc $(( ($(date +%s%N) - start) / 1000000 )) ms"
    grep -h '^N' "$dir"/*.torch 2>/dev/null | cut -f1-7
    echo "  requests predicted: $(grep -hc '^R' "$dir"/*.torch 2>/dev/null)"
    tail -3 "$dir.log" | cut -c1-300
    for args in "" "--fraction 1" "--scale-batch 0.5 --fraction 1" "--max-batch"; do
      echo "  whatif $args:"
      # shellcheck disable=SC2086
      "$BUILD/bin/vramtrace" whatif "$dir" $args 2>&1 | grep -E 'verdict|reserved peak|largest|first OOM|predicted|note' | sed 's/^/    /'
      "$BUILD/bin/vramtrace" whatif "$dir" $args --json > "$dir/whatif${args// /_}.json" 2>/dev/null
    done
  done
  (cd "$OUT" && tar -czf first-step-runs.tar.gz --exclude='*.html' first-step && rm -rf first-step)
fi
if [[ " $PARTS " == *" truth "* ]]; then
  LIMIT_GIB=16 timeout 420 python3 "$ROOT/scripts/gpu/first_step_truth.py" "${cases[@]}" \
    | tee "$OUT/first-step-truth.txt"
fi
