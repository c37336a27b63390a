# torch.nn.functional of the stand-in PyTorch: linear() makes its output (rows of the input x
# the weight's rows) and, with grad on, saves it for backward (torch/autograd.py).
from .. import autograd
from .._tensor import Tensor, is_grad_enabled


def linear(input, weight):
    out = Tensor((input.shape[0], weight.shape[0]), weight.dtype)
    if is_grad_enabled() and weight.requires_grad:
        autograd._save(out, weight)
    return out
