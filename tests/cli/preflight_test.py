#!/usr/bin/env python3
"""`vramtrace run --preflight` end to end on the stand-in PyTorch (tests/programs/
py_torch_preflight.py: py_torch_plan.py's model and fake-tensor stand-in, its steps then run for
real). The stand-in device has 80 MiB; the run's limit is 75 MiB, or PyTorch's per-process
fraction.

The prediction is the plan's (tests/cli/plan_test.py derives it): at batch 4096, 46 MiB reserved
of 75, 29 MiB to spare; at batch 10240 under a 0.875 fraction (70 MiB), 96 MiB, the largest
batch 6826, halving 46 MiB, bf16 56 MiB, checkpointing 76 MiB, expandable segments 86 MiB. It
comes in two stages: the step at its batch alone, which is the whole verdict when it fits; when
it will not, that is said at once, and the half batch and the remedies' changes follow.
A run that finished its steps weighs its remedies at exit on the model's copy as shapes (the
stand-in's is the model itself) within VRAMTRACE_TORCH_PREDICT_BUDGET of its time: weighed, too
short a share, stopped at the deadline, and off.

The steps as the stand-in's caching allocator serves them (a new segment is the request rounded
up to 2 MiB; best fit, the oldest segment first; nothing given back): at batch 4096 the weights
take one 2 MiB segment and the batch 8 MiB (10 MiB when the first step begins); the first step's
forward adds a 4 MiB segment for block1's scratch, 8 MiB for its output and, block2's scratch
reusing the 4 MiB, 8 MiB for block2's output (30 MiB); the gradients and the momentum fill the
4 MiB segment; the second step reuses every segment (the scratches inside the freed outputs'):
30 MiB recorded over the two iterations, against 46 MiB predicted: +53.3 %. At batch 10240 under
the fraction the step dies at block2's output (52 MiB held, 20 MiB more over 70): not compared.

   preflight_test.py BUILD_DIR"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
sys.dont_write_bytecode = True
import vtrel  # noqa: E402  (the reliability tests' helpers)
from vtrel import check  # noqa: E402

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MiB = 1 << 20
PROGRAM = os.path.join(SRC, "tests", "programs", "py_torch_preflight.py")


def env(**extra):
    e = vtrel.env(FAKE_TORCH_CUDART=os.path.join(vtrel.BUILD, "standin", "libcudart.so.13"),
                  PYTHONPATH=os.path.join(SRC, "tests", "programs", "fake_torch"),
                  VRAMTRACE_STANDIN_DEVICE_BYTES=str(80 * MiB), **extra)
    for k in ("VRAMTRACE_PLAN", "VRAMTRACE_PREFLIGHT", "VRAMTRACE_PREFLIGHT_WAIT",
              "VRAMTRACE_TORCH_PREDICT", "VRAMTRACE_TORCH_TRACE"):
        if k not in extra:
            e.pop(k, None)
    return e


def plain(*args):
    """The program without vramtrace: its output and exit code."""
    r = subprocess.run(["python3", PROGRAM] + list(args), env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, timeout=120)
    return r.stdout, r.returncode


def run(work, name, *args, options=("--preflight",), **extra):
    d = os.path.join(work, name)
    # stdout and stderr in one pipe: the order of the verdict and the program's lines.
    r = subprocess.run([vtrel.VRAMTRACE, "run"] + list(options) + ["-o", d, "--", "python3",
                                                                   PROGRAM] + list(args),
                       cwd=work, env=env(**extra), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    rep = {}
    if os.path.exists(os.path.join(d, "report.json")):
        with open(os.path.join(d, "report.json"), encoding="utf-8") as f:
            rep = json.load(f)
    torch = [n for n in os.listdir(d) if n.endswith(".torch")] if os.path.isdir(d) else []
    lines = (open(os.path.join(d, torch[0]), encoding="utf-8").read().splitlines()
             if len(torch) == 1 else [])
    check(rep and lines, "%s: no report or side channel (%d) %r" % (name, r.returncode,
                                                                     r.stdout[-800:]))
    return r, r.stdout.splitlines(), rep, lines


def program_lines(out):
    return [l for l in out if not l.startswith("vramtrace") and not l.startswith(" ")
            and not l.startswith("Traceback") and not l.startswith("torch.")]


def device(rep):
    procs = rep.get("preflight", {}).get("processes", [])
    check(len(procs) == 1 and len(procs[0]["devices"]) == 1, "one process, one device: %r" % (
        rep.get("preflight"),))
    return procs[0], procs[0]["devices"][0]


def fits(work):
    # The whole run's time for the remedies' fake steps at exit (below), however slow the
    # machine.
    r, out, rep, lines = run(work, "fits", VRAMTRACE_TORCH_PREDICT_BUDGET="1")
    want_out, want_rc = plain()
    check(r.returncode == want_rc == 0, "exit %d, without vramtrace %d" % (r.returncode, want_rc))
    check(program_lines(out) == want_out.splitlines(),
          "the program's output %r, without vramtrace %r" % (program_lines(out), want_out))
    verdict = ("vramtrace: PRE-FLIGHT: the first step (batch 4096) will peak at 46.00 MiB "
               "against a limit of 75.00 MiB: it fits, 29.00 MiB to spare")
    check(verdict in out, "the verdict: %r" % out)
    # Said after the program reached its first step and before that step went on.
    check(out.index("step 0 begins") < out.index(verdict) < out.index("step 1 begins"),
          "the order: %r" % out)
    pf = [l.split("\t") for l in lines if l.startswith("PF\t")]
    check(len(pf) == 1 and pf[0][2] == "4096", "the PF line: %r" % pf)
    # A step that fits needs only itself for the verdict: the pre-flight ran the step at its
    # batch alone (step 1, the completion of the step about to run); the remedies' changes were
    # weighed at exit on the model's copy as shapes (steps 2 and 3), and no half batch was run.
    steps = [[l.split("\t")[i] for i in (2, 3, 6)] for l in lines if l.startswith("N\t")]
    changes = [l.split("\t")[1:3] for l in lines if l.startswith("V\t")]
    check(steps == [["1", "4096", "ok"], ["2", "4096", "ok"], ["3", "4096", "ok"]] and
          changes == [["2", "bf16_autocast"], ["3", "checkpoint"]] and
          sum("running the first training step on fake tensors" in l for l in out) == 1 and
          not any("at half its batch" in l for l in out), "the steps: %r %r" % (steps, changes))
    p, d = device(rep)
    check(p["batch"] == 4096 and p["fake_step_seconds"] >= 0 and p["loss"] == "",
          "the process: %r" % p)
    # The loop calls the model in its body (`out = model(x)` in main's for): the stand-in step
    # held each output into the next forward, and says so with where it read that from.
    assumed = ("each iteration's output and loss held into the next forward, as a loop's "
               "`out = model(x)` holds them (the model is called in main (%s:52))" % PROGRAM)
    check(p["assumed"] == [assumed] and "vramtrace: pre-flight assumed " + assumed in out,
          "what the stand-in step assumed: %r" % p["assumed"])
    # And under the verdict as it came, with the rest of what the stand-in took for the loop.
    standin = ("vramtrace: PRE-FLIGHT: predicted with a stand-in for the program's step: one "
               "forward and backward per optimizer step, gradients set to none at zero_grad; " +
               assumed + "; `vramtrace plan` runs the program's own loop instead")
    check(standin in out and out.index(verdict) + 1 == out.index(standin),
          "the stand-in said under the verdict: %r" % out)
    got = {k: d.get(k) for k in ("batch", "predicted", "predicted_reserved_peak_bytes",
                                 "predicted_peak_bytes", "predicted_fits", "limit_bytes",
                                 "compared", "recorded_reserved_peak_bytes")}
    want = {"batch": 4096, "predicted": True, "predicted_reserved_peak_bytes": 46 * MiB,
            "predicted_peak_bytes": 46 * MiB, "predicted_fits": True, "limit_bytes": 75 * MiB,
            "compared": True, "recorded_reserved_peak_bytes": 30 * MiB}
    check(got == want, "the pre-flight: %r, expected %r" % (got, want))
    check(abs(d["error_percent"] - (46 - 30) / 30 * 100) < 1e-9 and
          d["recorded_from_ns"] < d["recorded_to_ns"], "the error: %r" % d)
    line = ("vramtrace: pre-flight predicted 46.00 MiB, the step took 30.00 MiB (error +53.3 %; "
            "PyTorch reserved, the first two iterations)")
    check(line in out, "the summary's line: %r" % out)
    # The run's own replays are of the recorded steps: the prediction does not stand in for them.
    check(rep["oom"] == [] and "plan" not in rep, "no OOM, no plan: %r" % rep.get("oom"))
    page = open(os.path.join(work, "fits", "report.html"), encoding="utf-8").read()
    check("predicted 46.00 MiB reserved, the step took 30.00 MiB (error +53.3 %)" in page,
          "the page's no-script summary")
    # The same run as the program's own loop would have left it (its PF line's "program", no
    # stand-in's assumptions): the report says whose step it was, on the summary and the page.
    own = os.path.join(work, "fits-own")
    shutil.copytree(os.path.join(work, "fits"), own)
    for n in os.listdir(own):
        if n.endswith(".torch"):
            path = os.path.join(own, n)
            side = open(path, encoding="utf-8").read().splitlines(True)
            side = [l if not l.startswith("PF\t") else l.rsplit("\t", 1)[0] + "\tprogram\n"
                    for l in side if not l.startswith("SA\t")]
            open(path, "w", encoding="utf-8").writelines(side)
    for n in ("report.json", "report.html"):
        os.unlink(os.path.join(own, n))
    r = subprocess.run([vtrel.VRAMTRACE, "report", "-o", own, own], env=env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    rep = json.load(open(os.path.join(own, "report.json"), encoding="utf-8"))
    p, d = device(rep)
    check((p["loss"], p["assumed"], d["predicted_reserved_peak_bytes"]) ==
          ("program", [], 46 * MiB), "the own loop's pre-flight: %r" % p)
    check("vramtrace: pre-flight predicted 46.00 MiB by the program's own loop, the step took "
          "30.00 MiB (error +53.3 %; PyTorch reserved, the first two iterations)" in r.stdout and
          "pre-flight assumed" not in r.stdout, "its summary: %r" % r.stdout)
    page = open(os.path.join(own, "report.html"), encoding="utf-8").read()
    check("predicted 46.00 MiB reserved by the program's own loop, the step took 30.00 MiB "
          "(error +53.3 %)" in page, "its page's no-script summary")
    print("fits: the verdict before the first step, the output unchanged, predicted 46 MiB "
          "against 30 MiB recorded; whose step it was (the stand-in's, the program's own "
          "loop's) said: checked")


def runs_out(work):
    args = ("--batch", "10240", "--fraction", "0.875")
    r, out, rep, lines = run(work, "oom", *args)
    want_out, want_rc = plain(*args)
    check(r.returncode == want_rc == 1, "exit %d, without vramtrace %d" % (r.returncode, want_rc))
    check(program_lines(out) == want_out.splitlines(),
          "the program's output %r, without vramtrace %r" % (program_lines(out), want_out))
    verdict = ("vramtrace: PRE-FLIGHT: the first step will need 96.00 MiB against PyTorch's "
               "per-process fraction of 70.00 MiB: it will run out of memory; the largest batch "
               "that fits is 6826 (this one: 10240); remedies: halve the batch 46.00 MiB (fits), "
               "bf16 autocast 56.00 MiB (fits), checkpoint the repeated blocks 76.00 MiB (runs "
               "out), PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True 86.00 MiB (runs out)")
    check(verdict in out, "the verdict: %r" % out)
    dies = [i for i, l in enumerate(out) if l.startswith("Traceback")]
    check(dies and out.index("step 0 begins") < out.index(verdict) < dies[0],
          "the verdict before the step died: %r" % out)
    # In two stages: the step at its batch alone says that it will not fit at once; then its
    # half and the remedies' changes give the largest batch and the remedies.
    first = ("vramtrace: PRE-FLIGHT: the first step will need 96.00 MiB against PyTorch's "
             "per-process fraction of 70.00 MiB: it will run out of memory; the largest batch "
             "that fits and the remedies follow")
    rest = ("vramtrace: PRE-FLIGHT: running it at half its batch and with the remedies' changes "
            "on fake tensors (a few seconds)")
    check(first in out and rest in out and
          out.index("step 0 begins") < out.index(first) < out.index(rest) < out.index(verdict),
          "the two stages: %r" % out)
    said = [i for i, l in enumerate(out) if "predicted with a stand-in" in l]
    check(said == [out.index(verdict) + 1], "the stand-in said once, under the last verdict: %r"
          % out)
    steps = [[l.split("\t")[i] for i in (2, 3)] for l in lines if l.startswith("N\t")]
    check(steps == [["1", "10240"], ["2", "5120"], ["3", "10240"], ["4", "10240"]],
          "the steps: %r" % steps)
    _, d = device(rep)
    check(d["predicted_reserved_peak_bytes"] == 96 * MiB and not d["predicted_fits"] and
          not d["compared"] and d["not_compared_because"] == "the step ran out of memory" and
          "recorded_reserved_peak_bytes" not in d, "the pre-flight: %r" % d)
    check("vramtrace: pre-flight predicted 96.00 MiB (reserved); not compared: the step ran out "
          "of memory" in out, "the summary's line: %r" % out)
    # No verdict waited for (VRAMTRACE_PREFLIGHT_WAIT=0): only the step at its batch ran before
    # it; the step then died, and the rest (its half, the remedies' changes) was predicted at
    # exit, as at any first step's death.
    r, out, rep, lines = run(work, "oom-no-wait", *args, VRAMTRACE_PREFLIGHT_WAIT="0")
    steps = [[l.split("\t")[i] for i in (2, 3)] for l in lines if l.startswith("N\t")]
    changes = [l.split("\t")[1:3] for l in lines if l.startswith("V\t")]
    check(r.returncode == 1 and program_lines(out) == want_out.splitlines() and
          steps == [["1", "10240"], ["2", "5120"], ["3", "10240"], ["4", "10240"]] and
          changes == [["3", "bf16_autocast"], ["4", "checkpoint"]],
          "no wait, then died: %d %r %r" % (r.returncode, steps, changes))
    print("runs out: the verdict before the step died, its exit and output unchanged: checked")


def others(work):
    # One step: the prediction covers two iterations, so nothing is compared.
    r, out, rep, _ = run(work, "one-step", "--steps", "1")
    _, d = device(rep)
    check(r.returncode == 0 and not d["compared"] and d["not_compared_because"] ==
          "the program ran 1 optimizer step(s) after the pre-flight; the prediction covers the "
          "first two", "one step: %r" % d)
    # No wait: the hook goes on at once and says so; the program's outcome is the same.
    r, out, rep, _ = run(work, "no-wait", VRAMTRACE_PREFLIGHT_WAIT="0")
    check(r.returncode == 0 and "3 steps ran" in out and
          "vramtrace: PRE-FLIGHT: no verdict within 0 s (VRAMTRACE_PREFLIGHT_WAIT); the program "
          "goes on" in out and device(rep)[1]["recorded_reserved_peak_bytes"] == 30 * MiB,
          "no wait: %d %r" % (r.returncode, out))
    # Without --preflight: no prediction, no PF line.
    r, out, rep, lines = run(work, "without", options=())
    check(r.returncode == 0 and "preflight" not in rep and
          not any(l.startswith("PF\t") for l in lines) and
          not any("PRE-FLIGHT" in l for l in out), "without --preflight: %r" % out)
    print("one step, no wait, without --preflight: checked")


def bf16_remedy(rep):
    found = [m for m in rep["diagnosis"]["remedies"] if m.get("kind") == "mixed_precision"]
    check(len(found) == 1 and "replayed" in found[0], "one replayed bf16 remedy: %r" % found)
    return found[0]


def weighed_at_exit(work):
    # A run that finished its steps weighs its remedies at exit on fake steps of the model's
    # copy as shapes (made at its first step's end), within a share of the run's time.
    r, out, rep, lines = run(work, "weighed", options=(), VRAMTRACE_TORCH_PREDICT_BUDGET="1")
    steps = [[l.split("\t")[i] for i in (2, 3, 6)] for l in lines if l.startswith("N\t")]
    changes = [l.split("\t")[1:] for l in lines if l.startswith("V\t")]
    # The recorded batch as it ran, under bf16 autocast, and with block1 and block2 (M ids 2
    # and 4: each Block, then its fc) checkpointed.
    check(r.returncode == 0 and steps == [["1", "4096", "ok"], ["2", "4096", "ok"],
                                          ["3", "4096", "ok"]] and
          changes == [["1", "none", "-"], ["2", "bf16_autocast", "-"],
                      ["3", "checkpoint", "2,4"]], "weighed: %r %r %r" % (steps, changes, out))
    weighed = bf16_remedy(rep)
    check("weighed_on_fake_step" in weighed["replayed"] and
          "not_weighed_on_fake_step" not in weighed["replayed"], "weighed: %r" % weighed)
    check(any(l.startswith("vramtrace: weighing the remedies on fake tensors (at most ") and
              "100 % of the run" in l for l in out), "said: %r" % out)
    # Nothing of the program's changed: its output and exit code are those without vramtrace.
    want_out, want_rc = plain()
    check(program_lines(out) == want_out.splitlines() and r.returncode == want_rc,
          "the program's output %r" % program_lines(out))

    # No share of the run for them: not run, and each remedy says why.
    r, out, rep, lines = run(work, "short", options=(), VRAMTRACE_TORCH_PREDICT_BUDGET="0")
    steps = [l.split("\t") for l in lines if l.startswith("N\t")]
    check(len(steps) == 1 and steps[0][6].startswith(
        "not weighed on fake steps: the run took ") and
        " and 0 % of it (VRAMTRACE_TORCH_PREDICT_BUDGET) is too short for them" in steps[0][6]
        and not any(l.startswith("R\t") for l in lines), "too short: %r" % steps)
    estimated = bf16_remedy(rep)
    check(estimated["replayed"]["not_weighed_on_fake_step"] == steps[0][6] and
          not any("weighing the remedies" in l for l in out), "too short: %r" % estimated)
    # The stand-in's bf16 step halves what the recorded requests' transform halves: the two
    # ways give the same figure here.
    check(estimated["predicted_peak_bytes"] == weighed["predicted_peak_bytes"],
          "weighed %r, estimated %r" % (weighed, estimated))

    # Foreseen: the first step made 8 allocations (each block's scratch and output, each
    # weight's gradient and momentum buffer), taken as 1 ms each for each of 3 fake steps:
    # 24 ms against 0.1 % of a run of well under 24 s. Not begun, and said.
    r, out, rep, lines = run(work, "foreseen", options=(),
                             VRAMTRACE_TORCH_PREDICT_BUDGET="0.001")
    steps = [l.split("\t") for l in lines if l.startswith("N\t")]
    check(r.returncode == 0 and len(steps) == 1 and steps[0][6].startswith(
        "not weighed on fake steps: they would take about ") and
        "(8 allocations in the first step, 3 steps), more than 0.1 % of the run's " in steps[0][6]
        and not any("weighing the remedies" in l for l in out), "foreseen: %r" % steps)

    # Fake steps slower than foreseen: a run of at least 2 s (it lingers), 5 % of it at least
    # 100 ms against the 24 ms foreseen, and each fake step 1 s, past that share in a run of
    # under 20 s: the first runs to its end, the rest are not begun, it is said, and the
    # remedies are the estimates.
    r, out, rep, lines = run(work, "stopped", "--linger", "2", options=(),
                             VRAMTRACE_TORCH_PREDICT_BUDGET="0.05", STANDIN_FAKE_STEP_SECONDS="1")
    steps = [l.split("\t") for l in lines if l.startswith("N\t")]
    check(r.returncode == 0 and len(steps) == 1 and steps[0][6].startswith(
        "not weighed on fake steps: they were stopped after ") and
        not any(l.startswith("R\t") for l in lines) and
        any(l.startswith("vramtrace: the remedies' fake steps were stopped after ") for l in out),
        "stopped: %r %r" % (steps, out))
    check(bf16_remedy(rep)["replayed"]["not_weighed_on_fake_step"] == steps[0][6],
          "stopped: the remedy says why")
    # VRAMTRACE_TORCH_PREDICT=off: nothing weighed, nothing said of it.
    r, out, rep, lines = run(work, "off", options=(), VRAMTRACE_TORCH_PREDICT="off")
    check(not any(l.startswith("N\t") for l in lines) and "not_weighed_on_fake_step" not in
          bf16_remedy(rep)["replayed"], "off: %r" % lines[:5])
    print("a finished run's remedies weighed at exit within its share, too short, stopped at "
          "the deadline, off: checked")


work = vtrel.temp_dir("vt-preflight-")
fits(work)
runs_out(work)
others(work)
weighed_at_exit(work)
vtrel.finish("preflight")
