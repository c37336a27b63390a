"""A training job of a real model that a user sizes by its batch: MODEL (resnet50, vit_b_16,
gpt2, bert), BATCH, STEPS, and LIMIT_GIB (PyTorch's per-process fraction, as on a smaller card:
a batch too big dies in its first step). Nothing is downloaded: the models are built from their
definitions. Prints PyTorch's own figures after the last step. The remedies applied for real:
AMP=1 (bf16 autocast), CKPT=1 (activation checkpointing of each repeated block: ResNet's stages
layer1-4, ViT's and the transformers' layers).

Also importable: build(model, batch) gives (model, optimizer, step) for scripts/gpu/first_step_truth.py."""
import json
import os

import torch


def checkpointed(blocks):
    """Each module of `blocks` under non-reentrant activation checkpointing."""
    import torch.utils.checkpoint as checkpoint
    for block in blocks:
        block.forward = (lambda f: lambda *a, **k: checkpoint.checkpoint(
            f, *a, use_reentrant=False, **k))(block.forward)


def build(name, batch, amp=False, ckpt=False):
    """The model on the GPU, its optimizer, and one training step (zero_grad, forward, loss,
    backward, step) as a function returning the loss."""
    torch.manual_seed(0)
    autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp)  # noqa: E731
    if name in ("resnet50", "vit_b_16"):
        import torchvision
        model = getattr(torchvision.models, name)().cuda()
        opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if name == "resnet50"
               else torch.optim.AdamW(model.parameters(), lr=1e-4))
        crit = torch.nn.CrossEntropyLoss()
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        if ckpt:
            checkpointed([getattr(model, n) for n in ("layer1", "layer2", "layer3", "layer4")]
                         if name == "resnet50" else list(model.encoder.layers))

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = crit(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return model, opt, step
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)
        model = GPT2LMHeadModel(cfg).cuda()
        seq = 1024
    elif name == "bert":
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig()  # bert-base: 12 layers, 768 wide, 30522 tokens
        model = BertForMaskedLM(cfg).cuda()
        seq = 512
    else:
        raise SystemExit("MODEL: resnet50, vit_b_16, gpt2 or bert")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
    if ckpt:
        checkpointed(model.transformer.h if name == "gpt2" else model.bert.encoder.layer)

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        return out.loss
    return model, opt, step


def main():
    name = os.environ.get("MODEL", "resnet50")
    batch = int(os.environ.get("BATCH", "256"))
    limit = float(os.environ.get("LIMIT_GIB", "16"))
    steps = int(os.environ.get("STEPS", "3"))
    if limit > 0:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(limit * 2**30 / total)
    model, opt, step = build(name, batch, amp=os.environ.get("AMP") == "1",
                             ckpt=os.environ.get("CKPT") == "1")
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    print("torch-figures", json.dumps({
        "model": name, "batch": batch, "allocated": torch.cuda.memory_allocated(),
        "max_allocated": torch.cuda.max_memory_allocated(),
        "max_reserved": torch.cuda.max_memory_reserved()}), flush=True)


if __name__ == "__main__":
    main()
