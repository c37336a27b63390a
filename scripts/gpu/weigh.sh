#!/usr/bin/env bash
# The remedies of runs that finish, as recorded by default (the fake steps in a forked process,
# _vramtrace_weigh.py), against the same remedies applied for real
# (scripts/gpu/results/remedies-truth-2026-12-04.txt, made by remedies.sh's truth), and what the
# weighing costs the run: each job of scripts/gpu/first_step_job.py (no cap, STEPS steps) runs
# under vramtrace as it is by default and with VRAMTRACE_TORCH_PREDICT=oom (no weighing), in
# turn; the wall-clock ratio of the two is the weighing's cost.
#
#   BUILD=/abs/build OUT=/tmp/out [STEPS=80] scripts/gpu/weigh.sh [MODEL:BATCH ...]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
RUNS=$OUT/weigh
STEPS=${STEPS:-80}
mkdir -p "$RUNS"
cases=("$@")
[[ ${#cases[@]} -eq 0 ]] && cases=(resnet50:128 vit_b_16:64 gpt2:8)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
export PYTHONUNBUFFERED=1
for c in "${cases[@]}"; do
  model=${c%%:*} batch=${c##*:}
  for mode in oom on; do
    dir=$RUNS/$model-b$batch
    [[ $mode == oom ]] && dir=$RUNS/off-$model-b$batch
    rm -rf "$dir"
    start=$(date +%s%N)
    VRAMTRACE_TORCH_PREDICT=$mode MODEL=$model BATCH=$batch LIMIT_GIB=0 STEPS=$STEPS \
      "$BUILD/bin/vramtrace" run -o "$dir" -- python3 "$ROOT/scripts/gpu/first_step_job.py" \
      > "$dir.log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "$model b$batch VRAMTRACE_TORCH_PREDICT=$mode: rc=$rc ${ms} ms"
    eval "ms_$mode=$ms"
  done
  python3 -c "print('$model b$batch: weighing on / off wall clock: %.3f' % ($ms_on / $ms_oom))"
  grep -h "vramtrace.*fake\|not weighed" "$RUNS/$model-b$batch.log" "$RUNS/$model-b$batch/"*.txt \
    2>/dev/null | head -5
done
rm -rf "$RUNS"/off-*
python3 "$ROOT/scripts/gpu/first_step_check.py" --build "$BUILD" --runs "$RUNS" --remedies \
  --truth "$ROOT/scripts/gpu/results/remedies-truth-2026-12-04.txt"
