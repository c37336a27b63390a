# Benchmark program for the HTML report (bench/html_open.sh), run on the stand-in PyTorch of
# tests/programs/fake_torch: a transformer-shaped training job whose report has the shapes of a
# big real run. BLOCKS blocks of four Linear layers each (attn.qkv, attn.proj, mlp.fc1, mlp.fc2:
# module names blocks.N.attn.qkv...), every layer's forward a scratch and an output (kept for
# backward), backward the grads once, the optimizer a momentum buffer per weight once; after
# ITERATIONS steps of a batch of 2048 (48 MiB of outputs kept for backward with 24 blocks) the
# batch doubles until the forward dies of an uncaught OutOfMemoryError.
# Each step allocates and frees 2 blocks per layer: ITERATIONS * BLOCKS * 16 block events.
#   python3 bench/torch_big_run.py [ITERATIONS] [BLOCKS]
import sys

import torch
import torch.nn.functional as F

FEATURES = 64


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter((FEATURES, FEATURES))

    def forward(self, x):
        scratch = torch.empty(x.shape[0], x.shape[1] // 2)
        del scratch
        return F.linear(x, self.weight)


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = Linear()
        self.proj = Linear()

    def forward(self, x):
        return self.proj(self.qkv(x))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Linear()
        self.fc2 = Linear()

    def forward(self, x):
        return self.fc2(self.fc1(x))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
        self.mlp = Mlp()

    def forward(self, x):
        return self.mlp(self.attn(x))


class Blocks(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        for i in range(n):
            setattr(self, str(i), Block())

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, str(i))(x)
        return x


class Net(torch.nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = Blocks(blocks)

    def forward(self, x):
        return self.blocks(x)


class Momentum(torch.optim.Optimizer):
    def __init__(self, params):
        super().__init__(params, dict(lr=0.1))

    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.empty_like(p)


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    model = Net(blocks)
    opt = Momentum(model.parameters())
    batch = 2048
    for step in range(iterations + 64):
        if step >= iterations:
            batch *= 2  # grows until the forward dies
        x = torch.empty(batch, FEATURES)
        out = model(x)
        out.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        del x, out


main()
