# torch.Tensor of the stand-in PyTorch: a CUDA tensor that owns one block of the stand-in
# caching allocator (cuda/memory.py) and gives it back when it is freed: explicitly (free(),
# as autograd frees what it saved) or when the last reference goes (__del__), as PyTorch does.
# Also dtypes, grad mode (torch.no_grad) and torch.empty.
from .cuda import memory as _memory


class dtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return "torch." + self.name


float32 = dtype("float32", 4)
bfloat16 = dtype("bfloat16", 2)

_grad = [True]


def is_grad_enabled():
    return _grad[0]


class no_grad:
    def __enter__(self):
        self.prev = _grad[0]
        _grad[0] = False

    def __exit__(self, *exc):
        _grad[0] = self.prev
        return False


class device:
    def __init__(self, index):
        self.type, self.index = "cuda", index


class _Storage:
    def __init__(self, tensor):
        self._t = tensor

    def data_ptr(self):
        return self._t._addr

    def nbytes(self):
        return self._t._nbytes if self._t._addr else 0


class Tensor:
    def __init__(self, shape, dtype=float32, requires_grad=False, on_cuda=True):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device(0)
        self.is_cuda = on_cuda
        self.requires_grad = requires_grad
        self.grad = None
        n = dtype.itemsize
        for d in self.shape:
            n *= d
        self._nbytes = n
        self._addr = 0
        if on_cuda:
            self._addr = _memory.malloc(n)

    def to(self, device):
        # A host tensor moved to the GPU: a new block of its size (a GPU one stays itself).
        if self.is_cuda or not str(device).startswith("cuda"):
            return self
        return Tensor(self.shape, self.dtype)

    def cuda(self):
        return self.to("cuda")

    def untyped_storage(self):
        return _Storage(self)

    @property
    def nbytes(self):
        return self._nbytes

    def data_ptr(self):
        return self._addr

    def free(self):
        if self._addr:
            addr, self._addr = self._addr, 0
            _memory.release(addr)

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass  # at interpreter shutdown the allocator may be gone

    def backward(self):
        import torch  # torch.autograd.backward looked up now: the start-up hook wraps it
        torch.autograd.backward(self)


def empty(*size, dtype=float32, device="cuda", requires_grad=False):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return Tensor(size, dtype, requires_grad, on_cuda=str(device).startswith("cuda"))


def empty_like(t):
    return Tensor(t.shape, t.dtype)
