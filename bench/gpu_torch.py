"""GPU workloads for bench/gpu.sh. Prints one JSON line: the median time of a step.

  bench/gpu_torch.py gpu_bound|launch_bound|launch_bound_ab|alloc_cached_ab|alloc_bound [--record-history]

gpu_bound:    an 8-layer transformer encoder, 1024 wide, training steps (GPU-bound).
launch_bound: 100 tiny Linear(64,64)+ReLU layers, forward+backward+SGD: about 1,000 kernel
              launches a step (launch-bound).
alloc_bound:  torch.empty(1 MiB) and its free, 20,000 times a step, meant to run with
              PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (every tensor a cuMemAllocAsync).
launch_bound_ab: the launch-bound step, in blocks of steps with something switched on and off
              inside the one process (bench/gpu_ab.py): VT_AB=history switches
              PyTorch's allocator trace as vramtrace's --torch=auto sets it (VT_AB_ENABLED,
              VT_AB_MAX_ENTRIES change its settings); VT_AB=default switches everything
              vramtrace's default does in a PyTorch process (VT_AB_LIB: the self-timing
              library); VT_AB_LIB=PATH and
              VT_AB_SYMBOL=NAME call NAME(1) / NAME(0) in that loaded library (CUPTI's floor,
              vramtrace's benchmark build). Prints the median step on and off, and the median
              of the ratios of adjacent blocks.
alloc_cached_ab: torch.empty(1 MiB) and its free 2,000 times a step from PyTorch's cache, with the
              same switches as launch_bound_ab: the switched thing's cost per tensor.
--record-history turns on torch.cuda.memory._record_memory_history (PyTorch's own peer tool).
"""
import ctypes
import os
import json
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from instructions import counter  # noqa: E402

COUNTER = counter()  # this thread's instructions, where the machine's counters can be had


def timed(step, warmup, reps, every=None, instructions=None):
    """The median step time; `every`, when given, gets each step's time (for the mean);
    `instructions`, a list, each step's instructions up to the synchronize (not its wait,
    which spins), where the counters can be had."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        n0 = COUNTER.read() if instructions is not None else 0
        t0 = time.perf_counter()
        step()
        if instructions is not None:
            instructions.append(COUNTER.read() - n0)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if every is not None:
        every.extend(times)
    return statistics.median(times)


def launch_bound_step(dev):
    """100 tiny Linear(64,64)+ReLU layers, forward+backward+SGD: about 800 launches a step."""
    model = nn.Sequential(*[m for _ in range(100) for m in (nn.Linear(64, 64), nn.ReLU())]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(8, 64, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()
    return step


def load_hook():
    """vramtrace's start-up hook loaded from its source without the rest of it running (no
    VRAMTRACE_TORCH_DIR: it attaches nothing), for its _Context (from _vramtrace_context.py
    beside it, or, in a version of one file, from the file itself). VT_AB_HOOK: another
    version's sitecustomize.py (an A/B of two versions in one session)."""
    import importlib
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.abspath(os.environ.get("VT_AB_HOOK") or os.path.join(
        here, "..", "python", "vramtrace", "_hook", "sitecustomize.py"))
    sys.path.insert(0, os.path.dirname(path))
    spec = importlib.util.spec_from_file_location("vt_hook", path)
    hook = importlib.util.module_from_spec(spec)
    os.environ.pop("VRAMTRACE_TORCH_DIR", None)
    spec.loader.exec_module(hook)
    if not hasattr(hook, "_Context"):
        hook._Context = importlib.import_module("_vramtrace_context")._Context
    return hook


def hook_trace(max_entries):
    """PyTorch's allocator trace with the start-up hook's settings (_vramtrace_lines'
    allocator_trace): a function of the trace's `context`."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "python", "vramtrace", "_hook"))
    from _vramtrace_lines import allocator_trace
    return allocator_trace(torch.cuda.memory._record_memory_history, max_entries)


def switch():
    """The thing launch_bound_ab turns on and off, as a function of one bool."""
    if os.environ.get("VT_AB") == "null":
        return lambda on: None  # the method's own spread: both blocks run the same
    if os.environ.get("VT_AB") == "context":
        # vramtrace's start-up hook's context (module, autograd and optimizer hooks);
        # switched by registering and removing.
        ctx = load_hook()._Context(torch, str)
        return ctx.set_enabled
    if os.environ.get("VT_AB") == "lines":
        # The hook's context on throughout, over the allocator trace as --torch=auto sets it;
        # switched: the trace's frames between the phases (lines_between_phases). Its guard
        # may switch them off for good (too costly for this step): said on stderr.
        hook = load_hook()
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=1000000)
        ctx = hook._Context(torch, str)
        ctx.lines.lines_between_phases(1000000)
        trace = ctx.trace
        saved = {"history": trace.history, "on": True}

        def lines(on):
            if not on and saved["on"] and trace.history is None and saved["history"] is not None:
                sys.stderr.write("lines between the phases cut by the hook's guard\n")
                saved["history"] = None
            saved["on"] = on
            if on and saved["history"] is not None:
                trace.history = saved["history"]
                ctx.lines.frames(True)
            elif not on:
                ctx.lines.frames(False)
                trace.history = None
        return lines
    if os.environ.get("VT_AB") == "default":
        # What vramtrace's default does in a PyTorch process, all switched together: its driver
        # callbacks (VT_AB_LIB: the self-timing library, under `vramtrace run --torch=off`, whose
        # callbacks can be switched), PyTorch's allocator trace as the hook sets it, and the
        # hook's context (categories, modules, phases, iterations, the carried-state check).
        # The context stops the launch callbacks after its second step, as the hook does,
        # unless VRAMTRACE_LAUNCHES=on (`--launches=on`: the arm default-launches-on). Not
        # switched: the trace's frames between the phases (measured apart: the `lines` arm).
        # VT_AB_SAMPLED=1: without the trace, as --torch=sampled runs between its windows (the
        # windows' own cost, every 50 steps, is bench/trace_gate_probe.py's).
        sampled = os.environ.get("VT_AB_SAMPLED") == "1"
        lib = ctypes.CDLL(os.environ["VT_AB_LIB"])
        callbacks = lib.vramtrace_bench_enable_callbacks
        callbacks.argtypes = [ctypes.c_int]
        ctx = load_hook()._Context(torch, str)

        def default(on):
            if callbacks(1 if on else 0) <= 0:
                raise SystemExit("vramtrace_bench_enable_callbacks: no callback switched")
            ctx.set_enabled(on)
            if sampled:
                return
            if on:
                hook_trace(1000000)(context=None)
            else:
                torch.cuda.memory._record_memory_history(enabled=None)
        return default
    if os.environ.get("VT_AB") == "history":
        # As --torch=auto sets it (the hook's own settings), unless VT_AB_ENABLED (all, state),
        # VT_AB_MAX_ENTRIES, VT_AB_CONTEXT, VT_AB_STACKS or VT_AB_SKIP ("none": every action
        # recorded, free_requested too) say.
        record = hook_trace(int(os.environ.get("VT_AB_MAX_ENTRIES", "1000000")))
        settings = dict(record.keywords, context=os.environ.get("VT_AB_CONTEXT") or None)
        settings["enabled"] = os.environ.get("VT_AB_ENABLED", "all")
        settings["stacks"] = os.environ.get("VT_AB_STACKS", "python")
        if os.environ.get("VT_AB_SKIP") == "none":
            settings.pop("skip_actions", None)
        sys.stderr.write("history settings: %s\n" % settings)

        def history(on):
            if on:
                record.func(**settings)
            else:
                torch.cuda.memory._record_memory_history(enabled=None)
        return history
    fn = getattr(ctypes.CDLL(os.environ["VT_AB_LIB"]), os.environ["VT_AB_SYMBOL"])
    fn.argtypes = [ctypes.c_int]

    def lib(on):
        if fn(1 if on else 0) <= 0:
            raise SystemExit(f"{os.environ['VT_AB_SYMBOL']}: no callback switched")
    return lib


def ab_blocks(step, turn, pairs, steps_per_block, means=None, counted=None):
    """Median step time with `turn(True)` and with `turn(False)`, in adjacent blocks whose order
    alternates (on-off, off-on, ...), so that drift during the run falls on both. `means`, when
    given, gets the ratio of the mean step times on and off over every timed step: what a run
    pays, with its rare costly steps (the hook's sampled iterations), which medians leave out.
    `counted`, when given and the counters can be had, gets the ratio of the median
    instructions a step on and off (the CPU work added, without the machine's drift)."""
    every = {True: [], False: []}
    instructions = {True: [], False: []} if COUNTER is not None else {True: None, False: None}

    def block(state):
        # one step after the switch, untimed
        return timed(step, 1, steps_per_block, every[state], instructions[state])
    on, off, ratios = [], [], []
    for i in range(pairs):
        got = {}
        for state in ((True, False) if i % 2 == 0 else (False, True)):
            turn(state)
            got[state] = block(state)
        on.append(got[True])
        off.append(got[False])
        ratios.append(got[True] / got[False])
    turn(True)
    if means is not None:
        means.append(statistics.fmean(every[True]) / statistics.fmean(every[False]))
    if counted is not None and COUNTER is not None:
        counted.append(statistics.median(instructions[True]) / statistics.median(instructions[False]))
    return statistics.median(on), statistics.median(off), statistics.median(ratios)


def main():
    mode = sys.argv[1]
    steps = None
    if "--record-history" in sys.argv:
        torch.cuda.memory._record_memory_history(max_entries=100000)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    if mode in ("gpu_bound", "gpu_bound_ab"):
        layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
        model = nn.TransformerEncoder(layer, 8).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(16, 512, 1024, device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            model(x).float().pow(2).mean().backward()
            opt.step()
        if mode == "gpu_bound_ab":
            turn = switch()
            timed(step, 5, 5)
            on, off, ratio = ab_blocks(step, turn, int(os.environ.get("VT_AB_PAIRS", "10")), 5)
            print(json.dumps({"mode": mode, "switched": os.environ.get("VT_AB"),
                              "seconds_per_step_on": on, "seconds_per_step_off": off,
                              "paired_ratio": ratio, "allocations_per_step": 0}))
            return
        sec = timed(step, 5, 30)
        per = "step"
    elif mode == "launch_bound":
        step = launch_bound_step(dev)
        sec = timed(step, 50, 400)
        per = "step"
        steps = 450  # with the warm-up: what the launch count of the whole run is divided by
    elif mode == "launch_bound_ab":
        step = launch_bound_step(dev)
        turn = switch()
        for _ in range(50):
            step()
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
        for _ in range(10):
            step()
        allocs = (torch.cuda.memory_stats().get("allocation.all.allocated", 0) - before) / 10
        means, counted = [], []
        on, off, ratio = ab_blocks(step, turn, int(os.environ.get("VT_AB_PAIRS", "30")),
                                   int(os.environ.get("VT_AB_STEPS", "10")), means, counted)
        print(json.dumps({"mode": mode, "switched": os.environ.get("VT_AB") or os.environ["VT_AB_SYMBOL"],
                          "seconds_per_step_on": on, "seconds_per_step_off": off,
                          "paired_ratio": ratio, "mean_ratio": means[0],
                          "instructions_ratio": counted[0] if counted else None,
                          "allocations_per_step": allocs}))
        return
    elif mode == "alloc_cached_ab":
        # PyTorch's caching allocator serving every tensor from its cache (no driver call): what
        # the switched thing costs per tensor alloc+free, in the same A/B blocks.
        turn = switch()

        def step():
            for _ in range(2000):
                t = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
                del t
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        on, off, ratio = ab_blocks(step, turn, int(os.environ.get("VT_AB_PAIRS", "30")), 10)
        print(json.dumps({"mode": mode, "switched": os.environ.get("VT_AB") or os.environ["VT_AB_SYMBOL"],
                          "seconds_per_step_on": on, "seconds_per_step_off": off,
                          "paired_ratio": ratio, "allocations_per_step": 2000}))
        return
    elif mode == "alloc_bound":
        def step():
            for _ in range(20000):
                t = torch.empty(1 << 20, dtype=torch.uint8, device=dev)
                del t
        sec = timed(step, 2, 10)
        sec /= 20000
        per = "alloc+free"
    else:
        raise SystemExit(f"unknown mode {mode}")
    out = {"mode": mode, "seconds_per_" + per.replace("+", "_"): sec, "per": per}
    if steps:
        out["steps"] = steps
    print(json.dumps(out))


if __name__ == "__main__":
    main()
