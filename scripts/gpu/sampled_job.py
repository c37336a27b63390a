#!/usr/bin/env python3
"""A real training job for `vramtrace run --torch=sampled` (scripts/gpu/sampled.sh), run the same
way under --torch=auto as the reference. MODEL: resnet18 (torchvision, batch 64 at 128x128) or
gpt2 (transformers from a config, 6 layers, batch 8 at 256 tokens). STEPS (120) training steps;
step BIG (75, between the sampled iterations) takes a batch SCALE (4) times larger, the run's
peak of allocated memory; with OOM_AT=N the batch grows from step N on until the job dies of an
OOM (between the windows). Prints PyTorch's own figures at the end (or at the OOM): its peak of
allocated memory and what it holds, for sampled_check.py to compare with the reports."""
import json
import os
import sys

import torch

MODEL = os.environ.get("MODEL", "resnet18")
STEPS = int(os.environ.get("STEPS", "120"))
BIG = int(os.environ.get("BIG", "75"))
SCALE = int(os.environ.get("SCALE", "4"))
OOM_AT = int(os.environ.get("OOM_AT", "0"))
dev = torch.device("cuda")
torch.manual_seed(0)


def resnet():
    import torchvision
    model = torchvision.models.resnet18(num_classes=100).to(dev)

    def batch(n):
        return (torch.randn(n, 3, 128, 128, device=dev), torch.randint(0, 100, (n,), device=dev))

    def loss(out, y):
        return torch.nn.functional.cross_entropy(out, y)
    return model, batch, loss, 64


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=16384)).to(dev)

    def batch(n):
        ids = torch.randint(0, 16384, (n, 256), device=dev)
        return ids, ids

    def loss(out, y):
        return out.loss
    return model, batch, loss, 8


def main():
    model, make_batch, loss_of, rows = {"resnet18": resnet, "gpt2": gpt2}[MODEL]()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    figures = {}
    try:
        for step in range(STEPS):
            n = rows * (SCALE if step == BIG else 1)
            if OOM_AT and step >= OOM_AT:
                n = rows * (2 ** (step - OOM_AT + 2))
            x, y = make_batch(n)
            out = model(x, labels=y) if MODEL == "gpt2" else model(x)
            loss = loss_of(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del out, loss, x, y
    except torch.OutOfMemoryError:
        figures["oom_step"] = step
        raise
    finally:
        torch.cuda.synchronize()
        figures.update(max_memory_allocated=torch.cuda.max_memory_allocated(),
                       memory_allocated=torch.cuda.memory_allocated(),
                       memory_reserved=torch.cuda.memory_reserved(),
                       max_memory_reserved=torch.cuda.max_memory_reserved())
        print("FIGURES " + json.dumps(figures), flush=True)


if __name__ == "__main__":
    sys.exit(main())
