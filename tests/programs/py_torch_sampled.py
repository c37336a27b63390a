# Test script (stand-in PyTorch of tests/programs/fake_torch) for `vramtrace run
# --torch=sampled`: 120 training steps of fc1 and fc2 (512x512 float32, 1 MiB weights each)
# with a momentum buffer per weight, on a batch of 256 rows (512 KiB) that each step makes
# again. Step 75 (between the sampled iterations: the first three, the 50th, the 100th) takes
# a batch of 2048 rows: its 4 MiB batch and outputs need new segments, and its blocks are the
# run's peak of allocated memory. With --torch=sampled the trace is off from the end of step 3
# to the end of step 49 and from the end of step 50 to the end of step 99; the segments made in
# step 75 keep it on from then to the end.
# With `keep`, each step also keeps a 4 KiB metric tensor in a list (480 KiB after 120 steps, in
# the small blocks' first segment: no new segment): at the end of step 49 more memory is in use
# than at the end of step 3, and the trace stays on from then.
# With `workspace`, 1 GiB is taken outside PyTorch first (cudaMalloc through ctypes, as a
# library's workspace would be) and kept to the end: the run's memory is nearly all of it.
# With `workspace LIB`, LIB's cublas_standin_workspace() takes it (tests/programs/
# libcublas_standin.cu: a library whose name says cuBLAS).
# With `late`, step 75 keeps its batch of 256 rows and takes 2 MiB outside PyTorch (cudaMalloc
# through ctypes), kept to the end: the device's peak comes between the sampled iterations,
# while PyTorch's memory is as in every step (steady).
# With `cublas`, fc1's first forward takes a 2 MiB workspace through PyTorch's allocator and
# keeps it for the process's life, as PyTorch does for a cuBLAS handle's.
# With `inner`, step 75 keeps its batch of 256 rows (the same inputs as every step: nothing
# tells the hook to trace it) and the model's forward widens it 8 times (2048 rows, 4 MiB)
# before fc1: the run's peak of allocated memory, between the sampled iterations. With
# `inner-oom` it widens it 64 times (32 MiB): fc2's output does not fit the 80 MiB device, a
# fatal OOM between the sampled iterations.
import ctypes
import os
import sys

import torch

FEATURES = 512
_WORKSPACES = []


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
        self.workspace = None

    def forward(self, x):
        if self.workspace is not None and not _WORKSPACES:
            _WORKSPACES.append(torch.empty(self.workspace // 4))  # float32
        return torch.nn.functional.linear(x, self.weight)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Linear(FEATURES)
        self.fc2 = Linear(FEATURES)
        self.widen = 1

    def forward(self, x):
        if self.widen > 1:
            x = torch.empty(x.shape[0] * self.widen, x.shape[1])
        return self.fc2(self.fc1(x))


def main():
    model = Net()
    opt = Momentum(model.parameters())
    history = []
    keep = sys.argv[1:] == ["keep"]
    if sys.argv[1:] == ["workspace"]:
        cudart = ctypes.CDLL(os.environ["FAKE_TORCH_CUDART"])
        cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        workspace = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(workspace), 1 << 30) == 0
    elif sys.argv[1:2] == ["workspace"]:
        lib = ctypes.CDLL(sys.argv[2])
        lib.cublas_standin_workspace.argtypes = [ctypes.c_size_t]
        lib.cublas_standin_workspace.restype = ctypes.c_void_p
        assert lib.cublas_standin_workspace(1 << 30)
    late = sys.argv[1:] == ["late"]
    if sys.argv[1:] == ["cublas"]:
        model.fc1.workspace = 2 << 20
    widen = {"inner": 8, "inner-oom": 64}.get(sys.argv[1] if sys.argv[1:] else "", 0)
    for step in range(120):
        rows = 2048 if step == 75 and not late and not widen else 256
        model.widen = widen if step == 75 else 1
        if late and step == 75:
            cudart = ctypes.CDLL(os.environ["FAKE_TORCH_CUDART"])
            cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
            workspace = ctypes.c_void_p()
            assert cudart.cudaMalloc(ctypes.byref(workspace), 2 << 20) == 0
        x = torch.empty(rows, FEATURES, device="cpu").to("cuda")
        out = model(x)
        out.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if keep:
            history.append(torch.empty(1024))
        del x, out
    print("steps done", flush=True)


main()
