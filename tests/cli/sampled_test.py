"""`vramtrace run --torch=sampled` end to end on the stand-in PyTorch, each program run twice:
sampled, and with every block traced (--torch=full), the reference.

tests/programs/py_torch_sampled.py (120 steps; step 75 moves an 8x batch to the GPU between the
sampled iterations):
  - the trace's windows: off at the end of steps 3 and 50 (2 O lines), on again at the end of
    step 49 and at step 75's move of its larger batch (2 U lines with the allocator's state),
    on for good from then (the move made a segment): no U line at exit;
  - the entries of the traced steps only: 153 blocks made (the 2 parameters, step 1's 7, steps
    2 and 3's 3 each, step 50's 3, steps 76-120's 135), the reference's 366;
  - the peak (step 75's) traced: its categories, the device peak and the memory at the end as
    the reference's, nothing said to be between the windows.
With `inner` step 75's batch is as every step's and its forward widens it inside (nothing tells
the hook): PyTorch's peak of allocated memory reported as reached between the windows, the
reference's in-use peak to the byte, in the second gap; the device's peak there as parameters
and optimizer state (2 MiB each) and 16 MiB unclassified.
The same with `keep` (4 KiB kept each step): more memory in use at the end of step 49 than at
the end of step 3, so the trace stays on from then (1 O, 1 U line); the growth found as the
reference finds it, 4 KiB per iteration, on the iterations traced whole; PyTorch's peak (step
75's, traced) not said to be between the windows; the blocks made in the gap said to be so.
tests/programs/py_torch_train.py (dies of an OOM in step 4, whose batch is 5 times larger): the
trace on from that batch's move, the OOM and the peak as the reference's.
py_torch_sampled.py `inner-oom` (dies of an OOM in step 75, between the windows, its inputs as
every step's):
  - the OOM recorded as the reference records it (request, live memory, free bytes, iteration,
    module), with the allocator's state at the OOM (a U line) and its entry written by the
    hook (PyTorch records none while the trace is off);
  - PyTorch's peak of allocated memory, 70.5 MiB, the reference's in-use peak; the categories
    at the device's peak adding up to it.
   sampled_test.py BUILD_DIR"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
sys.dont_write_bytecode = True
import vtrel  # noqa: E402  (the reliability tests' helpers)
from vtrel import check  # noqa: E402

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MiB = 1 << 20


def run(work, program, name, *options, args=(), budget=None, **extra):
    env = vtrel.env(FAKE_TORCH_CUDART=os.path.join(vtrel.BUILD, "standin", "libcudart.so.13"),
                    PYTHONPATH=os.path.join(SRC, "tests", "programs", "fake_torch"),
                    VRAMTRACE_STANDIN_DEVICE_BYTES=str(80 * MiB))
    env.pop("VRAMTRACE_TORCH_TRACE", None)
    env.pop("VRAMTRACE_TORCH_TRACE_BUDGET", None)
    if budget is not None:
        env["VRAMTRACE_TORCH_TRACE_BUDGET"] = budget
    env.update(extra)
    d = os.path.join(work, name)
    r = subprocess.run([vtrel.VRAMTRACE, "run", "-o", d] + list(options) +
                       ["--", "python3", os.path.join(SRC, "tests", "programs", program)] +
                       list(args),
                       cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    torch = [n for n in os.listdir(d) if n.endswith(".torch")] if os.path.isdir(d) else []
    check(len(torch) == 1 and os.path.exists(os.path.join(d, "report.json")),
          "%s %s: no trace or report (%d) %r" % (program, name, r.returncode, r.stderr[-800:]))
    lines = open(os.path.join(d, torch[0]), encoding="utf-8").read().splitlines() if torch else []
    with open(os.path.join(d, "report.json"), encoding="utf-8") as f:
        return r, lines, json.load(f)


def tags(lines, tag):
    return [l.split("\t") for l in lines if l.startswith(tag + "\t")]


def made(lines):
    return sum(1 for f in tags(lines, "E") if f[2] == "alloc")


def sampled(report):
    return report["processes"][0].get("torch_allocator_trace", {}).get("sampled")


def steps(work):
    r, lines, rep = run(work, "py_torch_sampled.py", "sampled", "--torch=sampled")
    _, ref_lines, ref = run(work, "py_torch_sampled.py", "every", "--torch=full")
    check(r.returncode == 0 and "steps done" in r.stdout, "sampled run: %d %r" % (
        r.returncode, r.stderr[-500:]))
    check(len(tags(lines, "O")) == 2 and len(tags(lines, "U")) == 2,
          "windows: %d O lines, %d U lines (expected 2 and 2)" % (
              len(tags(lines, "O")), len(tags(lines, "U"))))
    check(not tags(ref_lines, "O") and not tags(ref_lines, "U"), "the reference has gaps")
    check((made(lines), made(ref_lines)) == (153, 366),
          "blocks made in the trace: %d sampled, %d every (expected 153 and 366)" % (
              made(lines), made(ref_lines)))
    s = sampled(rep)
    check(s is not None and len(s["gaps"]) == 2 and s["peak_between"] == [],
          "gaps in report.json: %r" % s)
    check("came between" not in r.stderr, "the summary says the peak came between: %r" %
          r.stderr[:1200])
    for key in ("final_live_bytes",):
        check(rep["devices"][0][key] == ref["devices"][0][key], "%s: %d sampled, %d every" % (
            key, rep["devices"][0][key], ref["devices"][0][key]))
    check(rep["devices"][0]["peak"]["bytes"] == ref["devices"][0]["peak"]["bytes"],
          "device peak: %d sampled, %d every" % (rep["devices"][0]["peak"]["bytes"],
                                                 ref["devices"][0]["peak"]["bytes"]))
    at_peak = {k: v for k, v in rep["devices"][0]["categories"]["at_peak"].items() if v}
    want = {k: v for k, v in ref["devices"][0]["categories"]["at_peak"].items() if v}
    check(at_peak == want == {"parameters": 2 * MiB, "optimizer_state": 2 * MiB,
                              "gradients": 2 * MiB, "activations": 8 * MiB, "inputs": 4 * MiB,
                              "allocator_cache": 2 * MiB},
          "at the peak: %r, the reference's %r" % (at_peak, want))
    # The replay knows the gaps: their blocks freed at a gap's start, made at its end.
    w = subprocess.run([vtrel.VRAMTRACE, "whatif", "--json", os.path.join(work, "sampled")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    ref_w = subprocess.run([vtrel.VRAMTRACE, "whatif", "--json", os.path.join(work, "every")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    try:
        got, want = json.loads(w.stdout), json.loads(ref_w.stdout)
    except ValueError:
        got, want = {}, {}
    check(got.get("trace_sampled") is True and want.get("trace_sampled") is False and
          not got.get("window_lost"), "whatif: trace_sampled %r, the reference's %r (%r)" % (
              got.get("trace_sampled"), want.get("trace_sampled"), w.stderr[-300:]))
    # A PyTorch that kept its ring when the trace went off: no window's entries twice.
    _, kept_lines, _ = run(work, "py_torch_sampled.py", "kept-ring", "--torch=sampled",
                           FAKE_TORCH_KEEP_RING="1")
    check(made(kept_lines) == 153 and len(tags(kept_lines, "O")) == 2,
          "a ring kept across the gaps: %d blocks made, %d O lines (expected 153 and 2)" % (
              made(kept_lines), len(tags(kept_lines, "O"))))
    print("sampled steps: windows, entries, the larger batch's step traced: checked")


def inner(work):
    r, lines, rep = run(work, "py_torch_sampled.py", "inner-sampled", "--torch=sampled",
                        args=["inner"])
    _, _, ref = run(work, "py_torch_sampled.py", "inner-every", "--torch=full", args=["inner"])
    check(len(tags(lines, "O")) == 2 and len(tags(lines, "U")) == 2,
          "inner: windows %d O, %d U (expected 2 and 2)" % (
              len(tags(lines, "O")), len(tags(lines, "U"))))
    s = sampled(rep)
    peak = 18 * MiB + MiB // 2
    ref_peak = ref["devices"][0]["allocator"]["peak_in_use_bytes"]
    check(s is not None and [(p["device"], p["bytes"]) for p in s["peak_between"]] == [(0, peak)]
          and ref_peak == peak and s["peak_between"][0]["start_ns"] == s["gaps"][1]["start_ns"],
          "inner: the peak between the windows: %r (reference's in-use peak %d, expected %d)" % (
              s and s["peak_between"], ref_peak, peak))
    check("came between" in r.stderr and "18.50 MiB" in r.stderr,
          "inner: the summary says where the peak came: %r" % r.stderr[:1200])
    check(rep["devices"][0]["peak"]["bytes"] == ref["devices"][0]["peak"]["bytes"],
          "inner: device peak: %d sampled, %d every" % (rep["devices"][0]["peak"]["bytes"],
                                                        ref["devices"][0]["peak"]["bytes"]))
    # The device's peak came in the second gap: what is not known there is unclassified.
    at_peak = {k: v for k, v in rep["devices"][0]["categories"]["at_peak"].items() if v}
    check(at_peak == {"parameters": 2 * MiB, "optimizer_state": 2 * MiB,
                      "unclassified": 16 * MiB}, "inner: at the peak: %r" % at_peak)
    # The peak's lists of blocks hold what is known all through the gap, as its categories do:
    # the two parameters and their momentum buffers, not the gradients live at both its ends.
    peak = rep["devices"][0]["peak"]
    listed = sorted((b["category"], b["bytes"]) for b in peak["blocks"])
    check(listed == [("optimizer_state", MiB)] * 2 + [("parameters", MiB)] * 2
          and not peak.get("by_module") and
          sorted(t["name"] for t in peak["tensors"]) == ["fc1.weight", "fc1.weight.momentum_buffer",
                                                         "fc2.weight", "fc2.weight.momentum_buffer"],
          "inner: the blocks listed at the peak: %r, tensors %r" % (
              listed, [t["name"] for t in peak.get("tensors", [])]))
    moment = rep["devices"][0]["categories"]["at_peak_moment"]
    check("the blocks shown are those live all through it" in r.stderr and
          moment["kind"] == "device_peak",
          "inner: the summary says which blocks are shown: %r (at_peak_moment %r)" % (
              r.stderr[:1200], moment))
    print("a peak between the windows, its inputs as every step's: checked")


def kept(work):
    r, lines, rep = run(work, "py_torch_sampled.py", "keep-sampled", "--torch=sampled",
                        args=["keep"])
    _, _, ref = run(work, "py_torch_sampled.py", "keep-every", "--torch=full", args=["keep"])
    check(len(tags(lines, "O")) == 1 and len(tags(lines, "U")) == 1,
          "kept: windows %d O, %d U (expected 1 and 1: on for good from step 49)" % (
              len(tags(lines, "O")), len(tags(lines, "U"))))
    got = [(g["site"], g["bytes_per_iteration"]) for g in rep.get("growth", [])]
    want = [(g["site"], g["bytes_per_iteration"]) for g in ref.get("growth", [])]
    check(got == want == [("outside forward, backward and step", 4096)],
          "kept: growth %r, the reference's %r" % (got, want))
    s = sampled(rep)
    check(s is not None and s["peak_between"] == [] and tags(lines, "Y") == [["Y", "0",
          str(18 * MiB + 75 * 4096)]], "kept: the peak, traced: %r, Y %r" % (
              s and s["peak_between"], tags(lines, "Y")))
    whats = {b.get("what") for b in rep["devices"][0]["peak"]["blocks"]
             if b.get("category") == "unclassified"}
    check(whats == {"made while PyTorch's trace was off, between the sampled iterations "
                    "(--torch=full records every block)"}, "what the gap's blocks are: %r" % whats)
    print("kept across iterations: on for good, the growth as with every block traced: checked")


def oom(work):
    r, lines, rep = run(work, "py_torch_train.py", "oom-sampled", "--torch=sampled")
    ref_r, ref_lines, ref = run(work, "py_torch_train.py", "oom-every", "--torch=full")
    check(r.returncode == 1 and ref_r.returncode == 1, "the OOM runs: %d and %d" % (
        r.returncode, ref_r.returncode))
    check(len(tags(lines, "O")) == 1 and len(tags(lines, "U")) == 1,
          "windows: %d O, %d U (expected 1 and 1)" % (len(tags(lines, "O")), len(tags(lines, "U"))))
    keys = ("requested_bytes", "live_bytes", "free_bytes", "iteration", "module", "phase",
            "fatal", "categories")
    a = [{k: o.get(k) for k in keys} for o in rep["oom"]]
    b = [{k: o.get(k) for k in keys} for o in ref["oom"]]
    check(a == b and len(a) == 1, "the OOM: %r, the reference's %r" % (a, b))
    got = rep["devices"][0]["categories"]["at_peak"]
    want = ref["devices"][0]["categories"]["at_peak"]
    check(got == want and sampled(rep)["peak_between"] == [],
          "the OOM's step traced from its batch's move: at the peak %r, the reference's %r" % (
              got, want))
    print("an OOM of a larger batch: traced from its move, as with every block traced: checked")
    r, lines, rep = run(work, "py_torch_sampled.py", "inner-oom-sampled", "--torch=sampled",
                        args=["inner-oom"])
    ref_r, ref_lines, ref = run(work, "py_torch_sampled.py", "inner-oom-every", "--torch=full",
                                args=["inner-oom"])
    check(r.returncode == 1 and ref_r.returncode == 1, "the inner OOM runs: %d and %d" % (
        r.returncode, ref_r.returncode))
    check(len(tags(lines, "O")) == 2 and len(tags(lines, "U")) == 2,
          "inner OOM: windows: %d O, %d U (expected 2 and 2)" % (
              len(tags(lines, "O")), len(tags(lines, "U"))))
    got = [(f[2], f[4], f[8]) for f in tags(lines, "E") if f[2] == "oom"]
    want = [(f[2], f[4], f[8]) for f in tags(ref_lines, "E") if f[2] == "oom"]
    check(got == want == [("oom", str(32 * MiB), str(8 * MiB))],
          "the oom entry: %r, the reference's %r" % (got, want))
    keys = keys[:-1]
    a = [{k: o.get(k) for k in keys} for o in rep["oom"]]
    b = [{k: o.get(k) for k in keys} for o in ref["oom"]]
    check(a == b and len(a) == 1, "the inner OOM: %r, the reference's %r" % (a, b))
    s = sampled(rep)
    ref_peak = ref["devices"][0]["allocator"]["peak_in_use_bytes"]
    check(s is not None and [p["bytes"] for p in s["peak_between"]] == [ref_peak] ==
          [70 * MiB + MiB // 2], "PyTorch's peak: %r, the reference's in-use peak %d" % (
              s, ref_peak))
    at_peak = {k: v for k, v in rep["devices"][0]["categories"]["at_peak"].items() if v}
    check(at_peak == {"parameters": 2 * MiB, "optimizer_state": 2 * MiB,
                      "unclassified": 68 * MiB} and
          rep["devices"][0]["peak"]["bytes"] == ref["devices"][0]["peak"]["bytes"] == 72 * MiB,
          "inner OOM: at the peak %r (device peak %d)" % (at_peak,
                                                         rep["devices"][0]["peak"]["bytes"]))
    print("an OOM between the windows: recorded as with every block traced: checked")


def default(work):
    """--torch=auto: sampled where the trace would cost more than its budget of the third
    iteration (its blocks at 0.8 us each against its time). A budget of 0 samples, one of 100
    (a hundred times the iteration) does not; the default (1 %) decides by the iteration's time,
    which the test cannot fix: what it decided must agree with what it measured."""
    r, lines, rep = run(work, "py_torch_sampled.py", "auto-0", budget="0")
    # The third iteration: its batch, fc1's and fc2's outputs (the gradients and momentum
    # buffers are kept from the first step): 3 blocks, 2.4 us of trace.
    check(tags(lines, "I") == [["I", "3", tags(lines, "I")[0][2], "2", "0", "1"]]
          if tags(lines, "I") else False, "budget 0: the I line %r" % tags(lines, "I"))
    check((len(tags(lines, "O")), len(tags(lines, "U")), made(lines)) == (2, 2, 153),
          "budget 0: sampled as --torch=sampled: %d O, %d U, %d blocks (expected 2, 2, 153)" % (
              len(tags(lines, "O")), len(tags(lines, "U")), made(lines)))
    cost = rep["processes"][0]["torch_allocator_trace"].get("cost")
    check(cost is not None and cost["sampled"] and cost["blocks"] == 3 and
          cost["trace_ns"] == 2000 and cost["budget_share"] == 0 and sampled(rep) is not None,
          "budget 0: report.json's cost %r" % cost)
    # The collector's note, which the summary and the page print as it is.
    check(cost.get("note", "").startswith("the trace would cost ") and
          cost["note"].endswith(", 3 blocks in %.1f ms, over its budget of 0 %%; --torch=full "
                                "records every one" % (cost["iteration_ns"] / 1e6)) and
          cost["note"] in r.stderr,
          "budget 0: the summary says why: %r (note %r)" % (r.stderr[:1500], cost.get("note")))
    r, lines, rep = run(work, "py_torch_sampled.py", "auto-100", budget="100")
    cost = rep["processes"][0]["torch_allocator_trace"].get("cost")
    check(not tags(lines, "O") and made(lines) == 366 and cost is not None and
          not cost["sampled"] and cost["blocks"] == 3 and sampled(rep) is None,
          "budget 100: on throughout: %d O lines, %d blocks, cost %r" % (
              len(tags(lines, "O")), made(lines), cost))
    r, lines, rep = run(work, "py_torch_sampled.py", "auto")
    i = tags(lines, "I")
    check(len(i) == 1 and i[0][1] == "3" and i[0][4] == "10000", "default: the I line %r" % i)
    if len(i) == 1:
        iteration_us, trace_us, on = int(i[0][2]), int(i[0][3]), i[0][5] == "1"
        # The decision was on nanoseconds, the line holds microseconds.
        agrees = (trace_us + 1 > 0.01 * iteration_us) if on else (trace_us < 0.01 * (iteration_us + 1))
        check(agrees and (sampled(rep) is not None) == on and bool(tags(lines, "O")) == on,
              "default: sampled %s, trace %d us of %d us, gaps %r" % (on, trace_us, iteration_us,
                                                                   sampled(rep)))
    print("the default: sampled by the trace's cost of an iteration, as measured: checked")


def late(work):
    """The device's peak between the sampled iterations from 2 MiB taken outside PyTorch in step
    75, PyTorch's memory as in every step: the peak's categories are read in a traced
    iteration, as the reference reads them, nothing unclassified."""
    _, _, rep = run(work, "py_torch_sampled.py", "late-sampled", "--torch=sampled", args=["late"])
    _, _, ref = run(work, "py_torch_sampled.py", "late-every", "--torch=full", args=["late"])
    got = {k: v for k, v in rep["devices"][0]["categories"]["at_peak"].items() if v}
    want = {k: v for k, v in ref["devices"][0]["categories"]["at_peak"].items() if v}
    check(sampled(rep) is not None and got == want == {
        "parameters": 2 * MiB, "gradients": 2 * MiB, "optimizer_state": 2 * MiB,
        "activations": 1 * MiB, "inputs": MiB // 2, "allocator_cache": MiB // 2,
        "outside_pytorch": 2 * MiB}, "late: at the peak %r, the reference's %r" % (got, want))
    print("a steady run's peak between the sampled iterations: read where traced: checked")


work = vtrel.temp_dir("vt-sampled-")
steps(work)
inner(work)
kept(work)
oom(work)
default(work)
late(work)
vtrel.finish("sampled")
