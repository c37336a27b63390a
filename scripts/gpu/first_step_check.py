#!/usr/bin/env python3
"""vramtrace's predictions against the same jobs run for real: the table of docs/WHATIF.md.

First-step deaths (scripts/gpu/first_step.sh): for each run RUNS/MODEL-bBATCH, `vramtrace whatif`
with --fraction 1 (the whole step's reserved peak), --scale-batch 0.5 --fraction 1 (the half
batch's) and --max-batch (the largest batch under the run's own 16 GiB), against the "truth"
lines of scripts/gpu/first_step_truth.py. Remedies (scripts/gpu/remedies.sh): `vramtrace report`
of each run RUNS/MODEL-bBATCH, each remedy's predicted peak against the "remedies" lines (the
remedy applied for real).

    scripts/gpu/first_step_check.py --build build --runs DIR --truth FILE [--remedies]
Runs on any machine (no GPU needed): it reads the traces the GPU runs left."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

GIB = 2**30


def truth_lines(path, tag):
    out = {}
    for line in open(path, encoding="utf-8"):
        if line.startswith(tag + " "):
            t = json.loads(line[len(tag) + 1:])
            out[(t["model"], t["batch"])] = t
    return out


def whatif(build, run, *args):
    r = subprocess.run([os.path.join(build, "bin", "vramtrace"), "whatif", run, "--json", *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1:] or ["exit %d" % r.returncode]
    return json.loads(r.stdout), None


def err(pred, real):
    return "%+.1f %%" % (100.0 * (pred - real) / real) if pred and real else "-"


def first_steps(build, runs, truth):
    rows, ok = [], True
    for (model, batch), t in sorted(truth.items()):
        run = os.path.join(runs, "%s-b%d" % (model, batch))
        whole, e1 = whatif(build, run, "--fraction", "1")
        half, e2 = whatif(build, run, "--scale-batch", "0.5", "--fraction", "1")
        most, e3 = whatif(build, run, "--max-batch")
        if e1 or e2 or e3:
            print("%s b%d: whatif failed: %s" % (model, batch, e1 or e2 or e3))
            ok = False
            continue
        pw, ph = whole["reserved_peak_bytes"], half["reserved_peak_bytes"]
        # --max-batch's batch size (the report's and the plan's figure: each sample above the
        # scale's floor checked by a replay); from its scale where the batch was not known.
        mb = most.get("max_batch") or {}
        pb = mb["batch"] if "batch" in mb else int((mb.get("scale") or 0) * batch)
        rows.append((model, batch, pw, t["whole_step_reserved"], ph, t["half_batch_reserved"], pb,
                     t["largest_batch"], whole.get("predicted_requests")))
        within = (abs(pw - t["whole_step_reserved"]) <= 0.2 * t["whole_step_reserved"]
                  and abs(ph - t["half_batch_reserved"]) <= 0.2 * t["half_batch_reserved"]
                  and pb <= t["largest_batch"] and pb >= 0.9 * t["largest_batch"])
        ok &= within
    print("| job (16 GiB fraction) | whole step: predicted | real | error | half batch: predicted "
          "| real | error | largest batch: predicted | real |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m, b, pw, rw, ph, rh, pb, rb, _ in rows:
        print("| %s batch %d | %.2f GiB | %.2f GiB | %s | %.2f GiB | %.2f GiB | %s | %d | %d |"
              % (m, b, pw / GIB, rw / GIB, err(pw, rw), ph / GIB, rh / GIB, err(ph, rh), pb, rb))
    return ok


def remedies(build, runs, truth):
    ok = True
    print("| job | remedy | predicted (replayed) | applied for real | error |")
    print("|---|---|---|---|---|")
    for (model, batch), t in sorted(truth.items()):
        run = os.path.join(runs, "%s-b%d" % (model, batch))
        tmp = tempfile.mkdtemp()
        for f in os.listdir(run):
            if f.endswith((".torch", ".vtrace")) or f == "vramtrace.run":
                shutil.copy(os.path.join(run, f), tmp)
        r = subprocess.run([os.path.join(build, "bin", "vramtrace"), "report", tmp, "-o",
                            os.path.join(tmp, "out")], capture_output=True, text=True)
        path = os.path.join(tmp, "out", "report.json")
        if not os.path.exists(path):
            print("%s b%d: no report: %s" % (model, batch, r.stderr[-300:]))
            ok = False
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        report = json.load(open(path))
        real_of = {"smaller_batch": t["half_batch"], "mixed_precision": t["bf16"],
                   "activation_checkpointing": t["checkpointing"]}
        for rem in report.get("diagnosis", {}).get("remedies", []):
            kind = rem.get("kind")
            real = real_of.get(kind)
            rep = rem.get("replayed") or {}
            pred = rep.get("reserved_peak_bytes")
            if real is None:
                continue
            if pred is None:
                print("| %s batch %d | %s | not replayed: %s | %.2f GiB | - |"
                      % (model, batch, kind, rep.get("why", "?"), real / GIB))
                continue
            e = (pred - real) / real
            # The target: each within 10 % of the remedy applied for real.
            ok &= abs(e) <= 0.10
            print("| %s batch %d | %s | %.2f GiB | %.2f GiB | %s |"
                  % (model, batch, kind, pred / GIB, real / GIB, err(pred, real)))
        shutil.rmtree(tmp, ignore_errors=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--remedies", action="store_true")
    a = ap.parse_args()
    if a.remedies:
        ok = remedies(a.build, a.runs, truth_lines(a.truth, "remedies"))
    else:
        ok = first_steps(a.build, a.runs, truth_lines(a.truth, "truth"))
    print("all within their targets" if ok else "SOME OUTSIDE THEIR TARGETS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
