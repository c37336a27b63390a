# Test script (stand-in PyTorch of tests/programs/fake_torch): memory kept across iterations,
# the two ways a PyTorch program does it by mistake. Net is fc1, fc2, fc3, 1 MiB weights each
# (512x512 float32), and a head that makes a new 1024-wide output (4 MiB at 1024 rows, not
# saved for backward); the batch is 1024 x 512 float32 (2 MiB), made once. Each Linear takes a
# scratch of half its input (1 MiB, freed inside) and, with grad on, saves its output (2 MiB)
# for backward (torch/autograd.py).
#   eval [N]     model.eval(), N (6) forwards with autograd on and no backward: every forward's
#                graph (the three layers' outputs, 6 MiB) stays, as `total += loss` keeps it
#   nograd [N]   the same under torch.no_grad(): nothing stays
#   outputs [N]  N (6) training steps (backward, a momentum step) that keep each step's head
#                output (4 MiB) in a list: `kept.append(out.logits)`
#   detach [N]   the same with the outputs kept on the CPU (the remedy)
import sys

import torch

FEATURES = 512
ROWS = 1024


class Momentum(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1, momentum=0.9):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.empty_like(p)


class Linear(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = torch.nn.Parameter((features, features))

    def forward(self, x):
        scratch = torch.empty(x.shape[0], x.shape[1] // 2)
        del scratch
        return torch.nn.functional.linear(x, self.weight)


class Head(torch.nn.Module):
    def forward(self, h):
        return torch.empty(h.shape[0], 2 * FEATURES)  # py_torch_kept.py:46


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Linear(FEATURES)
        self.fc2 = Linear(FEATURES)
        self.fc3 = Linear(FEATURES)
        self.head = Head()

    def forward(self, x):
        return self.head(self.fc3(self.fc2(self.fc1(x))))


def main():
    mode = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    model = Net()
    x = torch.empty(ROWS, FEATURES, device="cpu").to("cuda")
    if mode in ("eval", "nograd"):
        model.eval()
        outs = []
        for _ in range(n):
            if mode == "nograd":
                with torch.no_grad():
                    out = model(x)  # py_torch_kept.py:72
            else:
                out = model(x)  # py_torch_kept.py:74
            outs.append(out.shape)
        return
    opt = Momentum(model.parameters())
    kept = []
    for _ in range(n):
        logits = model(x)  # py_torch_kept.py:80
        logits.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        kept.append(logits.shape if mode == "detach" else logits)


main()
