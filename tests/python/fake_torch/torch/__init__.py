# A stand-in for the parts of PyTorch that the pytest plugin reads (tests/python only): a
# caching allocator over the CUDA stand-in that keeps its segments after their blocks are freed,
# with PyTorch's figures (memory_allocated, max_memory_allocated, memory_reserved).
__version__ = "0.0+plugin-standin"
from . import cuda  # noqa: E402,F401
