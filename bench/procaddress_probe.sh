#!/usr/bin/env bash
# Whether launches could be recorded below CUPTI's callback cost, on a GPU: do a program's launches all go through cuLaunchKernel
# pointers that cudart fetches with cuGetProcAddress after the injection library is loaded?
# Runs bench/procaddress_probe.cpp's library (`cmake --build build --target vt_bench_libs`) in
# front of basic.cu built with static and with shared cudart, and a PyTorch launch-bound
# step, and prints its counts: CUPTI's launch count against the count through swapped pointers.
#   bench/procaddress_probe.sh [BUILD]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
PROBE=$(cd "$BUILD/lib" && pwd)/libvt_procaddress_probe.so
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
T=$(mktemp -d)
"$NVCC" -O2 -arch=native -I"$ROOT/tests/programs" -o "$T/basic-static" "$ROOT/tests/programs/basic.cu" || exit 2
"$NVCC" -O2 -arch=native -cudart shared -I"$ROOT/tests/programs" -o "$T/basic-shared" "$ROOT/tests/programs/basic.cu" || exit 2
for k in static shared; do
  echo "== basic ($k cudart)"
  CUDA_INJECTION64_PATH=$PROBE "$T/basic-$k" 2>&1 | grep -v "^procaddress_probe: swapped" | sort | uniq -c
  CUDA_INJECTION64_PATH=$PROBE "$T/basic-$k" 2>&1 | grep "^procaddress_probe: swapped" | sort | uniq -c
done
echo "== PyTorch: 20 launch-bound steps"
CUDA_INJECTION64_PATH=$PROBE python3 - <<'PY' 2>&1 | sort | uniq -c
import torch, torch.nn as nn
m = nn.Sequential(*[x for _ in range(100) for x in (nn.Linear(64, 64), nn.ReLU())]).cuda()
opt = torch.optim.SGD(m.parameters(), lr=1e-3, foreach=False)
x = torch.randn(8, 64, device="cuda")
for _ in range(20):
    opt.zero_grad(set_to_none=True); m(x).sum().backward(); opt.step()
torch.cuda.synchronize()
print("torch done")
PY
rm -rf "$T"
