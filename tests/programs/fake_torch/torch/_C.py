# torch._C's OOM observer registration (see cuda/memory.py).
from .cuda import memory as _memory


def _cuda_attach_out_of_memory_observer(callback):
    _memory._observers.append(callback)
