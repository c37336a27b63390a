"""Where the start-up hook's context costs on the launch-bound step (bench/gpu_torch.py's), part by
part: each part of _Context switched on and off inside one process in interleaved blocks (as
bench/gpu_ab.py does; VT_AB_STEPS steps a block, 10), the rest off, between the traced
iterations (module hooks off); then the whole context, PyTorch's allocator trace as the hook
sets it and with every action recorded, and the Python calls one step makes with the context on
and off (cProfile's counts).

    python3 bench/context_parts.py [PAIRS]"""
import cProfile
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(100) for m in (nn.Linear(64, 64), nn.ReLU())]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(8, 64, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    sys.path.insert(0, HERE)
    from gpu_torch import load_hook
    hook = load_hook()
    ctx = hook._Context(torch, str)
    for _ in range(5):  # past the traced iterations
        step()
    torch.cuda.synchronize()
    ctx.trace_modules = lambda full: None  # never sampled again: the steady state alone
    ctx.set_enabled(False)
    Tensor = torch.Tensor
    optim = ctx.optim
    handles = []

    def backward(on):
        torch.autograd.backward = ctx.traced_backward if on else ctx.backward

    def moves(on):
        for name, f in (ctx.traced_moves if on else ctx.moves).items():
            setattr(Tensor, name, f)

    def optimizer(on):
        for h in handles:
            h.remove()
        handles.clear()
        if on:
            handles.extend([optim.register_optimizer_step_pre_hook(ctx.step_pre),
                            optim.register_optimizer_step_post_hook(ctx.step_post)])

    def calls(on):
        ctx.enabled = on
        if hasattr(ctx, "outermost_calls"):
            ctx.outermost_calls(on)
        else:
            ctx.module_class.__call__ = ctx.traced_call if on else ctx.call

    def inner_calls(on):
        # The wrapper alone, as every call inside an outermost one pays it: every call takes
        # the short path (inside an outermost call), nothing marked.
        ctx.inside = on
        ctx.module_class.__call__ = ctx.traced_call if on else ctx.call

    from gpu_torch import hook_trace
    record = hook_trace(1000000)
    every_action = {k: v for k, v in record.keywords.items() if k != "skip_actions"}

    def trace(settings):
        def turn(on):
            if on:
                record.func(context=None, **settings)
            else:
                torch.cuda.memory._record_memory_history(enabled=None)
        return turn

    parts = {"backward": backward, "moves": moves, "optimizer steps": optimizer,
             "outermost calls": calls, "inner calls' wrapper": inner_calls,
             "all": ctx.set_enabled,
             "allocator trace (hook's: %s)" % ",".join(record.keywords.get("skip_actions", [])
                                                      or ["every action"]): trace(record.keywords),
             "allocator trace, every action": trace(every_action)}

    def block(n=int(os.environ.get("VT_AB_STEPS", "10"))):
        step()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    print("| part switched | step off (ms) | ratio on/off (median of %d pairs) | added per step |" % pairs)
    print("|---|---|---|---|")
    for name, turn in parts.items():
        ratios, offs = [], []
        for i in range(pairs):
            got = {}
            for state in ((True, False) if i % 2 == 0 else (False, True)):
                turn(state)
                got[state] = block()
            ratios.append(got[True] / got[False])
            offs.append(got[False])
        turn(False)
        r, off = statistics.median(ratios), statistics.median(offs)
        print(f"| {name} | {off * 1e3:.3f} | x{r:.4f} | {(r - 1) * off * 1e6:+.0f} us |", flush=True)

    def profile(on):
        ctx.set_enabled(on)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        prof.disable()
        ctx.set_enabled(False)
        st = pstats.Stats(prof)
        return {f"{k[0].split('/')[-1]}:{k[1]}({k[2]})": (v[1], v[2]) for k, v in st.stats.items()}
    off, on = profile(False), profile(True)
    print("\nPython calls in 10 steps that differ with the context on (calls on, off; own time on, s):")
    rows = []
    for k in set(on) | set(off):
        n_on, t_on = on.get(k, (0, 0.0))
        n_off = off.get(k, (0, 0.0))[0]
        if n_on != n_off:
            rows.append((t_on, k, n_on, n_off))
    for t_on, k, n_on, n_off in sorted(rows, reverse=True)[:25]:
        print(f"  {k}: {n_on} vs {n_off}, {t_on:.4f} s")


if __name__ == "__main__":
    main()
