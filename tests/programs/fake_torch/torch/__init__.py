# A stand-in for the parts of PyTorch that vramtrace's start-up hook uses (tests only): a tiny
# caching allocator over the CUDA stand-in (through ctypes) that records trace entries the way
# torch.cuda.memory._record_memory_history does, and calls the OOM observers.
__version__ = "0.0+standin"
from . import _C, cuda  # noqa: E402,F401
