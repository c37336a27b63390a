"""`vramtrace plan` against the same step run for real, on models no other check names, built
from their constructors or configs (nothing downloaded): efficientnet_b0 and resnet101
(torchvision), llama (a small transformers LlamaConfig: 8 layers, 1024 wide, sequence 1024) and
bert_small (BertConfig: 6 layers, 512 wide, sequence 512); llama1b (LlamaConfig: 18 layers, 2048
wide, sequence 1024: 1.06e9 parameters) for the plan's cost at that size.

    python3 plan_job.py run                 MODEL, BATCH, LIMIT_GIB from the environment: three
                                            training steps under LIMIT_GIB (PyTorch's
                                            per-process fraction); `vramtrace plan` stops it
                                            before the first
    python3 plan_job.py truth MODEL:BATCH:PREDICTED_LARGEST ...
                                            for each: the whole step's reserved peak at BATCH
                                            with no cap (three steps, max_memory_reserved), and
                                            the largest batch that runs three steps under
                                            LIMIT_GIB, by bisection from PREDICTED_LARGEST;
                                            one JSON line each ("truth ...")"""
import gc
import json
import os
import sys
import time

import torch

LIMIT_GIB = float(os.environ.get("LIMIT_GIB", "16"))


def build(name, batch):
    """The model on the GPU, its optimizer, and one training step as a function."""
    torch.manual_seed(0)
    if name in ("efficientnet_b0", "resnet101"):
        import torchvision
        model = getattr(torchvision.models, name)().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        crit = torch.nn.CrossEntropyLoss()
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
        return step
    if name == "llama1b":  # about 1.0e9 parameters: the plan's cost on a model of that size
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                          num_hidden_layers=18, num_attention_heads=16, num_key_value_heads=16,
                          max_position_embeddings=1024)
        model = LlamaForCausalLM(cfg).cuda()
        seq = 1024
    elif name == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                          num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
                          max_position_embeddings=1024)
        model = LlamaForCausalLM(cfg).cuda()
        seq = 1024
    elif name == "bert_small":
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig(hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                         intermediate_size=2048)
        model = BertForMaskedLM(cfg).cuda()
        seq = 512
    else:
        raise SystemExit("MODEL: efficientnet_b0, resnet101, llama or bert_small")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
    return step


def set_limit(limit_gib):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_gib * 2**30 / total)
                                               if limit_gib else 1.0)


def trial(name, batch, limit_gib):
    """The reserved peak of three steps at `batch`, or None when it runs out of memory."""
    gc.collect()
    torch.cuda.empty_cache()
    set_limit(limit_gib)
    torch.cuda.reset_peak_memory_stats()
    step = None
    try:
        step = build(name, batch)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_reserved()
    except torch.cuda.OutOfMemoryError:
        peak = None
    step = None
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def largest(name, guess, hi):
    """The largest batch in [1, hi] whose three steps fit under LIMIT_GIB, searched outwards from
    `guess` (the prediction, usually within a few samples) by steps that double, then bisected:
    two trials when the prediction is right."""
    guess = max(1, min(guess, hi))
    if trial(name, guess, LIMIT_GIB) is not None:
        lo, step = guess, 1  # fits: look above
        while lo < hi:
            up = min(hi, lo + step)
            if trial(name, up, LIMIT_GIB) is None:
                top = up - 1
                break
            lo, step = up, step * 2
        else:
            return lo
    else:
        top, step = guess - 1, 1  # does not fit: look below
        while top >= 1:
            down = max(1, top - step + 1)
            if trial(name, down, LIMIT_GIB) is not None:
                lo = down
                break
            top, step = down - 1, step * 2
        else:
            return 0
    while lo < top:
        mid = (lo + top + 1) // 2
        if trial(name, mid, LIMIT_GIB) is not None:
            lo = mid
        else:
            top = mid - 1
    return lo


def main():
    if sys.argv[1:2] == ["run"]:
        set_limit(LIMIT_GIB)
        step = build(os.environ["MODEL"], int(os.environ["BATCH"]))
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        print("ran three steps: max_memory_reserved %d" % torch.cuda.max_memory_reserved())
        return
    for arg in sys.argv[2:]:
        name, batch, guess = arg.split(":")
        batch, guess = int(batch), int(guess or 1)
        started = time.time()
        whole = trial(name, batch, 0)
        fits = largest(name, guess, batch)
        print("truth", json.dumps({"model": name, "batch": batch, "limit_gib": LIMIT_GIB,
                                   "whole_step_reserved": whole, "largest_batch": fits,
                                   "seconds": round(time.time() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
