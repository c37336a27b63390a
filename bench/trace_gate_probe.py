"""What switching PyTorch's allocator trace off between iterations would cost and keep, on the
launch-bound step (bench/context_parts.py's model): whether switching it off clears the ring,
the step with the trace on and off (interleaved blocks), what reading the allocator's state and
the ring's entries costs (torch.cuda.memory._snapshot) after one traced iteration and with the
trace off, and the cost of the figures read at an iteration's end.

    python3 bench/trace_gate_probe.py [PAIRS]"""
import statistics
import sys
import time

import torch
import torch.nn as nn


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(100) for m in (nn.Linear(64, 64), nn.ReLU())]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(8, 64, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    record = torch.cuda.memory._record_memory_history
    on = dict(enabled="all", context=None, stacks="python", max_entries=1000000,
              skip_actions=["free_requested"])
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    record(**on)
    step()
    torch.cuda.synchronize()
    n = len(torch.cuda.memory._snapshot()["device_traces"][0])
    record(enabled=None)
    left = len(torch.cuda.memory._snapshot()["device_traces"][0])
    record(**on)
    again = len(torch.cuda.memory._snapshot()["device_traces"][0])
    print(f"entries of one step: {n}; after switching off: {left}; on again: {again}")
    record(enabled=None)

    def block(k=3):
        step()
        ts = []
        for _ in range(k):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    ratios, offs = [], []
    for i in range(pairs):
        got = {}
        for state in ((True, False) if i % 2 == 0 else (False, True)):
            if state:
                record(**on)
            else:
                record(enabled=None)
            got[state] = block()
        ratios.append(got[True] / got[False])
        offs.append(got[False])
    record(enabled=None)
    r = statistics.median(ratios)
    print(f"trace on/off: x{r:.4f}, step off {statistics.median(offs) * 1e3:.3f} ms, "
          f"{(r - 1) * statistics.median(offs) * 1e6:+.0f} us a step")

    def timed(f, k=20):
        ts = []
        for _ in range(k):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e6

    def close_window():
        record(**on)
        step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        snap = torch.cuda.memory._snapshot()
        t1 = time.perf_counter()
        lines = []
        for e in snap["device_traces"][0]:
            lines.append("E\t0\t%s\t%d\t%d\t%d\t%d\t\t\n" % (e["action"], e["addr"], e["size"],
                                                          e["stream"], e["time_us"]))
        t2 = time.perf_counter()
        record(enabled=None)
        t3 = time.perf_counter()
        return (t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t2) * 1e6, len(lines), len(snap["segments"])
    got = [close_window() for _ in range(10)]
    print("window close: snapshot %.0f us, lines %.0f us, switch off %.0f us (%d entries, %d segments)"
          % tuple(statistics.median(g[i] for g in got) for i in range(3)) + (got[0][3], got[0][4]))
    print("snapshot with the trace off: %.0f us" % timed(torch.cuda.memory._snapshot))
    print("switch on: %.0f us" % timed(lambda: (record(**on), record(enabled=None))))
    print("memory_reserved: %.1f us" % timed(torch.cuda.memory_reserved, 200))
    print("max_memory_allocated: %.1f us" % timed(torch.cuda.max_memory_allocated, 200))
    print("mem_get_info: %.1f us" % timed(torch.cuda.mem_get_info, 200))
    stats = torch._C._cuda_memoryStats
    print("_cuda_memoryStats(0): %.1f us" % timed(lambda: stats(0), 200))
    # A big model's state: many blocks.
    big = [torch.empty(1000 + i, device=dev) for i in range(5000)]
    print("snapshot with 5000 more blocks, trace off: %.0f us" % timed(torch.cuda.memory._snapshot, 5))
    del big


if __name__ == "__main__":
    main()
