#!/usr/bin/env python3
"""Runs the GPU scenarios under vramtrace and checks the reports' figures (see test.sh).

Each check compares a figure from report.json with the value the test program is written to
produce: tests/programs/expected.json, which the stand-in tests read too. Prints one line per check and a markdown
table to OUT/gpu-results.md; exits 1 if any check failed.
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time


def gpu_name():
    """The GPU the reports must name: the one nvidia-smi names (cuDeviceGetName's words)."""
    return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                          capture_output=True, text=True).stdout.strip()


MiB = 1 << 20
results = []  # (scenario, check, expected, got, ok)


def check(scenario, what, expected, got, ok=None):
    if ok is None:
        ok = expected == got
    results.append((scenario, what, expected, got, ok))
    print(f"{'PASS' if ok else 'FAIL'}  {scenario:28s} {what:44s} expected {expected}  got {got}",
          flush=True)


def run(cmd, env=None, cwd=None, timeout=600):
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.time()
    p = subprocess.run(cmd, env=e, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0


def load(path):
    with open(path) as f:
        return json.load(f)


EXPECTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "programs",
                        "expected.json")
SIZE_UNITS = {"B": 0, "KiB": 10, "MiB": 20, "GiB": 30}


def normalize(want):
    """expected.json's "13 MiB" as bytes; arrays element by element."""
    if isinstance(want, list):
        return [normalize(w) for w in want]
    if isinstance(want, str):
        parts = want.split(" ")
        if len(parts) == 2 and parts[0].isdigit() and parts[1] in SIZE_UNITS:
            return int(parts[0]) << SIZE_UNITS[parts[1]]
    return want


def collect(at, path):
    """The values at a JSON pointer's segments, '*' standing for every element of an array."""
    if not path:
        return [at]
    head, rest = path[0], path[1:]
    if head == "*":
        return [v for e in at for v in collect(e, rest)] if isinstance(at, list) else []
    if isinstance(at, list):
        return collect(at[int(head)], rest) if head.isdigit() and int(head) < len(at) else []
    return collect(at[head], rest) if isinstance(at, dict) and head in at else []


def expect(scenario, report, program, standin=False):
    """One check per figure expected.json gives for `program` (its stand-in-only ones too with
    `standin`)."""
    with open(EXPECTED) as f:
        e = json.load(f)[program]
    figures = dict(e["report"])
    if standin:
        figures.update(e.get("standin", {}))
    for key, want in figures.items():
        got = collect(report, key.split("/")[1:])
        if "*" in key:
            check(scenario, key, sorted(normalize(want)), sorted(got))
        elif isinstance(want, dict):
            g = got[0] if got else None
            check(scenario, key, f"{want['starts']}...{want['ends']}", g,
                  isinstance(g, str) and g.startswith(want["starts"]) and g.endswith(want["ends"]))
        else:
            check(scenario, key, normalize(want), got[0] if got else None)


def contract_validator():
    """report/report.schema.json's validator, or None without the jsonschema module."""
    try:
        import jsonschema
    except ImportError:
        print("jsonschema is not installed: reports are not validated against "
              "report/report.schema.json", flush=True)
        return None
    with open(os.path.join(os.path.dirname(EXPECTED), "..", "..", "report",
                           "report.schema.json")) as f:
        return jsonschema.Draft202012Validator(json.load(f))


def api(dev, name, key="calls"):
    return dev.get("apis", {}).get(name, {}).get(key, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--torch-script", required=True)
    ap.add_argument("--torch-peak-script", help="tests/gpu/torch_peak.py (stacks checks)")
    a = ap.parse_args()
    # Absolute: the preload-only cases run the programs from a folder of their own.
    a.build = os.path.abspath(a.build)
    vt = os.path.join(a.build, "bin", "vramtrace")
    lib = os.path.join(a.build, "lib", "libvramtrace.so")
    out = a.out
    validator = contract_validator()

    def vrun(name, argv, env=None, timeout=600, options=()):
        d = os.path.join(out, name)
        subprocess.run(["rm", "-rf", d])
        p, secs = run([vt, "run", *options, "-o", d, "--"] + argv, env=env, timeout=timeout)
        rep = os.path.join(d, "report.json")
        r = load(rep) if os.path.exists(rep) else None
        if r is not None and validator is not None:
            errors = [f"{e.json_path}: {e.message[:200]}" for e in validator.iter_errors(r)]
            check(name, "report.json conforms to report.schema.json", [], errors[:5])
        with open(os.path.join(out, name + ".log"), "w") as f:
            f.write(p.stdout + "\n---stderr---\n" + p.stderr)
        return p, r, d

    for kind in ("static", "shared"):
        b = lambda prog: os.path.join(a.bin, f"{prog}-{kind}")
        s = f"basic ({kind} cudart)"
        p, r, d = vrun(f"basic-{kind}", [b("basic")])
        check(s, "exit code", 0, p.returncode)
        check(s, "program output unchanged", "basic done", p.stdout.strip())
        if r:
            dev = r["devices"][0]
            expect(s, r, "basic")
            name = gpu_name()
            check(s, "device name", name, dev["name"], dev["name"] == name)
            check(s, "stand_in flag", False, r["run"]["stand_in"])
        else:
            check(s, "report written", True, False)

        # --launches=off: the same memory figures; launches unknown, not 0.
        s = f"basic --launches=off ({kind} cudart)"
        p, r, d = vrun(f"basic-nolaunch-{kind}", [b("basic")], options=("--launches=off",))
        check(s, "exit code / output", (0, "basic done"), (p.returncode, p.stdout.strip()))
        if r:
            dev = r["devices"][0]
            pr = r["processes"][0]
            check(s, "peak / final live / allocations", (13 * MiB, 1 * MiB, 4),
                  (dev["peak"]["bytes"], dev["final_live_bytes"], api(dev, "cuMemAlloc")))
            check(s, "launches recorded: false, no count, no last kernel",
                  ({"recorded": False}, {"recorded": False}, False),
                  (pr["devices"][0]["launches"], {"recorded": pr["launches"]["recorded"]},
                   "last_kernel" in dev["peak"]))
            check(s, "summary says launches not recorded", True,
                  "kernel launches not recorded" in p.stdout + p.stderr)
        else:
            check(s, "report written", True, False)

        s = f"basic ({kind} cudart)"
        p, r, d = vrun(f"basic-exit3-{kind}", [b("basic"), "3"])
        check(s, "exit code passed through", 3, p.returncode)

        # LD_PRELOAD alone, then vramtrace report.
        d = os.path.join(out, f"preload-{kind}")
        subprocess.run(["rm", "-rf", d])
        os.makedirs(d)
        p, _ = run([b("basic")], env={"LD_PRELOAD": lib}, cwd=d)
        traces = glob.glob(os.path.join(d, "*.vtrace"))
        s2 = f"LD_PRELOAD ({kind} cudart)"
        check(s2, "stdout unchanged, nothing on stderr", ("basic done", ""),
              (p.stdout.strip(), p.stderr.strip()))
        check(s2, "one trace file", 1, len(traces))
        rp, _ = run([vt, "report", d, "-o", d])
        if os.path.exists(os.path.join(d, "report.json")):
            r = load(os.path.join(d, "report.json"))
            check(s2, "peak bytes via vramtrace report", 13 * MiB, r["devices"][0]["peak"]["bytes"])

        s = f"oom ({kind} cudart)"
        request_mib = 200000  # more than an H200 has
        p, r, d = vrun(f"oom-{kind}", [b("oom"), str(request_mib)])
        check(s, "exit code", 0, p.returncode)
        if r and r["oom"]:
            o = r["oom"][0]
            expect(s, r, "oom")
            check(s, "OOM requested bytes", request_mib * MiB, o["requested_bytes"])
            check(s, "free bytes at OOM (cuMemGetInfo)", "> 0", o.get("free_bytes", 0),
                  o.get("free_bytes", 0) > 0)
            check(s, "device total at OOM", r["devices"][0]["total_bytes"], o.get("total_bytes"))
        else:
            check(s, "OOM recorded", True, False)

        s = f"apis ({kind} cudart)"
        p, r, d = vrun(f"apis-{kind}", [b("apis")])
        check(s, "exit code", 0, p.returncode)
        vals = dict(l.split("=") for l in p.stdout.split() if "=" in l)
        if r and vals:
            dev = r["devices"][0]
            pitch, vmm = int(vals["pitch_bytes"]), int(vals["vmm_bytes"])
            expect(s, r, "apis")
            check(s, "cuMemAllocPitch bytes", pitch, api(dev, "cuMemAllocPitch", "bytes"))
            check(s, "cuMemCreate bytes", vmm, api(dev, "cuMemCreate", "bytes"))
            check(s, "peak bytes", 3 * MiB + max(MiB, 2 * MiB, pitch, vmm), dev["peak"]["bytes"])
            pools = r["processes"][0]["devices"][0].get("pools", [])
            check(s, "async pool reserved seen", ">= 1 MiB",
                  max([pl["peak_reserved_bytes"] for pl in pools] or [0]),
                  max([pl["peak_reserved_bytes"] for pl in pools] or [0]) >= MiB)

        for how, want in (("abort", -signal.SIGABRT), ("kill", -signal.SIGKILL), ("exit7", 7)):
            s = f"crash {how} ({kind} cudart)"
            p, r, d = vrun(f"crash-{how}-{kind}", [b("crash"), how])
            check(s, "exit status passed through", want, p.returncode)
            if r:
                expect(s, r, "crash")
            else:
                check(s, "report written", True, False)

        # An OOM, then at once a death: the OOM and the 48 MiB before it must be in the report,
        # under the launcher (the collector reads the buffers it shares with the process) and in
        # LD_PRELOAD file mode with a flush period of 60 s (only the flush at the failure).
        deaths = (("abort", -signal.SIGABRT), ("segv", -signal.SIGSEGV),
                  ("throw", -signal.SIGABRT), ("exit", 3), ("kill", -signal.SIGKILL))
        for how, want in deaths:
            s = f"oom, {how} ({kind} cudart)"
            argv = [b("oom_death"), how, str(request_mib)]
            p, r, d = vrun(f"oom-death-{how}-{kind}", argv)
            check(s, "exit status passed through", want, p.returncode)
            d = os.path.join(out, f"preload-oom-death-{how}-{kind}")
            subprocess.run(["rm", "-rf", d])
            os.makedirs(d)
            pp, _ = run(argv, env={"LD_PRELOAD": lib, "VRAMTRACE_FLUSH_MS": "60000"}, cwd=d)
            check(s + " preload", "exit status unchanged", want, pp.returncode)
            run([vt, "report", d, "-o", d])
            rp = os.path.join(d, "report.json")
            for mode, rep in (("run", r), ("preload", load(rp) if os.path.exists(rp) else None)):
                if rep and rep["oom"] and rep["devices"]:
                    expect(f"{s} {mode}", rep, "oom_death")
                    check(f"{s} {mode}", "OOM request", request_mib * MiB,
                          rep["oom"][0]["requested_bytes"])
                else:
                    check(f"{s} {mode}", "OOM and device in the report", True, False)

        s = f"threads ({kind} cudart)"
        p, r, d = vrun(f"threads-{kind}", [b("threads")])
        if r:
            expect(s, r, "threads")

        s = f"fork ({kind} cudart)"
        p, r, d = vrun(f"forker-{kind}", [b("forker")], timeout=120)
        check(s, "exit code, child ran", (0, True), (p.returncode, "child ran" in p.stdout))
        check(s, "one trace (parent only)", 1, len(glob.glob(os.path.join(d, "*.vtrace"))))
        if r:
            expect(s, r, "forker")

    # Process trees on one GPU: forked workers, ranks from a launcher, two processes sharing.
    s = "forked workers"
    p, r, d = vrun("workers", [os.path.join(a.bin, "workers-shared")])
    if r:
        expect(s, r, "workers")
    s = "4 ranks (launcher)"
    launcher = os.path.join(os.path.dirname(a.torch_script), "..", "programs", "launch_ranks.sh")
    p, r, d = vrun("ranks4", ["sh", launcher, "4", os.path.join(a.bin, "rank_alloc-static")])
    if r and "ranks" in r:
        expect(s, r, "rank_alloc")
    else:
        check(s, "ranks recognised", True, False)
    s = "two processes share the GPU"
    flag = os.path.join(out, "share.flag")
    if os.path.exists(flag):
        os.remove(flag)
    sg = os.path.join(a.bin, "share_gpu-static")
    p, r, d = vrun("share", ["sh", "-c", f"{sg} hold 40960 {flag} 8 & {sg} oom 20480 {flag}; wait"])
    check(s, "exit code", 0, p.returncode)
    if r and len(r["processes"]) == 2:
        by = {pp["pid"]: pp for pp in r["processes"]}
        peaks = sorted(pp["devices"][0]["peak"]["bytes"] for pp in r["processes"])
        check(s, "each process's own peak (20 GiB, 40 GiB)", [20480 * MiB, 40960 * MiB], peaks)
        check(s, "one OOM", 1, len(r["oom"]))
        if r["oom"]:
            o = r["oom"][0]
            check(s, "OOM: this process held 20 GiB", 20480 * MiB, o["live_bytes"])
            other = o.get("held_by_others_bytes", 0)
            check(s, "OOM: held by others >= the other's 40 GiB", f">= {40960 * MiB}", other,
                  other >= 40960 * MiB)
        check(s, "device peak: both at once", 61440 * MiB, r["devices"][0]["peak"]["bytes"])
    else:
        check(s, "two processes in one report", True, False)
    # Stacks: the site of a known allocation, by function, file and line, and its library.
    for kind in ("static", "shared"):
        exe = os.path.join(a.bin, f"callchain-{kind}")
        if not os.path.exists(exe):
            continue
        s = f"stacks: callchain ({kind} cudart)"
        p, r, d = vrun(f"callchain-{kind}", [exe])
        check(s, "exit code", 0, p.returncode)
        if not r:
            check(s, "report written", True, False)
            continue
        peak = r["devices"][0]["peak"]
        expect(s, r, "callchain")
        check(s, "library of the peak's allocations", f"callchain-{kind}",
              [x["library"] for x in peak.get("by_library", [])],
              [x["library"] for x in peak.get("by_library", [])] == [f"callchain-{kind}"])

    if a.torch_peak_script:
        s = "stacks: torch peak line"
        with open(a.torch_peak_script) as f:
            marked = [i + 1 for i, line in enumerate(f) if "# VT-PEAK" in line][0]
        p, r, d = vrun("torch-peak", [sys.executable, a.torch_peak_script],
                       env={"PYTHONUNBUFFERED": "1"})
        check(s, "exit code", 0, p.returncode)
        if r:
            pdev = r["processes"][0]["devices"][0]
            largest = (pdev["peak"].get("largest") or [{}])[0]
            want = f"make_activations ({os.path.abspath(a.torch_peak_script)}:{marked})"
            check(s, "largest allocation at the peak: its site", want, largest.get("site"),
                  largest.get("site") == want)
            check(s, "largest allocation at the peak: >= 4 GiB", ">= 4 GiB", largest.get("bytes"),
                  (largest.get("bytes") or 0) >= 4 << 30)
            check(s, "by_site at the peak names the marked line first", want,
                  (pdev["peak"].get("by_site") or [{}])[0].get("site"),
                  (pdev["peak"].get("by_site") or [{}])[0].get("site") == want)
            lib = largest.get("library", "")
            check(s, "owning library of PyTorch's segment", "libc10_cuda.so / libtorch_cuda.so",
                  lib, lib.startswith("libc10_cuda") or lib.startswith("libtorch_cuda"))
            libs = [x["library"] for x in pdev["peak"].get("by_library", [])]
            check(s, "peak.by_library led by PyTorch's CUDA library", "libc10_cuda / libtorch_cuda",
                  libs, bool(libs) and (libs[0].startswith("libc10_cuda") or
                                        libs[0].startswith("libtorch_cuda")))
        else:
            check(s, "report written", True, False)
            print(p.stderr[-3000:])

    # One process on two devices, where the machine has two.
    n_gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")
    if n_gpus >= 2:
        s = "one process, two devices"
        p, r, d = vrun("two-devices", [os.path.join(a.bin, "two_devices-static")])
        check(s, "exit code", 0, p.returncode)
        if r:
            expect(s, r, "two_devices")

    s = "no CUDA"
    p, r, d = vrun("nocuda", ["sh", "-c", "echo hi; exit 4"])
    check(s, "exit code / output", (4, "hi"), (p.returncode, p.stdout.strip()))
    check(s, "no trace written", 0, len(glob.glob(os.path.join(d, "*.vtrace"))))

    for conf in ("", "expandable_segments:True", "backend:cudaMallocAsync"):
        s = f"torch {conf or 'default'}"
        stats_path = os.path.join(out, f"torch-{conf.replace(':', '_') or 'default'}.json")
        env = {"VT_TORCH_STATS": stats_path, "PYTHONUNBUFFERED": "1"}
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        name = "torch-" + (conf.replace(":", "_") or "default")
        p, r, d = vrun(name, [sys.executable, a.torch_script], env=env)
        check(s, "exit code", 0, p.returncode)
        if conf == "" and r:
            # The same training loop with --launches=off: the same device peak (the loop is
            # deterministic), launches not recorded.
            p2, r2, _ = vrun(name + "-nolaunch", [sys.executable, a.torch_script], env=env,
                             options=("--launches=off",))
            check(s + " --launches=off", "exit code / device peak as with launches",
                  (0, r["devices"][0]["peak"]["bytes"]),
                  (p2.returncode, r2["devices"][0]["peak"]["bytes"] if r2 else None))
            check(s + " --launches=off", "launches recorded", False,
                  r2["processes"][0]["launches"]["recorded"] if r2 else None)
        if not (r and os.path.exists(stats_path)):
            check(s, "report and torch stats written", True, False)
            print(p.stderr[-3000:])
            continue
        t = load(stats_path)
        dev = r["devices"][0]
        pdev = r["processes"][0]["devices"][0]
        reserved = pdev["reserved"]["peak_bytes"]
        check(s, "vramtrace reserved peak >= torch max_memory_reserved",
              f">= {t['max_memory_reserved']}", reserved, reserved >= t["max_memory_reserved"])
        check(s, "vramtrace in-use peak >= torch max_memory_allocated",
              f">= {t['max_memory_allocated']}", dev["peak"]["bytes"],
              dev["peak"]["bytes"] >= t["max_memory_allocated"])
        outside = reserved - t["max_memory_reserved"]
        apis = ", ".join(f"{k}={v['bytes']}" for k, v in pdev["apis"].items() if v.get("bytes"))
        check(s, "outside PyTorch's allocator (listed)", "reported",
              f"{outside} B; by api: {apis}", True)

    with open(os.path.join(out, "gpu-results.md"), "w") as f:
        f.write("| scenario | check | expected | got | |\n|---|---|---|---|---|\n")
        for sc, what, exp, got, ok in results:
            f.write(f"| {sc} | {what} | {exp} | {got} | {'PASS' if ok else 'FAIL'} |\n")
    failed = sum(1 for x in results if not x[4])
    print(f"\n{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
