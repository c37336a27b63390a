# torch.optim of the plugin's stand-in PyTorch: what vramtrace's start-up hook registers on.
from .optimizer import Optimizer  # noqa: F401
