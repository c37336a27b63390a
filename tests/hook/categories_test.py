#!/usr/bin/env python3
"""The start-up hook's categories of PyTorch's blocks (python/vramtrace/_hook/sitecustomize.py,
vramtrace_categories(), which the pytest plugin names a test's blocks by): the named storages of
the models and optimizers it holds by weak reference, then the phase each block was made in
and whether it outlived it, as the collector's rules say (collector/model/torch_memory.h). The
hook is loaded from its file with no VRAMTRACE_TORCH_DIR, so nothing of it starts; its context
is a stand-in holding only what the function reads."""
import array
import importlib.util
import os
import sys
import weakref

HOOK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                        "vramtrace", "_hook")
sys.path.insert(0, HOOK_DIR)  # the files beside sitecustomize.py, as `vramtrace run` puts them
spec = importlib.util.spec_from_file_location("vt_hook_under_test",
                                              os.path.join(HOOK_DIR, "sitecustomize.py"))
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
import _vramtrace_marks as marks  # noqa: E402
from checks import check, finish  # noqa: E402  (beside this file)


class Storage:
    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


class Tensor:
    def __init__(self, ptr, grad=None):
        self.storage, self.grad = Storage(ptr), grad

    def untyped_storage(self):
        return self.storage


class Model:
    pass


class Optimizer:
    def __init__(self, params):
        self.param_groups = [{"params": params}]
        self.state = {}


class Torch:
    Tensor = Tensor


class Marks:
    """What vramtrace_categories() reads of the hook's Marks: times in ns, codes (kind in the
    low 4 bits, an id above)."""

    def __init__(self, timeline):
        self.times = array.array("q", [t for t, _ in timeline])
        self.codes = array.array("q", [c for _, c in timeline])


class Storages:
    """... and of its Storages: the models' parameters and the optimizers, weakly."""

    def __init__(self):
        self.torch = Torch
        self.roots, self.optimizers = [], []


class Context:
    def __init__(self, timeline):
        self.marks, self.storages = Marks(timeline), Storages()


check("no context (before torch, or VRAMTRACE_TORCH_CONTEXT=off): no category",
      hook.vramtrace_categories([(0x1000, 5, None)]), [None])

# A training step: forward (with a module inside it, autocast on), backward, optimizer step; an
# evaluation under no_grad; a second training forward still running.
US = 1000
timeline = [(1 * US, marks._SITE | 1 << 4), (1 * US, marks._FWD | (1 | 1 << 31) << 4),
            (1200, marks._MOD | 2 << 4), (1300, marks._MOD_END | 2 << 4),
            (2 * US, marks._FWD_END | 1 << 4),
            (3 * US, marks._BWD), (4 * US, marks._BWD_END),
            (5 * US, marks._STEP | 1 << 4), (6 * US, marks._STEP_END | 1 << 4),
            (7 * US, marks._FWD_EVAL | 1 << 4), (8 * US, marks._FWD_END | 1 << 4),
            (9 * US, marks._FWD_EVAL_GRAD | 1 << 4), (10 * US, marks._FWD_END | 1 << 4),
            (11 * US, marks._FWD | 1 << 4)]
ctx = Context(timeline)
model, grad = Model(), Tensor(0x2000)
param = Tensor(0x1000, grad)
state = Tensor(0x3000)
optimizer = Optimizer([param])
optimizer.state[param] = {"exp_avg": state, "step": 3}
ctx.storages.roots.append((weakref.ref(model), [("fc.weight", weakref.ref(param))], []))
ctx.storages.optimizers.append(weakref.ref(optimizer))
hook._vramtrace_ctx["context"] = ctx
cases = [
    ("a parameter, whenever it was made", (0x1000, 1.5, None), "parameters"),
    ("its .grad", (0x2000, 3.5, None), "gradients"),
    ("the optimizer's state of it", (0x3000, 0.5, None), "optimizer state"),
    ("made before any phase", (0x10, 0.5, None), "inputs and data"),
    ("made in the forward, still held", (0x20, 1.5, None), "activations"),
    ("made in the forward, freed after its end", (0x30, 1.5, 2.5), "activations"),
    ("made in the forward, freed inside it", (0x40, 1.5, 1.8), "temporaries"),
    ("made between forward and backward", (0x50, 2.5, None), "inputs and data"),
    ("made in backward, kept", (0x60, 3.5, None), "gradients"),
    ("made in backward, freed inside it", (0x70, 3.5, 3.9), "temporaries"),
    ("made in the optimizer step, kept", (0x80, 5.5, 7.5), "optimizer state"),
    ("made in the optimizer step, freed inside it", (0x90, 5.5, 5.9), "temporaries"),
    ("made in an evaluation under no_grad, kept (outputs)", (0xa0, 7.5, None), "inputs and data"),
    ("made in an evaluation with grad on, kept (a graph)", (0xb0, 9.5, None), "activations"),
    ("made in the forward still running, held", (0xc0, 11.5, None), "activations"),
    ("made in the forward still running, freed in it", (0xd0, 11.5, 11.7), "temporaries"),
]
got = hook.vramtrace_categories([c[1] for c in cases])
for (name, _, expected), category in zip(cases, got):
    check(name, category, expected)
# Each block alone: the phases looked at are those around its own times.
for name, block, expected in cases:
    check(name + " (alone)", hook.vramtrace_categories([block]), [expected])
# A model and an optimizer the program dropped name nothing: the parameter's block is then a
# forward's like any other.
del model, optimizer
check("a dropped model's parameter", hook.vramtrace_categories([(0x1000, 1.5, None)]),
      ["activations"])
finish("categories test")
