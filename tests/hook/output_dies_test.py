#!/usr/bin/env python3
"""Whether a training loop lets the model's output go before its next forward, read from the
calling frame's bytecode (output_dies_with_call and caller_frame in
python/vramtrace/_hook/_vramtrace_step.py): the stand-in step frees the previous output at the
iteration's end when it does, else keeps it until the next is assigned. Each shape of loop
below calls a model that asks from its own frame, in a file under a folder standing for
PyTorch's, which caller_frame passes over as the hook's context skips PyTorch's folder.

    tests/hook/output_dies_test.py"""
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "python", "vramtrace", "_hook")]
import _vramtrace_step as step  # noqa: E402
from checks import check, finish  # noqa: E402  (beside this file)

# A model's __call__ as torch.nn.Module's: a frame of a file in PyTorch's folder (SKIP),
# which caller_frame passes over to reach the program's.
SKIP = ("/site-packages/torch/",)
torch_like = {"step": step, "sys": sys, "SKIP": SKIP}
exec(compile("def call(answers):\n"
             "    answers.append(step.output_dies_with_call(\n"
             "        step.caller_frame(sys._getframe(0), SKIP)))\n"
             "    return 'output'\n", SKIP[0] + "nn/modules/module.py", "exec"), torch_like)
model = torch_like["call"]


def train_step(answers):  # called once a batch: its locals go when it returns
    out = model(answers)
    out.strip()


def train_step_copies(answers):  # another name for the output: followed no further
    out = model(answers)
    kept = out
    return kept.strip()


def train_step_hf(answers):  # its output read through attributes, one of them returned
    out = model(answers)
    out.upper()
    return out.lower


def train_step_returns(answers):  # what it returns lives on in the loop
    out = model(answers)
    return out


def train_step_passes(answers, kept):  # the output itself given to a call, which may keep it
    out = model(answers)
    kept.append(out)


def train_step_keeps(self, answers):  # stored beyond the call
    self.out = model(answers)


def loop(answers):  # a loop body: the output held until the next one is assigned
    for _ in range(2):
        out = model(answers)
    del out


def while_loop(answers):
    n = 0
    while n < 2:
        out = model(answers)
        n += 1
    del out


def gen_step(answers):  # a generator's locals outlive each yield
    out = model(answers)
    yield out


class Holder:
    pass


cases = {"a train_step(batch) that returns nothing": (train_step, True),
         "one that reads it through attributes and returns one":
             (train_step_hf, True),
         "one that returns its output": (train_step_returns, False),
         "one that names it again": (train_step_copies, False),
         "one that passes it to a call": (lambda a: train_step_passes(a, []), False),
         "one that stores it on an object": (lambda a: train_step_keeps(Holder(), a), False),
         "a for loop around the call": (loop, False),
         "a while loop around the call": (while_loop, False),
         "a generator": (lambda a: list(gen_step(a)), False)}
for name, (run, dies) in cases.items():
    answers = []
    run(answers)
    check(name, set(answers), {dies})

answers = []
exec("out = model(answers)\n", {"model": model, "answers": answers})
check("a module's top level (its names outlive the statement)", answers, [False])
check("no frame outside PyTorch", step.caller_frame(None, SKIP), None)
finish("whether the loop lets the output go before its next forward")
