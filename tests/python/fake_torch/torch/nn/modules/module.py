# torch.nn.modules.module of the plugin's stand-in PyTorch: Module, whose call runs the global
# forward hooks (what vramtrace's start-up hook registers to learn the models and their
# parameters), and Parameter.
from ... import Tensor

_pre_hooks, _post_hooks = {}, {}


class _Handle:
    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)


def register_module_forward_pre_hook(hook):
    key = object()
    _pre_hooks[key] = hook
    return _Handle(_pre_hooks, key)


def register_module_forward_hook(hook, always_call=False):
    key = object()
    _post_hooks[key] = hook
    return _Handle(_post_hooks, key)


class Parameter(Tensor):
    pass


class Module:
    training = True

    def __init__(self):
        self._params = []

    def add(self, nbytes):
        self._params.append(Parameter(nbytes))

    def forward(self):
        return None

    def __call__(self, *args):
        for hook in list(_pre_hooks.values()):
            hook(self, args)
        out = self.forward(*args)
        for hook in list(_post_hooks.values()):
            hook(self, args, out)
        return out

    def parameters(self, recurse=True):
        return iter(self._params)

    def named_parameters(self):
        return iter(("p%d" % i, p) for i, p in enumerate(self._params))

    def buffers(self, recurse=True):
        return iter(())

    def named_buffers(self):
        return iter(())

    def named_modules(self):
        return iter([("", self)])
