#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and PyTorch: profiles tests/html/torch_oom_train.py (a real
# training job that dies of OutOfMemoryError under a per-process memory fraction) and writes
# the first screen of its report.html to docs/report-oom-gpu.png (and -1000.png).
#   tests/html/gpu_oom_screenshot.sh [BUILD_DIR]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build}
OUT=$(mktemp -d)
"$BUILD/bin/vramtrace" run -o "$OUT" -- python3 "$ROOT/tests/html/torch_oom_train.py"
echo "gpu_oom_screenshot: the job exited with $? (1: it died of the OOM, as intended)"
node "$ROOT/tests/html/screenshot.mjs" "$OUT/report.html" "$ROOT/docs/report-oom-gpu.png" || exit 1
echo "gpu_oom_screenshot: report in $OUT"
