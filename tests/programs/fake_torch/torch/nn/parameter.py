# torch.nn.Parameter of the stand-in PyTorch: a tensor that needs a gradient, which a Module
# attribute registers as its parameter.
from .._tensor import Tensor


class Parameter(Tensor):
    def __init__(self, shape, dtype=None):
        from .._tensor import float32
        super().__init__(shape, dtype or float32, requires_grad=True)
