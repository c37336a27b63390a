#!/usr/bin/env python3
"""The pytest plugin's Python frames for every block, asked of the start-up hook
(sitecustomize.vramtrace_frames_for_good -> _vramtrace_lines.frames_for_good) on the stand-in
PyTorch (tests/programs/fake_torch): the frames stay on inside the phases from then on, the
hook keeps switching its sampled windows of the trace, and the hook does not take the plugin
for a program that set the trace itself. A program that did set it keeps it: the hook then
declines, and the plugin sets the trace as before.

    tests/hook/frames_for_good_test.py BUILD_DIR"""
import sys

from checks import check, finish, use_standin_torch  # (beside this file)

use_standin_torch(sys.argv[1])
import torch  # noqa: E402  (the stand-in)
import sitecustomize  # noqa: E402  (the hook; without VRAMTRACE_TORCH_DIR it attaches nothing)
from _vramtrace_context import _Context  # noqa: E402
from _vramtrace_lines import allocator_trace  # noqa: E402

memory = torch.cuda.memory


def hooked():
    """A context as the hook makes it by default: frames between the phases, windows sampled."""
    record = memory._record_memory_history
    ctx = _Context(torch, str)
    ctx.lines.lines_between_phases(1000)
    ctx.trace.watch_program()
    ctx.windows.sample_trace(allocator_trace(record, 1000), 1000, None)
    sitecustomize._vramtrace_ctx["context"] = ctx
    return ctx


ctx = hooked()
check("between the phases the frames are on", memory._context, "alloc")
ctx.lines.phase_begin()
check("inside a phase they are off", memory._context, None)
check("the plugin's ask is taken by the hook", sitecustomize.vramtrace_frames_for_good(), True)
check("... the frames are on again at once", memory._context, "alloc")
ctx.lines.phase_begin()
check("... and stay on inside the phases", memory._context, "alloc")
ctx.lines.check_lines(1)
check("... even when the iteration's lines are counted", memory._context, "alloc")
check("... the hook keeps its sampled windows of the trace", ctx.trace.window_record is not None, True)
check("... and does not take the plugin for the program", ctx.trace.program_trace, False)

# A program that sets the trace itself keeps its settings: the hook declines the plugin's ask.
ctx = hooked()
memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10)
check("a program's own trace: its windows end", ctx.trace.window_record, None)
check("... and the hook declines the plugin's ask", sitecustomize.vramtrace_frames_for_good(),
      False)
check("... the program's settings stand", memory._context, None)

# No context (VRAMTRACE_TORCH_CONTEXT=off): the plugin sets the trace itself.
sitecustomize._vramtrace_ctx.pop("context")
check("without the hook's context the ask is declined", sitecustomize.vramtrace_frames_for_good(),
      False)
finish("frames for good")
