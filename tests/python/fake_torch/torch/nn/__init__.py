# torch.nn of the plugin's stand-in PyTorch: a module with parameters, called through the
# global forward hooks that vramtrace's start-up hook registers (nn/modules/module.py).
from .modules.module import Module, Parameter  # noqa: F401
