"""The marks of vramtrace's start-up hook (sitecustomize.py), and the one object every part of
its context shares: what it saw, as the side channel will say it (the marks, K lines, in two
arrays; the program's lines they name, S lines; the modules, M lines; the exception that reached
the top, X; the pools CUDA graphs captured into), and where the program is now (the module calls
on the stack, a backward, an optimizer step, an outermost call between the traced iterations).
The parts (_vramtrace_storages, _vramtrace_modules, _vramtrace_lines, _vramtrace_windows,
_vramtrace_prediction) read and write this, and of each other only what they are handed;
_vramtrace_context wires them to PyTorch.

The kinds of marks are in the order of common/side_channel.h's VRAMTRACE_SIDE_MARKS
(tests/hook/side_channel_test.py checks)."""
import os
import sys

from _vramtrace_frames import is_program_file

(_MOD, _MOD_END, _FWD, _FWD_EVAL, _FWD_END, _BWD, _BWD_END, _STEP, _STEP_END, _SITE, _OOM,
 _FWD_EVAL_GRAD, _MOVE, _MOVE_END, _NAMED, _FED_BACK) = range(16)
# A LaunchesStopped record's reason when the hook stops them (common/records.h, StopReason).
_STOPPED_BY_HOOK = 1


class Marks:
    """What the hook saw and where the program is: see the module's text."""

    MAX_MARKS = 4_000_000  # the oldest half is dropped past this: long runs stay bounded

    def __init__(self, torch, clean):
        import array
        import threading
        import time
        self.clean = clean
        self.now = time.time_ns
        self.main = threading.main_thread().ident
        self.get_ident = threading.get_ident
        self.times, self.codes = array.array("q"), array.array("q")
        self.dropped = 0         # marks dropped (the oldest half, past MAX_MARKS)
        self.module_lines = []   # "M" lines (_vramtrace_context's module table writes them)
        self.sites = {}          # (file, line, function) -> sid
        self.program_files = {}  # file -> whether it is the program's own code
        self.site_lines = []     # "S" lines
        self.exception = None    # the X line of the exception that reached the top
        self.graph_pools = set()  # pools CUDA graphs captured into (their segment_pool_id)
        self.oom_seen = False
        # Where the program is: the module calls traced (mid, module), a backward running
        # (nested: a checkpoint's inside another), an optimizer step, an outermost call marked
        # alone between the traced iterations.
        self.stack = []
        self.in_backward = 0
        self.in_step = False
        self.in_root = False
        # The user's line is the innermost frame in none of these: torch, the hook's own
        # files (this folder), contextlib and functools.
        torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        here = os.path.dirname(os.path.abspath(__file__)) + os.sep
        self.skip = (torch_dir, here, os.path.dirname(os.__file__) + os.sep + "contextlib.py",
                     os.path.dirname(os.__file__) + os.sep + "functools.py")

    def on_main(self):
        """Whether the caller runs on the main thread: the only one whose calls are marked."""
        return self.get_ident() == self.main

    def between_phases(self):
        """No forward, backward or optimizer step is running."""
        return not (self.stack or self.in_root or self.in_backward or self.in_step)

    def mark(self, kind, ident, trim=True):
        """A mark now. `trim`: past MAX_MARKS the oldest half is dropped; a mark made where the
        side channel is written (on the thread of a report of the moment too, while the
        program's thread marks) passes False and is appended as is."""
        self.times.append(self.now())
        self.codes.append(kind | (ident << 4))
        if trim and len(self.times) > self.MAX_MARKS:
            half = self.MAX_MARKS // 2
            del self.times[:half]
            del self.codes[:half]
            self.dropped += half

    def site(self):
        """The innermost frame of the program's own code (_vramtrace_frames' rule, the
        collector's too: not PyTorch's, an installed package's, the hook's); where none is, the
        innermost outside torch, the hook, contextlib and functools."""
        f = sys._getframe(2)
        skip, own = self.skip, self.program_files
        first = None
        while f is not None:
            name = f.f_code.co_filename
            if not name.startswith(skip):
                first = first or f
                mine = own.get(name)
                if mine is None:
                    mine = own[name] = is_program_file(name)
                if mine:
                    break
            f = f.f_back
        f = f or first
        if f is None:
            return 0
        key = (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
        sid = self.sites.get(key)
        if sid is None:
            sid = self.sites[key] = len(self.sites) + 1
            self.site_lines.append("S\t%d\t%s\t%d\t%s\n" % (sid, self.clean(key[0]), key[1],
                                                             self.clean(key[2])))
        return sid
