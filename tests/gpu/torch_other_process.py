"""PyTorch script for the GPU suite (scripts/gpu/check_allocator.py): an OOM because another
process holds the GPU. A child process takes 100 GiB and waits; the parent then asks for 60 GiB,
which the device no longer has: OutOfMemoryError in the parent, whose own memory is small.
"""
import subprocess
import sys
import time

import torch

GiB = 1 << 30


def child() -> int:
    hold = torch.empty(100 * GiB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("held", hold.numel() // GiB, flush=True)
    sys.stdin.readline()  # until the parent is done
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        return child()
    p = subprocess.Popen([sys.executable, __file__, "child"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("held")
    small = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
    rc = 0
    try:
        torch.empty(60 * GiB, dtype=torch.uint8, device="cuda")  # VT-OOM
    except torch.cuda.OutOfMemoryError as ex:
        print("OOM:", str(ex).splitlines()[0][:120])
        rc = 3
    p.stdin.write("done\n")
    p.stdin.flush()
    p.wait(timeout=60)
    time.sleep(0.1)
    print("parent done", small.numel() >> 20)
    return rc


if __name__ == "__main__":
    sys.exit(main())
