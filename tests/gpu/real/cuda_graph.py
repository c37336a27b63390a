"""A small model captured in CUDA graphs and replayed (torch.cuda.graph, warm-up on a side
stream as PyTorch's documentation does it): graph 1 into its own private pool, graph 2 into a
pool from torch.cuda.graph_pool_handle(), and, where PyTorch has them, a buffer made in a
torch.cuda.MemPool. Just before exit it prints the private pools' segments as PyTorch's own
snapshot lists them (torch.cuda.memory_snapshot(), segment_pool_id not (0, 0)): total bytes
and bytes per pool, which vramtrace's private_pool category at exit must equal exactly."""
import json
import os
import torch

REPLAYS = int(os.environ.get("REPLAYS", "20"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
static_x = torch.randn(256, 1024, device="cuda")

side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    for _ in range(3):
        model(static_x)
torch.cuda.current_stream().wait_stream(side)

g1 = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(g1):
    static_y1 = model(static_x)
shared = torch.cuda.graph_pool_handle()
g2 = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(g2, pool=shared):
    static_y2 = model(static_x * 2)
for _ in range(REPLAYS):
    static_x.copy_(torch.randn_like(static_x))
    g1.replay()
    g2.replay()

mempool = None
if hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool"):
    mempool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(mempool):
        buf = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()

pools = {}
for seg in torch.cuda.memory_snapshot():
    pool = tuple(seg.get("segment_pool_id", (0, 0)))
    if pool != (0, 0):
        key = "%d,%d" % pool
        pools[key] = pools.get(key, 0) + seg["total_size"]
print("torch-figures", json.dumps({
    "private_bytes": sum(pools.values()), "pools": pools,
    "graph_pools": ["%d,%d" % tuple(g.pool()) for g in (g1, g2)],
    "mempool": "%d,%d" % tuple(mempool.id) if mempool is not None else None,
    "replays": REPLAYS, "reserved": torch.cuda.memory_reserved(),
    "allocated": torch.cuda.memory_allocated()}), flush=True)
