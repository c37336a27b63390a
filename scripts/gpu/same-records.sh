#!/usr/bin/env bash
# The same records on a GPU from two builds of the library (tests/tools/same_records.sh with
# PROGRAMS): CUDA test programs built with nvcc, static and shared cudart, each run twice under
# OLD's and NEW's libvramtrace.so on the real driver; every masked record must be the same.
#   scripts/gpu/same-records.sh OLD_BUILD [NEW_BUILD]   # NEW needs bin/vt_trace_digest too
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OLD=$1
NEW=${2:-$ROOT/build}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
BIN=$(mktemp -d)
for p in basic apis threads oom callchain; do
  extra=""
  [[ $p == apis ]] && extra="-lcuda"
  "$NVCC" -O2 -arch=native -I"$ROOT/tests/programs" -o "$BIN/$p-static" "$ROOT/tests/programs/$p.cu" $extra &
  "$NVCC" -O2 -arch=native -cudart shared -I"$ROOT/tests/programs" -o "$BIN/$p-shared" \
    "$ROOT/tests/programs/$p.cu" $extra &
done
wait
PROGRAMS=$BIN "$ROOT/tests/tools/same_records.sh" "$OLD" "$NEW"
