#!/bin/sh
# Builds fork_shim.so: a probe-only library, preloaded by fork_probe.py's cases, that passes every
# CUDA runtime call through to libcudart and, in a forked child that asked for it
# (vt_shim_child), writes the name of each runtime function the child calls (once each) and
# answers the device's index and count from what the parent had, as a forked child's runtime
# cannot. It shows which CUDA calls a fake training step makes in such a child.
#   scripts/gpu/fork_shim/make.sh OUT_DIR [libcudart.so.13]
set -eu
out=$1
cudart=${2:-/usr/local/cuda/lib64/libcudart.so.13}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
nm -D --defined-only "$cudart" | awk '{print $3}' | sed 's/@.*//' | grep '^cuda' | sort -u \
  > "$out/names.txt"
python3 "$here/gen.py" "$out/names.txt" > "$out/trampolines.S"
cc -O2 -shared -fPIC -o "$out/fork_shim.so" "$here/fork_shim.c" "$out/trampolines.S" -ldl
echo "$out/fork_shim.so: $(wc -l < "$out/names.txt") runtime functions"
