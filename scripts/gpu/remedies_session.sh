#!/usr/bin/env bash
# One device call: the remedies weighed on fake tensors (scripts/gpu/remedies.sh, recording only:
# the real runs are in scripts/gpu/results/remedies-truth-*.txt) and the first-step deaths
# recorded again (scripts/gpu/first_step.sh PARTS=record), with the check of both against the
# real figures. Everything goes under $OUT (traces packed as tar.gz).
#   BUILD=/abs/build OUT=/tmp/out scripts/gpu/remedies_session.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
TRUTH_DIR=${TRUTH_DIR:-$ROOT/scripts/gpu/results}
start=$(date +%s)
TRUTH=0 BUILD=$BUILD OUT=$OUT bash "$ROOT/scripts/gpu/remedies.sh" 2>&1
echo "remedies recorded: $(( $(date +%s) - start )) s"
mkdir -p "$OUT/check" && tar -xzf "$OUT/remedies-runs.tar.gz" -C "$OUT/check"
python3 "$ROOT/scripts/gpu/first_step_check.py" --build "$BUILD" --runs "$OUT/check/remedies" \
  --truth "$(ls "$TRUTH_DIR"/remedies-truth-*.txt | tail -1)" --remedies 2>&1
PARTS=record BUILD=$BUILD OUT=$OUT bash "$ROOT/scripts/gpu/first_step.sh" 2>&1 | grep -v '^    '
echo "all: $(( $(date +%s) - start )) s"
