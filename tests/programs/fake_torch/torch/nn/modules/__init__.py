# torch.nn.modules of the stand-in PyTorch.
from .module import Module  # noqa: F401
