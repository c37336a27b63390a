"""PyTorch's allocator trace in the sampled iterations only, for vramtrace's start-up hook (a
part of its context, switching the Trace it shares with _vramtrace_lines). On a launch-bound
step the trace costs about 0.8 us a block, 2 to 3 % of the step; this keeps it on in the
iterations whose module calls are traced (the first ones and every 50th) and off between them:
by default (--torch=auto) where the trace would cost more than 1 % of an iteration
(VRAMTRACE_TORCH_TRACE_BUDGET, judged on the last of the first iterations: its blocks against
its time), with --torch=sampled always, with --torch=full never.

PyTorch empties its ring when the trace is switched off, so a window's entries are read
(torch.cuda.memory._snapshot) and kept as lines when it closes. When the next window opens, the
allocator's state then (its segments and the blocks in use) and PyTorch's peak of
allocated memory are kept before its entries (U H B lines; an O line where each closed): the
collector knows what was made and freed between the windows, though not when, and whether the
peak came between them.

An iteration between the sampled ones that moves a larger tensor to the GPU than its line ever
moved, or whose outermost module call is given larger inputs than that module ever was (a bigger
batch, a longer sequence: the steps that set a new peak, or run out of memory), is traced as a
sampled one, from that move or call to the iteration's end.

The trace stays on for good once memory is not in a steady state (a segment was made between
two windows, or more memory is in use at a window's start than at the last one's end: memory
kept across the iterations), the device is nearly full (less than a tenth free when a window
closes), a window's entries filled the ring, an OOM came, or the program sets the trace itself."""
import time

from _vramtrace_lines import allocation_counter
from _vramtrace_write import allocator_state, entry_lines


class Windows:
    STASH_MAX_BYTES = 64 << 20  # the kept windows' lines; past it the oldest but the first go
    NEARLY_FULL = 0.10          # the device's free share under which the trace stays on
    # The trace's cost of a block inside a real step (PyTorch 2.11, H100: 0.6 to 1.15 us on the
    # launch-bound step, against 0.36 to 0.62 us for a cached tensor's alloc+free alone).
    BLOCK_COST_NS = 800

    def __init__(self, torch, clean, trace, trace_modules):
        """`trace`: the switch shared with the lines between the phases; `trace_modules(full)`:
        the context's module hooks on for the rest of an iteration traced from a larger input."""
        self.torch, self.clean, self.trace = torch, clean, trace
        self.tensor_class = torch.Tensor
        self.trace_modules = trace_modules
        self.windows = []          # per kept window: its lines, oldest first
        self.window_bytes = 0
        self.window_frames = {}    # (file, line, function) -> F line id, across the kept windows
        self.closed_segments = None  # {(device, address)} when the last window closed
        self.closed_allocated = None  # the bytes in use then
        self.trace_budget = None   # the share of an iteration the trace may cost, until judged
        self.cost_from = None      # (blocks handed out, time_ns) when an iteration began
        self.cost = None           # the I line's fields: the trace's cost in the iteration judged
        self.opened_us = 0         # when the trace last went on again (0: never off)
        self.input_bytes = {}      # id(module) or a move's site -> the largest inputs it had

    def sample_trace(self, record, max_entries, budget=None):
        """Switches the allocator trace off between the sampled iterations from now on:
        `record` is the hook's allocator_trace partial (its settings), `max_entries` its ring.
        With `budget`, only where the trace would cost more than that share of the last of the
        first iterations; else it stays on throughout."""
        self.trace.window_record = record
        self.window_max_entries = max_entries
        self.trace_budget = budget
        if budget is not None:
            self.block_count = allocation_counter(self.torch)

    def trace_window(self, on):
        """At an iteration's end: the trace on for the next iteration (a sampled one) or off."""
        if self.trace.window_record is None:
            return
        if on and self.trace.on and self.trace_budget is not None:
            self.cost_from = (self.block_count(), time.time_ns())
        if on == self.trace.on:
            return
        try:
            if on:
                self.open_window()
            elif self.trace_budget is None or self.worth_sampling():
                self.close_window()
        except Exception:
            self.trace_for_good()

    def larger_inputs(self, key, inputs):
        """At an outermost module call (key: id(module)) or a move to the GPU (key: its site)
        while the allocator trace is sampled: whether the trace is off and `inputs` are larger
        than any that call or move had before; if so the trace and the module hooks go on for
        the rest of this iteration. A few tensors looked at, once per call."""
        size = _input_bytes(inputs, self.tensor_class, [0, 0])
        seen = self.input_bytes.get(key)
        if seen is not None and size <= seen:
            return False
        self.input_bytes[key] = size
        if seen is None or self.trace.on or self.trace_budget is not None:
            return False
        self.trace_modules(True)
        self.trace_window(True)
        return True

    def worth_sampling(self):
        """Whether the trace would cost more than the budget's share of the iteration that just
        ended (its blocks at BLOCK_COST_NS each, against its time); if not, it stays on for
        good. Either way the I line says what was judged."""
        budget, self.trace_budget = self.trace_budget, None
        if self.cost_from is None:
            self.trace.window_record = None
            return False
        blocks = self.block_count() - self.cost_from[0]
        ns = time.time_ns() - self.cost_from[1]
        trace_ns = max(blocks, 0) * self.BLOCK_COST_NS
        sampled = trace_ns > 0 and trace_ns > budget * ns
        self.cost = (max(blocks, 0), max(ns, 0) // 1000, trace_ns // 1000, round(budget * 1e6),
                     int(sampled))
        if not sampled:
            self.trace.window_record = None
        return sampled

    def trace_for_good(self):
        """The trace on from now on, as the hook started it."""
        trace = self.trace
        record, trace.window_record = trace.window_record, None
        if record is not None and not trace.on:
            try:
                record(context="alloc" if trace.frames_on else None)
                trace.on = True
            except Exception:
                pass

    def close_window(self):
        memory = self.torch.cuda.memory
        snap = memory._snapshot()
        traces = snap.get("device_traces", [])
        if any(len(t) >= self.window_max_entries for t in traces) or self.nearly_full():
            self.trace.window_record = None  # on for good: nothing of this window is lost
            if self.cost:
                self.cost = self.cost[:4] + (0,)  # judged worth sampling, but not sampled
            return
        lines = []
        for device, trace in enumerate(traces):
            lines.extend(entry_lines(device, self.since_open(trace), self.window_frames,
                                     self.clean))
        self.trace.original_record(enabled=None)
        self.trace.on = False
        lines.extend(self.gap_lines("O\t%d\t%d\t%s\n", snap))
        self.closed_segments = _segments(snap)
        self.closed_allocated = self.allocated()
        self.keep(lines, new_window=False)

    def open_window(self):
        snap = self.torch.cuda.memory._snapshot()  # the trace is off: the state alone
        segments = _segments(snap)
        lines = self.gap_lines("U\t%d\t%d\t%s\n", snap)
        lines.append(allocator_state(snap, gap=True))
        self.opened_us = time.time_ns() // 1000
        trace = self.trace
        trace.window_record(context="alloc" if trace.frames_on else None)
        trace.on = True
        self.keep(lines, new_window=True)
        # Not a steady state: a segment made between the windows, or more memory in use than
        # at the same point of the iteration when the last closed (memory kept across the
        # iterations, whose growth the traced iterations then show): on for good.
        if self.closed_segments is not None and (segments - self.closed_segments or
                                                 self.allocated() != self.closed_allocated):
            trace.window_record = None

    def gap_oom(self, device, nbytes, device_free):
        """At an OOM, the trace on for good; while it was off, first the allocator's state now
        and the OOM's entry (PyTorch recorded none)."""
        if self.trace.window_record is None:
            return
        if not self.trace.on:
            try:
                self.open_window()
            except Exception:
                pass
            self.keep(["E\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n" % (
                device, "oom", 0, nbytes, 0, time.time_ns() // 1000, "",
                "" if device_free is None else int(device_free))], new_window=False)
        self.trace_for_good()

    def keep(self, lines, new_window):
        text = "".join(lines)
        if new_window or not self.windows:
            self.windows.append([])
        self.windows[-1].append(text)
        self.window_bytes += len(text)
        # Past the bound the second-oldest window goes (the first holds the first steps): the
        # next window's state still says what was live when it began.
        while self.window_bytes > self.STASH_MAX_BYTES and len(self.windows) > 2:
            self.window_bytes -= sum(len(t) for t in self.windows.pop(1))

    def kept_lines(self):
        """For the dump: the kept windows' lines (before the ring's entries), the next F line id
        free, and whether the trace is on."""
        return ("".join("".join(w) for w in list(self.windows)), len(self.window_frames) + 1,
                self.trace.on)

    def since_open(self, trace):
        """A device's entries from when the trace last went on: PyTorch 2.11 empties its ring when
        the trace goes off, and a PyTorch that kept it would otherwise give a closed window's
        entries twice."""
        if not self.opened_us:
            return trace
        return [e for e in trace if (e.get("time_us") or 0) >= self.opened_us]

    def gap_lines(self, line, snap):
        """An O or U line (`line`: its format) for each device of `snap`: the time now and
        PyTorch's peak of allocated memory on it."""
        now_us = time.time_ns() // 1000
        return [line % (device, now_us, self.peak_allocated(device))
                for device in range(len(snap.get("device_traces", [])) or 1)]

    def nearly_full(self):
        try:
            free, total = self.torch.cuda.mem_get_info()
            return total > 0 and free < self.NEARLY_FULL * total
        except Exception:
            return True

    def allocated(self):
        """The bytes in use on every device (PyTorch's memory_allocated), None if unknown."""
        try:
            cuda = self.torch.cuda
            return sum(int(cuda.memory_allocated(d)) for d in range(cuda.device_count()))
        except Exception:
            return None

    def peak_allocated(self, device):
        try:
            return str(int(self.torch.cuda.max_memory_allocated(device)))
        except Exception:
            return ""


def _input_bytes(obj, tensor_class, acc, depth=0):
    """The bytes of the first 8 tensors of a call's inputs (tensors, and tuples, lists and dicts
    of them up to 4 deep). `acc`: [bytes, tensors] so far."""
    if acc[1] >= 8:
        return acc[0]
    if isinstance(obj, tensor_class):
        try:
            acc[0] += int(obj.nbytes)
        except Exception:
            pass
        acc[1] += 1
    elif depth < 4 and isinstance(obj, (tuple, list, dict)):
        for x in (obj.values() if isinstance(obj, dict) else obj):
            if acc[1] >= 8:
                break
            _input_bytes(x, tensor_class, acc, depth + 1)
    return acc[0]


def _segments(snap):
    return {(int(s.get("device", 0) or 0), int(s.get("address", 0) or 0))
            for s in snap.get("segments", [])}
