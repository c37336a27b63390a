# Test script (stand-in PyTorch of tests/programs/fake_torch): the caching allocator fragments
# and goes out of memory. One 64 MiB segment; 16 blocks of 4 MiB made by make_blocks() (line
# 13); every other one freed: 32 MiB free in 8 blocks of 4 MiB. A request of 8 MiB fits no free
# block, the allocator asks the driver for a 20 MiB segment, the device (80 MiB) has no room:
# OOM. Expected: the OOM's fragmentation finding ranks first, naming expandable_segments.
import torch
from torch.cuda import memory

MiB = 1 << 20


def make_blocks(base):
    return [memory.alloc(base + i * 4 * MiB, 4 * MiB) for i in range(16)]  # py_torch_frag.py:13


def main():
    base = memory.segment(64 * MiB)
    blocks = make_blocks(base)
    for b in blocks[::2]:
        memory.free(b)
    try:
        memory.oom(8 * MiB, 20 * MiB)
    except RuntimeError as ex:
        print("caught:", str(ex)[:40])
    print("py_torch_frag done", torch.__version__)


main()
