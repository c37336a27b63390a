# A stand-in for the parts of PyTorch that vramtrace's start-up hook uses (tests only): a tiny
# caching allocator over the CUDA stand-in (through ctypes) that records trace entries the way
# torch.cuda.memory._record_memory_history does, and calls the OOM observers; tensors that own
# its blocks, nn.Module with the global forward hooks, an autograd that saves outputs for
# backward, and the Optimizer base with the global step hooks.
__version__ = "0.0+standin"
from . import _C, cuda  # noqa: E402,F401
from ._tensor import (Tensor, bfloat16, dtype, empty, empty_like, float32,  # noqa: E402,F401
                      is_grad_enabled, no_grad)
from .cuda.memory import OutOfMemoryError  # noqa: E402,F401
from . import autograd, compiler, nn, optim  # noqa: E402,F401


def is_autocast_enabled():
    return False
