#!/usr/bin/env python3
"""`vramtrace export` end to end on the stand-in: the files read back as the other tools read
them (json for Perfetto's trace event JSON, Python's pickle for PyTorch's memory snapshot), with
the figures the test programs make.

grow 32 (tests/programs/grow.cu): 64 MiB by cudaMalloc, 32 MiB more by cudaMallocAsync, both
freed: a peak of 96 MiB, nothing at the end. As a snapshot each driver allocation is a segment
with one block, made and freed in that order.

py_torch_train.py on the stand-in PyTorch (its header has the figures): iterations 0-3, the
forward, backward and optimizer step of 0-2 and the forward of 3, which dies of a fatal OOM on a
20 MiB request; then 46 MiB in blocks (parameters, gradients and optimizer state 2 MiB each, the
batch 20, fc1's output 20) in 70 MiB reserved (24 MiB cached).

   export_test.py BUILD_DIR"""
import json
import os
import pickle
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
sys.dont_write_bytecode = True
import vtrel  # noqa: E402  (the reliability tests' helpers)
from vtrel import check  # noqa: E402

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MiB = 1 << 20
TRAIN = os.path.join(SRC, "tests", "programs", "py_torch_train.py")


def record(work, name, cmd, **env):
    d = os.path.join(work, name)
    r = subprocess.run([vtrel.VRAMTRACE, "run", "-o", d, "--"] + cmd, cwd=work,
                       env=vtrel.env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    check(os.path.exists(os.path.join(d, "report.json")), "%s: no report (%d) %r" % (
        name, r.returncode, r.stderr[-800:]))
    return d, vtrel.load(os.path.join(d, "report.json"))


def export(work, *args):
    return subprocess.run([vtrel.VRAMTRACE, "export"] + list(args), cwd=work, env=vtrel.env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)


def exported(work, kind, run_dir, name):
    out = os.path.join(work, name)
    r = export(work, kind, run_dir, "-o", out)
    check(r.returncode == 0 and os.path.exists(out), "export %s: %d %r" % (
        kind, r.returncode, r.stderr))
    mode = stat.S_IMODE(os.stat(out).st_mode)
    check(mode == 0o600, "%s is written for the user only: %o" % (name, mode))
    with open(out, "rb") as f:
        data = f.read()
    return json.loads(data) if kind == "--perfetto" else pickle.loads(data)


def events(trace, ph, name=None):
    return [e for e in trace["traceEvents"]
            if e["ph"] == ph and (name is None or e["name"] == name)]


def us(report, ns):
    """A time of report.json (from the run's origin) on the export's clock (from the first CUDA
    work), in microseconds, as the exporter computes it."""
    return (ns - report["run"]["cuda_start_ns"]) / 1000.0


def replay(snapshot, device):
    """The device's trace applied from nothing, as memory_viz draws it: every block made inside a
    segment live then; the state at the end is the snapshot's segments and their active blocks."""
    segs, blocks = {}, {}
    for e in snapshot["device_traces"][device]:
        a, addr, size = e["action"], e["addr"], e["size"]
        check(set(e) >= {"action", "addr", "size", "stream", "time_us", "frames"},
              "an entry's keys: %r" % sorted(e))
        if a == "segment_alloc":
            check(addr not in segs, "segment %#x made twice" % addr)
            segs[addr] = size
        elif a == "segment_free":
            check(segs.pop(addr, None) == size, "segment %#x freed as made" % addr)
        elif a == "alloc":
            check(any(s <= addr < s + n for s, n in segs.items()),
                  "block %#x inside a segment" % addr)
            blocks[addr] = size
        elif a == "free_completed":
            check(blocks.pop(addr, None) == size, "block %#x freed as made" % addr)
    end_segs = {s["address"]: s["total_size"] for s in snapshot["segments"]
                if s["device"] == device}
    end_blocks = {b["address"]: b["requested_size"] for s in snapshot["segments"]
                  if s["device"] == device for b in s["blocks"] if b["state"] == "active_allocated"}
    check(segs == end_segs, "segments at the end: replayed %r, listed %r" % (segs, end_segs))
    check(blocks == end_blocks, "blocks at the end: replayed %r, listed %r" % (blocks, end_blocks))


def tiles(snapshot):
    """Each segment's blocks cover it exactly, in address order (memory_viz's segsum asserts it)."""
    for s in snapshot["segments"]:
        at = s["address"]
        for b in s["blocks"]:
            check(b["address"] == at and b["size"] > 0, "block at %#x in %#x" % (at, s["address"]))
            at += b["size"]
        check(at == s["address"] + s["total_size"], "segment %#x tiled" % s["address"])
        active = [b for b in s["blocks"] if b["state"] == "active_allocated"]
        check(s["allocated_size"] == sum(b["size"] for b in active) and
              s["requested_size"] == sum(b["requested_size"] for b in active),
              "segment %#x's sums" % s["address"])


def native(work):
    d, rep = record(work, "grow", [os.path.join(vtrel.BUILD, "tests", "programs", "grow"), "32"])
    pid = rep["processes"][0]["pid"]
    peak_ns = rep["processes"][0]["devices"][0]["peak"]["time_ns"]

    t = exported(work, "--perfetto", d, "grow.json")
    names = events(t, "M", "process_name")
    check([(e["pid"], e["args"]["name"].split(" ")[:3]) for e in names] ==
          [(pid, ["pid", str(pid), "grow"])], "the process group: %r" % names)
    mem = events(t, "C", "GPU 0 memory in use")
    values = [e["args"]["bytes"] for e in mem]
    check(max(values) == 96 * MiB and values[-1] == 0 and all(e["pid"] == pid for e in mem),
          "memory in use: %r" % values)
    at_peak = [e["ts"] for e in mem if e["args"]["bytes"] == 96 * MiB]
    check(at_peak == [us(rep, peak_ns)], "the peak at %r, report.json's %r" % (
        at_peak, us(rep, peak_ns)))
    check(not events(t, "i") and not events(t, "X"), "no OOM, iteration or range in grow")

    s = exported(work, "--memory-viz", d, "grow.pickle")
    trace = s["device_traces"][0]
    got = [(e["action"], e["size"]) for e in trace]
    want = [("segment_alloc", 64 * MiB), ("alloc", 64 * MiB), ("segment_alloc", 32 * MiB),
            ("alloc", 32 * MiB), ("free_requested", 32 * MiB), ("free_completed", 32 * MiB),
            ("segment_free", 32 * MiB), ("free_requested", 64 * MiB),
            ("free_completed", 64 * MiB), ("segment_free", 64 * MiB)]
    check(got == want and s["segments"] == [] and len(s["device_traces"]) == 1,
          "grow's snapshot: %r %r" % (got, s["segments"]))
    # The weights' stack, leaf first: cudaMalloc's caller is main.
    frames = trace[1]["frames"]
    check(frames and frames[0]["name"] == "main" and frames[0]["filename"].endswith("grow"),
          "the 64 MiB allocation's frames: %r" % frames[:2])
    times = [e["time_us"] for e in trace]
    weights = [a for a in rep["processes"][0]["devices"][0]["peak"]["largest"]
               if a["bytes"] == 64 * MiB]
    check(times == sorted(times) and len(weights) == 1 and
          times[1] == int(us(rep, weights[0]["time_ns"])), "times: %r, the weights' %r" % (
              times, weights))
    replay(s, 0)

    # Never over an existing file without --force; never over an input; both formats at once
    # is refused.
    out = os.path.join(work, "grow.json")
    before = open(out, "rb").read()
    r = export(work, "--perfetto", d, "-o", out)
    check(r.returncode == 2 and "exists: use --force" in r.stderr and
          open(out, "rb").read() == before, "an existing -o: %d %r" % (r.returncode, r.stderr))
    with open(out, "w") as f:
        f.write("old")
    r = export(work, "--perfetto", d, "-o", out, "--force")
    check(r.returncode == 0 and json.load(open(out))["traceEvents"], "--force: %r" % r.stderr)
    trace_file = [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".vtrace")][0]
    size = os.path.getsize(trace_file)
    r = export(work, "--memory-viz", trace_file, "-o", trace_file, "--force")
    check(r.returncode == 2 and os.path.getsize(trace_file) == size,
          "an input as -o: %d %r" % (r.returncode, r.stderr))
    r = export(work, "--memory-viz", "--perfetto", d, "-o", os.path.join(work, "both"))
    check(r.returncode == 2 and "one of --perfetto or --memory-viz" in r.stderr and
          not os.path.exists(os.path.join(work, "both")), "both: %r" % r.stderr)


def pytorch(work):
    d, rep = record(work, "train", ["python3", TRAIN],
                    FAKE_TORCH_CUDART=os.path.join(vtrel.BUILD, "standin", "libcudart.so.13"),
                    PYTHONPATH=os.path.join(SRC, "tests", "programs", "fake_torch"),
                    VRAMTRACE_STANDIN_DEVICE_BYTES=str(80 * MiB))
    pid = rep["processes"][0]["pid"]

    t = exported(work, "--perfetto", d, "train.json")
    iters = events(t, "X")
    check([e["name"] for e in iters if e["cat"] == "iteration"] ==
          ["iteration %d" % i for i in range(4)], "iterations: %r" % iters)
    phases = [(e["name"], e["args"]["iteration"]) for e in iters if e["cat"] == "phase"]
    check(phases == [(p, i) for i in range(3) for p in ("forward", "backward", "optimizer")] +
          [("forward", 3)], "phases: %r" % phases)
    forward = [e for e in iters if e["cat"] == "phase"][0]
    check(forward["args"]["site"] == TRAIN + ":70", "the forward's line: %r" % forward)
    ooms = events(t, "i")
    check(len(ooms) == 1 and ooms[0]["args"]["requested_bytes"] == 20 * MiB and
          ooms[0]["args"]["fatal"] is True and ooms[0]["pid"] == pid and
          ooms[0]["ts"] == us(rep, rep["oom"][0]["time_ns"]), "the OOM: %r" % ooms)
    cats = events(t, "C", "GPU 0 memory by category")
    last = cats[-1]["args"]
    check({k: v for k, v in last.items() if v} ==
          {"parameters": 2 * MiB, "gradients": 2 * MiB, "optimizer_state": 2 * MiB,
           "inputs": 20 * MiB, "activations": 20 * MiB, "allocator_cache": 24 * MiB},
          "the categories at the end: %r" % last)
    # The same series as report.json's categories over time, row for row.
    tl = rep["processes"][0]["devices"][0]["categories"]["timeline"]
    cols = tl["columns"]
    rows = [{c: row[i] for i, c in enumerate(cols) if c != "time_ns"} for row in tl["points"]]
    check([{k: v for k, v in r.items() if k in last} for r in rows] ==
          [e["args"] for e in cats] and
          [us(rep, row[0]) for row in tl["points"]] == [e["ts"] for e in cats],
          "the categories against report.json")

    s = exported(work, "--memory-viz", d, "train.pickle")
    tiles(s)
    replay(s, 0)
    reserved = sum(seg["total_size"] for seg in s["segments"])
    held = sum(b["requested_size"] for seg in s["segments"] for b in seg["blocks"]
               if b["state"] == "active_allocated")
    check((reserved, held) == (70 * MiB, 46 * MiB), "reserved, held: %r" % ((reserved, held),))
    ooms = [e for e in s["device_traces"][0] if e["action"] == "oom"]
    check(len(ooms) == 1 and ooms[0]["size"] == 20 * MiB and "device_free" in ooms[0],
          "the OOM entry: %r" % ooms)
    # fc1's output, kept for the backward that never came: its category, module and line.
    acts = [b for seg in s["segments"] for b in seg["blocks"]
            if b["state"] == "active_allocated" and b["frames"] and
            b["frames"][0]["name"].startswith("activations")]
    check(len(acts) == 1 and acts[0]["requested_size"] == 20 * MiB and acts[0]["frames"] == [
        {"filename": "<vramtrace category>", "line": 0, "name": "activations, forward, iteration 3"},
        {"filename": TRAIN, "line": 43, "name": "fc1 (Linear)"},
        {"filename": TRAIN, "line": 70, "name": "main"}], "fc1's output: %r" % acts)
    small = sorted(seg["total_size"] for seg in s["segments"] if seg["segment_type"] == "small")
    check(small == [2 * MiB, 2 * MiB], "small-pool segments: %r" % small)


def main():
    work = vtrel.temp_dir("vt-export-")
    native(work)
    pytorch(work)
    vtrel.finish("export")


if __name__ == "__main__":
    main()
