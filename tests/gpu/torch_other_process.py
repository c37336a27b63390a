"""PyTorch script for the GPU suite (scripts/gpu/check_allocator.py): an OOM because another
process holds the GPU. A child process takes 70 % of the device's memory (whole GiB; 98 GiB of an
H200, 55 of an H100) and waits; the parent then asks for 45 %, which the device no longer has:
OutOfMemoryError in the parent, whose own memory is small. The parent prints what the child held
("held_bytes N"), which the check compares with the report's memory held by others.
"""
import subprocess
import sys
import time

import torch

GiB = 1 << 30


def share(fraction):
    """That share of the device's memory, in whole GiB."""
    return int(torch.cuda.get_device_properties(0).total_memory * fraction) // GiB * GiB


def child() -> int:
    hold = torch.empty(share(0.7), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("held", hold.numel(), flush=True)
    sys.stdin.readline()  # until the parent is done
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        return child()
    p = subprocess.Popen([sys.executable, __file__, "child"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("held")
    print("held_bytes", int(line.split()[1]), flush=True)
    small = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
    rc = 0
    try:
        torch.empty(share(0.45), dtype=torch.uint8, device="cuda")  # VT-OOM
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
