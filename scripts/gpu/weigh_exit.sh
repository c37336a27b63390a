#!/usr/bin/env bash
# A finished run's remedies weighed at exit by default, on the model's copy as shapes, within
# VRAMTRACE_TORCH_PREDICT_BUDGET of the run's time: ResNet-50 batch 128, three steps
# (scripts/gpu/first_step_job.py), without vramtrace, then under `vramtrace run` at the default
# budget (1 %: a run this short stops its fake steps at the deadline) and at 1 (weighed). Prints
# each run's exit code (the same as without vramtrace), what the hook said of the fake steps, and
# whether report.json's bf16 remedy was weighed on them or says why not.
#
#   BUILD=$PWD/build-gpu OUT=/tmp/o scripts/gpu/weigh_exit.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
export MODEL=${MODEL:-resnet50} BATCH=${BATCH:-128} LIMIT_GIB=0 STEPS=3 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 "$ROOT/scripts/gpu/first_step_job.py" > "$OUT/weigh-plain.log" 2>&1
echo "without vramtrace: rc=$?"
for budget in default 1; do
  dir=$OUT/weigh-$budget
  rm -rf "$dir"
  if [[ $budget == default ]]; then
    "$BUILD/bin/vramtrace" run -o "$dir" -- python3 "$ROOT/scripts/gpu/first_step_job.py" \
      > "$dir.log" 2>&1
  else
    VRAMTRACE_TORCH_PREDICT_BUDGET=$budget "$BUILD/bin/vramtrace" run -o "$dir" -- \
      python3 "$ROOT/scripts/gpu/first_step_job.py" > "$dir.log" 2>&1
  fi
  echo "budget $budget: rc=$?"
  grep -E 'weigh|fake steps|Abort|terminate|Fatal' "$dir.log" | cut -c1-300
  python3 - "$dir/report.json" <<'PY'
import json, sys
try:
    rep = json.load(open(sys.argv[1]))
except Exception as ex:
    print("  no report.json: %s" % ex)
    sys.exit()
for m in rep["diagnosis"]["remedies"]:
    if m.get("kind") in ("mixed_precision", "activation_checkpointing"):
        r = m.get("replayed", {})
        print("  %s: %.2f GiB, %s" % (m["kind"], m.get("predicted_peak_bytes", 0) / 2**30,
              "weighed on fake steps" if "weighed_on_fake_step" in r else
              "not weighed: " + r.get("not_weighed_on_fake_step", "?")))
PY
done
