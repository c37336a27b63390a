"""A real training loop for the live checks (scripts/gpu/live.sh): torchvision's ResNet-50 on
random images, STEPS steps of batch BATCH, printing its median step time at the end. With a
WORK folder: at step PAUSE it writes WORK/ready.json (torch.cuda.memory_allocated(), the
requested bytes of memory_stats() and memory_reserved() then, after a synchronize) and waits for WORK/go, so that a report of that
moment can be compared with PyTorch's own figures.
   live_train.py STEPS BATCH [WORK PAUSE]"""
import json
import os
import statistics
import sys
import time

import torch
import torchvision

steps, batch = int(sys.argv[1]), int(sys.argv[2])
work = sys.argv[3] if len(sys.argv) > 3 else None
pause = int(sys.argv[4]) if len(sys.argv) > 4 else -1
model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (batch,), device="cuda")
times = []
for i in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
    if i == pause and work:
        stats = torch.cuda.memory_stats()
        fig = {"step": i, "allocated": torch.cuda.memory_allocated(),
               "requested": stats.get("requested_bytes.all.current"),
               "reserved": torch.cuda.memory_reserved(),
               "max_allocated": torch.cuda.max_memory_allocated()}
        with open(os.path.join(work, "ready.json.tmp"), "w") as f:
            json.dump(fig, f)
        os.replace(os.path.join(work, "ready.json.tmp"), os.path.join(work, "ready.json"))
        while not os.path.exists(os.path.join(work, "go")):
            time.sleep(0.05)
# The first steps warm up (cuDNN's autotuning, the allocator's first segments).
steady = times[5:] if len(times) > 10 else times
print("live-train: median step %.6f s over %d steps" % (statistics.median(steady), len(steady)))
