"""PyTorch script for the GPU suite (scripts/gpu/check_allocator.py): tensors kept across
iterations. 20 iterations of a tiny step; each keeps its 64 MiB activation in a list (the line
marked VT-LEAK), the way code that stores outputs or un-.item()'d losses does. Expected: growth
of exactly 64 MiB per iteration over 20 iterations at that line. With the argument "nvtx" each
iteration is an NVTX range "step" (torch.cuda.nvtx), else iterations come from the kernels.
"""
import sys

import torch


def main() -> int:
    nvtx = len(sys.argv) > 1 and sys.argv[1] == "nvtx"
    x = torch.randn(4096, 4096, device="cuda")  # 64 MiB of float32
    w = torch.randn(4096, 4096, device="cuda")
    kept = []
    for i in range(20):
        if nvtx:
            torch.cuda.nvtx.range_push("step")
        h = x @ w
        y = torch.relu(h)  # VT-LEAK
        kept.append(y)
        del h
        if nvtx:
            torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("torch leak done", len(kept), "nvtx" if nvtx else "kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
