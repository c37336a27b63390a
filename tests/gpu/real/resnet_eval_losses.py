"""An evaluation loop that keeps a list of losses as tensors (`losses.append(crit(out, y))`)
with autograd on: each loss holds its batch's graph, so every forward's activations stay live.
torchvision ResNet-18 in eval(), BATCH (64) x 3 x 224 x 224, BATCHES (8); ITEM=1 is a remedy
applied (loss.item()), NO_GRAD=1 the other (torch.no_grad()). Prints PyTorch's memory_allocated after each batch."""
import json, os
import torch, torchvision
batch = int(os.environ.get("BATCH", "64"))
batches = int(os.environ.get("BATCHES", "8"))
model = torchvision.models.resnet18().cuda().eval()
crit = torch.nn.CrossEntropyLoss()
x = torch.randn(batch, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (batch,), device="cuda")
item = os.environ.get("ITEM") == "1"
losses = []
alloc = []
import contextlib
guard = torch.no_grad if os.environ.get("NO_GRAD") == "1" else contextlib.nullcontext
for i in range(batches):
    with guard():
        loss = crit(model(x), y)
    losses.append(loss.item() if item else loss)
    torch.cuda.synchronize()
    alloc.append(torch.cuda.memory_allocated())
print("torch-figures", json.dumps({"allocated": alloc, "max_reserved": torch.cuda.max_memory_reserved(),
      "growth_per_batch": (alloc[-1] - alloc[1]) // max(1, len(alloc) - 2)}), flush=True)
