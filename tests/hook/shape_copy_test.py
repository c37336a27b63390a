#!/usr/bin/env python3
"""The start-up hook's copy of a model as shapes (ShapeCopy in
python/vramtrace/_hook/_vramtrace_step.py), by its own rules, on a small stand-in for the parts
of PyTorch it uses (this machine has no PyTorch; the GPU script scripts/gpu/fake_step_profile.py
holds the copy to the model itself with real PyTorch: the same requests from both).

The rules: every tensor the modules hold, at any depth (parameters, buffers, a plain tensor
attribute, one in a list), becomes a meta tensor of the same shape, strides and dtype, its device
kept beside it, and no tensor is copied with data (the real Tensor.__deepcopy__ is never called,
and it is put back after); a tied parameter stays one; what a module holds besides modules,
tensors, plain containers, bound methods and partials is shared (a LightningModule's trainer);
a bound method is copied onto the copy; the optimizer becomes its class and its groups' settings
over the copy's parameters, a setting held in a device tensor left out; each copied module has
the id its original had; a tensor of another class or layout refuses the copy.

    tests/hook/shape_copy_test.py"""
import functools
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "python", "vramtrace", "_hook")]
import _vramtrace_step as step  # noqa: E402
from checks import check, finish  # noqa: E402  (beside this file)


class Device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index

    def __repr__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)


class Tensor:
    data_copies = 0  # copies with data: there must be none
    strided = "strided"

    def __init__(self, shape, dtype="float32", device=Device("cuda", 0), stride=None,
                 requires_grad=False, layout="strided"):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self._stride = tuple(stride) if stride else tuple(
            int(__import__("math").prod(shape[i + 1:])) for i in range(len(shape)))
        self.requires_grad, self.is_leaf, self.layout = requires_grad, True, layout

    def stride(self):
        return self._stride

    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self

    def __deepcopy__(self, memo):
        Tensor.data_copies += 1
        return Tensor(self.shape, self.dtype, self.device, self._stride, self.requires_grad)


class Parameter(Tensor):
    def __init__(self, data=None, requires_grad=True):
        super().__init__(data.shape, data.dtype, data.device, data.stride(), requires_grad)

    def __deepcopy__(self, memo):
        Tensor.data_copies += 1
        return Parameter(self, self.requires_grad)


class Module:
    def __init__(self):
        self._parameters, self._buffers, self._modules = {}, {}, {}

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self.__dict__["_parameters"][name] = value
        elif isinstance(value, Module):
            self.__dict__["_modules"][name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for d in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(d, {}):
                return self.__dict__[d][name]
        raise AttributeError(name)

    def modules(self):
        yield self
        for m in self._modules.values():
            yield from m.modules()

    def parameters(self):
        seen = set()
        for m in self.modules():
            for p in m._parameters.values():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p

    def buffers(self):
        for m in self.modules():
            yield from m._buffers.values()


class Torch:
    """The parts of PyTorch that ShapeCopy uses."""
    Tensor, strided = Tensor, "strided"

    class nn:
        pass

    @staticmethod
    def empty_strided(shape, stride, dtype=None, device=None):
        return Tensor(shape, dtype, Device(device), stride)


Torch.nn.Parameter, Torch.nn.Module = Parameter, Module
torch = Torch()


class Trainer:
    copies = 0

    def __deepcopy__(self, memo):
        Trainer.copies += 1
        return Trainer()


class Block(Module):
    def __init__(self, shared=None):
        super().__init__()
        self.fc = Module()
        self.fc.weight = Parameter(Tensor((8, 4), device=Device("cuda", 1)))
        self._buffers["running_mean"] = Tensor((8,), device=Device("cuda", 1))
        if shared is not None:
            self.fc.tied = shared
        self.scale = 0.5

    def forward(self, x):
        return x


class Net(Module):
    def __init__(self):
        super().__init__()
        self.embed = Parameter(Tensor((100, 8), dtype="bfloat16", device=Device("cuda", 1)))
        self.block1 = Block(shared=self.embed)
        self.block2 = Block()
        self.cache = [Tensor((3, 3), stride=(1, 3), device=Device("cuda", 1))]
        self.rope = Tensor((16, 2), device=Device("cuda", 1))
        self.trainer = Trainer()
        self.run = self.block1.forward            # a bound method: onto the copy
        self.act = functools.partial(max, 0)      # copied (a partial)


class Adam:
    pass


model = Net()
opt = Adam()
opt.param_groups = [{"params": [model.embed, model.block1.fc.weight], "lr": 0.001,
                     "capturable": False},
                    {"params": [model.block2.fc.weight], "lr": Tensor(()), "betas": (0.9, 0.99)}]
ids = {id(m): n for n, m in enumerate(model.modules(), start=1)}
deepcopy_before = (Tensor.__deepcopy__, Parameter.__deepcopy__)

shape = step.ShapeCopy(torch, model, opt, lambda m: ids.get(id(m), 0))
c = shape.model

check("no tensor copied with data", Tensor.data_copies, 0)
check("Tensor and Parameter's __deepcopy__ put back",
      (Tensor.__deepcopy__, Parameter.__deepcopy__) == deepcopy_before, True)
check("a copy, not the model", c is not model and c.block1 is not model.block1, True)
metas = [c.embed, c.block1.fc.weight, c.block2.fc.weight, c.block1._buffers["running_mean"],
         c.cache[0], c.rope]
check("every tensor a meta tensor", [t.device.type for t in metas], ["meta"] * 6)
check("parameters stay parameters",
      [type(t).__name__ for t in (c.embed, c.block1.fc.weight, c.rope)],
      ["Parameter", "Parameter", "Tensor"])
check("shapes, strides and dtypes kept",
      [(t.shape, t.stride(), t.dtype) for t in (c.embed, c.cache[0])],
      [((100, 8), (8, 1), "bfloat16"), ((3, 3), (1, 3), "float32")])
check("each one's device kept beside it",
      sorted(set(repr(shape.devices[id(t)]) for t in metas)), ["cuda:1"])
check("requires_grad kept", (c.embed.requires_grad, c.rope.requires_grad), (True, False))
check("a tied parameter stays one", c.block1.fc.tied is c.embed, True)
check("the trainer shared, not copied", (c.trainer is model.trainer, Trainer.copies), (True, 0))
check("a bound method bound to the copy", c.run.__self__ is c.block1, True)
check("plain settings kept", (c.block1.scale, c.act(-3)), (0.5, 0))
check("each copied module has its original's id",
      [shape.module_ids(m) for m in c.modules()], list(range(1, 1 + len(ids))))
check("a module not copied has none", shape.module_ids(model.block1), 0)
check("the device of the model's first parameter", shape.device, 1)
o = shape.optimizer
check("the optimizer: its class", o.cls is Adam, True)
check("the optimizer: its groups over the copy's parameters",
      [[id(p) for p in g["params"]] for g in o.param_groups],
      [[id(c.embed), id(c.block1.fc.weight)], [id(c.block2.fc.weight)]])
check("the optimizer: its settings, one held in a device tensor left out",
      [{k: v for k, v in g.items() if k != "params"} for g in o.param_groups],
      [{"lr": 0.001, "capturable": False}, {"betas": (0.9, 0.99)}])

# A tensor of another layout (sparse) or class refuses the copy, before anything is copied.
model.block2._buffers["index"] = Tensor((4,), layout="sparse_coo")
try:
    step.ShapeCopy(torch, model, opt, lambda m: 0)
    refused = ""
except RuntimeError as ex:
    refused = str(ex)
check("a sparse tensor refuses the copy",
      refused, "its tensor of class Tensor and layout sparse_coo cannot be copied as shapes")
check("and nothing was copied with data", Tensor.data_copies, 0)
finish("shape copy")
