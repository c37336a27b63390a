#!/usr/bin/env bash
# `vramtrace run --preflight` with the program's own loop on fake tensors (in a forked copy of
# the process) against the stand-in step and the steps run for real, on the training loops of
# scripts/gpu/own_step_job.py (their own losses, fp16 GradScaler, bf16 weights with gradient
# checkpointing and accumulation, two forwards a step, a loss indexed by a boolean mask). Each
# MODEL:BATCH runs STEPS=3 optimizer steps with no cap three times: under --preflight as it
# runs (the program's own loop), under --preflight with VRAMTRACE_PREFLIGHT_STEP=standin, and
# without vramtrace (its losses, which the pre-flight's run must print the same). OVER cases
# (MODEL:BATCH:LIMIT_GIB) run under a per-process fraction the step does not fit, so that the
# pre-flight's second stage (the largest batch, the remedies) comes from the copy too.
# MODES="program" runs no stand-in pre-flight.
# scripts/gpu/own_preflight_check.py prints predicted vs recorded for each.
#
#   BUILD=$PWD/build-gpu OUT=/tmp/o scripts/gpu/own_preflight.sh [MODEL:BATCH ...]   (or CASES=...)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
RUNS=$OUT/own-preflight
mkdir -p "$RUNS"
cases=("$@")
[[ ${#cases[@]} -eq 0 ]] && read -ra cases <<< "${CASES:-seg:64 llama_bf16:48 vit_clr:256 mlm:64}"
OVER=${OVER:-"llama_bf16:48:10"}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore STEPS=3
for c in "${cases[@]}"; do
  model=${c%%:*} batch=${c##*:}
  for step in ${MODES:-program standin}; do
    dir=$RUNS/$model-b$batch-$step
    rm -rf "$dir"
    start=$(date +%s%N)
    VRAMTRACE_PREFLIGHT_STEP=$step MODEL=$model BATCH=$batch LIMIT_GIB=0 \
      "$BUILD/bin/vramtrace" run --preflight -o "$dir" -- \
      python3 "$ROOT/scripts/gpu/own_step_job.py" run > "$dir.log" 2>&1
    echo "$? $(( ($(date +%s%N) - start) / 1000000 ))" > "$dir.rc"
    echo "$model b$batch ($step): rc/ms $(cat "$dir.rc")"
    grep -E 'PRE-FLIGHT|^step|^ran|Error' "$dir.log" | cut -c1-400
  done
  MODEL=$model BATCH=$batch LIMIT_GIB=0 python3 "$ROOT/scripts/gpu/own_step_job.py" run \
    > "$RUNS/$model-b$batch-plain.log" 2>&1
done
for c in $OVER; do
  IFS=: read -r model batch limit <<< "$c"
  dir=$RUNS/over-$model-b$batch-program
  rm -rf "$dir"
  start=$(date +%s%N)
  VRAMTRACE_PREFLIGHT_STEP=program MODEL=$model BATCH=$batch LIMIT_GIB=$limit STEPS=1 \
    "$BUILD/bin/vramtrace" run --preflight -o "$dir" -- \
    python3 "$ROOT/scripts/gpu/own_step_job.py" run > "$dir.log" 2>&1
  echo "$? $(( ($(date +%s%N) - start) / 1000000 ))" > "$dir.rc"
  echo "over $model b$batch (${limit} GiB): rc/ms $(cat "$dir.rc")"
  grep -E 'PRE-FLIGHT|^step|^ran|Error' "$dir.log" | cut -c1-600
done
python3 "$ROOT/scripts/gpu/own_preflight_check.py" "$RUNS" | tee "$OUT/own-preflight-check.txt"
