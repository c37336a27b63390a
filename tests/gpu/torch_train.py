"""A small PyTorch training loop for the GPU suite (scripts/gpu/test.sh).

An 8-layer transformer encoder, 512 wide, trained for a few steps with AdamW. At the end it
writes PyTorch's own view of its memory (max reserved, max allocated) as JSON to the file named
by VT_TORCH_STATS, so the suite can compare it with vramtrace's report of the same run.
"""
import json
import os
import sys

import torch
import torch.nn as nn


def main() -> int:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=8).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    steps = int(os.environ.get("VT_TORCH_STEPS", "10"))
    for step in range(steps):
        x = torch.randn(32, 256, 512, device=dev)
        loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    stats = {
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "memory_reserved_end": torch.cuda.memory_reserved(),
        "allocator": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default"),
        "torch": torch.__version__,
        "loss": float(loss),
    }
    path = os.environ.get("VT_TORCH_STATS")
    if path:
        with open(path, "w") as f:
            json.dump(stats, f)
    print("torch train done", json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
