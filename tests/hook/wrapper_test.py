#!/usr/bin/env python3
"""The start-up hook's Module.__call__ wrapper (python/vramtrace/_hook/_vramtrace_context.py) on
the stand-in PyTorch (tests/programs/fake_torch): in an iteration that is not traced, the calls
inside an outermost module call go straight through before anything else is asked (each
question there cost about 0.6 us on every module call of a launch-bound step), while the
outermost call is still marked; in a traced iteration the module hooks mark every call.

    tests/hook/wrapper_test.py BUILD_DIR"""
import sys

from checks import check, finish, use_standin_torch  # (beside this file)

use_standin_torch(sys.argv[1])
import torch  # noqa: E402  (the stand-in)
from _vramtrace_context import _Context  # noqa: E402
import _vramtrace_marks as marks  # noqa: E402


class Leaf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter((4, 4))

    def forward(self, x):
        return x


class Block(torch.nn.Module):  # two leaves inside each block: calls nested two deep
    def __init__(self):
        super().__init__()
        self.a, self.b = Leaf(), Leaf()

    def forward(self, x):
        return self.b(self.a(x))


class Net(torch.nn.Module):  # 1 outermost call, 3 blocks, 6 leaves: 10 module calls a forward
    def __init__(self):
        super().__init__()
        self.b0, self.b1, self.b2 = Block(), Block(), Block()

    def forward(self, x):
        return self.b2(self.b1(self.b0(x)))


class Plain(torch.optim.Optimizer):
    def __init__(self, params):
        super().__init__(params, {})

    def step(self):
        pass


asked = [0]


def is_compiling():
    asked[0] += 1
    return False


torch.compiler.is_compiling = is_compiling  # read by the context when it is made
ctx = _Context(torch, str)
model, x = Net(), object()
opt = Plain(model.parameters())


def iteration():
    """One iteration; what it asked is_compiling() and the kinds of the marks it left."""
    asked[0] = 0
    start = len(ctx.marks.codes)
    model(x)
    opt.step()
    return asked[0], [c & 15 for c in ctx.marks.codes[start:]], [c >> 4 for c in ctx.marks.codes[start:]]


for i in range(3):  # the traced iterations (module hooks on) are the first 3 optimizer steps
    n, kinds, idents = iteration()
check("a traced iteration marks each of the 9 calls inside the outermost one (iteration 3)",
      kinds.count(marks._MOD), 9)
n, kinds, idents = iteration()
check("an iteration between the traced ones asks is_compiling() once: for the outermost call",
      n, 1)
check("... and marks no call inside it", kinds.count(marks._MOD), 0)
check("... marks the outermost forward as one whose calls were not traced (bit 30)",
      [bool(idents[k] & (1 << 30)) for k, kind in enumerate(kinds) if kind == marks._FWD], [True])
check("... and its end", kinds.count(marks._FWD_END), 1)
check("... and the optimizer step", kinds.count(marks._STEP), 1)
check("nothing is left inside an outermost call", (ctx.inside, ctx.marks.in_root), (False, False))


class Boom(Exception):
    pass


def raising(y):
    raise Boom()


model.b1.forward = raising  # a forward that raises between the traced iterations
try:
    model(x)
except Boom:
    pass
check("a forward that raised leaves no outermost call running", (ctx.inside, ctx.marks.in_root),
      (False, False))
del model.b1.forward
n, kinds, idents = iteration()
check("the next iteration asks is_compiling() once again", n, 1)
finish("wrapper test")
