"""The named storages of vramtrace's start-up hook (sitecustomize.py): the parameters,
buffers, gradients and optimizer state of the models and optimizers the hook has seen, by name
and data pointer (L lines of common/side_channel.h), at the first steps, every 50th and at each
OOM; and the same storages by category for the pytest plugin. Weak references only: a model
the program drops frees its memory as it would without the hook."""
from _vramtrace_marks import _NAMED


def named_storages(context):
    """{storage data_ptr: "parameters", "gradients" or "optimizer state"} of `context`'s models
    and optimizers ({} without one)."""
    out = {}
    if context is None:
        return out

    def add(tensor, category):
        try:
            if tensor is not None:
                out.setdefault(tensor.untyped_storage().data_ptr(), category)
        except Exception:
            pass

    for ref, params, buffers in list(context.roots):
        if ref() is None:
            continue
        for _, p in params:
            p = p()
            add(p, "parameters")
            add(getattr(p, "grad", None), "gradients")
        for _, b in buffers:
            add(b(), "parameters")
    for ref in list(context.optimizers):
        opt = ref()
        if opt is None:
            continue
        for group in opt.param_groups:
            for p in group.get("params", ()):
                add(p, "parameters")
                add(getattr(p, "grad", None), "gradients")
        for state in list(opt.state.values()):
            for v in state.values():
                if isinstance(v, context.torch.Tensor):
                    add(v, "optimizer state")
    return out


class _Storages:
    """The context's labelling of named storages (a part of _vramtrace_context._Context)."""

    def init_storages(self):
        # (weakref(root), [(name, weakref(param))], [(name, weakref(buffer))]): weak, so that a
        # model the program drops frees its memory as it would without the hook.
        self.roots = []
        self.param_names = {}    # id(param) -> name
        self.optimizers = []     # weakrefs, first seen first
        self.labels = []         # "L" lines: parameters, buffers, optimizer state
        self.grad_labels = []    # "L" lines of gradients (bounded: made anew each step)
        self.labelled = {}       # storage pointer -> (kind, name, bytes)

    def label_all_now(self):
        """Every named storage labelled at this moment, those labelled before included, and a
        mark saying so: the collector trusts no older label for a block still live here."""
        self.labelled.clear()
        self.label_all()
        self.times.append(self.now())
        self.codes.append(_NAMED)

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
            if len(lines) >= self.MAX_MARKS // 4:
                del lines[:len(lines) // 2]
        # Formatted when written: a step labels every gradient, so this stays a tuple append.
        lines.append((self.now(), t.device.index or 0, ptr, nbytes, kind, name, t.shape, t.dtype))

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
