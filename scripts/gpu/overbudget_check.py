"""The fake steps stopped at their deadline leave the process sound: ResNet-50 on the GPU, its
copy as shapes, the stand-in step run with a deadline already past and with one that passes
inside the step; each must raise OverBudget, allocate nothing on the device, and leave PyTorch's
allocator readable (torch.cuda.memory._snapshot) and the process to exit 0.

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
call, b = step.describe_call(torch, (torch.randn(64, 3, 224, 224, device="cuda"),), {})
shape = step.ShapeCopy(torch, model, opt, lambda m: 0)
for after_s in (0.0, 0.3, 0.8):
    before = torch.cuda.memory_allocated()
    t = time.perf_counter()
    try:
        step.predict_step(torch, shape.model, call, b, b, shape.optimizer, True, True, None,
                          shape.module_ids, devices=shape.devices,
                          deadline_ns=time.monotonic_ns() + int(after_s * 1e9))
        print("deadline in %.1f s: the step ended first" % after_s)
    except step.OverBudget:
        print("deadline in %.1f s: stopped after %.2f s; device memory allocated: %d bytes; "
              "snapshot's segments: %d" % (after_s, time.perf_counter() - t,
                                           torch.cuda.memory_allocated() - before,
                                           len(torch.cuda.memory._snapshot()["segments"])))
print("exit")
