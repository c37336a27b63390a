"""PyTorch script for the GPU suite's stacks checks (scripts/gpu/check.py).

A small model is built, then make_activations() allocates one 4 GiB tensor at the line marked
VT-PEAK: that block is the peak, so vramtrace's report must name this file and that line as the
site of the largest allocation live at the peak, and libc10_cuda (PyTorch's caching allocator) or
libtorch_cuda as the library that holds PyTorch's segments.
"""
import sys

import torch


def make_activations():
    return torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # VT-PEAK


def main() -> int:
    model = torch.nn.Linear(1024, 1024).cuda()
    big = make_activations()
    big.fill_(1)
    torch.cuda.synchronize()
    del big
    torch.cuda.empty_cache()
    print("torch peak done", sum(p.numel() for p in model.parameters()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
