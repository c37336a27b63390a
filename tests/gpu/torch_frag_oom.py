"""PyTorch script for the GPU suite (scripts/gpu/check_allocator.py): an OOM from fragmentation.

A 40 GiB tensor is freed (its segment stays cached), 40 tensors of 1 GiB are carved from that
segment and every other one is freed: 20 GiB reserved but free, in 1 GiB blocks. A filler takes
the device's free memory but 1 GiB. A request of 2 GiB then fits no free block and the driver
has no room for a new segment: OutOfMemoryError, with 20 GiB "reserved but unallocated".
With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PyTorch can unmap the free pieces and
map them again in one range: the same script then succeeds.
"""
import sys

import torch

GiB = 1 << 30


def main() -> int:
    big = torch.empty(40 * GiB, dtype=torch.uint8, device="cuda")
    del big
    parts = [torch.empty(GiB, dtype=torch.uint8, device="cuda") for _ in range(40)]
    del parts[::2]
    free, total = torch.cuda.mem_get_info()
    filler = torch.empty((free - GiB) // (2 << 20) * (2 << 20), dtype=torch.uint8, device="cuda")
    try:
        x = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")  # VT-OOM
        print("no OOM", x.numel() // GiB, filler.numel() > 0)
        return 0
    except torch.cuda.OutOfMemoryError as ex:
        print("OOM:", str(ex).splitlines()[0][:120])
        print("reserved but unallocated:",
              torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
        return 3


if __name__ == "__main__":
    sys.exit(main())
