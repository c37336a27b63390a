"""A torch.compile'd training loop (default mode, then mode="reduce-overhead", which replays
CUDA graphs from a private pool): run with and without vramtrace, its printed losses, graph
counts and graph breaks must be the same (the start-up hook wraps Module.__call__, Tensor.to
and .cuda; torch.compile must trace straight through them). Batches are moved with .to() and
made by a factory on the device, so the report names their lines."""
import json, os
import torch
torch.manual_seed(0)
mode = os.environ.get("MODE", "default")
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step_fn = torch.compile(model, mode=None if mode == "default" else mode)
from torch._dynamo.utils import counters
losses = []
for i in range(8):
    x = torch.randn(256, 512, generator=torch.Generator().manual_seed(i)).to("cuda")  # the batch's line
    y = torch.zeros(256, 512, device="cuda")
    out = step_fn(x)
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(round(loss.item(), 5))
print("compiled-figures", json.dumps({
    "losses": losses,
    "graph_breaks": sum(counters["graph_break"].values()),
    "unique_graphs": counters["stats"]["unique_graphs"],
    "max_allocated": torch.cuda.max_memory_allocated()}), flush=True)
