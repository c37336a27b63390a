"""Allocation failures that the job survives: with cuDNN's heuristics (PyTorch's default),
PyTorch tries each convolution plan in turn and skips one whose workspace cannot be allocated.
A ResNet-50 at batch 64 runs one step uncapped at 224x224; the process is then capped at what
that step reserved and trains at 176x176 (new shapes: every convolution chooses its plan again,
with less room left for workspaces). The job ends normally. Prints PyTorch's count of allocator
OOMs (num_ooms: each failure it raised, caught or not) and its own figures."""
import json
import torch, torchvision
model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
crit = torch.nn.CrossEntropyLoss()
def step(side):
    x = torch.randn(64, 3, side, side, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    opt.zero_grad(set_to_none=True)
    crit(model(x), y).backward()
    opt.step()
step(224)
torch.cuda.synchronize()
total = torch.cuda.get_device_properties(0).total_memory
cap = torch.cuda.max_memory_reserved()
torch.cuda.set_per_process_memory_fraction(cap / total)
for _ in range(3):
    step(176)
torch.cuda.synchronize()
print("torch-figures", json.dumps({"num_ooms": torch.cuda.memory_stats().get("num_ooms", 0),
      "cap": cap, "max_reserved": torch.cuda.max_memory_reserved()}), flush=True)
