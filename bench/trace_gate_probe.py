"""What switching PyTorch's allocator trace off between iterations would cost and keep, on the
launch-bound step (bench/gpu_torch.py's launch_bound_step): whether switching it off clears the ring,
the step with the trace on and off (interleaved blocks), what reading the allocator's state and
the ring's entries costs (torch.cuda.memory._snapshot) after one traced iteration and with the
trace off, and the cost of the figures read at an iteration's end.

    python3 bench/trace_gate_probe.py [PAIRS]"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_torch import hook_trace, launch_bound_step, timed  # noqa: E402


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    step = launch_bound_step(torch.device("cuda"))
    trace = hook_trace(1000000)  # the start-up hook's settings
    from _vramtrace_write import entry_lines  # beside the hook's settings (hook_trace's path)

    def on():
        trace(context=None)

    def off():
        torch.cuda.memory._record_memory_history(enabled=None)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    on()
    step()
    torch.cuda.synchronize()
    n = len(torch.cuda.memory._snapshot()["device_traces"][0])
    off()
    left = len(torch.cuda.memory._snapshot()["device_traces"][0])
    on()
    again = len(torch.cuda.memory._snapshot()["device_traces"][0])
    print(f"entries of one step: {n}; after switching off: {left}; on again: {again}")
    off()

    ratios, offs = [], []
    for i in range(pairs):
        got = {}
        for state in ((True, False) if i % 2 == 0 else (False, True)):
            (on if state else off)()
            got[state] = timed(step, 1, 3)
        ratios.append(got[True] / got[False])
        offs.append(got[False])
    off()
    r = statistics.median(ratios)
    print(f"trace on/off: x{r:.4f}, step off {statistics.median(offs) * 1e3:.3f} ms, "
          f"{(r - 1) * statistics.median(offs) * 1e6:+.0f} us a step")

    def call_us(f, k=20):
        ts = []
        for _ in range(k):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e6

    def close_window():
        on()
        step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        snap = torch.cuda.memory._snapshot()
        t1 = time.perf_counter()
        lines = entry_lines(0, snap["device_traces"][0], {}, str)  # as the hook keeps them
        t2 = time.perf_counter()
        off()
        t3 = time.perf_counter()
        return (t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t2) * 1e6, len(lines), len(snap["segments"])
    got = [close_window() for _ in range(10)]
    print("window close: snapshot %.0f us, lines %.0f us, switch off %.0f us (%d entries, %d segments)"
          % tuple(statistics.median(g[i] for g in got) for i in range(3)) + (got[0][3], got[0][4]))
    print("snapshot with the trace off: %.0f us" % call_us(torch.cuda.memory._snapshot))
    print("switch on and off: %.0f us" % call_us(lambda: (on(), off())))
    print("memory_reserved: %.1f us" % call_us(torch.cuda.memory_reserved, 200))
    print("max_memory_allocated: %.1f us" % call_us(torch.cuda.max_memory_allocated, 200))
    print("mem_get_info: %.1f us" % call_us(torch.cuda.mem_get_info, 200))
    stats = torch._C._cuda_memoryStats
    print("_cuda_memoryStats(0): %.1f us" % call_us(lambda: stats(0), 200))
    # A big model's state: many blocks.
    big = [torch.empty(1000 + i, device="cuda") for i in range(5000)]
    print("snapshot with 5000 more blocks, trace off: %.0f us" % call_us(torch.cuda.memory._snapshot, 5))
    del big


if __name__ == "__main__":
    main()
