#!/usr/bin/env python3
"""Runs the overhead benchmarks (see bench/gpu.sh): each workload without vramtrace, under
`vramtrace run`, and (for PyTorch) with torch.cuda.memory._record_memory_history, interleaved,
REPEATS times each; prints the median of each variant and its ratio to the uninstrumented run,
and writes OUT/bench-gpu.md."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys


def run(cmd, env):
    e = dict(os.environ)
    e.update(env)
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        print("FAILED:", " ".join(cmd), p.stderr[-2000:], file=sys.stderr)
        return None
    line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
    res = json.loads(line)
    res["_stderr"] = p.stderr
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated words: run the workloads whose name has one")
    ap.add_argument("--variants", default="", help="comma-separated variants to run (default: all)")
    ap.add_argument("--pin", default="", help="CPU list for taskset: every run on the same cores")
    a = ap.parse_args()
    vt = os.path.join(a.build, "bin", "vramtrace")
    here = os.path.dirname(os.path.abspath(__file__))
    torch_bench = os.path.join(here, "gpu_torch.py")
    native = os.path.join(a.bin, "gpu_native")
    workloads = [
        ("GPU-bound transformer step (8 layers, 1024 wide)", [sys.executable, torch_bench, "gpu_bound"], {}, True),
        ("launch-bound step (200 tiny layers, ~1000 launches)", [sys.executable, torch_bench, "launch_bound"], {}, True),
        ("PyTorch alloc+free, backend:cudaMallocAsync", [sys.executable, torch_bench, "alloc_bound"],
         {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, False),
        ("PyTorch alloc+free, default caching allocator", [sys.executable, torch_bench, "alloc_bound"],
         {}, True),
        ("native cudaMallocAsync+cudaFreeAsync pair", [native, "async"], {}, False),
        ("native empty kernel launch", [native, "launch"], {}, False),
    ]
    if a.only:
        workloads = [w for w in workloads if any(word in w[0] for word in a.only.split(","))]
    floor_lib = os.path.join(a.build, "lib", "libvt_cupti_floor.so")
    selftime_lib = os.path.join(a.build, "lib", "libvramtrace_selftime.so")
    rows = []
    for name, cmd, env, is_torch in workloads:
        variants = {"none": [], "cupti floor": [], "vramtrace": [], "vramtrace --stacks=native": [],
                    "vramtrace --stacks=none": []}
        # Memory only: the launch callbacks never enabled (--launches=off).
        variants["vramtrace --launches=off"] = []
        if not is_torch:
            # The same library timing its own callbacks (TSC), printed per callback id and site.
            variants["vramtrace selftime --stacks=none"] = []
        if is_torch:
            # vramtrace's default turns PyTorch's allocator trace on; --torch=off shows its cost.
            variants["vramtrace --torch=off"] = []
            # Launches recorded all run long (the default stops them once the hook has marked
            # two iterations).
            variants["vramtrace --launches=on"] = []
            # The lightest: memory callbacks only, no allocator trace (segments, not blocks).
            variants["vramtrace --launches=off --torch=off"] = []
            # Without vramtrace as the NVTX tool (libraries such as cuBLAS range their calls
            # through NVTX when a tool is attached): what recording ranges costs.
            variants["vramtrace no-nvtx"] = []
            variants["vramtrace --torch=stacks"] = []
            variants["torch _record_memory_history"] = []
            # The default, timing its own driver callbacks: our part of the step, per callback id.
            variants["vramtrace selftime"] = []
        if a.variants:
            keep = set(a.variants.split(","))
            variants = {k: v for k, v in variants.items() if k == "none" or k in keep}
        if not os.path.exists(floor_lib):
            variants.pop("cupti floor", None)
        if not os.path.exists(selftime_lib):
            variants.pop("vramtrace selftime --stacks=none", None)
            variants.pop("vramtrace selftime", None)
        selftime = {}
        steps = None
        launches_per_step = None
        for rep in range(a.repeats):
            for v in variants:
                c = list(cmd)
                e = dict(env)
                run_dir = os.path.join(a.out, "bench-run")
                if v.startswith("vramtrace selftime"):
                    c = [vt, "run", "--force", "-o", run_dir, "--lib", selftime_lib] + v.split()[2:] + ["--"] + c
                elif v == "vramtrace no-nvtx":
                    c = [vt, "run", "--force", "-o", run_dir, "--"] + c
                    e["NVTX_INJECTION64_PATH"] = "/nonexistent/no-nvtx-tool.so"
                elif v.startswith("vramtrace"):
                    c = [vt, "run", "--force", "-o", run_dir] + v.split()[1:] + ["--"] + c
                if v == "cupti floor":
                    e["CUDA_INJECTION64_PATH"] = floor_lib
                if v.startswith("torch"):
                    c = c + ["--record-history"]
                if a.pin and shutil.which("taskset"):
                    c = ["taskset", "-c", a.pin] + c
                res = run(c, e)
                if res:
                    val = [x for k, x in res.items() if k.startswith("seconds_per") or k == "ns_per_op"][0]
                    steps = res.get("steps", steps)
                    variants[v].append(val * (1e9 if "ns_per_op" not in res else 1))
                    # Each run as it ends, so that a call cut off by its time limit keeps them.
                    print(f"{name:55s}   run {rep + 1}/{a.repeats} {v:34s} {variants[v][-1]:14.1f} ns", flush=True)
                    for line in res.get("_stderr", "").splitlines():
                        if line.startswith("vramtrace-selftime"):
                            f = dict(kv.split("=") for kv in line.split()[1:])
                            selftime.setdefault((f["cbid"], f["site"]), []).append(
                                (float(f["ns_per_call"]), int(f.get("calls", 0))))
                    if v == "vramtrace" and "steps" in res:
                        try:
                            with open(os.path.join(run_dir, "report.json")) as rf:
                                rep_json = json.load(rf)
                            count = sum(d.get("launches", {}).get("count", 0)
                                        for pr in rep_json["processes"] for d in pr["devices"])
                            launches_per_step = count / res["steps"]
                            for pr in rep_json["processes"]:
                                ph = pr.get("phases", {})
                                print(f"{name:55s}   NVTX ranges recorded: {ph.get('total', 0)}; by name: "
                                      f"{[(x['name'], x['count']) for x in ph.get('by_name', [])[:6]]}; "
                                      f"iterations: {pr.get('iterations')}", flush=True)
                        except (OSError, KeyError, IndexError, ValueError):
                            pass
        med = {v: statistics.median(x) if x else float("nan") for v, x in variants.items()}
        base = med["none"]
        for v, m in med.items():
            # Ratios of runs made next to each other (same repeat), then their median: drift of
            # the machine between repeats cancels.
            paired = [x / b for x, b in zip(variants[v], variants["none"]) if b]
            pr = statistics.median(paired) if paired else float("nan")
            rows.append((name, v, m, m / base if base else float("nan"), m - base, pr, variants[v]))
            print(f"{name:55s} {v:34s} {m:14.1f} ns  x{m / base:.4f}  (+{m - base:.1f} ns)  paired x{pr:.4f}  runs={[round(x, 1) for x in variants[v]]}", flush=True)
        per_step_total = 0.0
        for (cbid, site), xs in sorted(selftime.items()):
            ns = [x for x, _ in xs]
            calls = statistics.median([c for _, c in xs])
            line = f"{name:55s}   selftime cbid={cbid} {site:5s} median {statistics.median(ns):8.1f} ns per call, {calls:.0f} calls"
            if steps:
                # Our time in this callback per step of the workload (the warm-up included in steps).
                per_step = statistics.median(ns) * calls / steps
                per_step_total += per_step
                line += f", {per_step / 1000:.1f} us per step"
            print(f"{line}  runs={[round(x, 1) for x in ns]}", flush=True)
        if steps and selftime:
            print(f"{name:55s}   selftime: our driver callbacks take {per_step_total / 1000:.1f} us per step", flush=True)
        if launches_per_step:
            print(f"{name:55s}   launches per step (vramtrace's count / steps run): {launches_per_step:.1f}", flush=True)
    with open(os.path.join(a.out, "bench-gpu.md"), "w") as f:
        f.write("| workload | variant | median ns per step/op | ratio to none | added ns | median paired ratio |\n|---|---|---|---|---|---|\n")
        for name, v, m, ratio, added, pr, runs in rows:
            f.write(f"| {name} | {v} | {m:.1f} | {ratio:.4f} | {added:+.1f} | {pr:.4f} |\n")


if __name__ == "__main__":
    main()
