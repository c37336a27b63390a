"""`vramtrace report`, `whatif` and `check` on PyTorch memory snapshots (torch.cuda.memory.
_dump_snapshot's pickle), end to end:
  - a snapshot shaped as PyTorch 2.11 writes it (tests/fuzz/make_snapshot_seeds.py): report.json's
    peak (the 20 MiB segment), the OOM's 32 MiB request with its 16 MiB free, the layout named in
    the process's command line; whatif --json replays it to its recorded reserved peak, and under
    expandable_segments too; check against its own report passes (one without an OOM) or says the
    candidate died of its OOM (exit 4);
  - a pickle that would run code (GLOBAL, REDUCE) or is cut short: exit 2 from report, whatif and
    check, naming the refusal, and nothing run;
  - the real snapshots of tests/data/snapshots (scripts/gpu/snapshots.py, recorded on a GPU),
    where present: each one's reserved peak within 0.1 % of PyTorch's max_memory_reserved, the
    OOM's request as PyTorch said it, whatif's replay within 0.1 % of the recorded peak.
   snapshot_test.py BUILD_DIR"""
import glob
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import make_snapshot_seeds as seeds  # noqa: E402
import snapshot_frames  # noqa: E402

VT = os.path.join(sys.argv[1], "bin", "vramtrace")
MiB = 1 << 20
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def vt(*args):
    return subprocess.run([VT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300)


def write(path, snap, protocol=4):
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=protocol)
    return path


def report(path, out):
    r = vt("report", path, "-o", out, "--no-progress")
    if r.returncode != 0:
        return r, None
    with open(os.path.join(out, "report.json")) as f:
        return r, json.load(f)


def whatif(path, *more):
    r = vt("whatif", path, "--json", *more)
    return json.loads(r.stdout) if r.returncode == 0 else None


def shaped(tmp):
    oom = write(os.path.join(tmp, "oom.pickle"), seeds.snapshot())
    r, j = report(oom, os.path.join(tmp, "oom-report"))
    check(r.returncode == 0, "report of a 2.11-shaped snapshot: exit 0 (%d: %s)"
          % (r.returncode, r.stderr.strip()[-300:]))
    if j:
        check(j["devices"][0]["peak"]["bytes"] == 20 * MiB, "its peak: the 20 MiB segment")
        o = j["oom"][0]
        check((o["requested_bytes"], o["free_bytes"], o["fatal"]) == (32 * MiB, 16 * MiB, True),
              "its OOM: 32 MiB requested, 16 MiB free, fatal")
        check(j["processes"][0]["cmdline"][0].startswith(
            "PyTorch memory snapshot, pickle protocol 4, the layout of PyTorch 2.11"),
            "the layout named in the process's command line")
    w = whatif(oom)
    check(w is not None and w["replays"][0]["reserved_peak_bytes"] == 20 * MiB
          and w["replays"][0]["recorded_reserved_peak_bytes"] == 20 * MiB,
          "whatif replays it to its recorded reserved peak (20 MiB)")
    exp = write(os.path.join(tmp, "expand.pickle"), seeds.snapshot(expandable=True), 5)
    w = whatif(exp)
    check(w is not None and w["replays"][0]["settings"]["recorded_alloc_conf"] == "expandable_segments:True"
          and w["replays"][0]["reserved_peak_bytes"] == 20 * MiB,
          "an expandable-segments snapshot (protocol 5): its recorded settings replayed")
    fine = write(os.path.join(tmp, "fine.pickle"), seeds.snapshot(oom=False))
    r, _ = report(fine, os.path.join(tmp, "fine-report"))
    c = vt("check", fine, "--baseline", os.path.join(tmp, "fine-report", "report.json"))
    check(c.returncode == 0, "check of a snapshot against its own report: exit 0 (%d: %s)"
          % (c.returncode, c.stderr.strip()[-300:]))
    c = vt("check", oom, "--baseline", os.path.join(tmp, "fine-report", "report.json"))
    check(c.returncode == 4 and "died of out-of-memory: device 0, 32.00 MiB requested" in c.stdout + c.stderr,
          "check of the OOM snapshot: exit 4, the candidate died of its OOM (%d: %s)"
          % (c.returncode, c.stderr.strip()[-300:]))


def hostile(tmp):
    marker = os.path.join(tmp, "ran")
    evil = os.path.join(tmp, "evil.pickle")
    with open(evil, "wb") as f:  # os.system("touch <marker>") when unpickled by Python
        f.write(b"\x80\x02cos\nsystem\nX" + len(b"touch " + marker.encode()).to_bytes(4, "little")
                + b"touch " + marker.encode() + b"\x85R.")
    cut = os.path.join(tmp, "cut.pickle")
    with open(cut, "wb") as f:
        f.write(pickle.dumps(seeds.snapshot(), protocol=4)[:200])
    for path, words in ((evil, "opcode GLOBAL refused"), (cut, "a frame longer than the file")):
        base = os.path.basename(path)
        r = vt("report", path, "-o", os.path.join(tmp, base + "-report"), "--no-progress")
        check(r.returncode == 2 and words in r.stderr, "report %s: exit 2, '%s'" % (base, words))
        r = vt("whatif", path)
        check(r.returncode == 2 and words in r.stderr, "whatif %s: exit 2, '%s'" % (base, words))
        r = vt("check", path, "--baseline", path)
        check(r.returncode == 2 and words in r.stderr, "check %s: exit 2, '%s'" % (base, words))
    check(not os.path.exists(marker), "the GLOBAL pickle ran nothing")


def real(tmp):
    data = os.path.join(HERE, "..", "data", "snapshots")
    found = sorted(glob.glob(os.path.join(data, "*.pickle")))
    print("real snapshots in tests/data/snapshots: %d" % len(found))
    for path in found:
        name = os.path.basename(path)[:-len(".pickle")]
        with open(path[:-len(".pickle")] + ".truth.json") as f:
            truth = json.load(f)
        r, j = report(path, os.path.join(tmp, "real-" + name + "-report"))
        check(r.returncode == 0, "%s: report exit 0 (%d: %s)" % (name, r.returncode, r.stderr[-300:]))
        if not j:
            continue
        peak = j["devices"][0]["peak"]["bytes"]
        want = truth["max_memory_reserved"]
        check(abs(peak - want) <= want / 1000,
              "%s: reserved peak %d within 0.1 %% of max_memory_reserved %d" % (name, peak, want))
        if "oom" in truth:
            asked = [o["requested_bytes"] for o in j["oom"]]
            check(any(("%d" % a) in truth["oom"] or ("%.2f MiB" % (a / MiB)) in truth["oom"]
                      or ("%.2f GiB" % (a / 2**30)) in truth["oom"] for a in asked),
                  "%s: the OOM's request %s as PyTorch said it: %s" % (name, asked, truth["oom"]))
        # A job that ran out under PyTorch's per-process fraction: the snapshot does not hold the
        # fraction (PyTorch's message does: "2.00 GiB allowed"), so the replay is given it, and
        # then fails at the request the job failed on.
        allowed = re.search(r"(\d+\.\d+) GiB allowed", truth.get("oom", ""))
        w = whatif(path, "--allow-damaged",
                   *(["--limit", allowed.group(1) + "GiB"] if allowed else []))
        if w and allowed:
            x = w["replays"][0]
            tried = re.search(r"Tried to allocate (\d+\.\d+) MiB", truth["oom"])
            want = round(float(tried.group(1)) * MiB) if tried else -1
            check(x["oom"] is not None and x["oom"]["requested_bytes"] == want,
                  "%s: the replay fails at the job's request of %d bytes: %r" % (
                      name, want, x.get("oom")))
        if w:
            x = w["replays"][0]
            check(abs(x["reserved_peak_bytes"] - x["recorded_reserved_peak_bytes"])
                  <= x["recorded_reserved_peak_bytes"] / 1000,
                  "%s: whatif %d within 0.1 %% of the recorded %d" % (
                      name, x["reserved_peak_bytes"], x["recorded_reserved_peak_bytes"]))


def categories(tmp):
    """Each block's category read from its frames (snapshot_frames.py's training step)."""
    cols = ["parameters", "gradients", "optimizer_state", "activations", "temporaries", "inputs",
            "unclassified"]
    for mode, at_exit, phases, most in [
            ("all", dict(parameters=5, inputs=2, gradients=4, optimizer_state=4),
             [("forward", "/home/user/train.py:36"), ("backward", None),
              ("optimizer", "/home/user/train.py:38")],
             dict(parameters=5, inputs=2, activations=4, temporaries=1, gradients=4,
                  optimizer_state=4)),
            # The backward's blocks have no frames: unclassified, the rest as with C++ frames.
            ("python", dict(parameters=5, inputs=2, optimizer_state=4, unclassified=4),
             [("forward", "/home/user/train.py:36"), ("optimizer", "/home/user/train.py:38")],
             dict(parameters=5, inputs=2, activations=4, temporaries=1, optimizer_state=4,
                  unclassified=4)),
            ("none", dict(unclassified=15), [], dict(unclassified=16))]:
        path = write(os.path.join(tmp, "frames-%s.pickle" % mode), snapshot_frames.train(mode))
        r, rep = report(path, os.path.join(tmp, "frames-%s" % mode))
        check(rep is not None, "frames %s: report exits 0" % mode)
        if not rep:
            continue
        d = rep["processes"][0]["devices"][0]
        c = d["categories"]
        got = {k: v // MiB for k, v in c["at_exit"].items() if v and k != "allocator_cache"}
        check(got == at_exit, "frames %s: at the end %r MiB (got %r)" % (mode, at_exit, got))
        got = [(p["phase"], p.get("site")) for p in d.get("phases", [])]
        check(got == phases, "frames %s: phases %r (got %r)" % (mode, phases, got))
        tl = c["timeline"]
        top = {}
        for pt in tl["points"]:
            for k in cols:
                v = pt[tl["columns"].index(k)] // MiB
                if v:
                    top[k] = max(top.get(k, 0), v)
        check(top == most, "frames %s: the most of each category %r MiB (got %r)" % (
            mode, most, top))
        problems = [p for p in rep["run"]["problems"] if "unclassified" in p]
        want = {"all": 0, "python": 1, "none": 1}[mode]
        check(len(problems) == want and (mode != "python" or "stacks=\"python\"" in problems[0])
              and (mode != "none" or "context=None" in problems[0]),
              "frames %s: %d problem(s) saying why blocks are unclassified (got %r)" % (
                  mode, want, problems))
    # The sites are the user's lines, not the allocator's innermost C++ frames.
    rep = report(os.path.join(tmp, "frames-all.pickle"), os.path.join(tmp, "frames-all-2"))[1]
    # (A snapshot is a moment of a process that went on: its live set is the peak's, not leaks.)
    sites = sorted(x["site"] for x in rep["devices"][0]["peak"]["by_line"])
    check(sites == ["<module> (/home/user/train.py:38)", "moved to the GPU at /home/user/train.py:35"]
          or all("c10::" not in s for s in sites) and len(sites) > 0,
          "frames all: the live set's sites are the user's lines (got %r)" % sites)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        categories(tmp)
        shaped(tmp)
        hostile(tmp)
        real(tmp)
    if failures:
        print("%d failed" % len(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
