"""What a pre-flight that will not fit spends its fake steps on, and what could make them fewer
or cheaper: one model built on the GPU and copied as shapes (ShapeCopy), then the steps the
pre-flight runs (_vramtrace_step.step_runs: the batch, its half, bf16 autocast, the repeated
blocks checkpointed), each timed; the step at its batch also with PyTorch's fake-tensor dispatch
cache off, and with one iteration instead of two. Then whether the second iteration's forward,
loss and backward ask for what the first one's did (the same sizes in the same order, frees at
the same places), which would let one iteration stand for both.

    python3 scripts/gpu/fake_step_speed.py MODEL BATCH      (MODEL: llama1b, gpt2, resnet50)

OUTPUT_DIES=1: each iteration's output let go at its end (a step function's, output_dies_with_call)
instead of held into the next forward; ONLY=half (or batch, bf16, checkpointed): that case
alone; DUMP=DIR: each case's requests, run in full and repeated, as DIR/<case>.<form>.txt (one
"op block bytes module phase" a line), for replaying them through the allocator model offline."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "vramtrace", "_hook"))
sys.path.insert(0, HERE)
import torch  # noqa: E402
import _vramtrace_step as step  # noqa: E402
from fake_step_profile import build  # noqa: E402


def timed(what, fn):
    t = time.perf_counter()
    out = fn()
    print("%-44s %6.2f s  %6d requests" % (what, time.perf_counter() - t, len(out)), flush=True)
    return out


def live_peak(requests):
    """The most bytes live at once (no allocator: the requests' own sum)."""
    size, live, peak = {}, 0, 0
    for op, block, nbytes, _module, _phase in requests:
        if op == "a":
            size[block] = nbytes
            live += nbytes
            peak = max(peak, live)
        else:
            live -= size.pop(block, 0)
    return peak


def live_at_peak(requests):
    """{size: count} of the blocks live at the requests' live peak."""
    size, live, best, best_live = {}, 0, -1, {}
    for op, block, nbytes, _module, _phase in requests:
        if op == "a":
            size[block] = nbytes
            live += nbytes
            if live > best:
                best, best_live = live, dict(size)
        else:
            live -= size.pop(block, 0)
    out = {}
    for nbytes in best_live.values():
        out[nbytes] = out.get(nbytes, 0) + 1
    return out


def main():
    name, batch = sys.argv[1], int(sys.argv[2])
    step.REPEAT_ON = True  # as VRAMTRACE_FAKE_STEP_REPEAT=1: the first full step says REPEATS
    model, args, kwargs = build(name, batch)
    opt = torch.optim.AdamW(model.parameters())
    call, b = step.describe_call(torch, args, kwargs)
    shape = step.ShapeCopy(torch, model, opt, lambda m: 0)
    ids = shape.module_ids

    def run(batch_, autocast=None, blocks=(), iterations=2, repeat=False):
        return step.predict_step(torch, shape.model, call, batch_, b, shape.optimizer, True, True,
                                 autocast, ids, iterations=iterations, checkpointed=blocks,
                                 devices=shape.devices, repeat=repeat, output_dies=dies)

    dies = os.environ.get("OUTPUT_DIES") == "1"
    only, dump = os.environ.get("ONLY"), os.environ.get("DUMP")

    timed("warm-up (the step at its batch)", lambda: run(b))
    print("its two forward-loss-backward ask alike (REPEATS): %s"
          % step._repeats().get(shape.model))
    full = timed("the step at its batch, 2 iterations", lambda: run(b))
    if not only:
        timed("the step at its batch, 1 iteration", lambda: run(b, iterations=1))
    import torch._dynamo.config as dynamo_config
    was = getattr(dynamo_config, "fake_tensor_cache_enabled", None)
    if was is not None and not only:
        dynamo_config.fake_tensor_cache_enabled = False
        try:
            timed("the step at its batch, dispatch cache off", lambda: run(b))
        finally:
            dynamo_config.fake_tensor_cache_enabled = was
    blocks = [m for m in step.repeated_blocks(shape.model) if ids(m)]
    cases = [("batch", "the step at its batch", b, None, ()),
             ("half", "half the batch", b // 2, None, ()),
             ("bf16", "bf16 autocast", b, torch.bfloat16, ())]
    if len(blocks) >= 2:
        cases.append(("checkpointed", "repeated blocks checkpointed (%d)" % len(blocks), b, None,
                      blocks))
    for key, what, batch_, autocast, blocks_ in cases:
        if only and key != only:
            continue
        whole = timed(what + ", run in full", lambda: run(batch_, autocast, blocks_))
        again = timed(what + ", second iteration repeated",
                      lambda: run(batch_, autocast, blocks_, repeat=True))
        if dump:
            os.makedirs(dump, exist_ok=True)
            with open(os.path.join(dump, "prefix.txt"), "w") as f:  # what the step starts with
                f.writelines("%d\n" % t.untyped_storage().nbytes() for t in list(
                    model.parameters()) + list(model.buffers()))
            for form, reqs in (("full", whole), ("repeated", again)):
                with open(os.path.join(dump, "%s.%s.txt" % (key, form)), "w") as f:
                    f.writelines("%s %d %d %d %s\n" % r for r in reqs)
        # What the allocator sees of each (_vramtrace_step.body_shape: a free by the place of
        # its allocation, whatever phase the repeat names for it).
        x, y = step.body_shape(whole), step.body_shape(again)
        same = x == y
        print("    the same requests: %s; live peak %d vs %d bytes" % (
            same, live_peak(whole), live_peak(again)))
        if not same:
            n = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
            print("    first difference at %d of %d / %d: %s vs %s" % (n, len(x), len(y),
                                                                     x[n:n + 3], y[n:n + 3]))
            print("    there, run in full: %s" % (whole[max(0, n - 2):n + 4],))
            print("    there, repeated:    %s" % (again[max(0, n - 2):n + 4],))
            # What is live at each one's peak, by size, that the other does not hold then.
            for name_, reqs in (("full", whole), ("repeated", again)):
                print("    live at the %s one's peak, by size: %s" % (
                    name_, sorted(live_at_peak(reqs).items(), key=lambda kv: -kv[0] * kv[1])[:8]))
    bodies, steps = step.runs_of(full)
    print("forward-loss-backward runs: %d (%s requests); optimizer runs: %s requests" % (
        len(bodies), ", ".join(str(len(b_)) for b_ in bodies),
        ", ".join(str(len(x)) for x in steps)))
    if len(bodies) == 2:
        # The second also frees what the first left (its output, its loss): compared apart, by
        # where they fall and what they were.
        sizes = {r[1]: r[2] for r in full if r[0] == "a"}
        own = {r[1] for r in bodies[1] if r[0] == "a"}
        earlier = [(i, r[4], sizes.get(r[1], 0)) for i, r in enumerate(bodies[1])
                   if r[0] == "f" and r[1] not in own]
        shapes = [step.body_shape(b_) for b_ in bodies]  # the frees of earlier blocks apart
        same = step.same_bodies(full)
        print("the second forward, loss and backward ask as the first's (its frees of earlier "
              "blocks apart): %s" % same)
        print("earlier blocks it frees: %d, %d bytes, at %s" % (
            len(earlier), sum(e[2] for e in earlier),
            ", ".join("%d(%s,%d)" % e for e in earlier[:12])))
        if not same:
            n = next((i for i, (x, y) in enumerate(zip(*shapes)) if x != y),
                     min(map(len, shapes)))
            print("first difference at request %d of %d / %d: %s vs %s" % (
                n, len(shapes[0]), len(shapes[1]), shapes[0][n:n + 3], shapes[1][n:n + 3]))

main()
