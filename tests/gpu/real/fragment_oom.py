"""An OOM from fragmentation: under a 4 GiB cap, three 1.25 GiB segments are reserved (a tensor
each, then freed: PyTorch keeps the segments cached), 30 MiB tensors are carved from them, every
other one is freed (about 1.85 GiB free in 30 MiB holes inside segments that still hold live
tensors, so PyTorch cannot release them), then one 300 MiB tensor is requested: the cap has no
room for a new segment and no hole is large enough, so the script dies. Prints PyTorch's figures
before the failure."""
import json
import torch
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(4 * 2**30 / total)
seg = 1280 << 20
segments = [torch.empty(seg, dtype=torch.uint8, device="cuda") for _ in range(3)]
del segments
small = [torch.empty(30 << 20, dtype=torch.uint8, device="cuda") for _ in range(3 * (seg // (30 << 20)))]
keep = small[1::2]
del small
print("torch-figures", json.dumps({"reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated(),
      "free_in_cache": torch.cuda.memory_reserved() - torch.cuda.memory_allocated(),
      "segments": len(torch.cuda.memory_snapshot())}), flush=True)
big = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
