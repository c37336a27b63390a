"""The fake steps stopped at their deadline leave the process sound: ResNet-50 on the GPU, its
copy as shapes, the stand-in steps of a finished run (predicted_lines: the step, bf16, the
checkpointed blocks) with a deadline already past, one that passes during the first step and
none. A step once begun runs to its end (nothing is raised inside an operator); the deadline is
asked between steps, where OverBudget stops the rest. Each must allocate nothing on the device,
leave PyTorch's allocator readable (torch.cuda.memory._snapshot) and a real training step
runnable after it, and the process must exit 0.

    python3 scripts/gpu/overbudget_check.py"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python", "vramtrace", "_hook"))
import torch  # noqa: E402
import torchvision  # noqa: E402
import _vramtrace_step as step  # noqa: E402

model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(64, 3, 224, 224, device="cuda")
call, b = step.describe_call(torch, (x,), {})
shape = step.ShapeCopy(torch, model, opt, lambda m: 0)
ids = {}


def module_id(m):
    return ids.setdefault(id(m), len(ids) + 1)


for after_s in (0.0, 0.3, None):
    before = torch.cuda.memory_allocated()
    t = time.perf_counter()
    deadline = None if after_s is None else time.monotonic_ns() + int(after_s * 1e9)
    try:
        lines = step.predicted_lines(torch, 0, 0, shape.model, call, b, shape.optimizer, True,
                                     True, None, module_id, finished=True,
                                     devices=shape.devices, deadline_ns=deadline)
        said = "ended first: %d steps" % sum(1 for line in lines if line.startswith("N\t"))
    except step.OverBudget:
        said = "stopped between steps"
    print("deadline %s: %s after %.2f s; device memory allocated by them: %d bytes; "
          "snapshot's segments: %d" % ("none" if after_s is None else "in %.1f s" % after_s,
                                       said, time.perf_counter() - t,
                                       torch.cuda.memory_allocated() - before,
                                       len(torch.cuda.memory._snapshot()["segments"])))
# A real step after them: the autograd engine and the allocator work as before.
loss = model(x).logsumexp(1).mean()
loss.backward()
opt.step()
torch.cuda.synchronize()
print("a real step after them: loss %.3f, max_memory_allocated %d" % (
    loss.item(), torch.cuda.max_memory_allocated()))
print("exit")
