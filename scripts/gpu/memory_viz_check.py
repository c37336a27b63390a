"""`vramtrace export --memory-viz` against PyTorch's own reader, on a GPU machine with PyTorch:
a small real training job recorded with `vramtrace run` (once plain, once with
expandable_segments:True), its snapshot exported, then fed to torch.cuda._memory_viz: trace_plot
(allocations and segments) and segment_plot must give HTML, segsum must pass its own asserts
(blocks tiling each segment), trace must read every entry. The snapshot's figures are held to
what PyTorch itself said at the end of the job (memory_reserved, memory_allocated), and its keys
to those of a snapshot PyTorch makes itself (torch.cuda.memory._snapshot()). The Perfetto export
of the same run must parse, with the job's iterations.

    python3 scripts/gpu/memory_viz_check.py [--vramtrace build-gpu/bin/vramtrace] [--out DIR]

Prints one line per check and "memory_viz_check: all checks passed" (exit 0), or what failed
(exit 1)."""
import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile

JOB = r'''
import json, sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for step in range(4):
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
keep = torch.empty(3 * 1000 * 1000 + 7, dtype=torch.uint8, device="cuda")  # an odd size
torch.cuda.synchronize()
json.dump({"reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated()},
          open(sys.argv[1], "w"))
'''

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def torch_keys():
    """The keys of a snapshot PyTorch makes itself, with its trace on."""
    import torch
    mem = torch.cuda.memory
    mem._record_memory_history(max_entries=1000)
    x = torch.empty(5 << 20, device="cuda")
    del x
    y = torch.empty(1 << 10, device="cuda")
    snap = mem._snapshot()
    mem._record_memory_history(enabled=None)
    del y
    segs = snap["segments"]
    entries = [e for t in snap["device_traces"] for e in t]
    return (set(snap), set().union(*(set(s) for s in segs)),
            set().union(*(set(b) for s in segs for b in s["blocks"])),
            set().union(*(set(e) for e in entries if e["action"] != "oom")))


def one(vramtrace, out, name, env_extra):
    import torch.cuda._memory_viz as viz
    d = os.path.join(out, name)
    job = os.path.join(out, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    truth_path = os.path.join(out, name + ".truth.json")
    env = dict(os.environ, **env_extra)
    r = subprocess.run([vramtrace, "run", "-o", d, "--force", "--", sys.executable, job,
                        truth_path], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    check(r.returncode == 0, "%s: vramtrace run (%d) %s" % (name, r.returncode, r.stderr[-400:]))
    truth = json.load(open(truth_path))
    pkl = os.path.join(out, name + ".pickle")
    r = subprocess.run([vramtrace, "export", "--memory-viz", d, "-o", pkl, "--force"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(r.returncode == 0, "%s: export --memory-viz: %s" % (name, r.stderr.strip()))
    data = pickle.load(open(pkl, "rb"))
    for what, fn in (("trace_plot", lambda: viz.trace_plot(data)),
                     ("trace_plot segments", lambda: viz.trace_plot(data, plot_segments=True)),
                     ("segment_plot", lambda: viz.segment_plot(data))):
        try:
            html = fn()
            check(isinstance(html, str) and "<html>" in html and "MemoryViz" in html,
                  "%s: %s gives HTML (%d bytes)" % (name, what, len(html)))
            with open(os.path.join(out, "%s.%s.html" % (name, what.replace(" ", "_"))), "w") as f:
                f.write(html)
        except Exception as e:  # the check is that PyTorch's reader takes it
            check(False, "%s: %s raised %r" % (name, what, e))
    for what, fn in (("segsum", viz.segsum), ("trace", viz.trace)):
        try:
            text = fn(data)
            check(bool(text), "%s: %s reads it (%d lines)" % (name, what, text.count("\n")))
        except Exception as e:
            check(False, "%s: %s raised %r" % (name, what, e))
    reserved = sum(s["total_size"] for s in data["segments"])
    allocated = sum(s["allocated_size"] for s in data["segments"])
    check(reserved == truth["reserved"], "%s: reserved at the end %d, PyTorch's %d" % (
        name, reserved, truth["reserved"]))
    check(allocated == truth["allocated"], "%s: allocated at the end %d, PyTorch's %d" % (
        name, allocated, truth["allocated"]))
    top, seg, block, entry = torch_keys()
    ours_seg = set().union(*(set(s) for s in data["segments"]))
    ours_block = set().union(*(set(b) for s in data["segments"] for b in s["blocks"]))
    ours_entry = set().union(*(set(e) for t in data["device_traces"] for e in t
                               if e["action"] != "oom"))
    for what, ours, theirs in (("top", set(data), top), ("segment", ours_seg, seg),
                               ("block", ours_block, block), ("entry", ours_entry, entry)):
        check(ours <= theirs, "%s: %s keys are PyTorch's (ours only: %s; PyTorch's only: %s)" % (
            name, what, sorted(ours - theirs), sorted(theirs - ours)))
    trace = os.path.join(out, name + ".json")
    r = subprocess.run([vramtrace, "export", "--perfetto", d, "-o", trace, "--force"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events = json.load(open(trace))["traceEvents"] if r.returncode == 0 else []
    iters = [e for e in events if e.get("cat") == "iteration"]
    # The job's 4 training steps, each an iteration (on the H100 on 2026-12-07 this expected 5,
    # counting a boundary after the last step that begins no iteration: the export gave 4).
    check(len(iters) == 4, "%s: the Perfetto trace has the job's 4 iterations (%d)" % (
        name, len(iters)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vramtrace", default=os.path.join("build-gpu", "bin", "vramtrace"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="vt-memory-viz-")
    os.makedirs(out, exist_ok=True)
    vramtrace = os.path.abspath(a.vramtrace)
    one(vramtrace, out, "plain", {})
    one(vramtrace, out, "expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    print("outputs in %s" % out)
    if failures:
        print("memory_viz_check: %d checks failed" % len(failures))
        return 1
    print("memory_viz_check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
