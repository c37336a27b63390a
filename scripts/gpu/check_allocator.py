#!/usr/bin/env python3
"""The GPU checks of the allocator's view (called by test.sh after check.py): PyTorch
scripts that go out of memory from fragmentation and because another process holds the GPU,
and one that keeps tensors across iterations, each under vramtrace with its default options.
Each check compares a figure of report.json with what the script is written to produce. Prints
one line per check, appends a table to OUT/gpu-results.md; exits 1 if any check failed.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check as g  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20


def marked(path, tag):
    with open(path) as f:
        return [i + 1 for i, line in enumerate(f) if "# " + tag in line][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scripts", required=True, help="tests/gpu")
    a = ap.parse_args()
    vt = os.path.join(a.build, "bin", "vramtrace")
    py = sys.executable

    def vrun(name, argv, env=None, extra=()):
        d = os.path.join(a.out, name)
        g.subprocess.run(["rm", "-rf", d])
        p, secs = g.run([vt, "run", "-o", d, *extra, "--"] + argv,
                        env=dict(env or {}, PYTHONUNBUFFERED="1"), timeout=400)
        rep = os.path.join(d, "report.json")
        r = g.load(rep) if os.path.exists(rep) else None
        with open(os.path.join(a.out, name + ".log"), "w") as f:
            f.write(p.stdout + "\n---stderr---\n" + p.stderr)
        return p, r

    def findings(o):
        return [f["kind"] for f in o.get("findings", [])]

    # (a) fragmentation
    script = os.path.join(a.scripts, "torch_frag_oom.py")
    s = "torch: OOM from fragmentation"
    p, r = vrun("torch-frag", [py, script])
    g.check(s, "script hit its OOM (exit 3)", 3, p.returncode)
    if r:
        proc = r["processes"][0]
        g.check(s, "PyTorch allocator trace merged", True,
                proc.get("torch_allocator_trace", {}).get("merged"))
        ooms = r["oom"]
        g.check(s, "one OOM", 1, len(ooms))
        o = ooms[-1] if ooms else {}
        fr = o.get("fragmentation", {})
        g.check(s, "allocator request", 2 * GiB, o.get("allocator", {}).get("requested_bytes"))
        g.check(s, "free reserved >= 20 GiB", ">= 20 GiB", fr.get("free_bytes"),
                (fr.get("free_bytes") or 0) >= 20 * GiB)
        g.check(s, "largest free block = 1 GiB", GiB, fr.get("largest_free_block_bytes"))
        g.check(s, "free blocks >= 20", ">= 20", fr.get("free_blocks"),
                (fr.get("free_blocks") or 0) >= 20)
        g.check(s, "first finding", "fragmentation", (findings(o) or [None])[0])
        g.check(s, "suggests expandable_segments", True,
                "expandable_segments:True" in (o.get("findings") or [{}])[0].get("suggestion", ""))
        want = f"main ({os.path.abspath(script)}:{marked(script, 'VT-OOM')})"
        g.check(s, "OOM site is the marked line", want, o.get("site"))
    else:
        g.check(s, "report written", True, False)
    s = "torch: same, expandable_segments"
    p, r = vrun("torch-frag-expandable", [py, script],
                env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    g.check(s, "no OOM (exit 0)", 0, p.returncode)
    if r:
        pools = r["processes"][0]["devices"][0].get("allocator", {}).get("pools", [])
        g.check(s, "allocator view from mapped pieces", True,
                bool(pools) and pools[0]["peak_reserved_bytes"] >= 60 * GiB)

    # (b) growth across iterations
    script = os.path.join(a.scripts, "torch_leak.py")
    want = f"main ({os.path.abspath(script)}:{marked(script, 'VT-LEAK')})"
    for mode, source in (("kernels", "kernel"), ("nvtx", "NVTX range 'step'")):
        s = f"torch: tensors kept ({mode})"
        p, r = vrun(f"torch-leak-{mode}", [py, script] + (["nvtx"] if mode == "nvtx" else []),
                    extra=("--torch=stacks",))
        g.check(s, "exit code", 0, p.returncode)
        if not r:
            g.check(s, "report written", True, False)
            continue
        it = r["processes"][0]["iterations"]
        g.check(s, "iterations found", 20, it.get("count"))
        g.check(s, "iterations from", source, it.get("source"),
                str(it.get("source", "")).startswith(source))
        gr = (r.get("growth") or [{}])[0]
        g.check(s, "growing site is the marked line", want, gr.get("site"))
        g.check(s, "64 MiB per iteration", 64 * MiB, gr.get("bytes_per_iteration"))
        g.check(s, "over 20 iterations", 20, gr.get("iterations"))
        if mode == "nvtx":
            ph = r["processes"][0].get("phases", {})
            g.check(s, "NVTX ranges recorded", 20,
                    sum(x["count"] for x in ph.get("by_name", []) if x["name"] == "step"))

    # (c) another process holds the GPU
    script = os.path.join(a.scripts, "torch_other_process.py")
    s = "torch: OOM, GPU held by another"
    p, r = vrun("torch-other", [py, script])
    g.check(s, "script hit its OOM (exit 3)", 3, p.returncode)
    if r:
        g.check(s, "two processes traced", 2, len(r["processes"]))
        ooms = r["oom"]
        g.check(s, "one OOM", 1, len(ooms))
        o = ooms[-1] if ooms else {}
        held = [int(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("held_bytes ")]
        held = held[0] if held else None
        g.check(s, "held by others >= what the other process held", f">= {held}",
                o.get("held_by_others_bytes"),
                held is not None and (o.get("held_by_others_bytes") or 0) >= held)
        g.check(s, "first finding", "held_by_others", (findings(o) or [None])[0])
        g.check(s, "no fragmentation finding", False, "fragmentation" in findings(o))

    failed = [x for x in g.results if not x[4]]
    with open(os.path.join(a.out, "gpu-results.md"), "a") as f:
        for sc, what, exp, got, ok in g.results:
            f.write(f"| {sc} | {what} | {exp} | {got} | {'PASS' if ok else 'FAIL'} |\n")
    print(f"\nallocator checks: {len(g.results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
