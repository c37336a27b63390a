# torch.cuda of the stand-in PyTorch: only the allocator's memory module.
from . import memory  # noqa: F401
