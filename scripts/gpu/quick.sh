#!/usr/bin/env bash
# A short GPU call: the JAX pool OOM check and the hook context's cost on the launch-bound step
# (for a session with little device time left; the full runs are categories.sh and
# bench/categories_cost.sh).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT/q"
VT=$ROOT/build/bin/vramtrace
PYTHONUNBUFFERED=1 timeout 60 "$VT" run --force -o "$OUT/q/jax" -- python3 "$ROOT/tests/gpu/real/jax_oom.py" 2>&1 | grep -E "^vramtrace|xla-figures" | tail -8
python3 - "$OUT/q/jax/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
o = [o for o in r["oom"] if o.get("fatal")]
print("jax fatal", len(o), "requested", o[0]["requested_bytes"] if o else None, "limit", r["diagnosis"].get("limit"),
      "remedies", [(m["kind"], m["saves_bytes"]) for m in r["diagnosis"].get("remedies", [])])
PY
VT_AB_PAIRS=12 timeout 70 python3 "$ROOT/bench/gpu_ab.py" --build "$ROOT/build" --only context,peer \
  --repeats 1 --workload launch_bound_ab 2>&1 | grep -E "^\||FAILED"
