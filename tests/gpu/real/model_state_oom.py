"""A model whose parameters, gradients and Adam's state alone exceed the limit: 16 Linear
layers of 4096x8192 in float32 (2 GiB of parameters), AdamW, in a process capped at 6 GiB. The
first optimizer step dies allocating Adam's state (2 GiB + 2 GiB of gradients + 4 GiB of
state > 6 GiB); no batch size helps. Prints PyTorch's own figures before it dies."""
import json
import torch
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(6 * 2**30 / total)
model = torch.nn.Sequential(*[torch.nn.Linear(4096 if i % 2 == 0 else 8192,
                                              8192 if i % 2 == 0 else 4096, bias=False)
                              for i in range(16)]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
x = torch.randn(8, 4096, device="cuda")
print("torch-figures", json.dumps({"params": sum(p.numel() * p.element_size() for p in model.parameters())}),
      flush=True)
for _ in range(2):
    opt.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    print("torch-figures", json.dumps({"after_backward": torch.cuda.memory_allocated()}), flush=True)
    opt.step()
