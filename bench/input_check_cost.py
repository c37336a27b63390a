#!/usr/bin/env python3
"""What the sampled trace's check of a call's inputs costs (the start-up hook's
Windows.larger_inputs, at each outermost module call and each move to the GPU between the
sampled iterations): its time a call on a batch as GPT-2's (input ids and labels), against an
empty call measured in the same process, and its share of a launch-bound step of STEP_MS
(bench/gpu_torch.py's, 22 ms on the H100) at CALLS calls a step.
    input_check_cost.py [CALLS=3] [STEP_MS=22]"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "vramtrace", "_hook"))
from _vramtrace_lines import Trace  # noqa: E402
from _vramtrace_windows import Windows  # noqa: E402


class Probe(Windows):
    def __init__(self):
        trace = Trace(torch)
        trace.window_record = object()  # sampling, as between the windows
        trace.on = False
        super().__init__(torch, str, trace, lambda full: None)


def per_call_ns(fn, n=200000):
    best = None
    for _ in range(5):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        ns = (time.perf_counter_ns() - t) / n
        best = ns if best is None else min(best, ns)
    return best


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    step_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 22.0
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ids = torch.randint(0, 16384, (8, 256), device=dev)
    inputs = ((ids,), {"labels": ids, "attention_mask": None})
    p = Probe()
    p.larger_inputs(1, inputs)  # seen once: every later call compares

    def check():
        p.larger_inputs(1, inputs)

    def empty():
        pass
    base = per_call_ns(empty)
    ns = per_call_ns(check) - base
    print("larger_inputs: %.2f us a call (an empty call %.0f ns, subtracted); %d calls a %.0f ms "
          "step: %.3f %% of it" % (ns / 1000, base, calls, step_ms,
                                  100.0 * calls * ns / (step_ms * 1e6)))


if __name__ == "__main__":
    main()
