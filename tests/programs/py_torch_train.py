# Test script (stand-in PyTorch of tests/programs/fake_torch): a training loop whose memory
# vramtrace classifies, then dies of an uncaught OutOfMemoryError. Net is fc1 and fc2, 1 MiB
# weights each (512x512 float32); a batch of B rows is B x 512 float32 (4 MiB at B = 2048).
# Each layer's forward takes a scratch of half its input (2 MiB, freed inside: temporaries)
# and keeps its output (4 MiB) for backward (activations); backward makes the 1 MiB grads
# once (kept: zero_grad(set_to_none=False)) and frees the outputs; Momentum.step makes a
# 1 MiB momentum buffer per weight once. Iterations 0-2 take B = 2048 and leave the caching
# allocator (best fit, segments rounded up to 2 MiB) with 20 MiB reserved. Iteration 3 takes
# B = 10240: the batch (20 MiB), fc1's scratch (10 MiB) and output (20 MiB) get new segments
# (70 MiB reserved, the peak), fc2's scratch reuses fc1's, and fc2's output (20 MiB, line 46)
# does not fit the 80 MiB device: a fatal OOM with 46 MiB in blocks (parameters, gradients and
# optimizer state 2 MiB each, the batch 20, fc1's output 20) and 24 MiB cached.
# With --fraction 0.875, torch.cuda.set_per_process_memory_fraction caps the allocator at
# 70 MiB: the same request is refused by PyTorch itself, the driver never asked.
# With --recover, the OOM is caught and iteration 3 runs again at B = 2048 (iteration 4 of
# the loop; the optimizer's steps count it as iteration 3); main() returns, the model and
# the optimizer go, and their blocks with them: nothing is in use at exit.
import sys

import torch
import torch.nn.functional as F

FEATURES = 512


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
        scratch = torch.empty(x.shape[0], x.shape[1] // 2)  # py_torch_train.py:44
        del scratch
        return F.linear(x, self.weight)  # py_torch_train.py:46


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Linear(FEATURES)
        self.fc2 = Linear(FEATURES)

    def forward(self, x):
        return self.fc2(self.fc1(x))


def main():
    args = sys.argv[1:]
    if args[:1] == ["--fraction"]:
        torch.cuda.set_per_process_memory_fraction(float(args[1]), 0)
    recover = "--recover" in args
    model = Net()
    opt = Momentum(model.parameters())
    for iteration in range(5 if recover else 4):
        batch = 5 * 2048 if iteration == 3 else 2048
        x = torch.empty(batch, FEATURES, device="cpu").to("cuda")  # py_torch_train.py:68
        try:
            out = model(x)  # py_torch_train.py:70
        except torch.OutOfMemoryError:
            if not recover:
                raise
            print("iteration", iteration, "out of memory, going on", flush=True)
            del x
            continue
        out.backward()  # py_torch_train.py:77
        opt.step()  # py_torch_train.py:78
        opt.zero_grad(set_to_none=False)
        del x, out
        print("iteration", iteration, "done", flush=True)


main()
