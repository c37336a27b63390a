"""A GPT-2 validation loop that forgets torch.no_grad(): `total += out.loss` chains every batch's
graph to the next, so each forward's activations stay live (no backward ever consumes them).
GPT-2 from a config (no download), LAYERS (12) x 768, sequence 1024, BATCH (8), BATCHES (16)
batches; EVAL=1 (default) calls model.eval() first, EVAL=0 leaves it in training mode; NO_GRAD=1
is the remedy applied, ITEM=1 the other (total += out.loss.item()); LIMIT_GIB caps the process with PyTorch's per-process fraction. Prints
PyTorch's memory_allocated after each batch."""
import json, os, contextlib
import torch
from transformers import GPT2Config, GPT2LMHeadModel
batch = int(os.environ.get("BATCH", "8"))
batches = int(os.environ.get("BATCHES", "16"))
limit = float(os.environ.get("LIMIT_GIB", "0"))
if limit > 0:
    torch.cuda.set_per_process_memory_fraction(limit * 2**30 / torch.cuda.get_device_properties(0).total_memory)
cfg = GPT2Config(n_layer=int(os.environ.get("LAYERS", "12")), n_embd=768, n_head=12, n_positions=1024)
model = GPT2LMHeadModel(cfg).cuda()
if os.environ.get("EVAL", "1") == "1":
    model.eval()
ids = torch.randint(0, cfg.vocab_size, (batch, 1024), device="cuda")
guard = torch.no_grad if os.environ.get("NO_GRAD") == "1" else contextlib.nullcontext
total = 0
alloc = []
for i in range(batches):
    with guard():
        out = model(ids, labels=ids)
        total += out.loss.item() if os.environ.get("ITEM") == "1" else out.loss
    torch.cuda.synchronize()
    alloc.append(torch.cuda.memory_allocated())
    print("torch-figures", json.dumps({"batch": i, "allocated": alloc[-1]}), flush=True)
print("torch-figures", json.dumps({"allocated": alloc, "max_reserved": torch.cuda.max_memory_reserved(),
      "max_allocated": torch.cuda.max_memory_allocated(),
      "growth_per_batch": (alloc[-1] - alloc[1]) // max(1, len(alloc) - 2)}), flush=True)
