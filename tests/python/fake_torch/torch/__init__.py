# A stand-in for the parts of PyTorch that the pytest plugin and vramtrace's start-up hook read
# (tests/python only): a caching allocator over the CUDA stand-in that keeps its segments after
# their blocks are freed, with PyTorch's figures (memory_allocated, max_memory_allocated,
# memory_reserved), its allocator trace, and tensors, modules, parameters and optimizers enough
# for the hook to learn the models it sees called and tell a parameter's storage.
__version__ = "0.0+plugin-standin"
from . import cuda  # noqa: E402,F401


class _Storage:
    def __init__(self, block):
        self.block = block

    def data_ptr(self):
        seg, offset, _ = self.block
        return seg[0] + offset

    def nbytes(self):
        return self.block[2]


class _Device:
    index = 0


class Tensor:
    """A tensor of `nbytes` on the device: one block of its own."""
    is_cuda = True
    device = _Device()
    dtype = "uint8"

    def __init__(self, nbytes):
        self.block = cuda.empty(nbytes)
        self.grad = None
        self.shape = (nbytes,)

    def untyped_storage(self):
        return _Storage(self.block)

    def to(self, *args, **kwargs):
        return self

    def cuda(self, *args, **kwargs):
        return self


def is_grad_enabled():
    return True


def is_autocast_enabled():
    return False


from . import autograd, nn, optim  # noqa: E402,F401
