"""An evaluation loop that keeps every batch's graph alive: the model is in eval() but autograd
is on, and `total += out.sum()` chains each batch's graph to the next. Prints memory_allocated
after each batch (PyTorch's own figure of the growth)."""
import json
import torch, torchvision
model = torchvision.models.resnet18().cuda().eval()
x = torch.randn(64, 3, 224, 224, device="cuda")
total = 0
alloc = []
for i in range(6):
    out = model(x)
    total = total + out.sum()
    torch.cuda.synchronize()
    alloc.append(torch.cuda.memory_allocated())
print("torch-figures", json.dumps({"allocated": alloc,
      "growth_per_batch": (alloc[-1] - alloc[1]) // (len(alloc) - 2)}), flush=True)
