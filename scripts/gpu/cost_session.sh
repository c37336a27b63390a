#!/usr/bin/env bash
# One call on the GPU machine for the default's cost on the launch-bound step (docs/PERFORMANCE.md):
# whether this machine's PMU counts instructions (a measure without the step's drift); the
# context's and the allocator trace's parts switched one at a time in one process
# (bench/context_parts.py); then bench/gpu_ab.py's in-process A/B of the default and its parts,
# all in many short blocks (drift falls on both arms), the null arm giving the method's spread.
#   BUILD=/abs/build-gpu OUT=/tmp/out [ARMS=null,default,...] [REPEATS=3] [PARTS_RUNS=2]
#   [VT_AB_PAIRS=60] [VT_AB_STEPS=3] [PIN=4-11] scripts/gpu/cost_session.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
PIN=${PIN:-4-11}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, inspect; print("torch", torch.__version__, "skip_actions:",
  "skip_actions" in inspect.signature(torch.cuda.memory._record_memory_history).parameters)'
python3 "$ROOT/bench/instructions.py" --probe
export VT_AB_PAIRS=${VT_AB_PAIRS:-60} VT_AB_STEPS=${VT_AB_STEPS:-3}
for i in $(seq "${PARTS_RUNS:-2}"); do
  echo "context_parts, process $i:"
  (cd "$ROOT/bench" && taskset -c "$PIN" python3 context_parts.py "$VT_AB_PAIRS" 2>&1 | tail -40)
done
python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --out "$OUT/ab" --repeats "${REPEATS:-3}" \
  --pin "$PIN" --workload launch_bound_ab \
  --only "${ARMS:-null,default,history,history-every-action}"
