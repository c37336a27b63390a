"""What the jobs of scripts/gpu/first_step_job.py need for real, to hold vramtrace's
predictions of a first-step death against: for each MODEL:BATCH given, the whole step's reserved
peak at BATCH and at half of it with no cap (three steps: torch.cuda.max_memory_reserved()), and
the largest batch that runs three steps under LIMIT_GIB (PyTorch's per-process fraction), by
bisection. Each try runs in this process after the last one's memory is given back
(empty_cache), as a fresh process would start.

    python3 scripts/gpu/first_step_truth.py resnet50:256 vit_b_16:384 gpt2:32 bert:96
Prints one JSON line per model ("truth ..."). With --remedies, for each MODEL:BATCH the reserved
peak of three steps with no cap as it is, at half the batch, under bf16 autocast and with its
repeated blocks checkpointed ("remedies ..."): the report's remedies applied for real."""
import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from first_step_job import build  # noqa: E402

LIMIT_GIB = float(os.environ.get("LIMIT_GIB", "16"))
TOTAL = torch.cuda.get_device_properties(0).total_memory


def trial(name, batch, limit_gib, **remedy):
    """The reserved peak of three steps at `batch`, or None when it runs out of memory."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_gib * 2**30 / TOTAL)
                                               if limit_gib else 1.0)
    torch.cuda.reset_peak_memory_stats()
    try:
        model, opt, step = build(name, batch, **remedy)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_reserved()
    except torch.cuda.OutOfMemoryError:
        peak = None
    model = opt = step = None
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def largest(name, hi):
    """The largest batch in [1, hi] whose three steps fit under LIMIT_GIB."""
    lo, best = 1, None
    if trial(name, 1, LIMIT_GIB) is None:
        return 0
    best = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if trial(name, mid, LIMIT_GIB) is not None:
            lo = best = mid
        else:
            hi = mid - 1
    return best


remedies = "--remedies" in sys.argv
for arg in sys.argv[1:]:
    if arg.startswith("--"):
        continue
    name, batch = arg.split(":")
    if remedies:
        batch = int(batch)
        print("remedies", json.dumps({
            "model": name, "batch": batch, "reserved": trial(name, batch, 0),
            "half_batch": trial(name, batch // 2, 0), "bf16": trial(name, batch, 0, amp=True),
            "checkpointing": trial(name, batch, 0, ckpt=True)}), flush=True)
        continue
    batch = int(batch)
    started = time.time()
    whole = trial(name, batch, 0)
    half = trial(name, batch // 2, 0)
    fits = largest(name, batch)
    print("truth", json.dumps({"model": name, "batch": batch, "limit_gib": LIMIT_GIB,
                               "whole_step_reserved": whole, "half_batch_reserved": half,
                               "largest_batch": fits, "seconds": round(time.time() - started, 1)}),
          flush=True)
