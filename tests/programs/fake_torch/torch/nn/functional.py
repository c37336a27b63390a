# torch.nn.functional of the stand-in PyTorch: linear() makes its output (rows of the input x
# the weight's rows), launches one kernel (fake_gemm) and, with grad on, saves the output for
# backward (torch/autograd.py).
from .. import autograd
from .._tensor import Tensor, is_grad_enabled
from ..cuda import memory as _memory


def linear(input, weight):
    out = Tensor((input.shape[0], weight.shape[0]), weight.dtype)
    _memory.launch("fake_gemm")
    if is_grad_enabled() and weight.requires_grad:
        autograd._save(out, weight)
    return out
