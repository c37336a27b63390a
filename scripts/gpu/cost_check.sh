#!/usr/bin/env bash
# One call on the GPU machine after a change of the start-up hook's cost: the real PyTorch checks
# of the GPU suite (scripts/gpu/test.sh: exact figures, iterations, phases, categories, modules),
# torch.compile under the hook (scripts/gpu/compile_check.py: the same losses, graphs and graph
# breaks with and without it), then the cost (scripts/gpu/cost_session.sh, ARMS null,default).
#   BUILD=/abs/build-gpu OUT=/tmp/out scripts/gpu/cost_check.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
start=$(date +%s)
OUT_DIR=$OUT/suite BUILD=$BUILD timeout 260 bash "$ROOT/scripts/gpu/test.sh" 2>&1 | grep -E "passed|FAIL" | tail -30
echo "suite: $(( $(date +%s) - start )) s"
timeout 200 python3 "$ROOT/scripts/gpu/compile_check.py" --build "$BUILD" --scripts "$ROOT/tests/gpu/real" \
  --out "$OUT/compile" 2>&1 | tail -12
echo "compile: $(( $(date +%s) - start )) s"
ARMS=${ARMS:-null,default} REPEATS=${REPEATS:-3} PARTS_RUNS=${PARTS_RUNS:-1} BUILD=$BUILD OUT=$OUT \
  bash "$ROOT/scripts/gpu/cost_session.sh" 2>&1 | grep -vE "^  " | tail -30
echo "cost: $(( $(date +%s) - start )) s"
