"""A real job that dies of CUDA out of memory: torchvision ResNet-50, SGD with momentum,
batch BATCH (default 256), in a process limited to LIMIT_GIB (default 16) of the GPU with
torch.cuda.set_per_process_memory_fraction, as on a 16 GB card; or, with HOG_GIB, while another
process holds that much of the GPU. Prints PyTorch's own figures."""
import os, sys, json, subprocess
import torch, torchvision
hog = None
if os.environ.get("HOG_GIB"):
    hog = subprocess.Popen([sys.executable, "-c",
        "import sys, torch; t = torch.empty(%d << 30, dtype=torch.uint8, device='cuda'); "
        "torch.cuda.synchronize(); print('held', flush=True); sys.stdin.readline()" % int(os.environ["HOG_GIB"])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert hog.stdout.readline().startswith("held")
    import atexit
    atexit.register(lambda: (hog.stdin.write("done\n"), hog.stdin.flush(), hog.wait()))
batch = int(os.environ.get("BATCH", "256"))
limit = float(os.environ.get("LIMIT_GIB", "16"))
steps = int(os.environ.get("STEPS", "3"))
amp = os.environ.get("AMP", "0") == "1"
total = torch.cuda.get_device_properties(0).total_memory
if limit > 0:
    torch.cuda.set_per_process_memory_fraction(limit * 2**30 / total)
model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
crit = torch.nn.CrossEntropyLoss()
# CKPT=layer1,layer2: those stages under activation checkpointing (a remedy applied for real).
import torch.utils.checkpoint as checkpoint
for name in filter(None, os.environ.get("CKPT", "").split(",")):
    stage = getattr(model, name)
    stage.forward = (lambda f: lambda t: checkpoint.checkpoint(f, t, use_reentrant=False))(stage.forward)
x = torch.randn(batch, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (batch,), device="cuda")
def fig(tag):
    print("torch-figures", json.dumps({"at": tag, "allocated": torch.cuda.memory_allocated(),
        "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
        "params": sum(p.numel() * p.element_size() for p in model.parameters()),
        "opt_state": sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values() if torch.is_tensor(v))}), flush=True)
for step in range(steps):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = crit(model(x), y)
    loss.backward()
    opt.step()
    fig("step%d" % step)
fig("end")
