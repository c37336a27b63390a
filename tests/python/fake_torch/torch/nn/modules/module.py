# torch.nn.modules.module of the plugin's stand-in PyTorch: Module, whose call runs the global
# forward hooks and its own (what vramtrace's start-up hook registers to learn the models and
# their parameters, and to mark the outermost calls between its traced iterations), and
# Parameter.
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

    def register_forward_pre_hook(self, hook, with_kwargs=False):
        if "_own_pre" not in self.__dict__:
            self._own_pre = {}
        key = object()
        self._own_pre[key] = (hook, with_kwargs)
        return _Handle(self._own_pre, key)

    def register_forward_hook(self, hook, always_call=False):
        if "_own_post" not in self.__dict__:
            self._own_post = {}
        key = object()
        self._own_post[key] = hook
        return _Handle(self._own_post, key)

    # As PyTorch runs them: the global hooks, then the module's own; the forward hooks also
    # when the forward raises (always_call, as the start-up hook registers them).
    def __call__(self, *args, **kwargs):
        for hook in list(_pre_hooks.values()):
            hook(self, args)
        for hook, with_kwargs in list(self.__dict__.get("_own_pre", {}).values()):
            if with_kwargs:
                hook(self, args, kwargs)
            else:
                hook(self, args)
        out = None
        try:
            out = self.forward(*args, **kwargs)
        finally:
            for hook in list(_post_hooks.values()) + list(self.__dict__.get("_own_post", {}).values()):
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
