"""`vramtrace plan` on training loops that are not a stand-in's: each runs its own loss, precision
and loop shape, with its batches from a DataLoader copied to the GPU at each step (nothing
downloaded; models from their constructors or configs):

  seg        torchvision deeplabv3_mobilenet_v3_large, one output channel (B,1,H,W), its loss
             BCE-with-logits + dice, fp16 autocast under GradScaler, AdamW
  llama_bf16 a transformers LlamaConfig (6 layers, 1024 wide, sequence 512) in bf16 weights,
             gradient_checkpointing_enable(), its own shifted cross-entropy (no labels given to
             the model), 4 micro-batches accumulated per optimizer step, AdamW
  vit_clr    timm vit_small_patch16_224 with a 128-wide head, two augmented views per step (two
             forwards), an NT-Xent contrastive loss, SGD with momentum
  llama_loop the small Llama of plan_job.py (8 layers, 1024 wide, sequence 1024) in a loop that
             drops each step's output (`loss = model(...).loss`), AdamW
  mlm        a transformers BertConfig (6 layers, 512 wide, sequence 256) masked-language
             model whose loss selects the masked positions by a boolean mask
             (`logits[mask]`: an output shape that depends on the data, which fake tensors
             cannot give), AdamW: the plan's steps fall back to the stand-in and say why

    python3 own_step_job.py run              MODEL, BATCH, LIMIT_GIB (per-process fraction, 0:
                                             none) from the environment; STEPS optimizer steps
                                             (default 3), the loss printed at each
    python3 own_step_job.py truth MODEL:BATCH:LARGEST ...
                                             for each, in this process: the reserved peak of two
                                             optimizer steps at BATCH with no cap
                                             (max_memory_reserved), and whether LARGEST and
                                             LARGEST+1 run two steps under LIMIT_GIB; one JSON
                                             line each ("truth ...")"""
import gc
import json
import os
import sys
import time

import torch

LIMIT_GIB = float(os.environ.get("LIMIT_GIB", "16"))
ACCUMULATE = {"llama_bf16": 4}


def build(name, batch):
    """(model, optimizer, loader, step): step(batch_from_loader, micro) runs one micro-batch and
    returns True when it stepped the optimizer."""
    torch.manual_seed(0)
    data = torch.utils.data
    if name == "seg":
        import torchvision
        model = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=1, aux_loss=False).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cuda")
        n = batch * 3
        ds = data.TensorDataset(torch.randn(n, 3, 320, 320),
                                (torch.rand(n, 1, 320, 320) > 0.5).float())

        def dice(logits, target):
            p = torch.sigmoid(logits)
            inter = (p * target).sum(dim=(1, 2, 3))
            return 1 - ((2 * inter + 1) / (p.sum(dim=(1, 2, 3)) + target.sum(dim=(1, 2, 3)) + 1)).mean()

        def step(b, micro):
            x, m = b[0].cuda(non_blocking=True), b[1].cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.float16):
                out = model(x)["out"]
                loss = torch.nn.functional.binary_cross_entropy_with_logits(out, m) + dice(out, m)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            return loss, True
    elif name in ("llama_bf16", "llama_loop"):
        from transformers import LlamaConfig, LlamaForCausalLM
        if name == "llama_bf16":
            cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                              num_hidden_layers=6, num_attention_heads=16,
                              num_key_value_heads=16, max_position_embeddings=512)
            model = LlamaForCausalLM(cfg).to(torch.bfloat16).cuda()
            model.gradient_checkpointing_enable()
            model.config.use_cache = False
            seq = 512
        else:
            cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                              num_hidden_layers=8, num_attention_heads=16,
                              num_key_value_heads=16, max_position_embeddings=1024)
            model = LlamaForCausalLM(cfg).cuda()
            seq = 1024
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        ds = data.TensorDataset(torch.randint(0, cfg.vocab_size, (batch * 9, seq)))
        accumulate = ACCUMULATE.get(name, 1)

        def step(b, micro):
            ids = b[0].cuda(non_blocking=True)
            if name == "llama_loop":
                loss = model(input_ids=ids, labels=ids).loss
            else:
                logits = model(input_ids=ids).logits
                loss = torch.nn.functional.cross_entropy(
                    logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                    ids[:, 1:].reshape(-1)) / accumulate
            loss.backward()
            if (micro + 1) % accumulate:
                return loss, False
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss, True
    elif name == "vit_clr":
        import timm
        model = timm.create_model("vit_small_patch16_224", num_classes=128).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        ds = data.TensorDataset(torch.randn(batch * 3, 3, 224, 224))

        def nt_xent(a, b, t=0.2):
            z = torch.nn.functional.normalize(torch.cat([a, b]), dim=1)
            sim = z @ z.t() / t
            sim.fill_diagonal_(float("-inf"))
            n = a.shape[0]
            target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
            return torch.nn.functional.cross_entropy(sim, target)

        def step(b, micro):
            x = b[0].cuda(non_blocking=True)
            v1 = torch.flip(x, dims=[3])
            v2 = x + 0.1 * torch.randn_like(x)
            loss = nt_xent(model(v1), model(v2))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss, True
    elif name == "mlm":
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig(vocab_size=30522, hidden_size=512, num_hidden_layers=6,
                         num_attention_heads=8, intermediate_size=2048,
                         max_position_embeddings=256)
        model = BertForMaskedLM(cfg).cuda()
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        seq = 256
        ids = torch.randint(0, cfg.vocab_size, (batch * 3, seq))
        ds = data.TensorDataset(ids, torch.rand(batch * 3, seq) < 0.15)

        def step(b, micro):
            x, mask = b[0].cuda(non_blocking=True), b[1].cuda(non_blocking=True)
            logits = model(input_ids=x.masked_fill(mask, 103)).logits
            loss = torch.nn.functional.cross_entropy(logits[mask], x[mask])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss, True
    else:
        raise SystemExit("MODEL: seg, llama_bf16, vit_clr, llama_loop or mlm")
    loader = data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True,
                             pin_memory=True, num_workers=0)
    return model, opt, loader, step


def set_limit(limit_gib):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_gib * 2**30 / total)
                                               if limit_gib else 1.0)


def train(name, batch, steps, say=False):
    """`steps` optimizer steps of the program's loop (epochs over its loader as needed)."""
    model, opt, loader, step = build(name, batch)
    done = micro = 0
    while done < steps:
        for b in loader:
            loss, stepped = step(b, micro)
            micro += 1
            if stepped:
                done += 1
                if say:
                    print("step %d loss %.4f" % (done, loss.item()), flush=True)
                if done >= steps:
                    break
    del model, opt, loader, step


def trial(name, batch, limit_gib):
    """The reserved peak of two optimizer steps at `batch`, or None when it runs out."""
    gc.collect()
    torch.cuda.empty_cache()
    set_limit(limit_gib)
    torch.cuda.reset_peak_memory_stats()
    try:
        train(name, batch, 2)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_reserved()
    except torch.cuda.OutOfMemoryError:
        peak = None
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def main():
    if sys.argv[1:2] == ["run"]:
        set_limit(LIMIT_GIB)
        train(os.environ["MODEL"], int(os.environ["BATCH"]), int(os.environ.get("STEPS", "3")),
              say=True)
        torch.cuda.synchronize()
        print("ran: max_memory_reserved %d" % torch.cuda.max_memory_reserved())
        return
    for arg in sys.argv[2:]:
        name, batch, guess = arg.split(":")
        batch, guess = int(batch), int(guess or 0)
        started = time.time()
        whole = trial(name, batch, 0)
        at = trial(name, guess, LIMIT_GIB) if guess else None
        above = trial(name, guess + 1, LIMIT_GIB) if guess else None
        print("truth", json.dumps({"model": name, "batch": batch, "limit_gib": LIMIT_GIB,
                                   "whole_step_reserved": whole, "largest_predicted": guess,
                                   "fits_at_predicted": at is not None,
                                   "fits_one_above": above is not None,
                                   "seconds": round(time.time() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
