"""A job that catches CUDA out of memory in a forward and goes on with a smaller batch: a
ResNet-50 at batch 512 under an 8 GiB per-process fraction fails in its forward; the loop
retries at batch 32 twice (forward, backward, step), then drops the model and the optimizer.
Prints how many OOMs it caught and PyTorch's memory_allocated at the end."""
import json, warnings
import torch, torchvision
warnings.simplefilter("always")  # a warning from a module hook would show in the log
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(8 * 2**30 / total)
model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
crit = torch.nn.CrossEntropyLoss()
ooms = 0
for batch in (512, 32, 32):
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    try:
        loss = crit(model(x), y)
    except torch.OutOfMemoryError:
        ooms += 1
        del x, y
        continue
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del x, y, loss
del model, opt
torch.cuda.synchronize()
print("torch-figures", json.dumps({"ooms": ooms, "allocated_at_end": torch.cuda.memory_allocated()}),
      flush=True)
