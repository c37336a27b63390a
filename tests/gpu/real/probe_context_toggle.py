"""Probe (not a test): what switching PyTorch's allocator-trace context on and off costs, and
whether it keeps the trace (clear_history=False)."""
import inspect, time, torch
rec = torch.cuda.memory._record_memory_history
print("clear_history kwarg:", "clear_history" in inspect.signature(rec).parameters)
rec(enabled="all", context=None, stacks="python", max_entries=100000)
a = [torch.empty(1 << 20, device="cuda") for _ in range(10)]
n0 = len(torch.cuda.memory._snapshot()["device_traces"][0])
t = time.perf_counter()
for i in range(1000):
    rec(enabled="all", context="alloc", stacks="python", max_entries=100000)
    rec(enabled="all", context=None, stacks="python", max_entries=100000)
dt = (time.perf_counter() - t) / 2000
b = [torch.empty(1 << 20, device="cuda") for _ in range(10)]
tr = torch.cuda.memory._snapshot()["device_traces"][0]
print("entries before toggles %d after %d; per toggle %.1f us" % (n0, len(tr), dt * 1e6))
rec(enabled="all", context="alloc", stacks="python", max_entries=100000)
c = torch.empty(3 << 20, device="cuda")
tr = torch.cuda.memory._snapshot()["device_traces"][0]
print("last entry frames:", [(f["filename"].rsplit("/", 1)[-1], f["line"]) for f in tr[-1].get("frames", [])][:3])
