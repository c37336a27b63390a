#!/usr/bin/env bash
# What the start-up hook's context (module, autograd and optimizer hooks: the categories) costs,
# switched on and off inside each process (bench/gpu_ab.py): on the launch-bound step
# beside PyTorch's allocator trace as vramtrace sets it and PyTorch's own tool as its docs start
# it (context and stacks "all", the peer), and on the GPU-bound step.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --only null,context,context_every,history,peer \
  --repeats "${REPEATS:-2}" --workload launch_bound_ab
python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --only null,context \
  --repeats "${REPEATS:-2}" --workload gpu_bound_ab
