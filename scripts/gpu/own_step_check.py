"""`vramtrace plan`'s two predictions of each loop of scripts/gpu/own_step.sh (the program's own
steps on fake tensors, and the stand-in step) against the loop run for real
(own_step_job.py truth's lines): the whole step's reserved peak, predicted vs real and its
error; the largest batch under the fraction and whether it and one more ran for real; the
plan's cost.

    python3 own_step_check.py RUNS_DIR TRUTH_FILE"""
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
print("| job | step | whole step: predicted | real | error | largest batch | it runs | one "
      "more runs | plan's time | loss |")
print("|---|---|---|---|---|---|---|---|---|---|")
bad = 0
errors = {"program": [], "standin": []}
for name in sorted(os.listdir(runs)):
    path = os.path.join(runs, name, "report.json")
    if not os.path.isfile(path):
        continue
    job, step = name.rsplit("-", 1)
    model, batch = job.rsplit("-b", 1)
    batch = int(batch)
    rep = json.load(open(path, encoding="utf-8"))
    procs = rep.get("plan", {}).get("processes", [])
    if not procs or not procs[0]["devices"] or not procs[0]["devices"][0].get("predicted"):
        print("| %s batch %d | %s | no plan |" % (model, batch, step))
        bad += 1
        continue
    p, d = procs[0], procs[0]["devices"][0]
    t = truth.get((model, batch), {})
    real = t.get("whole_step_reserved")
    pred = d["reserved_peak_bytes"]
    err = 100.0 * (pred - real) / real if real else None
    if err is not None:
        errors[step].append(err)
    largest = d.get("largest_batch")
    checked = step == "program" and t.get("largest_predicted") == largest
    print("| %s batch %d | %s | %.2f GiB | %s | %s | %s | %s | %s | %.1f s | %s |" % (
        model, batch, step, pred / GiB, "%.2f GiB" % (real / GiB) if real else "-",
        "%+.1f %%" % err if err is not None else "-", largest,
        t.get("fits_at_predicted") if checked else "-",
        t.get("fits_one_above") if checked else "-", p["fake_step_seconds"], p.get("loss")))
    if checked and not t.get("fits_at_predicted"):
        print("  OVER: the predicted largest batch did not fit for real")
        bad += 1
    for m in d.get("remedies", []):
        print("  remedy %s: %s" % (m["kind"], "%.2f GiB%s" % (m["peak_bytes"] / GiB, " (fits)"
                                   if m["fits"] else "") if m["replayed"]
                                   else "not replayed: " + m["not_replayed_because"]))
    for u in p["unseen"]:
        print("  not seen: " + u)
for step, errs in errors.items():
    if errs:
        s = sorted(abs(e) for e in errs)
        print("%s: %d jobs, |error| median %.1f %%, largest %.1f %%"
              % (step, len(s), s[len(s) // 2] if len(s) % 2 else
                 (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2, s[-1]))
sys.exit(1 if bad else 0)
