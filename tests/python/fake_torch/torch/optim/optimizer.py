# torch.optim.optimizer of the plugin's stand-in PyTorch: the global step hooks that
# vramtrace's start-up hook registers, and an Optimizer whose step() runs them.
from ..nn.modules.module import _Handle

_pre_hooks, _post_hooks = {}, {}


def register_optimizer_step_pre_hook(hook):
    key = object()
    _pre_hooks[key] = hook
    return _Handle(_pre_hooks, key)


def register_optimizer_step_post_hook(hook):
    key = object()
    _post_hooks[key] = hook
    return _Handle(_post_hooks, key)


class Optimizer:
    def __init__(self, params):
        self.param_groups = [{"params": list(params)}]
        self.state = {}

    def step(self):
        for hook in list(_pre_hooks.values()):
            hook(self, (), {})
        for hook in list(_post_hooks.values()):
            hook(self, (), {})
