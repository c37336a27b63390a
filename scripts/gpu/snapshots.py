"""PyTorch's own memory snapshots, made the documented way (torch.cuda.memory.
_record_memory_history, then _dump_snapshot), for vramtrace's snapshot reader to be tested on:
small real jobs, each written to OUT/NAME.pickle with what PyTorch itself said of it in
OUT/NAME.truth.json (max_memory_reserved, max_memory_allocated, the OOM's request when there was
one), so that a test can hold the reader's figures to PyTorch's.

    python3 scripts/gpu/snapshots.py OUT
      train     an MLP trained 6 steps (SGD with momentum), snapshot at the end
      oom       the same at a batch that runs out under a 2 GiB per-process fraction, snapshot
                written in the OutOfMemoryError's handler
      expand    the train job under expandable_segments:True (its segments mapped, not allocated)
      nostack   the train job recorded with stacks="python" and context="alloc" (fewer keys)"""
import json
import os
import subprocess
import sys

JOBS = ("train", "oom", "expand", "nostack")


def job(name, out):
    import torch
    torch.manual_seed(0)
    mem = torch.cuda.memory
    kwargs = {"max_entries": 100000}
    if name == "nostack":
        kwargs.update(context="alloc", stacks="python")
    mem._record_memory_history(**kwargs)
    batch = 64 if name != "oom" else 4096
    if name == "oom":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(2 * 2**30 / total)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1000)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    truth = {"job": name, "torch": torch.__version__, "batch": batch}
    try:
        for step in range(6):
            x = torch.randn(batch * (8 if name == "oom" and step == 3 else 1), 1024,
                            device="cuda")
            y = torch.randint(0, 1000, (x.shape[0],), device="cuda")
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as ex:
        truth["oom"] = str(ex).splitlines()[0][:300]
    truth["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    truth["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    truth["memory_reserved_at_dump"] = torch.cuda.memory_reserved()
    truth["memory_allocated_at_dump"] = torch.cuda.memory_allocated()
    mem._dump_snapshot(os.path.join(out, name + ".pickle"))
    with open(os.path.join(out, name + ".truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    print(json.dumps(truth))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if len(sys.argv) > 2:
        return job(sys.argv[2], out)
    for name in JOBS:  # each in its own process: its own peaks and its own allocator settings
        env = dict(os.environ)
        if name == "expand":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        subprocess.run([sys.executable, __file__, out, name], env=env, check=False)


if __name__ == "__main__":
    main()
