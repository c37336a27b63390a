#!/usr/bin/env bash
# One device call that proves the causes and the what-if on a GPU: scripts/gpu/causes_check.py
# (each way memory runs out, each remedy applied for real) and scripts/gpu/whatif.sh (the
# replay against real runs). Logs and tables under $LOGS; each part cut at its time.
#   BUILD=build-gpu LOGS=/tmp/logs scripts/gpu/causes-session.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
LOGS=${LOGS:-$ROOT/gpu-out/logs}
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/session.log"
start=$(date +%s)
timeout "${CAUSES_S:-330}" python3 "$ROOT/scripts/gpu/causes_check.py" --build "$BUILD" \
  --out "$ROOT/gpu-out/causes" > "$LOGS/causes.log" 2>&1
echo "causes rc=$? $(( $(date +%s) - start )) s" | tee -a "$LOGS/session.log"
cp "$ROOT/gpu-out/causes/causes-table.md" "$LOGS/" 2>/dev/null
start=$(date +%s)
BUILD=$BUILD OUT=$ROOT/gpu-out timeout "${WHATIF_S:-200}" "$ROOT/scripts/gpu/whatif.sh" \
  ${WHATIF_ONLY:+--only "$WHATIF_ONLY"} > "$LOGS/whatif.log" 2>&1
echo "whatif rc=$? $(( $(date +%s) - start )) s" | tee -a "$LOGS/session.log"
