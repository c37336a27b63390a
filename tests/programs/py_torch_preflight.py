# Test script (stand-in PyTorch of tests/programs/fake_torch) for `vramtrace run --preflight`: a
# training loop of STEPS steps (default 3) whose first the start-up hook predicts before it runs.
# The fake-tensor run is py_torch_plan.py's stand-in (its predict_step: the same model, the same
# requests), so the prediction is the plan's; the steps here then run for real on the stand-in
# caching allocator (segments of the request rounded up to 2 MiB, best fit, never given back):
#   forward, in each block: a scratch of b x 256 float32 freed at once, the output (b x 512
#     float32) kept for backward (torch.autograd's graph);
#   backward: each weight's gradient (1 MiB, once), each saved output freed;
#   optimizer step: a 1 MiB momentum buffer per weight (once).
# It prints a line before each step and after the last, and exits 0 (or dies of the stand-in's
# OutOfMemoryError, as PyTorch's program would). Arguments: --batch B (default 4096),
# --fraction F (torch.cuda.set_per_process_memory_fraction), --steps N, --linger S (sleeps S
# seconds after the steps: a run of at least that long).
import sys
import time

import torch

import py_torch_plan as plan

FEATURES = plan.FEATURES


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter((FEATURES, FEATURES))

    def forward(self, x):
        scratch = torch.empty(x.shape[0], FEATURES // 2)
        del scratch
        out = torch.empty(x.shape[0], FEATURES)
        torch.autograd._save(out, self.weight)
        return out


def main():
    args = sys.argv[1:]
    batch = int(args[args.index("--batch") + 1]) if "--batch" in args else 4096
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 3
    if "--fraction" in args:
        torch.cuda.set_per_process_memory_fraction(float(args[args.index("--fraction") + 1]), 0)
    try:
        plan.stand_in_for_fake_tensors()
    except ImportError:
        pass  # run without vramtrace (the test's reference): no hook to stand in for
    model = plan.Net(Linear)
    opt = plan.Momentum(model.parameters())
    x = torch.empty(batch, FEATURES, device="cpu").to("cuda")
    for step in range(steps):
        print("step %d begins" % step, flush=True)
        out = model(x)
        out.backward()
        opt.step()
        del out
    print("%d steps ran" % steps, flush=True)
    if "--linger" in args:
        time.sleep(float(args[args.index("--linger") + 1]))


main()
