#!/usr/bin/env python3
"""A fake step's second iteration repeated from its first (_Recorder.repeat and same_bodies in
python/vramtrace/_hook/_vramtrace_step.py), on request lists alone (this machine has no
PyTorch; scripts/gpu/fake_step_speed.py holds the repeat to the step run in full with real
PyTorch: the same requests, model by model).

The rules: the first iteration's forward, loss and backward asked again as new blocks, in
order, its frees of its own blocks with them; the loop's frees of the previous output before the
loss and of the previous loss before the backward, where it says; the body's blocks the first
optimizer step freed (the backward's last temporaries) freed again after the repeat; what the
repeat leaves live is what the body left live. Two iterations ask alike when their bodies make
the same sizes in the same order and free their own blocks at the same places, whatever they
free of earlier blocks.

    tests/hook/repeat_test.py"""
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "python", "vramtrace", "_hook")]
import _vramtrace_step as step  # noqa: E402
from _vramtrace_prediction import Prediction  # noqa: E402
from checks import check, finish  # noqa: E402  (beside this file)

MiB = 1 << 20
# The first iteration: forward (1: output, 2: a temporary freed in the forward), loss (3, its
# temporary 4 freed), backward (5: a gradient; 6: a temporary the optimizer step's first look
# frees), then the step's state (7).
first = [("a", 1, 8 * MiB, 11, "f"), ("a", 2, 4 * MiB, 12, "f"), ("f", 2, 0, 12, "f"),
         ("a", 3, 1 * MiB, 0, "l"), ("a", 4, 2 * MiB, 0, "l"), ("f", 4, 0, 0, "l"),
         ("a", 5, 16 * MiB, 0, "b"), ("a", 6, 3 * MiB, 0, "b"),
         ("f", 6, 0, 0, "s"), ("a", 7, 32 * MiB, 0, "s")]
body = first[:8]
# The second iteration as the repeat makes it from the first: new blocks in the same order, the
# previous output (1) freed before the loss, the previous loss (3) before the backward, the
# backward's last temporary (now 13) freed again where the optimizer step freed it.
REPEATED = [
    ("a", 8, 8 * MiB, 11, "f"), ("a", 9, 4 * MiB, 12, "f"), ("f", 9, 0, 12, "f"),
    ("f", 1, 0, 0, "l"),
    ("a", 10, 1 * MiB, 0, "l"), ("a", 11, 2 * MiB, 0, "l"), ("f", 11, 0, 0, "l"),
    ("f", 3, 0, 0, "b"),
    ("a", 12, 16 * MiB, 0, "b"), ("a", 13, 3 * MiB, 0, "b"),
    ("f", 13, 0, 0, "s")]

rec = step._Recorder.__new__(step._Recorder)
rec.requests, rec.blocks = list(first), 7
asked = []


def release(phase, has_requests):
    asked.append((phase, has_requests))
    block = {"l": 1, "b": 3}[phase]  # the previous output, then the previous loss
    rec.requests.append(("f", block, 0, 0, phase))
    return [block]


new, released = rec.repeat(body, [6], release)
check("the loop's frees asked before the loss and before the backward", asked,
      [("l", True), ("b", True)])
check("the released blocks", released, [1, 3])
check("the repeated requests, in order", rec.requests[len(first):], REPEATED)
check("what the repeat leaves live: the output, the loss, the gradient", new,
      {1: 8, 3: 10, 5: 12})
check("the blocks numbered on", rec.blocks, 13)

# A loss of no operator (the model's own): nothing before the loss, both frees before the
# backward.
rec.requests, rec.blocks = list(first), 7
asked.clear()
no_loss = [r for r in body if r[4] != "l"]
rec.repeat(no_loss, [], lambda phase, has: asked.append((phase, has)) or [])
check("a loss of no request: asked with none", asked, [("l", False), ("b", True)])

# Two iterations alike: the second frees the first's output, loss and gradient among its own.
second = [("f", 5, 0, 0, "f")] + REPEATED
check("two iterations alike", step.same_bodies(first + second), True)
other = [r if r[1] != 12 else (r[0], 12, 17 * MiB, 0, "b") for r in second]
check("a gradient of another size: not alike", step.same_bodies(first + other), False)
moved = second[:3] + [second[4], second[3]] + second[5:]
check("an earlier block freed beside its own: still alike",
      step.same_bodies(first + moved), True)
early = second[:2] + [("f", 8, 0, 0, "f")] + second[2:]
check("its own output freed in its forward: not alike", step.same_bodies(first + early), False)
check("one iteration alone: not alike", step.same_bodies(first), False)

# The glue (_repeat_body): what the first optimizer step freed of the body is freed again after
# the repeat, the gradients zero_grad let go are the forward's first frees, the previous output
# and loss are let go where the loop lets them go, and the parameters get gradients unrecorded.
class Param:
    grad = None


class Torch:
    @staticmethod
    def empty_like(p):
        return ("grad of", p)


rec = step._Recorder.__new__(step._Recorder)
rec.requests, rec.blocks, rec.phase, rec.off = list(first), 7, "s", False
# What Python lets go at each look: the gradient (block 5) after zero_grad, the output (1)
# when the loop lets it go, the loss (3) after it.
gone = [[5], [1], [3]]
registered = []


def collect():
    for b in gone.pop(0) if gone else []:
        rec.requests.append(("f", b, 0, 0, rec.phase))


rec.collect = collect
rec.existing = registered.extend
held = {"out": "output", "loss": "loss"}
params = [Param(), Param()]
repeated, late = step._repeat_body(Torch, rec, (body, 8, params), held)
check("the glue: the requests after the first iteration", rec.requests[len(first):],
      [("f", 5, 0, 0, "f")] + REPEATED)
check("the glue: the output and the loss let go", held, {"out": None, "loss": None})
check("the glue: the repeated output and loss, for the loop's end", (repeated, late),
      ({8, 10}, []))
check("the glue: gradients given unrecorded, as outside blocks",
      ([p.grad for p in params], registered, rec.off),
      ([("grad of", params[0]), ("grad of", params[1])],
       [("grad of", params[0]), ("grad of", params[1])], False))

# A step function that lets its output and loss go as it returns: the first optimizer step
# freed them after its last allocation, so the repeated ones are freed after the next
# optimizer step, not with the backward's last temporary before it.
rec = step._Recorder.__new__(step._Recorder)
ended = first + [("f", 1, 0, 0, "s"), ("f", 3, 0, 0, "s")]
rec.requests, rec.blocks, rec.phase, rec.off = list(ended), 7, "s", False
gone = [[5]]
rec.collect, rec.existing = collect, registered.extend
held = {"out": None, "loss": None}
repeated, late = step._repeat_body(Torch, rec, (body, 8, params), held)
check("a step function's output: freed after the next optimizer step", (repeated, late),
      (set(), [8, 10]))
check("a step function's output: the repeat frees the temporary alone",
      [r for r in rec.requests[len(ended):] if r[0] == "f" and r[4] == "s"],
      [("f", 13, 0, 0, "s")])

# An optimizer step that made no block (SGD without momentum): all it freed is freed after the
# next one, each once.
rec = step._Recorder.__new__(step._Recorder)
plain = first[:8] + [("f", 6, 0, 0, "s"), ("f", 1, 0, 0, "s")]
rec.requests, rec.blocks, rec.phase, rec.off = list(plain), 7, "s", False
gone = [[5]]
rec.collect, rec.existing = collect, registered.extend
held = {"out": None, "loss": None}
repeated, late = step._repeat_body(Torch, rec, (body, 8, params), held)
check("an optimizer step of no allocation: all it freed, after the next one",
      (repeated, late, [r for r in rec.requests[len(plain):] if r[0] == "f" and r[4] == "s"]),
      (set(), [13, 8], []))

# Where it is on: a pre-flight's fake steps (both stages) unless VRAMTRACE_FAKE_STEP_REPEAT=0,
# and nowhere else unless =1 (a finished run's, a first-step death's at exit).
class PreflightStub(Prediction):
    def __init__(self):
        self.preflight_dir, self.seen, self.predicted = "/nowhere", [], []
        self.preflight_line = "PF\t1\t8\t0\t1\tmodel\n"
        self.batches = None

    def fork_own(self, module):
        return None  # the stand-in step's stages (the program's own loop needs real PyTorch)

    def predict_first_step(self, module, line, runs):
        self.seen.append(("stage 1", step.REPEAT_ON))
        return self.preflight_line, None, 0

    def ask_preflight(self, folder, asked_from, stage):
        return "more" if stage == 1 else None

    def predict_steps(self, force, runs):
        self.seen.append(("stage 2", step.REPEAT_ON))


for setting, during, after in (("", True, False), ("0", False, False), ("1", True, True)):
    step.REPEAT_SETTING, step.REPEAT_ON = setting, setting == "1"
    stub = PreflightStub()
    stub.preflight(object())
    check("VRAMTRACE_FAKE_STEP_REPEAT=%s: repeated in the pre-flight's stages, and after" % setting,
          (stub.seen, step.REPEAT_ON), ([("stage 1", during), ("stage 2", during)], after))
finish("a fake step's second iteration repeated")
