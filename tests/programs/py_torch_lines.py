# Test script (stand-in PyTorch of tests/programs/fake_torch): small blocks made between
# forward, backward and step by a factory, in a segment made before them, as a batch's targets
# are (torch.randint(..., device="cuda")). No call the start-up hook marks makes them, and
# their segment was not made for them: only the allocator trace's own frames, which the hook
# switches on between the phases, give them the user's line. Net is one Linear (1 MiB weight
# in a 2 MiB segment). Each of 6 iterations moves a batch of 64 x 512 float32 (128 KiB) to the
# GPU, makes its targets (64 float32, 256 bytes) at line 42 and keeps them in a list (a leak:
# 6 x 256 bytes at exit), then runs forward, backward and step; the batch is dropped.
# With --own-history the program sets PyTorch's allocator trace itself first (context "all"):
# the hook leaves it so, and every block has frames, those made in forward too.
import sys

import torch
import torch.nn.functional as F

FEATURES = 512


class Linear(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = torch.nn.Parameter((features, features))

    def forward(self, x):
        return F.linear(x, self.weight)


class Plain(torch.optim.Optimizer):
    def step(self):
        pass


def main():
    if "--own-history" in sys.argv:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                                 max_entries=100000)
    model = Linear(FEATURES)
    opt = Plain(model.parameters(), {})
    kept = []
    for iteration in range(6):
        x = torch.empty(64, FEATURES, device="cpu").to("cuda")
        targets = torch.empty(64)  # py_torch_lines.py:42
        kept.append(targets)
        out = model(x)
        out.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        del x, out
    print("py_torch_lines done", len(kept), flush=True)
    return model, opt, kept


held = main()
