# torch.nn.modules.module of the stand-in PyTorch: Module with PyTorch's global forward hooks
# (register_module_forward_pre_hook / register_module_forward_hook: __call__ runs the pre
# hooks, forward, then the post hooks; when the forward raises, only the post hooks
# registered with always_call=True run, with output None), the registration of parameters,
# buffers and submodules by attribute, and their named walks. FAKE_TORCH_VERSION=2.0: no
# always_call, as in PyTorch 2.0.
import os
from collections import OrderedDict

from ..parameter import Parameter

_global_forward_pre_hooks = OrderedDict()
_global_forward_hooks = OrderedDict()
_global_forward_hooks_always_called = OrderedDict()
_next_hook = [0]


class _Handle:
    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)
        _global_forward_hooks_always_called.pop(self.key, None)


def _register(hooks, hook):
    _next_hook[0] += 1
    hooks[_next_hook[0]] = hook
    return _Handle(hooks, _next_hook[0])


def register_module_forward_pre_hook(hook):
    return _register(_global_forward_pre_hooks, hook)


def register_module_forward_hook(hook, *, always_call=False):
    handle = _register(_global_forward_hooks, hook)
    if always_call:
        _global_forward_hooks_always_called[handle.key] = True
    return handle


if os.environ.get("FAKE_TORCH_VERSION") == "2.0":
    def register_module_forward_hook(hook):  # noqa: F811 (PyTorch 2.0: no always_call)
        return _register(_global_forward_hooks, hook)


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name, tensor):
        self._buffers[name] = tensor
        object.__setattr__(self, name, tensor)

    def forward(self, *args):
        raise NotImplementedError

    def __call__(self, *args):
        output = None
        called = set()
        try:
            for hook in list(_global_forward_pre_hooks.values()):
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
            output = self.forward(*args)
            for key, hook in list(_global_forward_hooks.items()):
                called.add(key)
                result = hook(self, args, output)
                if result is not None:
                    output = result
            return output
        except Exception:
            for key, hook in list(_global_forward_hooks.items()):
                if key in _global_forward_hooks_always_called and key not in called:
                    try:
                        hook(self, args, output)
                    except Exception:
                        pass
            raise

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(prefix + ("." if prefix else "") + name)

    def _named(self, attr):
        for mprefix, m in self.named_modules():
            for name, t in getattr(m, attr).items():
                yield (mprefix + "." if mprefix else "") + name, t

    def named_parameters(self):
        return self._named("_parameters")

    def parameters(self):
        return (p for _, p in self.named_parameters())

    def named_buffers(self):
        return self._named("_buffers")

    def train(self, mode=True):
        for _, m in self.named_modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)
