#!/usr/bin/env python3
"""The table of scripts/gpu/own_preflight.sh's runs: per loop, the pre-flight's predicted reserved
peak of the first step (report.json's preflight, the program's own loop and the stand-in step)
against the one recorded over the same two iterations, the error, the fake steps' seconds, what
ran them (preflight.processes[].loss: "program" is the program's own loop), and whether the
job's losses under the pre-flight are those it prints without vramtrace.

    own_preflight_check.py RUNS"""
import json
import os
import sys

GiB = float(1 << 30)


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def losses(text):
    return [l for l in text.splitlines() if l.startswith("step ")]


def main():
    runs = sys.argv[1]
    names = sorted(n[:-4] for n in os.listdir(runs)
                   if n.endswith(".log") and not n.endswith("-plain.log"))
    print("%-32s %-8s %-9s %-10s %-10s %-8s %-7s %s" % (
        "run", "rc", "ran", "predicted", "recorded", "error", "fake s", "losses as without"))
    errors = {}
    for name in names:
        base = os.path.join(runs, name)
        rc = read(base + ".rc").split()
        try:
            p = json.load(open(os.path.join(base, "report.json")))["preflight"]["processes"][0]
            d = p["devices"][0]
        except Exception as ex:
            print("%-32s %-8s no pre-flight in report.json (%s)" % (name, "/".join(rc), ex))
            continue
        pred = d.get("predicted_reserved_peak_bytes")
        rec = d.get("recorded_reserved_peak_bytes")
        err = d.get("error_percent")
        plain = base.rsplit("-", 1)[0] + "-plain.log"
        same = "-"
        if os.path.exists(plain):
            a, b = losses(read(base + ".log")), losses(read(plain))
            same = "same" if a and a == b else "DIFFERENT %s vs %s" % (a, b)
        print("%-32s %-8s %-9s %-10s %-10s %-8s %-7.1f %s" % (
            name, "/".join(rc[:1]), p.get("loss") or "-",
            "%.2f GiB" % (pred / GiB) if pred else "-", "%.2f GiB" % (rec / GiB) if rec else "-",
            "%+.1f %%" % err if isinstance(err, (int, float)) else "-",
            p.get("fake_step_seconds", 0.0), same))
        if isinstance(err, (int, float)):
            errors.setdefault(name.rsplit("-", 1)[1], []).append(abs(err))
    for kind, es in sorted(errors.items()):
        es.sort()
        print("%s: median |error| %.1f %%, largest %.1f %% over %d loops"
              % (kind, es[len(es) // 2], es[-1], len(es)))


main()
