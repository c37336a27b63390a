# torch.nn of the stand-in PyTorch: Module (nn/modules/module.py), Parameter, functional.
from . import functional  # noqa: F401
from .modules import Module  # noqa: F401
from .parameter import Parameter  # noqa: F401
