# torch.nn of the plugin's stand-in PyTorch: a module with parameters, nothing more.
from .. import Tensor


class Parameter(Tensor):
    pass


class Module:
    def __init__(self):
        self._params = []

    def add(self, nbytes):
        self._params.append(Parameter(nbytes))

    def parameters(self, recurse=True):
        return iter(self._params)

    def buffers(self, recurse=True):
        return iter(())
