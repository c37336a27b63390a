# Test script (stand-in PyTorch of tests/programs/fake_torch): several Python processes that
# import torch, each with its own PyTorch allocator trace for the collector to read. Run with
# no argument, it starts 3 children (this script with "child") one after the other, then
# does what a child does: keeps a 256 KiB tensor made outside any phase (line 16), whose
# frames the allocator trace records. Each process's tensor is still live at its exit.
import subprocess
import sys

import torch


def main():
    if sys.argv[1:] != ["child"]:
        for _ in range(3):
            subprocess.run([sys.executable, __file__, "child"], check=True)
    kept = torch.empty(64 * 1024)  # py_torch_procs.py:16
    print("py_torch_procs done", sys.argv[1:], flush=True)
    return kept


held = main()
