"""GPU workloads for scripts/bench-gpu.sh. Prints one JSON line: the median time of a step.

  bench_torch.py gpu_bound|launch_bound|alloc_bound [--record-history]

gpu_bound:    an 8-layer transformer encoder, 1024 wide, training steps (GPU-bound).
launch_bound: 100 tiny Linear(64,64)+ReLU layers, forward+backward+SGD: about 1,000 kernel
              launches a step (launch-bound).
alloc_bound:  torch.empty(1 MiB) and its free, 20,000 times a step, meant to run with
              PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (every tensor a cuMemAllocAsync).
--record-history turns on torch.cuda.memory._record_memory_history (PyTorch's own peer tool).
"""
import json
import statistics
import sys
import time

import torch
import torch.nn as nn


def timed(step, warmup, reps):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    mode = sys.argv[1]
    steps = None
    if "--record-history" in sys.argv:
        torch.cuda.memory._record_memory_history(max_entries=100000)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    if mode == "gpu_bound":
        layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
        model = nn.TransformerEncoder(layer, 8).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(16, 512, 1024, device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            model(x).float().pow(2).mean().backward()
            opt.step()
        sec = timed(step, 5, 30)
        per = "step"
    elif mode == "launch_bound":
        model = nn.Sequential(*[m for _ in range(100) for m in (nn.Linear(64, 64), nn.ReLU())]).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
        x = torch.randn(8, 64, device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            model(x).sum().backward()
            opt.step()
        sec = timed(step, 50, 400)
        per = "step"
        steps = 450  # with the warm-up: what the launch count of the whole run is divided by
    elif mode == "alloc_bound":
        def step():
            for _ in range(20000):
                t = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
                del t
        sec = timed(step, 2, 10)
        sec /= 20000
        per = "alloc+free"
    else:
        raise SystemExit(f"unknown mode {mode}")
    out = {"mode": mode, "seconds_per_" + per.replace("+", "_"): sec, "per": per}
    if steps:
        out["steps"] = steps
    print(json.dumps(out))


if __name__ == "__main__":
    main()
