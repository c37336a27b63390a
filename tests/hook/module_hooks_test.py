#!/usr/bin/env python3
"""The start-up hook's module hooks (python/vramtrace/_hook/_vramtrace_context.py) on the stand-in
PyTorch (tests/programs/fake_torch): a module made while a forward runs (BERT's masked-LM head
makes its CrossEntropyLoss inside its forward) is named under the module that called it, and a
hook of vramtrace's own that raises never reaches the program: it is said once and module calls
are no longer traced. (Naming such a module raised TypeError inside the program's forward, and
a transformers BertForMaskedLM died of it under `vramtrace run` on the H100.)

    tests/hook/module_hooks_test.py BUILD_DIR"""
import io
import sys

from checks import check, finish, use_standin_torch  # (beside this file)

use_standin_torch(sys.argv[1])
import torch  # noqa: E402  (the stand-in)
from _vramtrace_context import _Context  # noqa: E402


class Leaf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter((4, 4))

    def forward(self, x):
        return x


class Loss(torch.nn.Module):  # no parameters: as torch.nn.CrossEntropyLoss
    def forward(self, x):
        return x


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = Leaf()

    def forward(self, x):
        return Loss()(self.decoder(x))  # a module made and called inside the forward


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = Leaf(), Head()

    def forward(self, x):
        return self.head(self.body(x))


class Plain(torch.optim.Optimizer):
    def __init__(self, params):
        super().__init__(params, {})

    def step(self):
        pass


ctx = _Context(torch, str)
model, x = Net(), object()
opt = Plain(model.parameters())
try:
    model(x)  # the first iteration is traced: the module hooks mark every call
    opt.step()
    raised = None
except Exception as ex:  # noqa: BLE001  (whatever it is, the program must not see it)
    raised = "%s: %s" % (type(ex).__name__, ex)
check("a module made inside a forward: the program's forward does not raise", raised, None)
names = [line.split("\t")[2] for line in ctx.marks.module_lines]
check("... and it is named under the module that called it", names[-1], "head.Loss")
check("... the modules of the model as before", names[:-1], ["Net", "body", "head", "head.decoder"])

# A bug of the hook's own (its naming raising) inside the program's forward.
err, sys.stderr = sys.stderr, io.StringIO()
try:
    def broken(module):
        raise KeyError("boom")
    ctx.modules.module_id = broken
    raised = None
    for _ in range(2):
        model(x)
        opt.step()
except Exception as ex:  # noqa: BLE001
    raised = "%s: %s" % (type(ex).__name__, ex)
finally:
    said, sys.stderr = sys.stderr.getvalue(), err
check("a hook of vramtrace's own that raises: the program's forward does not", raised, None)
check("... said once on stderr", said,
      "vramtrace: the start-up hook's module hooks failed (KeyError: 'boom'): module calls are "
      "no longer traced; the program goes on\n")
check("... and nothing is left on the hook's stack", ctx.marks.stack, [])
finish("module hooks test")
