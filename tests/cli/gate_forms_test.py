"""The CI gate gives one verdict whatever form a run comes in: its report.json, its run folder
of traces and side channels, a report made again from those traces, or (for check alone) one
trace file. Each form of two real runs recorded on an H200 (ResNet-50 at batch 128, finished;
at batch 256, dead of its OOM in the first step: tests/data/h200) and of a stand-in native
program that dies of its OOM goes through the same expectations:
  - a candidate that died of its OOM fails (exit 4), whether its own exit code is there or only
    its traces' exit status;
  - a budget per PyTorch category is measured in every form that has the side channel, and one
    that a side cannot be measured against is bad input (exit 2), never a pass;
  - a damaged trace is what `report` says it is: refused when nothing could be read, said as
    incomplete when it was cut;
  - a baseline of another GPU model, or one that died, is said in a NOTE.
   gate_forms_test.py BUILD_DIR"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
sys.dont_write_bytecode = True
import vtrel  # noqa: E402  (the reliability tests' helpers)
from vtrel import check  # noqa: E402

VT = vtrel.VRAMTRACE
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "h200")
NATIVE_LOOP = os.path.join(vtrel.BUILD, "tests", "programs", "native_loop")


def vt(args, cwd, **extra):
    return subprocess.run([VT] + args, cwd=cwd, env=vtrel.env(**extra), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=300)


def forms(work, name, source):
    """The forms of one recorded run: its folder (copied), a report made again from it, and
    its trace alone (no side channel)."""
    folder = os.path.join(work, name)
    shutil.copytree(source, folder)
    remade = os.path.join(work, name + "-report")
    r = vt(["report", folder, "-o", remade], work)
    check(r.returncode == 0, "report %s: exit %d (%r)" % (name, r.returncode, r.stderr[-300:]))
    trace = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".vtrace")]
    return {"folder": folder, "report made again": os.path.join(remade, "report.json"),
            "remade folder": remade, "trace": trace[0]}


def gate(work, candidate, baseline, *budgets):
    args = ["check", candidate, "--baseline", baseline]
    for b in budgets:
        args += ["--max-increase", b]
    return vt(args, work)


def died_fails_in_every_form(work, done, died):
    for cform in ("folder", "report made again", "remade folder", "trace"):
        for bform in ("folder", "report made again"):
            r = gate(work, died[cform], done[bform], "1000%")
            what = "check died(%s) --baseline finished(%s)" % (cform, bform)
            check(r.returncode == 4, "%s: exit %d, not 4 (%r)" % (what, r.returncode,
                                                                   r.stdout[-400:]))
            # Without its side channel the trace cannot tell which OOM reached the top of the
            # program; its exit status still fails it.
            check(cform == "trace" or "vramtrace check: candidate INCOMPLETE: died of "
                  "out-of-memory: device 0, 196.00 MiB requested\n" in r.stdout,
                  "%s: the OOM not said: %r" % (what, r.stdout[-400:]))
            check("vramtrace check: candidate INCOMPLETE: cut short: pid 744 (python3.12) "
                  "exited 1\n" in r.stdout, "%s: the exit status not said" % what)


def category_budgets_in_every_form(work, done, died):
    # The activations grew from 10.17 GiB to 15.50 GiB: a regression in every form that has the
    # side channel (it read as 0 B and passed from a folder before).
    for cform in ("folder", "report made again"):
        for bform in ("folder", "report made again"):
            r = gate(work, died[cform], done[bform], "1000%", "activations:0")
            what = "check died(%s) --baseline finished(%s) activations:0" % (cform, bform)
            check(r.returncode == 1, "%s: exit %d, not 1 (%r)" % (what, r.returncode,
                                                                   r.stdout[-400:]))
            check("  budget activations +0 B (up to 10.17 GiB): +5.34 GiB, REGRESSION\n"
                  in r.stdout, "%s: the category's row: %r" % (what, r.stdout[:600]))
    # The same run against itself passes its category budgets in every form.
    for cform in ("folder", "report made again"):
        r = gate(work, done[cform], done["folder"], "0", "activations:0", "parameters:0")
        check(r.returncode == 0, "finished(%s) against itself: exit %d (%r)"
              % (cform, r.returncode, r.stdout[-300:] + r.stderr[-300:]))
    # A trace without its side channel has no categories: the budget cannot be checked.
    r = gate(work, done["trace"], done["report made again"], "5%", "activations:0")
    check(r.returncode == 2, "a trace alone with a category budget: exit %d, not 2 (%r)"
          % (r.returncode, r.stdout[-300:]))
    check("the budget on activations cannot be checked on device 0 (NVIDIA H200): the candidate "
          "has no PyTorch categories" in r.stderr, "a trace alone: %r" % r.stderr)


def native_death(work):
    # The stand-in's 1000 MiB device: native_loop's 16th kept buffer fails and it returns 3.
    base, dead = os.path.join(work, "native-base"), os.path.join(work, "native-dead")
    r = vt(["run", "-o", base, "--", NATIVE_LOOP], work)
    check(r.returncode == 0, "native_loop: exit %d" % r.returncode)
    r = vt(["run", "-o", dead, "--", NATIVE_LOOP], work,
           VRAMTRACE_STANDIN_DEVICE_BYTES=1048576000)
    check(r.returncode == 3, "native_loop on 1000 MiB: exit %d, not 3" % r.returncode)
    remade = os.path.join(work, "native-dead-report")
    vt(["report", dead, "-o", remade], work)
    os.remove(os.path.join(dead, "report.json"))  # the folder of traces alone
    for form in (dead, remade, os.path.join(remade, "report.json")):
        r = gate(work, form, os.path.join(base, "report.json"), "1000%")
        check(r.returncode == 4, "native_loop dead (%s): exit %d, not 4 (%r)"
              % (form, r.returncode, r.stdout[-400:]))
        check("vramtrace check: candidate INCOMPLETE: died of out-of-memory: device 0, "
              "64.00 MiB requested\n" in r.stdout, "native_loop dead (%s): %r"
              % (form, r.stdout[-400:]))


def damaged_traces(work, done):
    with open(done["trace"], "rb") as f:
        data = f.read()
    for size, code, said in ((1000, 2, "nothing could be read from its traces"),
                             (20000, 0, "B INCOMPLETE: damaged trace: ")):
        cut = os.path.join(work, "cut%d.vtrace" % size)
        with open(cut, "wb") as f:
            f.write(data[:size])
        r = vt(["diff", done["report made again"], cut], work)
        check(r.returncode == code, "diff A cut%d: exit %d, not %d" % (size, r.returncode, code))
        check(said in r.stdout + r.stderr, "diff A cut%d: %r not said (%r)"
              % (size, said, (r.stdout + r.stderr)[-400:]))
        r = gate(work, cut, done["report made again"], "1000%")
        check(r.returncode == (2 if code == 2 else 4), "check cut%d: exit %d" % (size, r.returncode))


def baseline_notes(work, done, died):
    with open(done["report made again"]) as f:
        other = json.load(f)
    other["devices"][0]["name"] = "NVIDIA H100 80GB HBM3"
    path = os.path.join(work, "h100.json")
    with open(path, "w") as f:
        json.dump(other, f)
    r = gate(work, done["report made again"], path, "1000%")
    check(r.returncode == 0, "another GPU model: exit %d" % r.returncode)
    check("vramtrace check: NOTE: device 0 is another GPU model in each run: NVIDIA H100 80GB "
          "HBM3 in the baseline, NVIDIA H200 in the candidate; compare runs on the same model\n"
          in r.stdout, "another GPU model: %r" % r.stdout[-500:])
    r = gate(work, done["report made again"], died["folder"], "1000%")
    check("vramtrace check: NOTE: the baseline is not a whole measurement: died of "
          "out-of-memory: device 0, 196.00 MiB requested\n" in r.stdout,
          "a baseline that died: %r" % r.stdout[-500:])


def main():
    work = vtrel.temp_dir("vt-gate-forms-")
    done = forms(work, "finished", os.path.join(DATA, "remedies", "resnet50-b128"))
    died = forms(work, "died", os.path.join(DATA, "first-step", "resnet50-b256"))
    died_fails_in_every_form(work, done, died)
    category_budgets_in_every_form(work, done, died)
    native_death(work)
    damaged_traces(work, done)
    baseline_notes(work, done, died)
    vtrel.finish("gate forms")


if __name__ == "__main__":
    main()
