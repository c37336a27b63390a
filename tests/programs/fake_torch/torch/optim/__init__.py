# torch.optim of the stand-in PyTorch: the Optimizer base (optim/optimizer.py).
from .optimizer import Optimizer  # noqa: F401
