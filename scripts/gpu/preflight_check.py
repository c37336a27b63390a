#!/usr/bin/env python3
"""The table of scripts/gpu/preflight.sh's runs: per run (KIND-MODEL-bBATCH in RUNS), whether
the pre-flight's verdict came on stderr before the job's first step ended (before its "ran three
steps" line or its OOM), what it said, the predicted reserved peak of the first step (report.json's
preflight) against the one recorded over the same two iterations and the error, the job's own
max_memory_reserved over its three steps, the fake steps' seconds, and for a fitting job the run's
wall time with --preflight against plain `vramtrace run`.

    preflight_check.py RUNS"""
import json
import os
import sys

GiB = float(1 << 30)


def read(path, default=""):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


def gib(v):
    return "%.2f GiB" % (v / GiB) if isinstance(v, (int, float)) else "-"


def main():
    runs = sys.argv[1]
    names = sorted(n[:-4] for n in os.listdir(runs) if n.endswith(".log"))
    print("%-28s %-4s %-9s %-11s %-11s %-9s %-11s %-7s %s" % (
        "run", "rc", "verdict", "predicted", "recorded", "error", "job's max", "fake s",
        "wall ms (plain)"))
    failures = 0
    for name in names:
        if name.startswith("plain-"):
            continue
        base = os.path.join(runs, name)
        log = read(base + ".log").splitlines()
        rc = read(base + ".rc", "?").strip()
        verdict = [i for i, l in enumerate(log) if l.startswith("vramtrace: PRE-FLIGHT: the first")]
        ends = [i for i, l in enumerate(log)
                if l.startswith("ran three steps") or "OutOfMemoryError" in l]
        said = "before" if verdict and (not ends or verdict[0] < ends[0]) else "MISSING"
        if said != "before":
            failures += 1
        fits = "fits" if verdict and "it fits" in log[verdict[0]] else (
            "runs out" if verdict else "-")
        job = [int(l.rsplit(" ", 1)[1]) for l in log if l.startswith("ran three steps")]
        try:
            rep = json.loads(read(os.path.join(base, "report.json"), "{}"))
        except ValueError:
            rep = {}
        procs = rep.get("preflight", {}).get("processes", [])
        d = procs[0]["devices"][0] if procs and procs[0].get("devices") else {}
        err = ("%+.1f %%" % d["error_percent"]) if d.get("compared") else (
            d.get("not_compared_because", d.get("error", "no pre-flight"))[:30])
        wall = read(base + ".ms", "?").strip()
        plain = os.path.join(runs, "plain-" + name.split("-", 1)[1] + ".ms")
        if os.path.exists(plain):
            wall += " (%s)" % read(plain).strip()
        print("%-28s %-4s %-9s %-11s %-11s %-9s %-11s %-7s %s" % (
            name, rc, fits, gib(d.get("predicted_reserved_peak_bytes")),
            gib(d.get("recorded_reserved_peak_bytes")), err, gib(job[0]) if job else "-",
            "%.1f" % procs[0]["fake_step_seconds"] if procs else "-", wall))
        # The pre-flight as the user waits for it (preflight.sh's DIR.times): from the hook's
        # first line to the launcher's last verdict (the largest batch and the remedies, for a
        # step that will not fit), fake steps and replays together.
        stamped = [l.split("\t", 1) for l in read(base + ".times").splitlines() if "\t" in l]
        began = [float(t) for t, l in stamped if l.startswith("vramtrace: PRE-FLIGHT: running")]
        said_at = [float(t) for t, l in stamped
                   if l.startswith("vramtrace: PRE-FLIGHT: the first")]
        if began and said_at:
            print("    pre-flight wall: %.1f s from its first line to its last verdict (%d "
                  "verdict line(s))" % (said_at[-1] - began[0], len(said_at)))
        print("    verdict (%s the first step ended): %s" % (
            said, log[verdict[0]][len("vramtrace: PRE-FLIGHT: "):] if verdict else "none"))
    if failures:
        print("%d run(s) without a verdict before the first step ended" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
