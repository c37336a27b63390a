#!/usr/bin/env python3
"""`vramtrace whatif` against real runs: records real PyTorch jobs under vramtrace, asks
`vramtrace whatif` what another setting, limit or batch would do, then runs the job for real
that way and compares. Run by scripts/gpu/whatif.sh on a machine with a GPU, torch and
torchvision; prints one line per check (PASS/FAIL, the case, predicted vs real) and a table for
docs/WHATIF.md, and writes every run and every whatif answer under --out.

Cases:
  self-replay   every recorded run replayed under its own settings: the reserved peak within
                1 % of the recorded one (and of torch.cuda.max_memory_reserved()), an OOM at
                the same request where the run had one;
  expandable    fragment_oom.py (a fragmentation OOM under a 4 GiB fraction) with
                expandable_segments:True: fits for real exactly when predicted;
  max-split     the same with max_split_size_mb:1024;
  limit         ResNet-50 at batch 128 recorded unlimited (12.74 GiB reserved, 10.61 GiB
                allocated at most on an H200), replayed under fractions 0.10, 0.08, 0.078,
                0.076 and 0.07 of the GPU (the H200 traces put the edge between 0.078 and
                0.077: PyTorch frees its cache under the cap); run for real with
                set_per_process_memory_fraction;
  batch         ResNet-50 at batch 128 recorded unlimited: x0.5 and x2 predicted, run at 64 and
                256: the reserved peak within 5 %;
  max-batch     the largest batch under a 16 GiB fraction predicted from the batch-128 run; runs
                at 0.95x and 1.05x of it: the first fits, the second runs out.
--only runs the cases named (comma-separated)."""
import argparse, json, os, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("--build", required=True)
ap.add_argument("--scripts", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--only", default="")
args = ap.parse_args()
VT = os.path.join(args.build, "bin", "vramtrace")
results, table, runs, recorded_oom = [], [], {}, {}


def check(name, ok, detail):
    results.append((name, bool(ok), detail))
    print(("PASS" if ok else "FAIL"), name, "|", detail, flush=True)


def gib(b):
    return "-" if b is None else "%.3f GiB" % (b / 2**30)


def record(tag, script, **env):
    """The job under `vramtrace run`: (exit code, the folder, PyTorch's last figures)."""
    out = os.path.join(args.out, tag)
    subprocess.run(["rm", "-rf", out])
    e = dict(os.environ, PYTHONUNBUFFERED="1", **{k: str(v) for k, v in env.items()})
    p = subprocess.run([VT, "run", "-o", out, "--", sys.executable, os.path.join(args.scripts, script)],
                       env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=500)
    with open(out + ".log", "w") as f:
        f.write(p.stdout)
    figs = [json.loads(l.split(" ", 1)[1]) for l in p.stdout.splitlines() if l.startswith("torch-figures ")]
    oom = "OutOfMemoryError" in p.stdout or "CUDA out of memory" in p.stdout
    print("----", tag, "exit", p.returncode, "oom" if oom else "", flush=True)
    runs[tag] = out
    recorded_oom[tag] = oom
    return p.returncode, out, figs, oom


def real(tag, script, **env):
    """The job without vramtrace: (out of memory?, PyTorch's figures)."""
    e = dict(os.environ, PYTHONUNBUFFERED="1", **{k: str(v) for k, v in env.items()})
    p = subprocess.run([sys.executable, os.path.join(args.scripts, script)], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=500)
    with open(os.path.join(args.out, tag + ".real.log"), "w") as f:
        f.write(p.stdout)
    figs = [json.loads(l.split(" ", 1)[1]) for l in p.stdout.splitlines() if l.startswith("torch-figures ")]
    oom = "OutOfMemoryError" in p.stdout or "CUDA out of memory" in p.stdout
    print("----", tag, "(real) exit", p.returncode, "oom" if oom else "", flush=True)
    return oom, figs


def whatif(folder, *opts):
    p = subprocess.run([VT, "whatif", folder, "--json", *opts], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=900)
    name = os.path.basename(folder) + "".join(o.replace("/", "_").replace(":", "=") for o in opts)
    with open(os.path.join(args.out, "whatif-" + name + ".json"), "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        print(p.stderr[-2000:])
        return None
    return json.loads(p.stdout)


def max_reserved(figs):
    vals = [f.get("max_reserved") for f in figs if f.get("max_reserved") is not None]
    return max(vals) if vals else None


def case_self_replay():
    for tag in list(runs):
        w = whatif(runs[tag])
        if w is None:
            check("self-replay %s" % tag, False, "whatif failed")
            continue
        rec = w["recorded_reserved_peak_bytes"]
        pred = w["reserved_peak_bytes"]
        err = abs(pred - rec) / rec if rec else 1
        same_oom = (w["verdict"] == "oom" and w["oom"]["recorded_request"]) if w["recorded_oom"] else w["verdict"] == "fits"
        check("self-replay %s: reserved peak within 1 %%" % tag, err <= 0.01,
              "predicted %s, recorded %s (%.2f %%)" % (gib(pred), gib(rec), 100 * err))
        check("self-replay %s: the same verdict, an OOM at the same request" % tag, same_oom,
              "recorded %s, predicted %s" % ("oom" if w["recorded_oom"] else "fits", w["verdict"]))
        table.append(("self-replay " + tag, gib(pred), gib(rec), "%.2f %%" % (100 * err),
                      "yes" if same_oom else "no"))


def fragmentation(conf, tag):
    if "fragment-oom" not in runs:
        record("fragment-oom", "fragment_oom.py")
    out = runs["fragment-oom"]
    oom = recorded_oom["fragment-oom"]
    w = whatif(out, "--alloc-conf", conf)
    real_oom, _ = real("fragment-oom-" + tag, "fragment_oom.py", PYTORCH_CUDA_ALLOC_CONF=conf)
    pred_oom = w is not None and w["verdict"] == "oom"
    check("%s on fragment_oom.py: fits for real exactly when predicted" % conf, w is not None and pred_oom == real_oom,
          "predicted %s, real %s (recorded run: %s)" % ("oom" if pred_oom else "fits",
                                                        "oom" if real_oom else "fits", "oom" if oom else "fits"))
    table.append((conf + " on fragment_oom.py", "oom" if pred_oom else "fits", "oom" if real_oom else "fits", "",
                  "yes" if pred_oom == real_oom else "no"))


def case_expandable():
    fragmentation("expandable_segments:True", "expandable")


def case_max_split():
    fragmentation("max_split_size_mb:1024", "maxsplit")


def base128():
    if "resnet-128" not in runs:
        record("resnet-128", "resnet_oom.py", BATCH=128, LIMIT_GIB=0, STEPS=3)
    return runs["resnet-128"]


def case_limit():
    out = base128()
    for frac in (0.10, 0.08, 0.078, 0.076, 0.07):
        w = whatif(out, "--fraction", str(frac))
        real_oom, figs = real("resnet-128-f%g" % frac, "resnet_oom.py", BATCH=128,
                              LIMIT_GIB="%.4f" % (frac * total_gib()), STEPS=3)
        pred_oom = w is not None and w["verdict"] == "oom"
        check("fraction %g on ResNet-50 batch 128: runs out for real exactly when predicted" % frac,
              w is not None and pred_oom == real_oom,
              "predicted %s, real %s" % ("oom" if pred_oom else "fits", "oom" if real_oom else "fits"))
        table.append(("fraction %g, ResNet-50 batch 128" % frac, "oom" if pred_oom else "fits",
                      "oom" if real_oom else "fits", "", "yes" if pred_oom == real_oom else "no"))


_total = []


def total_gib():
    # Asked in a child process: a CUDA context in the checker would take memory from the jobs.
    if not _total:
        p = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_properties(0).total_memory)"],
                           stdout=subprocess.PIPE, text=True, check=True)
        _total.append(int(p.stdout.split()[-1]) / 2**30)
    return _total[0]


def case_batch():
    out = base128()
    for scale, batch in ((0.5, 64), (2.0, 256)):
        w = whatif(out, "--scale-batch", str(scale))
        oom, figs = real("resnet-%d" % batch, "resnet_oom.py", BATCH=batch, LIMIT_GIB=0, STEPS=3)
        r = max_reserved(figs)
        pred = w["reserved_peak_bytes"] if w else None
        err = abs(pred - r) / r if (pred and r) else 1
        check("batch x%g (ResNet-50 %d): reserved peak within 5 %%" % (scale, batch), err <= 0.05,
              "predicted %s, real %s (%.2f %%)" % (gib(pred), gib(r), 100 * err))
        table.append(("batch x%g, ResNet-50 %d" % (scale, batch), gib(pred), gib(r), "%.2f %%" % (100 * err),
                      "yes" if err <= 0.05 else "no"))


def case_max_batch():
    out = base128()
    frac = 16 / total_gib()
    w = whatif(out, "--fraction", "%.6f" % frac, "--max-batch")
    if not w or not w.get("max_batch"):
        check("max-batch predicted", False, "no answer")
        return
    best = 128 * w["max_batch"]["scale"]
    lo, hi = int(best * 0.95), int(best * 1.05 + 0.999)
    lo_oom, _ = real("resnet-max-lo", "resnet_oom.py", BATCH=lo, LIMIT_GIB=16, STEPS=3)
    hi_oom, _ = real("resnet-max-hi", "resnet_oom.py", BATCH=hi, LIMIT_GIB=16, STEPS=3)
    check("largest batch under 16 GiB: 0.95x fits, 1.05x runs out", not lo_oom and hi_oom,
          "predicted %.1f; batch %d %s, batch %d %s" % (best, lo, "oom" if lo_oom else "fits",
                                                         hi, "oom" if hi_oom else "fits"))
    table.append(("largest batch, 16 GiB (predicted %.1f)" % best, "%d fits, %d oom" % (lo, hi),
                  "%d %s, %d %s" % (lo, "oom" if lo_oom else "fits", hi, "oom" if hi_oom else "fits"), "",
                  "yes" if (not lo_oom and hi_oom) else "no"))


def record_base():
    record("fragment-oom", "fragment_oom.py")
    record("resnet-oom-16g", "resnet_oom.py", BATCH=256, LIMIT_GIB=16, STEPS=3)
    base128()
    if os.path.exists(os.path.join(args.scripts, "gpt2_train.py")):
        try:
            import transformers  # noqa: F401
            record("gpt2", "gpt2_train.py")
        except ImportError:
            pass


CASES = {"expandable": case_expandable, "max-split": case_max_split, "limit": case_limit,
         "batch": case_batch, "max-batch": case_max_batch, "self-replay": case_self_replay}
os.makedirs(args.out, exist_ok=True)
only = [c for c in args.only.split(",") if c]
if not only or "self-replay" in only:
    record_base()
for name in (only or ["expandable", "max-split", "limit", "batch", "max-batch", "self-replay"]):
    CASES[name]()
print("\n| case | predicted | real (or recorded) | error | agrees |")
print("|---|---|---|---|---|")
for row in table:
    print("| " + " | ".join(row) + " |")
print("\n%d/%d checks passed" % (sum(ok for _, ok, _ in results), len(results)))
sys.exit(0 if results and all(ok for _, ok, _ in results) else 1)
