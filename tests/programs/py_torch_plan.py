# Test script (stand-in PyTorch of tests/programs/fake_torch) for `vramtrace plan`: a training
# loop the start-up hook must stop before its first forward runs. The stand-in has no
# FakeTensorMode, so this program stands in for it: it gives the stand-in the pieces of PyTorch
# the hook's prediction reads (torch.utils._pytree, torch.device, Module.children) and replaces
# the one function that runs a step on fake tensors (_vramtrace_step.predict_step) by the
# requests this model's step makes, sized by the batch as the real step would be:
#   forward, in each block: a scratch of half the input (b x 256 float32, freed at once), the
#     output (b x 512 float32) kept for backward;
#   loss: none made (the stand-in's output is its own loss);
#   backward: each weight's gradient (1 MiB, kept), the gradient of the input (b x 512, freed),
#     then the outputs freed;
#   optimizer step: a 1 MiB momentum buffer per weight (kept).
# Under bf16 autocast the activations and the scratch take half; with the blocks checkpointed
# each block's output is freed when it returns and made again in the backward.
# Net: two Blocks of one 512 x 512 float32 Linear each (1 MiB weights). Arguments:
#   --batch B (default 10240), --fraction F (torch.cuda.set_per_process_memory_fraction),
#   --swallow (catches the stop's SystemExit and calls the model again),
#   --eval-first (a no_grad evaluation forward before training: the plan waits past it),
#   --no-step (never calls the model: no plan).
# A finished run's fake steps at exit (weigh_at_exit) run on a ShapeCopy: the stand-in's is the
# model itself; each of those steps takes STANDIN_FAKE_STEP_SECONDS (0).
import os
import sys
import time
import types

import torch

FEATURES = 512
MiB = 1 << 20


def stand_in_for_fake_tensors():
    pytree = types.ModuleType("torch.utils._pytree")

    def tree_leaves(x):
        if isinstance(x, (tuple, list)):
            return [leaf for y in x for leaf in tree_leaves(y)]
        if isinstance(x, dict):
            return [leaf for y in x.values() for leaf in tree_leaves(y)]
        return [x]

    def tree_map(f, x):
        if isinstance(x, (tuple, list)):
            return type(x)(tree_map(f, y) for y in x)
        if isinstance(x, dict):
            return {k: tree_map(f, v) for k, v in x.items()}
        return f(x)
    pytree.tree_leaves, pytree.tree_map = tree_leaves, tree_map
    utils = types.ModuleType("torch.utils")
    utils._pytree = pytree
    sys.modules["torch.utils"], sys.modules["torch.utils._pytree"] = utils, pytree
    torch.utils = utils
    torch.device = torch._tensor.device
    torch.nn.Module.children = lambda self: iter(self._modules.values())

    import _vramtrace_step

    def predict_step(torch_, model, call, batch, recorded_batch, optimizer, training, grad,
                     autocast, module_ids, iterations=2, checkpointed=(), devices=None,
                     repeat=False, output_dies=False):
        # A fake step that takes STANDIN_FAKE_STEP_SECONDS, for a finished run's budget.
        time.sleep(float(os.environ.get("STANDIN_FAKE_STEP_SECONDS", "0") or 0))
        act = batch * FEATURES * (2 if autocast is not None else 4)
        requests, n = [], [0]

        def a(nbytes, module, phase):
            n[0] += 1
            requests.append(("a", n[0], nbytes, module, phase))
            return n[0]

        def f(block, module, phase):
            requests.append(("f", block, 0, module, phase))
        blocks = [model.block1, model.block2]
        kept = []
        for blk in blocks:
            mid = module_ids(blk.fc)
            f(a(act // 2, mid, "f"), mid, "f")
            out = a(act, mid, "f")
            if blk in checkpointed:
                f(out, mid, "f")
                out = None
            kept.append((out, mid))
        for out, mid in reversed(kept):
            if out is None:
                out = a(act, mid, "b")  # recomputed
            a(MiB, mid, "b")
            f(a(act, mid, "b"), mid, "b")
            f(out, mid, "b")
        for blk in blocks:
            a(MiB, module_ids(blk.fc), "s")
        return requests
    _vramtrace_step.predict_step = predict_step

    class ShapeCopy:
        """The stand-in has no meta tensors: the model itself stands for its copy as shapes."""

        def __init__(self, torch_, model, optimizer, module_ids):
            self.model, self.optimizer, self.module_ids = model, optimizer, module_ids
            self.devices, self.device = None, 0
    _vramtrace_step.ShapeCopy = ShapeCopy


class Momentum(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if "momentum_buffer" not in self.state[p]:
                    self.state[p]["momentum_buffer"] = torch.empty_like(p)


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter((FEATURES, FEATURES))

    def forward(self, x):
        return torch.empty(x.shape[0], FEATURES)


class Block(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.fc = layer()

    def forward(self, x):
        return self.fc(x)


class Net(torch.nn.Module):
    """Two blocks of `layer` (py_torch_preflight.py runs the same model with a layer of its own)."""

    def __init__(self, layer=Linear):
        super().__init__()
        self.block1 = Block(layer)
        self.block2 = Block(layer)

    def forward(self, x):
        return self.block2(self.block1(x))


def main():
    args = sys.argv[1:]
    batch = int(args[args.index("--batch") + 1]) if "--batch" in args else 10240
    if "--fraction" in args:
        torch.cuda.set_per_process_memory_fraction(float(args[args.index("--fraction") + 1]), 0)
    stand_in_for_fake_tensors()
    model = Net()
    opt = Momentum(model.parameters())
    x = torch.empty(batch, FEATURES, device="cpu").to("cuda")
    if "--no-step" in args:
        print("no step taken", flush=True)
        return
    if "--eval-first" in args:
        with torch.no_grad():
            model(x)
        print("evaluated", flush=True)
    print("first step begins", flush=True)
    try:
        out = model(x)
    except SystemExit:
        if "--swallow" not in args:
            raise
        print("swallowed the stop", flush=True)
        out = model(x)
    print("the step ran", flush=True)  # never: the plan stops the process before the forward
    out.backward()
    opt.step()


if __name__ == "__main__":  # tests/programs/py_torch_preflight.py takes its pieces
    main()
