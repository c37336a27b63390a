# torch.optim.optimizer of the stand-in PyTorch: Optimizer with param_groups, per-parameter
# state and PyTorch's global step hooks (register_optimizer_step_pre_hook / _post_hook), run
# around every subclass's step() as PyTorch's wrapper does.
from collections import OrderedDict, defaultdict
import functools

_global_optimizer_pre_hooks = OrderedDict()
_global_optimizer_post_hooks = OrderedDict()
_next_hook = [0]


class _Handle:
    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)


def _register(hooks, hook):
    _next_hook[0] += 1
    hooks[_next_hook[0]] = hook
    return _Handle(hooks, _next_hook[0])


def register_optimizer_step_pre_hook(hook):
    return _register(_global_optimizer_pre_hooks, hook)


def register_optimizer_step_post_hook(hook):
    return _register(_global_optimizer_post_hooks, hook)


def _with_hooks(step):
    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        for hook in list(_global_optimizer_pre_hooks.values()):
            hook(self, args, kwargs)
        out = step(self, *args, **kwargs)
        for hook in list(_global_optimizer_post_hooks.values()):
            hook(self, args, kwargs)
        return out
    return wrapper


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults = defaults
        self.param_groups = [dict(defaults, params=list(params))]
        self.state = defaultdict(dict)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            cls.step = _with_hooks(cls.__dict__["step"])

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None  # the gradient's block goes with its last reference
