#!/usr/bin/env bash
# One GPU call of exploration on real PyTorch jobs with the current build: the allocator clock
# probe, and a ResNet-50 OOM under a 16 GiB per-process fraction. Outputs under $OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
VT=$ROOT/build/bin/vramtrace
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 "$ROOT/tests/gpu/real/probe_hooks.py" 2>&1 | tail -5
for case in "${CASES:-oom}"; do :; done
rm -rf /tmp/vt-oom
PYTHONUNBUFFERED=1 timeout 300 "$VT" run -o /tmp/vt-oom -- python3 "$ROOT/tests/gpu/real/resnet_oom.py" > "$OUT/oom.log" 2>&1
echo "exit $?"; grep -v "^  " "$OUT/oom.log" | tail -40
cp /tmp/vt-oom/report.json "$OUT/oom-report.json"; cp /tmp/vt-oom/report.html "$OUT/oom-report.html"
ls -la /tmp/vt-oom | head
