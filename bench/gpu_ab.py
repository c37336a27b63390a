#!/usr/bin/env python3
"""The launch-bound step with one thing switched on and off inside each process (because the
step's spread from one process to the next on the GPU machine, 10 to 16 ms, is larger than the
3 % to be measured). Runs bench/gpu_torch.py launch_bound_ab REPEATS times for each of:

  null       nothing switched: the method's own spread (its ratio should be 1)
  floor      CUPTI's floor: vramtrace's driver callbacks with an empty callback (libvt_cupti_floor.so)
  vramtrace  vramtrace's driver callbacks, its own work included (`vramtrace run --torch=off`
             with libvramtrace_selftime.so, whose callbacks can be switched; its timer, about
             35 ns a callback, is included)
  vramtrace-nolaunch   the same with --launches=off (the memory callbacks only)
  launches   the launch callbacks alone (what the default stops in a PyTorch process)
  default    everything the default does in a PyTorch process, switched together: the memory
             callbacks, the allocator trace as set, the hook's context (launches stopped after
             its second step, as the hook stops them)
  default-launches-on   the same with --launches=on (launches recorded all along)
  context-other   the context of another version of the hook (VT_AB_HOOK=FILE)
  lines      over the context and the trace, the trace's frames between the phases
  history    PyTorch's allocator trace as `--torch=auto` sets it, without vramtrace
  history-every-action   the same with free_requested recorded too (as the hook did before)
  history-20k, history-state   the same with a ring of 20,000 entries, or enabled="state"

and prints the median step with it on and off, the median paired ratio (adjacent blocks of one
process, then the median over processes) and the cost per launch, from LAUNCHES per step.
Needs `cmake --build build --target vt_bench_libs`.
  bench/gpu_ab.py --build build [--repeats 3] [--pin 4-11] [--only null,floor,vramtrace,history,...]"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

LAUNCHES_PER_STEP = 801  # vramtrace's count on this step (bench/gpu.py prints it)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", default="gpu-out/ab")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pin", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--workload", default="launch_bound_ab", choices=["launch_bound_ab", "alloc_cached_ab", "gpu_bound_ab"],
                    help="alloc_cached_ab: 2,000 tensors a step from PyTorch's cache (cost per tensor)")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    bench = [sys.executable, os.path.join(here, "gpu_torch.py"), a.workload]
    lib = os.path.abspath(os.path.join(a.build, "lib"))
    floor = os.path.join(lib, "libvt_cupti_floor.so")
    selftime = os.path.join(lib, "libvramtrace_selftime.so")
    vt = os.path.join(a.build, "bin", "vramtrace")
    run_dir = os.path.join(a.out, "run")
    cases = {
        "null": (bench, {"VT_AB": "null"}),
        "floor": (bench, {"CUDA_INJECTION64_PATH": floor, "VT_AB_LIB": floor,
                          "VT_AB_SYMBOL": "vt_cupti_floor_enable"}),
        "vramtrace": ([vt, "run", "-o", run_dir, "--torch=off", "--lib", selftime, "--"] + bench,
                      {"VT_AB_LIB": selftime, "VT_AB_SYMBOL": "vramtrace_bench_enable_callbacks"}),
        "vramtrace-nolaunch": ([vt, "run", "-o", run_dir, "--torch=off", "--launches=off", "--lib", selftime,
                                "--"] + bench,
                               {"VT_AB_LIB": selftime, "VT_AB_SYMBOL": "vramtrace_bench_enable_callbacks"}),
        # The launch callbacks alone: what the default saves by stopping them in a PyTorch
        # process once the hook marks its iterations.
        "launches": ([vt, "run", "-o", run_dir, "--torch=off", "--lib", selftime, "--"] + bench,
                     {"VT_AB_LIB": selftime, "VT_AB_SYMBOL": "vramtrace_bench_enable_launch_callbacks"}),
        # Everything the default does in a PyTorch process, switched together (gpu_torch.py's
        # VT_AB=default): the default's cost against the same process without vramtrace's parts.
        "default": ([vt, "run", "-o", run_dir, "--torch=off", "--lib", selftime, "--"] + bench,
                    {"VT_AB": "default", "VT_AB_LIB": selftime}),
        # --torch=sampled between its windows: the same without PyTorch's allocator trace.
        "default-sampled": ([vt, "run", "-o", run_dir, "--torch=off", "--lib", selftime, "--"] +
                            bench, {"VT_AB": "default", "VT_AB_LIB": selftime,
                                    "VT_AB_SAMPLED": "1"}),
        # The same with --launches=on: launches recorded all along (the default before).
        "default-launches-on": ([vt, "run", "-o", run_dir, "--torch=off", "--launches=on", "--lib",
                                 selftime, "--"] + bench, {"VT_AB": "default", "VT_AB_LIB": selftime}),
        "history": (bench, {"VT_AB": "history"}),
        # The trace as the hook set it before it skipped free_requested (every action).
        "history-every-action": (bench, {"VT_AB": "history", "VT_AB_SKIP": "none"}),
        # The start-up hook's context (module, autograd and optimizer hooks: the categories).
        "context": (bench, {"VT_AB": "context"}),
        # The context of another version of the hook (VT_AB_HOOK=FILE in the environment of
        # bench/gpu_ab.py), measured beside this one's in the same session.
        "context-other": (bench, {"VT_AB": "context", "VT_AB_HOOK": os.environ.get("VT_AB_HOOK", "")}),
        # Over the context and the trace: the trace's frames between the phases.
        "lines": (bench, {"VT_AB": "lines"}),
        # The same with module hooks in every iteration (VRAMTRACE_TORCH_MODULES=every).
        "context_every": (bench, {"VT_AB": "context", "VRAMTRACE_TORCH_MODULES": "every"}),
        # PyTorch's own tool as its docs start it (context and stacks "all"): the peer.
        "peer": (bench, {"VT_AB": "history", "VT_AB_CONTEXT": "all", "VT_AB_STACKS": "all",
                         "VT_AB_MAX_ENTRIES": "100000"}),
        # Cheaper settings the default could take, if they keep what the report needs:
        "history-20k": (bench, {"VT_AB": "history", "VT_AB_MAX_ENTRIES": "20000"}),
        "history-state": (bench, {"VT_AB": "history", "VT_AB_ENABLED": "state"}),
    }
    if a.only:
        cases = {k: v for k, v in cases.items() if k in a.only.split(",")}
    got = {k: [] for k in cases}
    for rep in range(a.repeats):
        for name, (cmd, env) in cases.items():
            e = dict(os.environ)
            e.pop("VT_AB_HOOK", None)  # only for the arm context-other
            e.update(env)
            c = (["taskset", "-c", a.pin] if a.pin and shutil.which("taskset") else []) + cmd
            # The run folder is the benchmark's own: each arm starts from an empty one (vramtrace
            # run replaces no earlier output it is not asked to).
            shutil.rmtree(run_dir, ignore_errors=True)
            p = subprocess.run(c, env=e, capture_output=True, text=True, timeout=300)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if p.returncode != 0 or not lines:
                print(f"FAILED {name}: rc={p.returncode} {p.stderr[-1500:]}", flush=True)
                continue
            r = json.loads(lines[-1])
            got[name].append(r)
            print(f"run {rep + 1}/{a.repeats} {name:10s} on {r['seconds_per_step_on'] * 1e3:8.3f} ms  "
                  f"off {r['seconds_per_step_off'] * 1e3:8.3f} ms  paired x{r['paired_ratio']:.4f}  "
                  f"means x{r.get('mean_ratio', float('nan')):.4f}  "
                  f"instructions x{r.get('instructions_ratio') or float('nan'):.4f}  "
                  f"allocations per step {r['allocations_per_step']:.0f}", flush=True)
    unit = "per launch" if a.workload == "launch_bound_ab" else "per alloc+free"
    per_step = {"launch_bound_ab": LAUNCHES_PER_STEP, "alloc_cached_ab": 2000}.get(a.workload, 1)
    print(f"\n{a.workload}:")
    print(f"| switched | step off (ms) | step on (ms) | paired ratio (median of processes) | per process | spread | added per step | {unit} | ratio of the means (every step: what a run pays) | instructions a step (where counted) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in got.items():
        if not rs:
            continue
        on = statistics.median(r["seconds_per_step_on"] for r in rs)
        off = statistics.median(r["seconds_per_step_off"] for r in rs)
        ratios = [r["paired_ratio"] for r in rs]
        pr = statistics.median(ratios)
        added = (pr - 1) * off
        spread = max(ratios) - min(ratios)
        means = ", ".join("x%.4f" % r.get("mean_ratio", float("nan")) for r in rs)
        counted = ", ".join("x%.4f" % r["instructions_ratio"] for r in rs
                            if r.get("instructions_ratio")) or "-"
        print(f"| {name} | {off * 1e3:.3f} | {on * 1e3:.3f} | x{pr:.4f} | {', '.join(f'x{x:.4f}' for x in ratios)} "
              f"| ±{spread / 2:.4f} | {added * 1e6:+.0f} us | {added * 1e9 / per_step:+.0f} ns | {means} | {counted} |",
              flush=True)


if __name__ == "__main__":
    main()
