#!/usr/bin/env bash
# How long report.html takes to open on big runs, in headless Chromium (bench/html_open.mjs):
#  - torch: a transformer-shaped training job on the stand-in PyTorch (bench/torch_big_run.py,
#    ITERATIONS steps of BLOCKS blocks: ITERATIONS*BLOCKS*16 PyTorch block events) that dies
#    of OOM, profiled by `vramtrace run`;
#  - native: vt_synth_trace's NATIVE_EVENTS driver events, `vramtrace report`;
#  - sites: the HTML tests' big fixture (tests/html/fixtures.mjs: 20,000 sites with deep
#    stacks at the peak and at the OOM, 5,000 modules), rendered by vt_render_html.
# Prints each page's size, its embedded JSON's, report.json's and the open time. Not a test:
# the time depends on the machine.
#   bench/html_open.sh [BUILD_DIR] [ITERATIONS] [BLOCKS] [NATIVE_EVENTS]
# With KEEP=1 the reports are kept (their folder is printed).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
ITERATIONS=${2:-3000}
BLOCKS=${3:-24}
NATIVE=${4:-10000000}
WORK=$(mktemp -d)
if [[ ${KEEP:-} == 1 ]]; then echo "reports in $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi

echo "torch: $ITERATIONS iterations of $BLOCKS blocks ($((ITERATIONS * BLOCKS * 16)) block events and more)"
t0=$(date +%s.%N)
FAKE_TORCH_CUDART=$BUILD/standin/libcudart.so.13 PYTHONPATH=$ROOT/tests/programs/fake_torch \
  VRAMTRACE_STANDIN_DEVICE_BYTES=$((1 << 30)) LD_LIBRARY_PATH=$BUILD/standin \
  "$BUILD/bin/vramtrace" run -o "$WORK/torch" -- python3 "$ROOT/bench/torch_big_run.py" \
  "$ITERATIONS" "$BLOCKS" >"$WORK/torch.log" 2>&1 || true
echo "  profiled in $(echo "$(date +%s.%N) - $t0" | bc) s; $(grep -c . "$WORK/torch.log") lines of output"
test -f "$WORK/torch/report.html" || { cat "$WORK/torch.log"; exit 1; }

echo "native: $NATIVE events"
"$BUILD/bin/vt_synth_trace" "$WORK/native.vtrace" "$NATIVE" >/dev/null
"$BUILD/bin/vramtrace" report "$WORK/native.vtrace" -o "$WORK/native" --force >/dev/null 2>&1

echo "sites: the big fixture"
mkdir -p "$WORK/sites"
node --input-type=module -e "
import { writeFileSync } from 'node:fs';
import { big } from '$ROOT/tests/html/fixtures.mjs';
writeFileSync('$WORK/sites/report.json', JSON.stringify(big(20000)));"
"$BUILD/bin/vt_render_html" "$WORK/sites/report.json" "$WORK/sites/report.html"

# What opening any page costs on this machine: a page with nothing in it.
echo '<!doctype html><body data-ready="1">' >"$WORK/empty.html"
node "$ROOT/bench/html_open.mjs" "empty page=$WORK/empty.html" torch="$WORK/torch/report.html" native="$WORK/native/report.html" \
  sites="$WORK/sites/report.html"
