#!/usr/bin/env python3
"""`vramtrace plan` end to end on the stand-in PyTorch (tests/programs/py_torch_plan.py, whose
step's requests are given in its header; the stand-in has no FakeTensorMode, so the program
stands in for the fake-tensor run). The stand-in device has 80 MiB; the run's limit is 75 MiB (a
sixteenth kept for the CUDA context), or PyTorch's per-process fraction.

At batch 10240 (activations 20 MiB, scratch 10 MiB) under a 0.875 fraction (70 MiB), replayed
through the caching allocator's rules (<= 1 MiB: 2 MiB small segments; < 10 MiB: 20 MiB
segments; else rounded to 2 MiB): before the step the weights (one 2 MiB small segment) and the
batch (20 MiB); the step adds a 10 MiB scratch segment, each block's 20 MiB output, a second
small segment for the gradients, the input's 20 MiB gradient and a third small segment for the
momentum: 96 MiB reserved, 26 MiB over the fraction. Half the batch: 46 MiB. bf16 autocast
(activations halved, weighed by the fake steps' ratio): 56 MiB. Checkpointed blocks (the outputs
freed, made again in the backward): 76 MiB. The largest batch keeping 1.5 % free (68.95 MiB):
6826, whose step takes 68 MiB; at 6827 the scratch no longer fits beside the first output in its
20 MiB segment, a new one is taken and the step needs 72 MiB.
At batch 4096 with no fraction: 46 MiB of 75, 29 MiB to spare; the largest batch 7168 (its
outputs exactly 14 MiB segments), as the 10240 run's under the same limit.

   plan_test.py BUILD_DIR"""
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
PROGRAM = os.path.join(SRC, "tests", "programs", "py_torch_plan.py")


def run(work, name, *args, command="plan", **more_env):
    env = vtrel.env(FAKE_TORCH_CUDART=os.path.join(vtrel.BUILD, "standin", "libcudart.so.13"),
                    PYTHONPATH=os.path.join(SRC, "tests", "programs", "fake_torch"),
                    VRAMTRACE_STANDIN_DEVICE_BYTES=str(80 * MiB), **more_env)
    for k in ("VRAMTRACE_PLAN", "VRAMTRACE_TORCH_PREDICT", "VRAMTRACE_TORCH_TRACE"):
        env.pop(k, None)
    d = os.path.join(work, name)
    r = subprocess.run([vtrel.VRAMTRACE, command, "-o", d, "--", "python3", PROGRAM] + list(args),
                       cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    names = os.listdir(d) if os.path.isdir(d) else []
    torch = [n for n in names if n.endswith(".torch")]
    vtrace = [n for n in names if n.endswith(".vtrace")]
    lines = (open(os.path.join(d, torch[0]), encoding="utf-8").read().splitlines()
             if len(torch) == 1 else [])
    rep = {}
    if os.path.exists(os.path.join(d, "report.json")):
        with open(os.path.join(d, "report.json"), encoding="utf-8") as f:
            rep = json.load(f)
    check(len(torch) == 1 and len(vtrace) == 1 and rep, "%s: no trace or report (%d) %r" % (
        name, r.returncode, r.stderr[-800:]))
    return r, lines, rep, [os.path.join(d, n) for n in vtrace]


def tags(lines, tag):
    return [l.split("\t") for l in lines if l.startswith(tag + "\t")]


def driver_allocations(vtrace):
    """(time on the trace's monotonic clock, bytes) of each driver allocation of the trace."""
    out = subprocess.run([os.path.join(vtrel.BUILD, "bin", "vt_trace_digest"), "trace", vtrace],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    allocs = []
    for line in out.splitlines():
        if line.startswith("Alloc "):
            f = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
            allocs.append((int(f["t"]), int(f["bytes"])))
    return allocs


def stop_time(lines):
    """The Z line's time on the trace's monotonic clock (the header's two clocks)."""
    head = lines[0].split("\t")
    z = tags(lines, "Z")
    return int(z[0][1]) - int(head[2]) + int(head[3]) if z else None


def device_plan(rep):
    procs = rep.get("plan", {}).get("processes", [])
    return procs[0]["devices"][0] if len(procs) == 1 and len(procs[0]["devices"]) == 1 else {}


def over_the_fraction(work):
    r, lines, rep, vtrace = run(work, "fraction", "--fraction", "0.875")
    check(r.returncode == 0, "the plan's exit: %d %r" % (r.returncode, r.stderr[-500:]))
    check("first step begins" in r.stdout and "the step ran" not in r.stdout,
          "the program stopped before its step: %r" % r.stdout)
    check("vramtrace plan: stopped before the first training step (batch 10240)" in r.stderr,
          "the hook's line: %r" % r.stderr[-1500:])
    z = tags(lines, "Z")
    check(len(z) == 1 and z[0][2] == "10240" and z[0][4] == "0" and z[0][5] == "",
          "the Z line: %r" % z)
    # Nothing of the step was allocated: the driver's allocations are the weights' small segment
    # and the batch's, both before the stop.
    t = stop_time(lines)
    allocs = driver_allocations(vtrace[0]) if vtrace else []
    check([b for _, b in allocs] == [2 * MiB, 20 * MiB] and t is not None and
          all(a < t for a, _ in allocs), "allocations %r, the stop at %r" % (allocs, t))
    n = tags(lines, "N")
    check([(x[3], x[4], x[6]) for x in n] == [("10240", "10240", "ok"), ("5120", "10240", "ok"),
                                               ("10240", "10240", "ok"), ("10240", "10240", "ok")]
          and [v[2] for v in tags(lines, "V")] == ["bf16_autocast", "checkpoint"],
          "the predicted steps: %r %r" % (n, tags(lines, "V")))
    d = device_plan(rep)
    got = {k: d.get(k) for k in ("batch", "predicted", "reserved_peak_bytes", "outside_bytes",
                                 "peak_bytes", "limit_bytes", "fraction_limit_bytes", "fits",
                                 "over_bytes", "free_bytes", "largest_batch",
                                 "largest_batch_at_least", "predicted_batches")}
    want = {"batch": 10240, "predicted": True, "reserved_peak_bytes": 96 * MiB,
            "outside_bytes": 0, "peak_bytes": 96 * MiB, "limit_bytes": 75 * MiB,
            "fraction_limit_bytes": 70 * MiB, "fits": False, "over_bytes": 26 * MiB,
            "free_bytes": 0, "largest_batch": 6826, "largest_batch_at_least": False,
            "predicted_batches": [5120, 10240]}
    check(got == want, "the plan: %r, expected %r" % (got, want))
    # The report's own remedy of a smaller batch says the same largest batch: one figure, never
    # above a batch whose replay runs out (a bisection's upper end said 6833 here).
    how = [m.get("how") for m in rep["diagnosis"].get("remedies", [])
           if m.get("kind") == "smaller_batch"]
    check(how == ["the largest batch that fits the limit, replayed, is 6826 (this one: 10240)"],
          "the report's smaller batch: %r" % how)
    remedies = [(m["kind"], m.get("peak_bytes"), m.get("fits")) for m in d.get("remedies", [])]
    check(remedies[:3] == [("smaller_batch", 46 * MiB, True), ("mixed_precision", 56 * MiB, True),
                           ("activation_checkpointing", 76 * MiB, False)]
          and [m[0] for m in remedies[3:]] == ["expandable_segments"],
          "the remedies: %r" % remedies)
    p = rep["plan"]["processes"][0]
    check(p["batch"] == 10240 and not p["rng_restored"] and p["loss"] == "" and
          p["fake_step_seconds"] >= 0 and any("set to none" in u for u in p["unseen"]),
          "the process's plan: %r" % p)
    # The stand-in step's assumption of the loop, read from the model's caller: main binds the
    # output to a local it reads only through .backward, and runs no loop around the call.
    check(("each iteration's output and loss let go as it ends: the model's caller, main (%s:163)"
           ", keeps the output in a local it reads only through its attributes, gone when it "
           "returns" % PROGRAM) in p["unseen"], "what the stand-in step assumed: %r" % p["unseen"])
    # The report of the run itself: no OOM claimed, no leak suspects at the stop.
    check(rep["oom"] == [] and rep["leaks"] == [] and rep["live_at_death"] == [] and
          rep["diagnosis"].get("verdict") != "oom" and rep["run"]["complete"],
          "the run's report: oom %r leaks %r verdict %r complete %r" % (
              rep["oom"], rep["leaks"], rep["diagnosis"].get("verdict"), rep["run"]["complete"]))
    for line in ("vramtrace: PLAN: device 0: the whole step peaks at 96.00 MiB (PyTorch reserved "
                 "96.00 MiB + 0 B outside PyTorch) against PyTorch's per-process fraction of "
                 "70.00 MiB: will run out of memory, 26.00 MiB over",
                 "vramtrace: PLAN: device 0: the largest batch that fits is 6826 (this one: "
                 "10240; 1.5 % kept free)",
                 "vramtrace: PLAN: device 0:   halve the batch: peak 46.00 MiB (fits)"):
        check(line in r.stderr.splitlines(), "the summary's line %r in %r" % (line, r.stderr))
    print("over the fraction: stopped, nothing allocated after, the plan's figures: checked")


def fits(work):
    r, lines, rep, _ = run(work, "fits", "--batch", "4096")
    d = device_plan(rep)
    got = {k: d.get(k) for k in ("peak_bytes", "limit_bytes", "fits", "free_bytes",
                                 "largest_batch")}
    check(r.returncode == 0 and got == {"peak_bytes": 46 * MiB, "limit_bytes": 75 * MiB,
                                        "fits": True, "free_bytes": 29 * MiB,
                                        "largest_batch": 7168},
          "batch 4096: %d %r" % (r.returncode, got))
    check("vramtrace: PLAN: device 0: the whole step peaks at 46.00 MiB (PyTorch reserved "
          "46.00 MiB + 0 B outside PyTorch) against a limit of 75.00 MiB: fits, 29.00 MiB to "
          "spare" in r.stderr.splitlines(), "the summary: %r" % r.stderr)
    # Checkpointing and expandable segments replay to the step's own 46 MiB here: no saving, so
    # not offered.
    kinds = [(m["kind"], m.get("peak_bytes")) for m in d.get("remedies", [])]
    check(kinds == [("smaller_batch", 26 * MiB), ("mixed_precision", 26 * MiB)],
          "the remedies that save something: %r" % kinds)
    # Every module call traced (no call wrapper otherwise in that mode): the plan stops there too.
    r, lines, rep, _ = run(work, "every", "--batch", "4096", VRAMTRACE_TORCH_MODULES="every")
    d = device_plan(rep)
    check(r.returncode == 0 and len(tags(lines, "Z")) == 1 and "the step ran" not in r.stdout
          and d.get("peak_bytes") == 46 * MiB,
          "every module call traced: %d %r %r" % (r.returncode, r.stdout, d.get("peak_bytes")))
    print("a step that fits, with every module call traced too: checked")


def goes_on(work):
    # The program catches the stop's SystemExit and calls the model again: ended there, 0.
    r, lines, rep, _ = run(work, "swallow", "--swallow")
    check(r.returncode == 0 and "swallowed the stop" in r.stdout and
          "the step ran" not in r.stdout and device_plan(rep).get("peak_bytes") == 96 * MiB,
          "swallowed: %d %r %r" % (r.returncode, r.stdout, device_plan(rep)))
    # An evaluation forward first (no_grad): it runs; the plan stops the training one.
    r, lines, rep, _ = run(work, "eval-first", "--eval-first")
    check(r.returncode == 0 and "evaluated" in r.stdout and "the step ran" not in r.stdout and
          len(tags(lines, "Z")) == 1, "eval first: %d %r" % (r.returncode, r.stdout))
    # No training step at all: no plan, said, exit 2 (the command exited 0).
    r, lines, rep, _ = run(work, "no-step", "--no-step")
    check(r.returncode == 2 and "vramtrace plan: no process reached a training step" in r.stderr
          and "plan" not in rep and not tags(lines, "Z"), "no step: %d %r" % (
              r.returncode, r.stderr[-600:]))
    # `run` is not `plan`: the step runs, nothing is stopped.
    r, lines, rep, _ = run(work, "run", "--batch", "2048", command="run")
    check(r.returncode == 0 and "the step ran" in r.stdout and not tags(lines, "Z") and
          "plan" not in rep, "run: %d %r" % (r.returncode, r.stdout))
    print("a program that goes on, an evaluation first, no step, run: checked")


work = vtrel.temp_dir("vt-plan-")
over_the_fraction(work)
fits(work)
goes_on(work)
vtrel.finish("plan")
