# A stand-in for the parts of PyTorch that the pytest plugin reads (tests/python only): a
# caching allocator over the CUDA stand-in that keeps its segments after their blocks are freed,
# with PyTorch's figures (memory_allocated, max_memory_allocated, memory_reserved), its allocator
# trace, and tensors, modules and parameters enough to tell a parameter's storage.
__version__ = "0.0+plugin-standin"
from . import cuda  # noqa: E402,F401


class _Storage:
    def __init__(self, block):
        self.block = block

    def data_ptr(self):
        seg, offset, _ = self.block
        return seg[0] + offset


class Tensor:
    """A tensor of `nbytes` on the device: one block of its own."""

    def __init__(self, nbytes):
        self.block = cuda.empty(nbytes)
        self.grad = None

    def untyped_storage(self):
        return _Storage(self.block)


from . import nn  # noqa: E402,F401
