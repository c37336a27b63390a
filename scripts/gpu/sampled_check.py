#!/usr/bin/env python3
"""Checks scripts/gpu/sampled.sh's jobs: each run under --torch=sampled against the same job
under --torch=full and against PyTorch's own figures (the FIGURES line sampled_job.py prints).
Prints one line per check and exits 1 if any failed.
    sampled_check.py RUNS_DIR [JOB...]"""
import glob
import json
import os
import sys

failed = 0


def check(job, what, ok, detail):
    global failed
    failed += not ok
    print("%s  %-12s %-58s %s" % ("PASS" if ok else "FAIL", job, what, detail), flush=True)


def near(a, b, share):
    return a is not None and b is not None and abs(a - b) <= share * max(abs(a), abs(b), 1)


def load(d):
    try:
        with open(os.path.join(d, "report.json")) as f:
            report = json.load(f)
    except OSError:
        report = None
    figures = None
    try:
        for line in open(d + ".log", errors="replace"):
            if line.startswith("FIGURES "):
                figures = json.loads(line[8:])
    except OSError:
        pass
    lines = []
    for t in glob.glob(os.path.join(d, "*.torch")):
        lines += [l.split("\t") for l in open(t, errors="replace").read().splitlines()]
    return report, figures, lines


def main():
    runs = sys.argv[1]
    for job in sys.argv[2:] or ("resnet18", "gpt2", "gpt2:oom"):
        s, s_fig, s_lines = load(os.path.join(runs, job + "-sampled"))
        a, a_fig, a_lines = load(os.path.join(runs, job + "-full"))
        if not (s and a and s_fig and a_fig):
            check(job, "both runs reported, with PyTorch's figures", False,
                  "sampled %s/%s, full %s/%s" % (bool(s), bool(s_fig), bool(a), bool(a_fig)))
            continue
        sd, ad = s["devices"][0], a["devices"][0]
        sampled = s["processes"][0].get("torch_allocator_trace", {}).get("sampled")
        gaps = len(sampled["gaps"]) if sampled else 0
        check(job, "gaps (O lines, U lines)", gaps >= 1,
              "%d gaps, %d O, %d U" % (gaps, sum(1 for l in s_lines if l[0] == "O"),
                                        sum(1 for l in s_lines if l[0] == "U")))
        made = [sum(1 for l in x if l[0] == "E" and len(l) > 2 and l[2] == "alloc")
                for x in (s_lines, a_lines)]
        check(job, "blocks in the trace, sampled < full", made[0] < made[1], "%d vs %d" % tuple(made))
        check(job, "device peak as --torch=full's (within 2 %)",
              near(sd["peak"]["bytes"], ad["peak"]["bytes"], 0.02),
              "%d vs %d" % (sd["peak"]["bytes"], ad["peak"]["bytes"]))
        # PyTorch's own peak: the highest figure the hook read.
        peaks = [p["bytes"] for p in (sampled or {}).get("peak_between", [])]
        got = peaks[0] if peaks else sd["allocator"]["peak_in_use_bytes"]
        check(job, "PyTorch's peak (between the windows or traced) vs max_memory_allocated",
              near(got, s_fig["max_memory_allocated"], 0.01 if not peaks else 0.0),
              "%s %d vs %d" % ("between" if peaks else "traced", got, s_fig["max_memory_allocated"]))
        check(job, "--torch=full's in-use peak vs its max_memory_allocated (within 1 %)",
              near(ad["allocator"]["peak_in_use_bytes"], a_fig["max_memory_allocated"], 0.01),
              "%d vs %d" % (ad["allocator"]["peak_in_use_bytes"], a_fig["max_memory_allocated"]))
        # What the peak is: each category within 3 % of the peak of --torch=full's (a batch made
        # before its forward, between the windows, is unclassified where --torch=full says
        # inputs), and the remedies offered.
        sc, ac = sd["categories"]["at_peak"], ad["categories"]["at_peak"]
        off = {k: (sc.get(k, 0), ac.get(k, 0)) for k in set(sc) | set(ac)
               if abs(sc.get(k, 0) - ac.get(k, 0)) > 0.03 * ad["peak"]["bytes"]}
        check(job, "categories at the peak as --torch=full's (within 3 % of it)", not off,
              "off: %r" % off if off else "unclassified %d" % sc.get("unclassified", 0))
        kinds = [sorted(r["kind"] for r in x.get("diagnosis", {}).get("remedies", []))
                 for x in (s, a)]
        check(job, "the remedies as --torch=full's", kinds[0] == kinds[1], "%r vs %r" % tuple(kinds))
        if job.endswith(":oom"):
            so, ao = s.get("oom", []), a.get("oom", [])
            keys = ("requested_bytes", "iteration", "phase", "fatal")
            # Every OOM, the recovered ones (PyTorch freed its cache and retried) and the fatal.
            check(job, "the OOMs as --torch=full's (request, iteration, phase)",
                  len(so) == len(ao) >= 1 and
                  all(x.get(k) == y.get(k) for x, y in zip(so, ao) for k in keys),
                  "%r vs %r" % ([{k: o.get(k) for k in keys} for o in so],
                                [{k: o.get(k) for k in keys} for o in ao]))
            check(job, "live at the OOM (within 1 %)",
                  len(so) == len(ao) >= 1 and
                  all(near(x["live_bytes"], y["live_bytes"], 0.01) for x, y in zip(so, ao)),
                  "%s vs %s" % ([o.get("live_bytes") for o in so], [o.get("live_bytes") for o in ao]))
        else:
            check(job, "live at the end as --torch=full's (within 1 %)",
                  near(sd["final_live_bytes"], ad["final_live_bytes"], 0.01),
                  "%d vs %d" % (sd["final_live_bytes"], ad["final_live_bytes"]))
    print("sampled_check: %d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
