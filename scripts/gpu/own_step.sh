#!/usr/bin/env bash
# `vramtrace plan` with the program's own loop on fake tensors, against the stand-in step and
# the real steps, on training loops no test names (scripts/gpu/own_step_job.py: their own
# losses, fp16 GradScaler, bf16 weights with gradient checkpointing and accumulation, two
# forwards a step). Each MODEL:BATCH is planned twice under a per-process fraction of LIMIT_GIB
# (default 16): as it runs (the program's own steps) and with VRAMTRACE_PLAN_STEP=standin; then
# the same loop runs for real: the reserved peak of two optimizer steps at BATCH with no cap, and
# whether the own plan's largest batch and one more run under the fraction.
# scripts/gpu/own_step_check.py prints predicted vs real for both.
#
# The planned programs would run STEPS=20 optimizer steps (the plan needs eight of them: two for
# each predicted step); MODES="program" plans only as it runs; TRUTH=FILE takes the real loops'
# figures from an earlier run's own-truth.txt where its largest batch is the same.
#
#   BUILD=$PWD/build-gpu OUT=/tmp/o scripts/gpu/own_step.sh [MODEL:BATCH ...]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
RUNS=$OUT/own
export LIMIT_GIB=${LIMIT_GIB:-16}
mkdir -p "$RUNS"
cases=("$@")
[[ ${#cases[@]} -eq 0 ]] && cases=(seg:64 llama_bf16:48 vit_clr:256 llama_loop:16)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
truth=()
for c in "${cases[@]}"; do
  model=${c%%:*} batch=${c##*:}
  for step in ${MODES:-program standin}; do
    dir=$RUNS/$model-b$batch-$step
    rm -rf "$dir"
    start=$(date +%s%N)
    VRAMTRACE_PLAN_STEP=$step MODEL=$model BATCH=$batch STEPS=20 "$BUILD/bin/vramtrace" plan -o "$dir" -- \
      python3 "$ROOT/scripts/gpu/own_step_job.py" run > "$dir.log" 2>&1
    rc=$?
    echo "plan $model b$batch ($step): rc=$rc $(( ($(date +%s%N) - start) / 1000000 )) ms"
    grep -E 'vramtrace plan|PLAN|^step|^ran|Error|error' "$dir.log" | cut -c1-400
  done
  guess=$(python3 -c 'import json,sys
try:
    d = json.load(open(sys.argv[1]))["plan"]["processes"][0]["devices"][0]
    print(d.get("largest_batch") or 0)
except Exception:
    print(0)' "$RUNS/$model-b$batch-program/report.json")
  truth+=("$model:$batch:$guess")
done
if [[ -n ${TRUTH:-} ]]; then
  # Only the loops whose planned largest batch is not the earlier one's run again.
  again=()
  for t in "${truth[@]}"; do
    IFS=: read -r model batch guess <<< "$t"
    grep -q "\"model\": \"$model\", \"batch\": $batch,.*\"largest_predicted\": $guess," "$TRUTH" \
      || again+=("$t")
  done
  cp "$TRUTH" "$OUT/own-truth.txt"
  [[ ${#again[@]} -gt 0 ]] && timeout 400 python3 "$ROOT/scripts/gpu/own_step_job.py" truth \
    "${again[@]}" | tee -a "$OUT/own-truth.txt"
else
  timeout 400 python3 "$ROOT/scripts/gpu/own_step_job.py" truth "${truth[@]}" \
    | tee "$OUT/own-truth.txt"
fi
python3 "$ROOT/scripts/gpu/own_step_check.py" "$RUNS" "$OUT/own-truth.txt" | tee "$OUT/own-check.txt"
