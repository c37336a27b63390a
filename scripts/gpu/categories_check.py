#!/usr/bin/env python3
"""The categories, names, phases, diagnosis and remedies on real PyTorch jobs, each compared
with what PyTorch itself reports (and an OOM caught in a forward, the loop going on). Run by scripts/gpu/categories.sh on a machine with a GPU;
prints a table of checks and writes every report under --out. --only runs the cases named
(those defined as functions in CASES) and nothing else."""
import argparse, json, os, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("--build", required=True)
ap.add_argument("--scripts", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--only", default="", help="comma-separated cases to run alone (of: cuda-graph, long-run)")
args = ap.parse_args()
VT = os.path.join(args.build, "bin", "vramtrace")
results = []

def check(name, ok, detail):
    results.append((name, bool(ok), detail))
    print(("PASS" if ok else "FAIL"), name, "|", detail, flush=True)

def run(tag, script, **env):
    out = os.path.join(args.out, tag)
    e = dict(os.environ, PYTHONUNBUFFERED="1", **{k: str(v) for k, v in env.items()})
    subprocess.run(["rm", "-rf", out])
    p = subprocess.run([VT, "run", "-o", out, "--", sys.executable, os.path.join(args.scripts, script)],
                       env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400)
    figs = [json.loads(l.split(" ", 1)[1]) for l in p.stdout.splitlines()
            if l.startswith("torch-figures ") or l.startswith("xla-figures ")]
    with open(os.path.join(args.out, tag + ".log"), "w") as f:
        f.write(p.stdout)
    try:
        r = json.load(open(os.path.join(out, "report.json")))
    except Exception as ex:
        print(p.stdout[-3000:])
        raise
    print("----", tag, "exit", p.returncode)
    print("\n".join(l for l in p.stdout.splitlines() if l.startswith("vramtrace:"))[:3000])
    return p.returncode, r, figs

def gib(b): return "%.3f GiB" % (b / 2**30)

def cats(r, where="at_peak", pid_dev=None):
    for pr in r["processes"]:
        for d in pr["devices"]:
            if "categories" in d:
                return d["categories"][where], d, pr
    return {}, {}, {}

def finish():
    print("\n%d/%d checks passed" % (sum(ok for _, ok, _ in results), len(results)))
    sys.exit(0 if all(ok for _, ok, _ in results) else 1)

def case_cuda_graph():
    """CUDA graphs (their own pool, a graph_pool_handle() pool) and a MemPool: the private_pool
    category at exit equals the total_size of the snapshot's segments whose segment_pool_id is
    not (0, 0), read by the script just before exit; per pool too, graphs' pools said so."""
    rc, r, figs = run("cuda-graph", "cuda_graph.py")
    tf = figs[-1] if figs else {}
    ex, d, pr = cats(r, "at_exit")
    check("graph: private_pool at exit = the snapshot's private segments",
          rc == 0 and tf.get("private_bytes", 0) > 0 and ex.get("private_pool") == tf.get("private_bytes"),
          "exit %s: %s vs %s (%d replays; torch reserved %s)" % (rc, ex.get("private_pool"), tf.get("private_bytes"),
          tf.get("replays", 0), tf.get("reserved")))
    live = next((x.get("final_live_bytes") for x in r["devices"] if x.get("index") == d.get("index")), None)
    check("graph: the categories at exit add up to the device's figure", live is not None and sum(ex.values()) == live,
          "%s vs %s: %s" % (sum(ex.values()), live, {k: gib(v) for k, v in ex.items() if v}))
    listed = {"%d,%d" % tuple(p["pool_id"]): p for p in d.get("categories", {}).get("private_pools", [])}
    check("graph: each pool's bytes as the snapshot's", {k: p["bytes"] for k, p in listed.items()} == tf.get("pools"),
          "%s vs %s" % ({k: p["bytes"] for k, p in listed.items()}, tf.get("pools")))
    graphs = set(tf.get("graph_pools", []))
    said = {k for k, p in listed.items() if p["cuda_graph"]}
    check("graph: the CUDA graphs' pools are said to be, the MemPool's not", said == graphs and tf.get("mempool") not in said,
          "said %s, graphs %s, mempool %s" % (sorted(said), sorted(graphs), tf.get("mempool")))

def case_long_run():
    """A run longer than PyTorch's trace ring (VRAMTRACE_TORCH_MAX_ENTRIES=200, a few hundred
    entries of a ResNet-50 step): what was live before the ring's window comes from the
    allocator's state at exit and the hook's names, so parameters, gradients and optimizer
    state at exit are the same as with the whole trace, and the categories add up."""
    runs = {}
    for tag, env in (("long-run-full", {}), ("long-run-ring", {"VRAMTRACE_TORCH_MAX_ENTRIES": 200})):
        runs[tag] = run(tag, "resnet_oom.py", BATCH=32, LIMIT_GIB=0, STEPS=3, **env)
    (rc1, r1, f1), (rc2, r2, f2) = runs["long-run-full"], runs["long-run-ring"]
    ex1, d1, _ = cats(r1, "at_exit")
    ex2, d2, _ = cats(r2, "at_exit")
    for k in ("parameters", "gradients", "optimizer_state"):
        check("long run: %s at exit as with the whole trace" % k, rc2 == 0 and ex1.get(k) and ex1.get(k) == ex2.get(k),
              "%s vs %s" % (ex2.get(k), ex1.get(k)))
    live = next((x.get("final_live_bytes") for x in r2["devices"] if x.get("index") == d2.get("index")), None)
    check("long run: the categories at exit add up", live is not None and sum(ex2.values()) == live,
          "%s vs %s: %s" % (sum(ex2.values()), live, {k: gib(v) for k, v in ex2.items() if v}))
    check("long run: the wrapped ring is said", any("was full" in p for p in r2["run"].get("problems", [])),
          str(r2["run"].get("problems", []))[:300])

CASES = {"cuda-graph": case_cuda_graph, "long-run": case_long_run}
if args.only:
    for name in args.only.split(","):
        CASES[name]()
    finish()

# 1. ResNet-50 at batch 256 limited to 16 GiB: dies of OOM.
rc, r, figs = run("resnet-oom", "resnet_oom.py", BATCH=256, LIMIT_GIB=16, STEPS=2)
dg = r.get("diagnosis", {})
fatal = [o for o in r["oom"] if o.get("fatal")]
check("oom: verdict oom, one fatal OOM", dg.get("verdict") == "oom" and len(fatal) == 1,
      "verdict %s, fatal %d, recovered %s" % (dg.get("verdict"), len(fatal), dg.get("recovered_ooms")))
lim = dg.get("limit", {})
check("oom: limit is the 16 GiB fraction", lim.get("kind") == "per_process_fraction" and abs(lim.get("bytes", 0) - 16 * 2**30) < 2**20,
      "%s %s" % (lim.get("kind"), gib(lim.get("bytes", 0))))
check("oom: headroom not green", dg.get("headroom_bytes", 1) < 2**30, "headroom %s" % gib(dg.get("headroom_bytes", 0)))
if fatal:
    f = fatal[0]
    check("oom: phase, module, iteration, python line", f.get("phase") in ("forward", "backward") and f.get("module") and f.get("python_site", "").endswith(".py:%s" % f.get("python_site", ":").rsplit(":", 1)[-1]),
          "phase %s module %s iteration %s line %s" % (f.get("phase"), f.get("module"), f.get("iteration"), f.get("python_site")))
    check("oom: first finding is the limit", f["findings"] and f["findings"][0]["kind"] == "limit_reached",
          [x["kind"] for x in f["findings"]])
    c = f.get("categories", {})
    check("oom: categories add up to what the process held", sum(c.values()) == f["live_bytes"],
          "%s vs %s: %s" % (sum(c.values()), f["live_bytes"], {k: gib(v) for k, v in c.items() if v}))
check("oom: no leak suspects for what was live when it died", not r["leaks"] and r.get("live_at_death"),
      "leaks %d, live_at_death %d" % (len(r["leaks"]), len(r.get("live_at_death", []))))
check("oom: no growth over a first step", not r["growth"], "growth %d" % len(r["growth"]))
# Every PyTorch block live when it died has the user's line: the targets (2 KiB from
# torch.randint in a segment made before them) from the allocator trace's frames between the
# phases, the batch from its own segment, the parameters from model.cuda().
blocks = [g for g in r.get("live_at_death", []) if not g.get("library")]
lineless = [(g["site"], g["bytes"]) for g in blocks if ".py:" not in g["site"]]
check("oom: every PyTorch block live at death has a Python line", blocks and not lineless,
      "%d groups, without a line: %s" % (len(blocks), lineless[:4]))
targets = [g["site"] for g in blocks if g["site"].startswith("outside forward") and g["bytes"] == 256 * 8]
check("oom: the targets' line is resnet_oom.py:27", targets and all(t.endswith("resnet_oom.py:27") for t in targets),
      targets)
print("remedies:", [(m["kind"], gib(m["saves_bytes"])) for m in dg.get("remedies", [])])

# 1b. The same model while another process holds 127 GiB of the GPU.
rc, r, figs = run("resnet-hog", "resnet_oom.py", BATCH=256, LIMIT_GIB=0, STEPS=2, HOG_GIB=127)
dg = r.get("diagnosis", {})
fatal = [o for o in r["oom"] if o.get("fatal")]
check("hog: one fatal OOM, the rest survived", len(fatal) == 1 and dg.get("recovered_ooms", 0) == len(r["oom"]) - 1,
      "fatal %d, recovered %s of %d" % (len(fatal), dg.get("recovered_ooms"), len(r["oom"])))
check("hog: limit is what other processes left", dg.get("limit", {}).get("kind") == "other_processes", dg.get("limit"))
if fatal:
    check("hog: first finding is the other process", fatal[0]["findings"][0]["kind"] == "held_by_others",
          [x["kind"] for x in fatal[0]["findings"]])
check("hog: no growth over a first step", not r["growth"], "growth %d" % len(r["growth"]))
print("hog remedies:", [(m["kind"], gib(m["saves_bytes"])) for m in dg.get("remedies", [])])

# 2. The same model unlimited at batch 256: the peak's categories against PyTorch, and the
#    predictions for mixed precision and half the batch against measured runs.
rc, r, figs = run("resnet-256", "resnet_oom.py", BATCH=256, LIMIT_GIB=0, STEPS=3)
c, d, pr = cats(r)
tf = figs[-1] if figs else {}
check("resnet: parameter bytes = model.parameters()", c.get("parameters", 0) >= tf.get("params", -1) and c.get("parameters", 0) - tf.get("params", 0) < 2**20,
      "%d vs %d (buffers %d B)" % (c.get("parameters", 0), tf.get("params", 0), c.get("parameters", 0) - tf.get("params", 0)))
check("resnet: optimizer state = optimizer.state", c.get("optimizer_state") == tf.get("opt_state"),
      "%s vs %s" % (c.get("optimizer_state"), tf.get("opt_state")))
m = d["categories"]["at_peak_moment"]
check("resnet: categories add up to the device figure at their moment", sum(c.values()) == m["bytes"] and m["bytes"] <= d["peak"]["bytes"],
      "%d vs %d (%s; device peak %d)" % (sum(c.values()), m["bytes"], m["what"], d["peak"]["bytes"]))
print("resnet categories at peak:", {k: gib(v) for k, v in c.items() if v})
print("resnet iterations:", pr.get("iterations"))
check("resnet: iterations from optimizer.step()", pr.get("iterations", {}).get("source") == "optimizer.step()" and pr["iterations"]["count"] == 3, pr.get("iterations"))
rem = {m["kind"]: m for m in r.get("diagnosis", {}).get("remedies", [])}
print("remedies:", [(k, gib(m["saves_bytes"]), gib(m["predicted_peak_bytes"])) for k, m in rem.items()])
print("by top module:", [(m["module"], gib(m["bytes"])) for m in d["peak"].get("by_top_module", [])[:6]])
print("tensors:", [(t["name"], t["kind"], t["shape"], t["dtype"]) for t in d["peak"].get("tensors", [])[:5]])
peak256 = d["peak"]["bytes"]
for kind, env in (("mixed_precision", dict(AMP=1, BATCH=256)), ("smaller_batch", dict(BATCH=128))):
    rc2, r2, f2 = run("resnet-" + kind, "resnet_oom.py", LIMIT_GIB=0, STEPS=3, **env)
    measured = r2["devices"][0]["peak"]["bytes"]
    pred = rem.get(kind, {}).get("predicted_peak_bytes", 0)
    check("resnet: predicted peak with %s within 20%% of measured" % kind, pred and abs(pred - measured) <= 0.2 * measured,
          "predicted %s, measured %s (torch max_reserved %s)" % (gib(pred), gib(measured), gib(f2[-1]["max_reserved"]) if f2 else "?"))

# 3. GPT-2 from a config, AdamW.
rc, r, figs = run("gpt2", "gpt2_train.py", STEPS=4)
c, d, pr = cats(r)
tf = figs[-1] if figs else {}
ex = cats(r, "at_exit")[0]
check("gpt2: parameters at exit = model.parameters()", ex.get("parameters", 0) - tf.get("params", 0) in range(0, 2**22),
      "%s vs %s" % (ex.get("parameters"), tf.get("params")))
check("gpt2: gradients at exit = .grad", ex.get("gradients") == tf.get("grads"), "%s vs %s" % (ex.get("gradients"), tf.get("grads")))
check("gpt2: optimizer state at exit = optimizer.state", ex.get("optimizer_state") == tf.get("opt_state"), "%s vs %s" % (ex.get("optimizer_state"), tf.get("opt_state")))
print("gpt2 at peak:", {k: gib(v) for k, v in c.items() if v})
print("gpt2 by module:", [(m["module"], gib(m["bytes"])) for m in d["peak"].get("by_module", [])[:6]])

# 4. An evaluation loop that keeps each batch's graph.
rc, r, figs = run("eval-graph", "eval_keeps_graph.py")
tf = figs[-1] if figs else {}
g = r["growth"][0] if r["growth"] else {}
rate = sum(x["bytes_per_iteration"] for x in r["growth"])
check("eval: growth per batch (all sites) matches PyTorch within 10%", g and abs(rate - tf["growth_per_batch"]) <= 0.1 * tf["growth_per_batch"],
      "%s vs %s over %d sites, first %s" % (rate, tf.get("growth_per_batch"), len(r["growth"]), g.get("site")))
rem = [m["kind"] for m in r.get("diagnosis", {}).get("remedies", [])]
check("eval: no_grad is a remedy", "no_grad" in rem, rem)

# 6. An OOM caught in a forward, the loop going on at a smaller batch, the model dropped.
rc, r, figs = run("oom-caught", "oom_caught.py")
tf = figs[-1] if figs else {}
log = open(os.path.join(args.out, "oom-caught.log")).read()
check("caught: the program ran as without vramtrace", rc == 0 and tf.get("ooms") == 1 and "always_call" not in log,
      "exit %s, ooms %s, hook warning %s" % (rc, tf.get("ooms"), "always_call" in log))
c, d, pr = cats(r)
kinds = [p["phase"] for p in d.get("phases", [])]
# The model's three (the one that raised, two retries) and the loss module's two.
check("caught: the retries are forwards of their own", kinds.count("forward") == 5 and kinds.count("backward") == 2,
      kinds)
o = r["oom"][0] if r["oom"] else {}
check("caught: one OOM, in the forward, not fatal", len(r["oom"]) == 1 and o.get("phase") == "forward" and not o.get("fatal"),
      "ooms %d phase %s module %s fatal %s" % (len(r["oom"]), o.get("phase"), o.get("module"), o.get("fatal")))
ex = cats(r, "at_exit")[0]
check("caught: the dropped model's memory is gone at exit", ex.get("parameters") == 0 and ex.get("gradients") == 0 and ex.get("optimizer_state") == 0,
      "at exit %s; torch memory_allocated %s" % ({k: gib(v) for k, v in ex.items() if v}, tf.get("allocated_at_end")))

# 7. Failures the job survives: convolution plans whose workspace did not fit, skipped by PyTorch.
rc, r, figs = run("cudnn-workspace", "cudnn_workspace.py")
tf = figs[-1] if figs else {}
dg = r.get("diagnosis", {})
fatal = [o for o in r["oom"] if o.get("fatal")]
check("workspace: the job ended normally, no fatal OOM, verdict not oom",
      rc == 0 and not fatal and dg.get("verdict") != "oom",
      "exit %s, fatal %d, verdict %s" % (rc, len(fatal), dg.get("verdict")))
check("workspace: every failure PyTorch raised is counted as recovered",
      tf.get("num_ooms") is not None and dg.get("recovered_ooms", 0) == tf["num_ooms"] == len(r["oom"]),
      "recovered %s, oom entries %d, torch num_ooms %s (sizes %s)" % (dg.get("recovered_ooms"), len(r["oom"]),
      tf.get("num_ooms"), sorted({o.get("requested_bytes") for o in r["oom"]})[:6]))

# 8. Parameters, gradients and Adam's state alone exceed the limit: shard or offload.
rc, r, figs = run("model-state", "model_state_oom.py")
tf = figs[0] if figs else {}
dg = r.get("diagnosis", {})
fatal = [o for o in r["oom"] if o.get("fatal")]
check("state: one fatal OOM in the optimizer step", len(fatal) == 1 and fatal[0].get("phase") == "optimizer",
      "fatal %d phase %s module %s line %s" % (len(fatal), fatal[0].get("phase") if fatal else None,
      fatal[0].get("module") if fatal else None, fatal[0].get("python_site") if fatal else None))
rem = [m["kind"] for m in dg.get("remedies", [])]
check("state: the first remedy is to shard or offload, no smaller batch offered as a fix",
      rem[:1] == ["offload"] and "mixed_precision" not in rem[:1], rem)
if fatal:
    c = fatal[0].get("categories", {})
    check("state: parameters at the OOM = model.parameters()", c.get("parameters") == tf.get("params"),
          "%s vs %s" % (c.get("parameters"), tf.get("params")))

# 9. Fragmentation: the cap's memory was in PyTorch's cache, in holes smaller than the request.
rc, r, figs = run("fragment", "fragment_oom.py")
tf = figs[-1] if figs else {}
dg = r.get("diagnosis", {})
fatal = [o for o in r["oom"] if o.get("fatal")]
check("fragment: one fatal OOM, first finding fragmentation", len(fatal) == 1 and fatal[0]["findings"]
      and fatal[0]["findings"][0]["kind"] == "fragmentation",
      "fatal %d findings %s" % (len(fatal), [x["kind"] for x in fatal[0]["findings"]] if fatal else None))
rem = {m["kind"]: m for m in dg.get("remedies", [])}
check("fragment: expandable_segments offered, saving the cache's free bytes",
      "expandable_segments" in rem and abs(rem["expandable_segments"]["saves_bytes"] - tf.get("free_in_cache", 0)) <= 64 << 20,
      "saves %s vs PyTorch's reserved-allocated %s" % (gib(rem.get("expandable_segments", {}).get("saves_bytes", 0)),
      gib(tf.get("free_in_cache", 0))))

# 5. JAX: an OOM inside XLA's preallocated pool (the driver never fails).
rc, r, figs = run("jax-oom", "jax_oom.py")
xf = figs[-1] if figs else {}
dg = r.get("diagnosis", {})
fatal = [o for o in r["oom"] if o.get("fatal")]
check("jax: the pool's OOM is reported, fatal", len(fatal) == 1 and fatal[0].get("requested_bytes") == 8 << 30,
      "%d fatal, requested %s" % (len(fatal), fatal[0].get("requested_bytes") if fatal else None))
lim = dg.get("limit", {})
check("jax: the limit is XLA's pool = bytes_limit", lim.get("kind") == "xla_pool" and lim.get("bytes") == xf.get("bytes_limit"),
      "%s %s vs %s" % (lim.get("kind"), lim.get("bytes"), xf.get("bytes_limit")))
pool = [d.get("xla_pool") for pr in r["processes"] for d in pr["devices"] if d.get("xla_pool")]
check("jax: XLA's peak in use", pool and pool[0]["peak_in_use_bytes"] >= xf.get("bytes_in_use", -1),
      "%s vs last seen %s" % (pool[0]["peak_in_use_bytes"] if pool else None, xf.get("bytes_in_use")))

# 10. CUDA graphs and a MemPool: their private pools, segments whole.
case_cuda_graph()
case_long_run()

finish()
