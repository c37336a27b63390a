#!/usr/bin/env python3
"""Each way memory runs out, on a GPU: one real program per cause run under vramtrace, the cause
the report names checked, and every remedy it offers that a program here can apply run for real,
its measured peak set against the report's prediction. Prints the checks and a Markdown table
(also written to OUT/causes-table.md) of predicted against measured.
  python3 scripts/gpu/causes_check.py --build build --out /tmp/causes [--only NAME,...]
Needs torch, torchvision and transformers; the native case needs BUILD/native_growth
(nvcc -O2 -arch=sm_90 -o BUILD/native_growth tests/gpu/real/native_growth.cu)."""
import argparse, json, os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
R = os.path.join(ROOT, "tests", "gpu", "real")
ap = argparse.ArgumentParser()
ap.add_argument("--build", default=os.path.join(ROOT, "build"))
ap.add_argument("--out", default=os.path.join(ROOT, "gpu-out", "causes"))
ap.add_argument("--only", default="")
args = ap.parse_args()
VT = os.path.join(args.build, "bin", "vramtrace")
os.makedirs(args.out, exist_ok=True)
failures, rows = [], []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (": " + detail if detail else ""), flush=True)
    if not ok:
        failures.append(name)


def run(tag, cmd, **env):
    """`vramtrace run` of cmd with env; returns (exit code, report.json)."""
    out = os.path.join(args.out, tag)
    subprocess.run(["rm", "-rf", out])
    e = dict(os.environ, PYTHONUNBUFFERED="1", **{k: str(v) for k, v in env.items()})
    p = subprocess.run([VT, "run", "-o", out, "--"] + cmd, env=e, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=400)
    with open(out + ".log", "w") as f:
        f.write(p.stdout)
    return p.returncode, json.load(open(os.path.join(out, "report.json")))


def py(script):
    return [sys.executable, os.path.join(R, script)]


def gib(b):
    return "%.2f GiB" % (b / 2**30)


def peak(r):
    return max(d["peak"]["bytes"] for d in r["devices"])


def remedy(r, kind):
    for x in r["diagnosis"].get("remedies", []):
        if x["kind"] == kind:
            return x
    return None


def compare(case, r, kind, measured_tag, cmd, tolerance=0.20, **env):
    """Applies remedy `kind` for real (cmd with env) and sets its peak against the prediction."""
    x = remedy(r, kind)
    if x is None:
        check("%s offers %s" % (case, kind), False, "not offered")
        return
    rc, m = run(measured_tag, cmd, **env)
    got = peak(m)
    lo, hi = x["predicted_peak_bytes"], x.get("predicted_peak_high_bytes")
    if x.get("predicted_peak_is_lower_bound"):
        ok, said = got >= lo, "at least " + gib(lo)
    elif x.get("predicted_peak_is_upper_bound"):
        ok, said = got <= lo, "at most " + gib(lo)
    elif hi is not None:
        ok, said = lo * (1 - tolerance) <= got <= hi * (1 + tolerance), gib(lo) + " to " + gib(hi)
    else:
        ok, said = abs(got - lo) <= tolerance * got, gib(lo)
    err = "" if hi is not None or x.get("predicted_peak_is_lower_bound") else \
        " (%+.0f %%)" % (100.0 * (lo - got) / got)
    check("%s: %s predicted %s, measured %s%s" % (case, kind, said, gib(got), err), ok and rc == 0,
          "" if rc == 0 else "the remedy run exited %d" % rc)
    rows.append((case, kind, said, gib(got), err.strip(" ()") or ("holds" if ok else "does not hold")))


def cause_of(r):
    return r["diagnosis"].get("cause", {}).get("kind")


def case_eval_graph():
    rc, r = run("eval-graph", py("gpt2_eval_graph.py"), BATCHES=16, LIMIT_GIB=24)
    check("GPT-2 evaluation without no_grad dies (24 GiB)", rc != 0 and r["diagnosis"]["verdict"] == "oom")
    check("its cause is the kept graph", cause_of(r) == "kept_graph", r["diagnosis"].get("cause", {}).get("title", ""))
    check("no_grad is the first remedy", r["diagnosis"]["remedies"][0]["kind"] == "no_grad")
    figs = [json.loads(l.split(" ", 1)[1]) for l in open(os.path.join(args.out, "eval-graph.log"))
            if l.startswith("torch-figures ") and '"batch"' in l]
    per = r["diagnosis"]["growth"]["bytes_per_iteration"]
    torch_per = figs[1]["allocated"] - figs[0]["allocated"] if len(figs) >= 2 else 0
    check("kept per iteration against PyTorch's growth of memory_allocated",
          torch_per and abs(per - torch_per) <= 0.02 * torch_per, "%d against %d" % (per, torch_per))
    compare("GPT-2 evaluation (24 GiB)", r, "no_grad", "eval-graph-no_grad", py("gpt2_eval_graph.py"),
            BATCHES=16, LIMIT_GIB=0, NO_GRAD=1)
    compare("GPT-2 evaluation (24 GiB)", r, "accumulate_numbers", "eval-graph-item", py("gpt2_eval_graph.py"),
            BATCHES=16, LIMIT_GIB=0, ITEM=1)


def case_eval_losses():
    rc, r = run("eval-losses", py("resnet_eval_losses.py"))
    check("ResNet-18 evaluation keeping a list of losses: kept graph", cause_of(r) == "kept_graph")
    compare("ResNet-18 list of losses", r, "no_grad", "eval-losses-no_grad", py("resnet_eval_losses.py"), NO_GRAD=1)
    compare("ResNet-18 list of losses", r, "accumulate_numbers", "eval-losses-item", py("resnet_eval_losses.py"), ITEM=1)


def case_keep_logits():
    rc, r = run("keep-logits", py("gpt2_keep_logits.py"), STEPS=12, LIMIT_GIB=12)
    check("GPT-2 keeping its logits dies (12 GiB)", rc != 0)
    check("its cause is kept outputs, not the limit", cause_of(r) == "kept_outputs",
          r["diagnosis"].get("cause", {}).get("title", ""))
    compare("GPT-2 keeping logits (12 GiB)", r, "detach_outputs", "keep-logits-detach",
            py("gpt2_keep_logits.py"), STEPS=12, LIMIT_GIB=0, DETACH_CPU=1)


def case_native():
    prog = [os.path.join(args.build, "native_growth")]
    rc, r = run("native-growth", prog)
    p = r["processes"][0]
    check("native loop: 40 iterations from its launches", p.get("iterations", {}).get("count") == 40,
          json.dumps(p.get("iterations", {}))[:200])
    g = [x for x in r["growth"] if x["bytes_per_iteration"] == 64 << 20]
    check("native loop: 64 MiB per iteration at its cudaMalloc", bool(g), json.dumps([x["site"] for x in r["growth"]])[:300])
    rc, r = run("native-oom", prog, KEEP_MIB=8192)
    check("native loop that runs out exits 3", rc == 3)
    check("its OOM is fatal, verdict oom", r["diagnosis"]["verdict"] == "oom")
    check("its cause is the growth", cause_of(r) == "growth", r["diagnosis"].get("cause", {}).get("title", ""))
    rem = [x["kind"] for x in r["diagnosis"].get("remedies", [])]
    check("native remedies, none of PyTorch's", rem and rem[0] == "free_per_iteration" and
          not any(k in rem for k in ("mixed_precision", "activation_checkpointing", "smaller_batch")), str(rem))
    compare("native loop (8 GiB a step)", r, "free_per_iteration", "native-free", prog, KEEP_MIB=8192, FREE_KEPT=1)


def case_first_step():
    rc, r = run("resnet-oom", py("resnet_oom.py"), BATCH=256, LIMIT_GIB=16, STEPS=2)
    check("ResNet-50 dies in its first step (16 GiB)", rc != 0)
    for kind, env in (("smaller_batch", dict(BATCH=128)), ("mixed_precision", dict(AMP=1)),
                      ("activation_checkpointing", dict(CKPT="layer1,layer2"))):
        e = dict(dict(BATCH=256, LIMIT_GIB=0, STEPS=2), **env)
        compare("ResNet-50 first step (16 GiB)", r, kind, "resnet-" + kind, py("resnet_oom.py"), **e)
    rc, r = run("gpt2-oom", py("gpt2_train.py"), LAYERS=12, BATCH=32, LIMIT_GIB=16, STEPS=2)
    check("GPT-2 dies in its first step (16 GiB)", rc != 0)
    for kind, env in (("smaller_batch", dict(BATCH=16)), ("mixed_precision", dict(AMP=1)),
                      ("activation_checkpointing", dict(CKPT=1))):
        e = dict(dict(LAYERS=12, BATCH=32, LIMIT_GIB=0, STEPS=2), **env)
        if remedy(r, kind):
            compare("GPT-2 first step (16 GiB)", r, kind, "gpt2-" + kind, py("gpt2_train.py"), **e)


def case_fragmentation():
    rc, r = run("fragment-oom", py("fragment_oom.py"))
    check("fragmentation OOM: the cause", cause_of(r) == "fragmentation")
    compare("fragmentation (4 GiB)", r, "expandable_segments", "fragment-expandable",
            py("fragment_oom.py"), tolerance=0.05, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")


CASES = {"eval-graph": case_eval_graph, "eval-losses": case_eval_losses, "keep-logits": case_keep_logits,
         "native": case_native, "first-step": case_first_step, "fragmentation": case_fragmentation}
only = [c for c in args.only.split(",") if c]
for name, fn in CASES.items():
    if not only or name in only:
        try:
            fn()
        except Exception as ex:  # a case that cannot run is a failure, the others still run
            check(name, False, "%s: %s" % (type(ex).__name__, ex))
table = ["| case | remedy | predicted peak | measured peak | error |", "|---|---|---|---|---|"]
table += ["| %s | %s | %s | %s | %s |" % row for row in rows]
print("\n".join(table))
with open(os.path.join(args.out, "causes-table.md"), "w") as f:
    f.write("\n".join(table) + "\n")
print("%d failed" % len(failures), failures)
sys.exit(1 if failures else 0)
