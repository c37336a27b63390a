"""A real PyTorch job for report.html's screenshot on a GPU (tests/html/gpu_oom_screenshot.sh).

A small convolutional network is trained with a batch that doubles each step, under a
per-process memory fraction of 10 % of the device, until PyTorch raises OutOfMemoryError in the
forward pass; the error is not caught, so the job dies of it as a real one would.
"""
import torch
from torch import nn


def block(c_in: int, c_out: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True))


def main() -> None:
    torch.cuda.set_per_process_memory_fraction(0.1)
    model = nn.Sequential(block(3, 64), block(64, 64), nn.MaxPool2d(2), block(64, 128),
                          block(128, 128), nn.MaxPool2d(2), block(128, 256), block(256, 256),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000)).cuda()
    opt = torch.optim.Adam(model.parameters())
    batch = 16
    for step in range(64):
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: batch {batch}, loss {loss.item():.3f}", flush=True)
        batch *= 2


if __name__ == "__main__":
    main()
