"""The named storages of vramtrace's start-up hook (sitecustomize.py): the parameters,
buffers, gradients and optimizer state of the models and optimizers the hook has seen, by name
and data pointer (L lines of common/side_channel.h), at the first steps, every 50th and at each
OOM; and the categories of blocks for the pytest plugin (the same storages, then the phases
the context marked). Weak references only: a model the program drops frees its memory as it
would without the hook."""
import bisect
import warnings
import weakref

from _vramtrace_marks import (_BWD, _BWD_END, _FWD, _FWD_END, _FWD_EVAL, _FWD_EVAL_GRAD, _NAMED,
                              _STEP, _STEP_END)


def named_storages(storages):
    """{storage data_ptr: "parameters", "gradients" or "optimizer state"} of the models and
    optimizers `storages` (a Storages) knows ({} without one)."""
    out = {}
    if storages is None:
        return out

    def add(tensor, category):
        try:
            if tensor is not None:
                out.setdefault(tensor.untyped_storage().data_ptr(), category)
        except Exception:
            pass

    for ref, params, buffers in list(storages.roots):
        if ref() is None:
            continue
        for _, p in params:
            p = p()
            add(p, "parameters")
            add(getattr(p, "grad", None), "gradients")
        for _, b in buffers:
            add(b(), "parameters")
    for ref in list(storages.optimizers):
        opt = ref()
        if opt is None:
            continue
        for group in opt.param_groups:
            for p in group.get("params", ()):
                add(p, "parameters")
                add(getattr(p, "grad", None), "gradients")
        for state in list(opt.state.values()):
            for v in state.values():
                if isinstance(v, storages.torch.Tensor):
                    add(v, "optimizer state")
    return out


def categories(storages, marks, blocks):
    """The category of each block of [(address, made_us, freed_us)] (freed_us None while it
    lives), by the collector's rules 1 to 5 (collector/model/torch_memory.h): a named storage's
    ("parameters", "gradients", "optimizer state"); else the phase it was made in, kept past
    that phase's end (activations, gradients, optimizer state; an evaluation's under no_grad,
    inputs and data) or freed inside it (temporaries); else "inputs and data"."""
    with warnings.catch_warnings():  # some objects warn when looked at (reduce_op)
        warnings.simplefilter("ignore")
        named = named_storages(storages)
    spans = _phase_spans(marks, blocks)
    begins = [b for b, _, _ in spans]
    out = []
    for address, made_us, freed_us in blocks:
        category = named.get(address)
        if category is None:
            i = bisect.bisect_right(begins, made_us * 1000) - 1
            category = "inputs and data"
            if i >= 0 and (spans[i][1] is None or made_us * 1000 <= spans[i][1]):
                _, end, phase = spans[i]
                kept = freed_us is None or (end is not None and freed_us * 1000 > end)
                category = _PHASE_CATEGORY[phase] if kept else "temporaries"
        out.append(category)
    return out


# What a block made in a phase and kept past its end is: a training forward's, or an
# evaluation's with grad on, are activations (a graph kept alive); under no_grad, outputs.
_PHASE_CATEGORY = {0: "activations", 1: "inputs and data", 2: "gradients", 3: "optimizer state"}
_PHASE_OF_MARK = {_FWD: 0, _FWD_EVAL_GRAD: 0, _FWD_EVAL: 1, _BWD: 2, _STEP: 3}
_PHASE_END_OF_MARK = {_FWD_END: (0, 1), _BWD_END: (2,), _STEP_END: (3,)}


def _phase_spans(marks, blocks):
    """[(begin_ns, end_ns or None, phase)] of the phases (forward, backward, optimizer step)
    marked around the blocks' times, in time order; a phase still running has no end."""
    times, codes = marks.times, marks.codes
    first = min((made for _, made, _ in blocks), default=0) * 1000
    last = max((max(made, freed or 0) for _, made, freed in blocks), default=0) * 1000
    lo = bisect.bisect_right(times, first)
    while lo > 0 and codes[lo - 1] & 15 not in _PHASE_OF_MARK:  # back to the phase of `first`
        lo -= 1
    lo = max(lo - 1, 0)
    hi = bisect.bisect_right(times, last)
    while hi < len(times) and codes[hi] & 15 not in _PHASE_END_OF_MARK:  # on to its end
        hi += 1
    spans, open_at, open_phase = [], None, None
    for t, code in zip(times[lo:hi + 1], codes[lo:hi + 1]):
        kind = code & 15
        if kind in _PHASE_OF_MARK:
            open_at, open_phase = t, _PHASE_OF_MARK[kind]
        elif open_at is not None and open_phase in _PHASE_END_OF_MARK.get(kind, ()):
            spans.append((open_at, t, open_phase))
            open_at = None
    if open_at is not None:
        spans.append((open_at, None, open_phase))
    return spans


class Storages:
    """The named storages: the models the context met (add_root) and the optimizers that
    stepped, weakly, and their L lines."""

    def __init__(self, torch, marks):
        self.torch, self.marks = torch, marks
        # (weakref(root), [(name, weakref(param))], [(name, weakref(buffer))]): weak, so that a
        # model the program drops frees its memory as it would without the hook.
        self.roots = []
        self.param_names = {}    # id(param) -> name
        self.optimizers = []     # weakrefs, first seen first
        self.labels = []         # "L" lines: parameters, buffers, optimizer state
        self.grad_labels = []    # "L" lines of gradients (bounded: made anew each step)
        self.labelled = {}       # storage pointer -> (kind, name, bytes)

    def add_root(self, module, params, buffers):
        """A model met as an outermost call: its parameters [(name, param)] and buffers
        [(name, buffer)] named and labelled now."""
        ref = weakref.ref
        for n, p in params:
            self.param_names[id(p)] = n
        params = [(n, ref(p)) for n, p in params]
        buffers = [(n, ref(b)) for n, b in buffers]
        self.roots.append((ref(module), params, buffers))
        self.label_root(params, buffers)

    def stepped(self, optimizer):
        """An optimizer's step began: whether it is the first optimizer that stepped (whose
        steps are the iterations)."""
        if not any(w() is optimizer for w in self.optimizers):
            self.optimizers.append(weakref.ref(optimizer))
        return self.optimizers[0]() is optimizer

    def first_optimizer(self, optimizer):
        return bool(self.optimizers) and self.optimizers[0]() is optimizer

    def label_all_now(self):
        """Every named storage labelled at this moment, those labelled before included, and a
        mark saying so: the collector trusts no older label for a block still live here."""
        self.labelled.clear()
        self.label_all()
        # Never trimmed: this runs where the side channel is written.
        self.marks.mark(_NAMED, 0, trim=False)

    def label(self, t, kind, name):
        try:
            if t is None or not t.is_cuda:
                return
            s = t.untyped_storage()
            ptr, nbytes = s.data_ptr(), s.nbytes()
        except Exception:
            return
        if not ptr:
            return
        # Gradients are labelled at every step (set_to_none frees them and the next backward
        # makes new ones, often at the same address); the rest once per storage.
        key = (kind, name, nbytes)
        if kind != "grad":
            if self.labelled.get(ptr) == key:
                return
            self.labelled[ptr] = key
        lines = self.labels
        if kind == "grad":
            lines = self.grad_labels
            if len(lines) >= self.marks.MAX_MARKS // 4:
                del lines[:len(lines) // 2]
        # Formatted when written: a step labels every gradient, so this stays a tuple append.
        lines.append((self.marks.now(), t.device.index or 0, ptr, nbytes, kind, name, t.shape,
                      t.dtype))

    def label_root(self, params, buffers):
        for n, ref in params:
            p = ref()
            if p is not None:
                self.label(p, "param", n)
                self.label(p.grad, "grad", n + ".grad")
        for n, ref in buffers:
            self.label(ref(), "buffer", n)

    def label_all(self):
        for ref, params, buffers in self.roots:
            if ref() is not None:
                self.label_root(params, buffers)
        for ref in self.optimizers:
            opt = ref()
            if opt is None:
                continue
            for gi, group in enumerate(opt.param_groups):
                for pi, p in enumerate(group.get("params", ())):
                    name = self.param_names.get(id(p))
                    if name is None:
                        name = self.param_names[id(p)] = "param_groups[%d][%d]" % (gi, pi)
                        self.label(p, "param", name)
                    self.label(p.grad, "grad", name + ".grad")
                    state = opt.state.get(p)
                    if state:
                        for k, v in state.items():
                            if isinstance(v, self.torch.Tensor):
                                self.label(v, "state", "%s.%s" % (name, k))
