#!/usr/bin/env python3
"""torch.compile under vramtrace: the compiled training loop (tests/gpu/real/compiled_train.py)
in default mode and in mode="reduce-overhead" (CUDA graphs), run alone and under `vramtrace run`;
the losses, the number of graphs and of graph breaks must be the same, and the report must name
the line that moved the batch to the GPU. Run by scripts/gpu/session.sh compile."""
import argparse, json, os, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("--build", required=True)
ap.add_argument("--scripts", required=True)
ap.add_argument("--out", required=True)
args = ap.parse_args()
VT = os.path.join(args.build, "bin", "vramtrace")
script = os.path.abspath(os.path.join(args.scripts, "compiled_train.py"))
failed = 0


def check(name, ok, detail):
    global failed
    failed += not ok
    print(("PASS" if ok else "FAIL"), name, "|", detail, flush=True)


def figures(text):
    for line in text.splitlines():
        if line.startswith("compiled-figures "):
            return json.loads(line.split(" ", 1)[1])
    return None


for mode in ("default", "reduce-overhead"):
    env = dict(os.environ, MODE=mode, PYTHONUNBUFFERED="1")
    alone = subprocess.run([sys.executable, script], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
    out = os.path.join(args.out, "compiled-" + mode)
    subprocess.run(["rm", "-rf", out])
    traced = subprocess.run([VT, "run", "-o", out, "--", sys.executable, script], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    a, b = figures(alone.stdout), figures(traced.stdout)
    if a is None or b is None:
        print(alone.stdout[-2000:], traced.stdout[-2000:])
    check("%s: both ran" % mode, alone.returncode == 0 and traced.returncode == 0 and a and b,
          "exit %d / %d" % (alone.returncode, traced.returncode))
    if not (a and b):
        continue
    check("%s: same losses" % mode, a["losses"] == b["losses"], "%s / %s" % (a["losses"][-2:], b["losses"][-2:]))
    check("%s: same graphs and graph breaks" % mode,
          (a["graph_breaks"], a["unique_graphs"]) == (b["graph_breaks"], b["unique_graphs"]),
          "breaks %d / %d, graphs %d / %d" % (a["graph_breaks"], b["graph_breaks"],
                                              a["unique_graphs"], b["unique_graphs"]))
    r = json.load(open(os.path.join(out, "report.json")))
    texts = json.dumps(r)
    line = next(i for i, l in enumerate(open(script), 1) if "# the batch's line" in l)
    check("%s: the batch's line named" % mode, "moved to the GPU at %s:%d" % (script, line) in texts,
          texts[texts.find("moved to the GPU at"):][:200] if "moved to the GPU at" in texts
          else "no 'moved to the GPU' site")
    cats = {}
    for p in r["processes"]:
        for d in p["devices"]:
            cats = d.get("categories", {}).get("at_exit", cats)
    print("   categories at exit:", {k: v for k, v in cats.items() if v})
sys.exit(1 if failed else 0)
