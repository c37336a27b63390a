# torch.cuda of the stand-in PyTorch: the allocator's memory module, PyTorch's per-process
# memory fraction (enforced by memory.segment()), the device's total memory, and CUDA graphs
# and private pools (graphs.py).
from . import graphs, memory  # noqa: F401
from .graphs import (CUDAGraph, MemPool, graph, graph_pool_handle,  # noqa: F401
                     use_mem_pool)
from .memory import (OutOfMemoryError, max_memory_allocated, mem_get_info,  # noqa: F401
                     memory_allocated, memory_stats)


def device_count():
    return 1


class _DeviceProperties:
    def __init__(self, total_memory):
        self.total_memory = total_memory


def get_device_properties(device=None):
    return _DeviceProperties(memory.mem_get_info()[1])


def set_per_process_memory_fraction(fraction, device=None):
    if not 0 <= fraction <= 1:
        raise ValueError("invalid fraction %r" % fraction)
    memory._fraction = float(fraction)


def get_per_process_memory_fraction(device=None):
    return memory._fraction
