"""Where the start-up hook's context costs on a launch-bound step: the step with no hook, with an
empty global forward pre/post hook pair (PyTorch's slow module-call path, the floor any module
hook pays), with the whole context (module hooks in every iteration, and sampled: the default,
and its iterations between the sampled ones alone: the outermost calls marked through
Module.__call__), and the context's own functions under cProfile. Prints the
cost per module call of each, as ratios against the no-hook step of the same process.

    python3 bench/context_cost.py [cuda|cpu]
"""
import cProfile
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn as nn

DEV = torch.device(sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu"))
HERE = os.path.dirname(os.path.abspath(__file__))


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def timed(step, reps=30):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(100) for m in (nn.Linear(64, 64), nn.ReLU())]).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(8, 64, device=DEV)
    calls = 1 + len(model)  # module calls a step

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    sys.path.insert(0, HERE)
    from gpu_torch import load_hook
    hook = load_hook()
    os.environ["VRAMTRACE_TORCH_MODULES"] = "every"
    ctx_every = hook._Context(torch, str)
    ctx_every.set_enabled(False)
    os.environ["VRAMTRACE_TORCH_MODULES"] = "sampled"
    ctx = hook._Context(torch, str)
    ctx.set_enabled(False)
    # The iterations between the sampled ones alone: the outermost calls marked through
    # Module.__call__ (traced_call), every inner call straight through it, no module hooks.
    ctx_outer = hook._Context(torch, str)
    ctx_outer.set_enabled(False)
    ctx_outer.full = False
    ctx_outer.trace_modules = lambda full: None  # never sampled

    from torch.nn.modules import module as nn_module

    def empty_hooks(on, handles=[]):
        for h in handles:
            h.remove()
        handles.clear()
        if on:
            handles.append(nn_module.register_module_forward_pre_hook(lambda m, a: None))
            handles.append(nn_module.register_module_forward_hook(lambda m, a, o: None, always_call=True))

    for _ in range(20):
        step()
    rows = []
    for rnd in range(3):
        base = timed(step)
        empty_hooks(True)
        empty = timed(step)
        empty_hooks(False)
        ctx_every.set_enabled(True)
        every = timed(step)
        ctx_every.set_enabled(False)
        ctx.set_enabled(True)
        full = timed(step)
        ctx.set_enabled(False)
        ctx_outer.set_enabled(True)
        outer = timed(step)
        ctx_outer.set_enabled(False)
        rows.append((base, empty, every, full, outer))
    base, empty, every, full, outer = (statistics.median(r[i] for r in rows) for i in range(5))
    print(f"device {DEV} torch {torch.__version__} module calls a step {calls}")
    print(f"| step | ms | x no hook | added per module call |")
    print(f"|---|---|---|---|")
    for name, t in (("no hook", base), ("empty global hooks", empty),
                    ("context, module hooks every iteration", every),
                    ("context, module hooks sampled (default)", full),
                    ("context, outermost calls only (between the sampled iterations)", outer)):
        print(f"| {name} | {t * 1e3:.3f} | x{t / base:.4f} | {(t - base) / calls * 1e9:.0f} ns |")
    ctx_every.set_enabled(True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        step()
    sync()
    prof.disable()
    ctx_every.set_enabled(False)
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
