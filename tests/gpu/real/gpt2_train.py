"""A GPT-2 (transformers, built from a config: no download) trained with AdamW for STEPS steps;
prints PyTorch's own figures after the last step: parameter, gradient and optimizer-state
bytes, memory_allocated, max_memory_allocated/reserved. LIMIT_GIB caps the process with PyTorch's
per-process fraction (a first-step death at LAYERS=12 BATCH=32 LIMIT_GIB=16); CKPT=1 and AMP=1
apply activation checkpointing and bf16 autocast."""
import json, os
import torch
from transformers import GPT2Config, GPT2LMHeadModel
steps = int(os.environ.get("STEPS", "4"))
batch = int(os.environ.get("BATCH", "8"))
limit = float(os.environ.get("LIMIT_GIB", "0"))
if limit > 0:
    torch.cuda.set_per_process_memory_fraction(limit * 2**30 / torch.cuda.get_device_properties(0).total_memory)
cfg = GPT2Config(n_layer=int(os.environ.get("LAYERS", "6")), n_embd=768, n_head=12, n_positions=1024)
model = GPT2LMHeadModel(cfg).cuda()
if os.environ.get("CKPT") == "1":  # activation checkpointing of every block (a remedy applied)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
amp = os.environ.get("AMP") == "1"  # bf16 autocast (a remedy applied)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, cfg.vocab_size, (batch, 1024), device="cuda")
for step in range(steps):
    opt.zero_grad(set_to_none=False)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = model(ids, labels=ids)
    out.loss.backward()
    opt.step()
torch.cuda.synchronize()
def storage_bytes(ts):
    seen = {}
    for t in ts:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())
print("torch-figures", json.dumps({
    "params": storage_bytes(model.parameters()),
    "grads": storage_bytes(p.grad for p in model.parameters() if p.grad is not None),
    "opt_state": storage_bytes(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.is_cuda),
    "allocated": torch.cuda.memory_allocated(), "max_allocated": torch.cuda.max_memory_allocated(),
    "max_reserved": torch.cuda.max_memory_reserved()}), flush=True)
