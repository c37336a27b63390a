"""The Python lines of the blocks a program makes between its phases (forward, backward,
optimizer step), for vramtrace's start-up hook (sitecustomize.py): PyTorch's allocator trace
gathers Python frames only between the phases, and only while they cost little (Lines); the
trace's switch, which this and the sampled windows (_vramtrace_windows) share (Trace); and the
trace's settings, which the hook starts it with."""
import functools
import os


def allocator_trace(record, max_entries):
    """PyTorch's allocator trace as the hook keeps it, a function of its `context` (None: no
    frames; "alloc": the Python frames of each block), from `record`
    (torch.cuda.memory._record_memory_history). Every block's alloc and free_completed, which
    the collector reads; not free_requested, which PyTorch writes beside every free_completed
    and nothing reads: a third of the trace's entries, and of its cost on a step of many small
    tensors, where this PyTorch can skip them (skip_actions)."""
    import inspect
    settings = {"enabled": "all", "stacks": "python", "max_entries": max_entries}
    try:
        if "skip_actions" in inspect.signature(record).parameters:
            settings["skip_actions"] = ["free_requested"]
    except (TypeError, ValueError):
        pass
    return functools.partial(record, **settings)


def allocation_counter(torch):
    """A function that says how many blocks PyTorch's allocator has handed out so far (0 where
    PyTorch cannot say: nothing is then counted)."""
    stats = getattr(torch.cuda.memory, "memory_stats_as_nested_dict", None)

    def allocations():
        try:
            return int(stats()["allocation"]["all"]["allocated"])
        except Exception:
            return 0
    return allocations


class Trace:
    """PyTorch's allocator trace as the hook switches it: on or off (the sampled windows), with
    the Python frames of each block or without (between the phases), and whether the program
    took it over (then the hook switches it no more)."""

    def __init__(self, torch):
        self.torch = torch
        self.on = True             # off between the sampled windows
        self.frames_on = False
        self.history = None        # the hook's settings while it switches the frames (Lines)
        self.window_record = None  # the hook's settings while it switches the trace (Windows)
        self.original_record = None  # PyTorch's own, once watch_program wrapped it
        self.program_trace = False   # the program set the allocator trace itself

    def watch_program(self):
        """PyTorch's _record_memory_history wrapped once: a program that sets the trace itself
        keeps its settings (the hook switches it no more, frames nor windows). The function as
        PyTorch has it, for the hook's own switches."""
        if self.original_record is not None:
            return self.original_record
        memory = self.torch.cuda.memory
        record = memory._record_memory_history
        trace = self

        @functools.wraps(record)
        def program_record(*args, **kwargs):
            trace.program_trace = True
            trace.history = None
            trace.window_record = None
            trace.on = True
            return record(*args, **kwargs)

        memory._record_memory_history = program_record
        if getattr(self.torch.cuda, "_record_memory_history", None) is record:
            self.torch.cuda._record_memory_history = program_record
        self.original_record = record
        return record


class Lines:
    """The frames switched on between the phases and off inside them, within their budget."""

    def __init__(self, torch, marks, trace):
        self.torch, self.marks, self.trace = torch, marks, trace
        self.counting = False     # allocations between phases counted in this iteration
        self.between = 0
        self.between_from = 0
        self.iteration_ns = 0
        self.lines_for_good = False  # frames on for every block, phases included (frames_for_good)

    def lines_between_phases(self, max_entries):
        """The allocator trace's Python frames switched on between the phases (forward,
        backward, optimizer step) and off inside them: the blocks a program makes between them
        (a batch's targets from torch.randint(..., device="cuda"), a running loss, a metric)
        get the user's line, which nothing else gives them (no module, no step), while the
        phases, where nearly all allocations are, pay nothing. Frames cost about 2 us per
        allocation and a switch about 2 us; where the allocations between the phases would
        cost more than 0.5 % of a counted iteration (the first ones and every 50th), the
        frames stay off from then on. A program that sets the trace itself keeps its own.
        VRAMTRACE_TORCH_LINES: off, or the share of an iteration they may cost (0.005)."""
        budget = os.environ.get("VRAMTRACE_TORCH_LINES", "") or "0.005"
        if budget == "off":
            return
        try:
            self.budget = float(budget)
        except ValueError:
            self.budget = 0.005
        record = self.trace.watch_program()
        self.allocations = allocation_counter(self.torch)
        self.trace.history = allocator_trace(record, max_entries)
        self.frames(True)

    def frames_for_good(self, max_entries):
        """The Python frames of every block from now on, the phases' too (the pytest plugin
        names a failing test's blocks by their lines), asked of the hook rather than set on
        PyTorch's trace behind it, which the hook would take for the program's own: its switch
        of the frames between the phases stops, its sampled windows of the trace go on. False
        where the hook does not hold the trace (the program set it): the caller sets it."""
        trace = self.trace
        if trace.program_trace:
            return False
        if trace.history is None:  # lines off, or over their budget: the hook's settings again
            trace.history = allocator_trace(trace.watch_program(), max_entries)
        self.lines_for_good = True
        self.counting = False
        self.frames(True)
        return trace.frames_on

    def frames(self, on):
        trace = self.trace
        if on == trace.frames_on or trace.history is None:
            return
        if self.counting:
            if on:
                self.between_from = self.allocations()
            else:
                self.tally()
        try:
            if trace.on:  # off between the sampled iterations: set when the next opens
                trace.history(context="alloc" if on else None)
            trace.frames_on = on
        except Exception:
            trace.history = None

    def tally(self):
        """Adds the allocations made since the frames went on, or since the last tally."""
        n = self.allocations()
        self.between += n - self.between_from
        self.between_from = n

    def phase_begin(self):
        if self.trace.frames_on and not self.lines_for_good:
            self.frames(False)

    def phase_end(self):
        trace = self.trace
        if trace.history is not None and not trace.frames_on and self.marks.between_phases():
            self.frames(True)

    def check_lines(self, done):
        """At the end of iteration `done` - 1: frames off for good when those between the
        phases of a counted iteration cost more than 0.5 % of its time; the next counted
        iteration is the first ones' and every 50th."""
        trace = self.trace
        if trace.history is None or self.lines_for_good:
            return
        now = self.marks.now()
        if self.counting and self.iteration_ns:
            if trace.frames_on:
                self.tally()
            if self.between * 2000 > self.budget * (now - self.iteration_ns):
                self.frames(False)
                trace.history = None
                return
        self.between = 0
        self.counting = done < 3 or done % 50 == 49
        if self.counting and trace.frames_on:
            self.between_from = self.allocations()
        self.iteration_ns = now
