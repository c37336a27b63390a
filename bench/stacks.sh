#!/usr/bin/env bash
# The cost of stacks, on the CPU stand-in: ns per cudaMalloc/cudaFree pair without vramtrace and
# under it with VRAMTRACE_STACKS=none|native|python|all, from C++ (bench_alloc.cu) and from
# Python (bench_alloc.py through ctypes.PyDLL, the GIL held, and ctypes.CDLL, the GIL released), all in this one invocation. Each
# figure is the median of 5 runs; ratios are against the same loop without vramtrace.
#   bench/stacks.sh [BUILD]       (default ./build)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
export LD_LIBRARY_PATH=$BUILD/standin
LIB=$BUILD/lib/libvramtrace.so
CUDART=$BUILD/standin/libcudart.so.13
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# measure MODE CMD...: MODE is "off" (no vramtrace) or a VRAMTRACE_STACKS value.
measure() {
  local mode=$1; shift
  for _ in 1 2 3 4 5; do
    if [[ $mode == off ]]; then
      "$@"
    else
      (cd "$TMP" && VRAMTRACE_STACKS=$mode VRAMTRACE_OUTPUT=$TMP/b.%p.vtrace LD_PRELOAD=$LIB "$@")
    fi | sed -n 's/^ns_per_pair=//p'
  done | median
}

echo "date: $(date -u +%Y-%m-%d), host: $(nproc) cores, $(uname -m), $(python3 --version)"
for lang in C++ Python Python-CDLL; do
  if [[ $lang == C++ ]]; then cmd=("$BUILD/tests/programs/bench_alloc" 200000)
  elif [[ $lang == Python ]]; then cmd=(python3 "$ROOT/tests/programs/bench_alloc.py" "$CUDART" 50000)
  else cmd=(python3 "$ROOT/tests/programs/bench_alloc.py" "$CUDART" 50000 cdll); fi
  base=$(measure off "${cmd[@]}")
  printf '%-11s %-22s %8s ns/pair\n' "$lang" "without vramtrace" "$base"
  for mode in none native python all; do
    ns=$(measure "$mode" "${cmd[@]}")
    printf '%-11s %-22s %8s ns/pair  x%s  (+%s ns)\n' "$lang" "VRAMTRACE_STACKS=$mode" "$ns" \
      "$(awk -v a="$ns" -v b="$base" 'BEGIN {printf "%.2f", a / b}')" "$((ns - base))"
  done
done
