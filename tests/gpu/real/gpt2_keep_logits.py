"""A GPT-2 training loop that keeps every step's logits on the GPU for a metric computed later
(`kept.append(out.logits)`): the logits outlive their step, 785 MiB each at BATCH 4 (4 x 1024 x
50257 float32). LAYERS (12), STEPS (12), LIMIT_GIB (0: none; 12 dies at about step 8) with
PyTorch's per-process fraction; DETACH_CPU=1 is the remedy applied (.detach().cpu()). Prints
PyTorch's memory_allocated after each step."""
import json, os
import torch
from transformers import GPT2Config, GPT2LMHeadModel
batch = int(os.environ.get("BATCH", "4"))
steps = int(os.environ.get("STEPS", "12"))
limit = float(os.environ.get("LIMIT_GIB", "0"))
if limit > 0:
    torch.cuda.set_per_process_memory_fraction(limit * 2**30 / torch.cuda.get_device_properties(0).total_memory)
cfg = GPT2Config(n_layer=int(os.environ.get("LAYERS", "12")), n_embd=768, n_head=12, n_positions=1024)
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, cfg.vocab_size, (batch, 1024), device="cuda")
detach = os.environ.get("DETACH_CPU") == "1"
kept = []
alloc = []
for step in range(steps):
    opt.zero_grad(set_to_none=True)
    out = model(ids, labels=ids)
    out.loss.backward()
    opt.step()
    kept.append(out.logits.detach().cpu() if detach else out.logits)
    torch.cuda.synchronize()
    alloc.append(torch.cuda.memory_allocated())
    print("torch-figures", json.dumps({"step": step, "allocated": alloc[-1],
          "max_reserved": torch.cuda.max_memory_reserved()}), flush=True)
print("torch-figures", json.dumps({"allocated": alloc, "max_reserved": torch.cuda.max_memory_reserved(),
      "growth_per_step": (alloc[-1] - alloc[1]) // max(1, len(alloc) - 2)}), flush=True)
