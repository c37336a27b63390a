"""Probe on the GPU: does PyTorch's allocator trace clock (time_us) agree with time.time_ns()
to within a microsecond, and which public hooks exist in this PyTorch?"""
import sys, time
import torch
torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=100000)
marks = []
for i in range(2000):
    t0 = time.time_ns()
    x = torch.empty(4096 + i * 512, device="cuda")
    t1 = time.time_ns()
    marks.append((t0, t1, x.data_ptr()))
    del x
snap = torch.cuda.memory._snapshot()
allocs = {}
for e in snap["device_traces"][0]:
    if e["action"] == "alloc":
        allocs.setdefault(e["addr"], []).append(e["time_us"])
early = late = inside = 0
worst = 0
for t0, t1, ptr in marks:
    ts = [t * 1000 for t in allocs.get(ptr, [])]
    ok = [t for t in ts if t0 - 2000 <= t <= t1 + 2000]
    if not ok:
        continue
    t = min(ok, key=lambda t: abs(t - (t0 + t1) / 2))
    if t < t0 - 999: early += 1; worst = max(worst, t0 - t)
    elif t > t1: late += 1; worst = max(worst, t - t1)
    else: inside += 1
print("clock: inside %d early %d late %d worst_ns %d" % (inside, early, late, worst))
import torch.nn.modules.module as M
import torch.optim.optimizer as O
print("hooks:", hasattr(M, "register_module_forward_pre_hook"), hasattr(M, "register_module_forward_hook"),
      hasattr(O, "register_optimizer_step_pre_hook"), hasattr(O, "register_optimizer_step_post_hook"),
      hasattr(torch.Tensor, "register_post_accumulate_grad_hook"))
print("fraction api:", hasattr(torch.cuda, "get_per_process_memory_fraction"),
      [n for n in dir(torch.cuda.memory) if "fraction" in n])
print("python", sys.version)
