"""`vramtrace plan`'s predictions (the report.json of each run of scripts/gpu/plan.sh) against
the same steps run for real (plan_job.py truth's lines): the whole step's reserved peak,
predicted vs real, its error, and the largest batch under the fraction, predicted vs real; the
plan's own cost (seconds on fake steps) and whether the program ran anything of its step.

    python3 plan_check.py RUNS_DIR TRUTH_FILE"""
import json
import os
import sys

GiB = 2**30
runs, truth_file = sys.argv[1], sys.argv[2]
truth = {}
for line in open(truth_file, encoding="utf-8"):
    if line.startswith("truth "):
        t = json.loads(line[len("truth "):])
        truth[(t["model"], t["batch"])] = t
print("| job | whole step: predicted | real | error | fits? predicted | largest batch: "
      "predicted | real | fake steps | exit |")
print("|---|---|---|---|---|---|---|---|---|")
bad = 0
for name in sorted(os.listdir(runs)):
    path = os.path.join(runs, name, "report.json")
    if not os.path.isfile(path):
        continue
    model, batch = name.rsplit("-b", 1)
    batch = int(batch)
    rep = json.load(open(path, encoding="utf-8"))
    procs = rep.get("plan", {}).get("processes", [])
    if not procs or not procs[0]["devices"] or not procs[0]["devices"][0].get("predicted"):
        print("| %s batch %d | no plan: %s |" % (model, batch, procs and procs[0]["devices"] and
                                                  procs[0]["devices"][0].get("error")))
        bad += 1
        continue
    p, d = procs[0], procs[0]["devices"][0]
    t = truth.get((model, batch), {})
    real = t.get("whole_step_reserved")
    pred = d["reserved_peak_bytes"]
    err = "%+.1f %%" % (100.0 * (pred - real) / real) if real else "-"
    print("| %s batch %d | %.2f GiB | %s | %s | %s | %s | %s | %.1f s | %s |" % (
        model, batch, pred / GiB, "%.2f GiB" % (real / GiB) if real else "-", err,
        "fits" if d["fits"] else "runs out by %.2f GiB" % (d["over_bytes"] / GiB),
        d.get("largest_batch"), t.get("largest_batch", "-"), p["fake_step_seconds"],
        rep["run"].get("exit_code")))
    if d.get("largest_batch") and t.get("largest_batch") is not None and \
            d["largest_batch"] > t["largest_batch"]:
        print("  OVER: the predicted largest batch did not fit for real")
        bad += 1
    for m in d.get("remedies", []):
        print("  remedy %s: %s" % (m["kind"], "%.2f GiB%s" % (m["peak_bytes"] / GiB, " (fits)"
                                   if m["fits"] else "") if m["replayed"]
                                   else "not replayed: " + m["not_replayed_because"]))
    for u in p["unseen"]:
        print("  not seen: " + u)
sys.exit(1 if bad else 0)
