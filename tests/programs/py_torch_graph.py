# Test script (stand-in PyTorch of tests/programs/fake_torch): CUDA graphs and a MemPool, whose
# private pools vramtrace counts as one category, segments whole. Net is one Linear with a
# 1 MiB weight (512x512 float32) in a 2 MiB segment of the default pool; the static input is
# 2048 x 512 float32 (4 MiB, a 4 MiB segment). Each forward takes a scratch of half its input
# (2 MiB, freed inside) and makes its 4 MiB output: captured in a graph, both come from the
# graph's private pool, in segments of 2 and 4 MiB (the output does not fit the freed 2 MiB).
# Graph 1 is captured into its own pool (id (1, 0)) and replayed 3 times (a replay makes
# nothing); a MemPool (id (0, 1)) holds a 512 KiB buffer in a 2 MiB segment; graph 2 is
# captured into a shared pool from graph_pool_handle() (id (0, 2)). At exit everything is
# still held: the weight (parameters, 1 MiB), the input (inputs, 4 MiB), 1 MiB free in the
# weight's segment (allocator cache), and 6 + 2 + 6 = 14 MiB of private pools (8.5 MiB of
# blocks, 5.5 MiB free in them): 20 MiB, the device's figure.
import torch
import torch.nn.functional as F

FEATURES = 512


class Linear(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = torch.nn.Parameter((features, features))

    def forward(self, x):
        scratch = torch.empty(x.shape[0], x.shape[1] // 2)
        del scratch
        return F.linear(x, self.weight)


def main():
    model = Linear(FEATURES)
    x = torch.empty(2048, FEATURES)
    g1 = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g1):
        y1 = model(x)
    for _ in range(3):
        g1.replay()
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        buf = torch.empty(256, FEATURES)
    g2 = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g2, pool=torch.cuda.graph_pool_handle()):
        y2 = model(x)
    print("py_torch_graph done, replays", g1.replays, flush=True)
    return model, x, g1, y1, pool, buf, g2, y2


kept = main()  # held until exit: the report's figures at exit are all of it
