"""The training step a process never finished, predicted on fake tensors.

A job that runs out of memory in its first step (a batch too big) recorded only the requests
made before it died: the rest of the forward, the backward and the optimizer step never ran.
At exit, the start-up hook (sitecustomize.py) asks this module to run that step again on
PyTorch's fake tensors (FakeTensorMode: shapes, dtypes and devices without memory): the model's
own forward on fake copies of its parameters and buffers (swapped in as torch.func.functional_call
does, for the whole step: a checkpointed module recomputes in the backward)
(the user's model, its BatchNorm statistics and its optimizer are untouched), the loss, the
backward, and a fresh optimizer of the same class and settings on the fake parameters. Every
storage made on a CUDA device and when it is freed is recorded, in order, as the requests
PyTorch's caching allocator would have had; `vramtrace whatif` replays them (N and R lines of
common/side_channel.h).

Two iterations are run, as a training loop does: the second is the steady state (the optimizer's
state is live during its forward, and the previous iteration's output and loss are freed only
when the new ones are assigned, or at the iteration's end where the code that called the model
lets them go there: output_dies_with_call). It runs at the recorded batch and at its half, so
that the collector can tell how each request grows with the batch. In a pre-flight (and
everywhere with VRAMTRACE_FAKE_STEP_REPEAT=1), where the first step's two forwards, losses and
backwards asked for the same blocks (REPEATS), the later steps run the first iteration's alone
and repeat its requests for the second (their optimizer step still runs): nearly half of a fake
step's time.

The same step is also run with the changes the report offers as remedies, at the recorded
batch: under torch.autocast(bfloat16), and with the model's repeated blocks under
torch.utils.checkpoint (V lines). The collector weighs each change by the difference between
these fake steps, so that what fake tensors miss (below) is the same on both sides.

What it does not see: cuBLAS/cuDNN workspaces and the kernels' own scratch (the collector takes
them from the recorded part), the program's own loss function when the forward died before it
(a cross-entropy over the output's last dimension is assumed when the model returns no loss),
`zero_grad(set_to_none=False)` (PyTorch's default, set_to_none, is assumed), and models whose
operators have no fake implementation (then the status line says why)."""
import os
import sys

_PHASES = {"forward": "f", "loss": "l", "backward": "b", "step": "s"}
# The loss each fake step took ("model", "cross_entropy", "sum"), for `vramtrace plan` to say
# when it was assumed.
LOSSES = []
# model -> whether the first step run in full on it found its second forward, loss and backward
# asking for what its first did (same_bodies): then the model's later steps may repeat the
# first's requests instead of running them again, in nearly half the time. By default in a
# pre-flight only, whose later steps the program waits for (there the 1e9 Llama's half batch
# repeated came to 41.49 GiB against 40.79 run in full on the H100, the other steps the same:
# docs/WHATIF.md); VRAMTRACE_FAKE_STEP_REPEAT=1 everywhere, =0 nowhere.
REPEATS = None
REPEAT_SETTING = os.environ.get("VRAMTRACE_FAKE_STEP_REPEAT", "")
REPEAT_ON = REPEAT_SETTING == "1"


def _repeats():
    global REPEATS
    if REPEATS is None:
        import weakref
        REPEATS = weakref.WeakKeyDictionary()
    return REPEATS


class OverBudget(Exception):
    """The fake steps ran past their deadline: raised between two of them (predicted_lines),
    never inside one (raised from inside an operator, in PyTorch's dispatcher or the autograd
    engine's thread, it aborted the process on the H100), and let through by every handler here
    that takes other exceptions for a step's failure."""


class _Recorder:
    """Storages made and freed on CUDA devices, in order, as (op, block, bytes, module, phase)."""

    def __init__(self, torch, module_ids):
        from torch.multiprocessing.reductions import StorageWeakRef
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves
        self.weak, self.leaves, self.torch = StorageWeakRef, tree_leaves, torch
        # Whether the storage of a key (a StorageWeakRef's cdata, its weak reference held) is
        # gone: PyTorch's own test, called directly. Every operator asks it of every live
        # storage (collect), and StorageWeakRef.expired's two Python calls around it were
        # two thirds of a fake step's time (12.8 of 18.3 s for a 1e9-parameter Llama).
        self.expired = getattr(getattr(torch, "UntypedStorage", None), "_expired", None) or (
            lambda key: torch.Storage._expired(key))
        self.module_ids = module_ids
        self.live = {}         # storage key -> (weak ref, block number)
        self.outside = {}      # storage key -> weak ref: what existed before the step
        self.requests = []
        self.phase = "f"
        self.modules = []      # the M ids of the modules running, innermost last
        self.blocks = 0
        recorder = self

        self.off = False       # operators run unrecorded (a repeated iteration's gradients)

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if recorder.off:
                    return func(*args, **(kwargs or {}))
                recorder.collect()
                out = recorder.result(func, args, kwargs or {}, func(*args, **(kwargs or {})))
                recorder.made(out)
                return out

        self.mode = Mode()
        self.index_put = torch.ops.aten.index_put.default

    def result(self, func, args, kwargs, out):
        """An operator's result as the GPU makes it. The backward of an index puts the gradient
        into zeros of the input's shape in place (_index_put_impl_); on tensor subclasses, fake
        tensors among them, PyTorch calls the out-of-place index_put instead, whose result is a
        second tensor of that shape (2.0 GB an iteration for the logits of a masked-language
        model's loss on its masked tokens) that the GPU never makes: the zeros stand for it."""
        if func is self.index_put and self.phase == "b" and (
                args[3] if len(args) > 3 else kwargs.get("accumulate", False)):
            return args[0]
        return out

    def collect(self):
        """Frees: the storages whose last tensor is gone since the last look."""
        gone = list(filter(self.expired, self.live))
        if not gone:
            return
        module = self.modules[-1] if self.modules else 0
        for k in gone:
            self.requests.append(("f", self.live.pop(k)[1], 0, module, self.phase))

    def freed_now(self, phase):
        """The frees since the last look, recorded in `phase` now: the block numbers."""
        self.phase, start = phase, len(self.requests)
        self.collect()
        return [r[1] for r in self.requests[start:]]

    def repeat(self, body, freed_after, release):
        """The requests of an iteration's forward, loss and backward again, as new blocks
        (`body`: the first iteration's), with what the loop frees between them as it runs:
        `release`(phase, has_requests) frees the previous output and loss where the loop would
        (before the loss and before the backward) and returns their blocks. `freed_after`: the
        body's blocks freed after it, before the optimizer step, freed again after the repeat.
        Returns (the new block of each of the body's still live, the blocks released)."""
        new, released = {}, []
        runs = {"f": [], "l": [], "b": []}
        for r in body:
            runs.get(r[4], runs["b"]).append(r)
        for phase in ("f", "l", "b"):
            if phase != "f":
                released += release(phase, bool(runs[phase]))
            for op, block, nbytes, module, ph in runs[phase]:
                if op == "a":
                    self.blocks += 1
                    new[block] = self.blocks
                    self.requests.append(("a", self.blocks, nbytes, module, ph))
                elif block in new:
                    self.requests.append(("f", new.pop(block), 0, module, ph))
        for block in freed_after:
            if block in new:
                self.requests.append(("f", new.pop(block), 0, 0, "s"))
        return new, released

    def made(self, out):
        module = self.modules[-1] if self.modules else 0
        for t in self.leaves(out):
            if not isinstance(t, self.torch.Tensor) or t.device.type != "cuda":
                continue
            st = t.untyped_storage()
            ref = self.weak(st)
            key = ref.cdata
            if key in self.live:
                if not self.expired(key):
                    continue  # a view or an in-place result: no new block
                # Freed inside this operator and its storage object made again at the same
                # address: the old block's free comes first.
                self.requests.append(("f", self.live.pop(key)[1], 0, module, self.phase))
            if key in self.outside and not self.expired(key):
                continue  # a view of a parameter, a buffer or an input
            nbytes = st.nbytes()
            if nbytes == 0:
                continue
            self.blocks += 1
            self.live[key] = (ref, self.blocks)
            self.requests.append(("a", self.blocks, nbytes, module, self.phase))

    def existing(self, tensors):
        """Storages made before the step (parameters, buffers, the batch): the run recorded
        them already."""
        for t in tensors:
            if isinstance(t, self.torch.Tensor):
                ref = self.weak(t.untyped_storage())
                self.outside[ref.cdata] = ref

    def forward_hooks(self):
        nn = self.torch.nn.modules.module
        ids = self.module_ids
        modules = self.modules

        def pre(module, args):
            modules.append(ids(module))

        def post(module, args, output):
            if modules:
                modules.pop()

        return [nn.register_module_forward_pre_hook(pre),
                nn.register_module_forward_hook(post, always_call=True)]


def _fake_args(torch, mode, meta, batch, recorded_batch):
    """The recorded call's arguments as fake tensors, those of the recorded batch at `batch`."""
    def make(leaf):
        if isinstance(leaf, _Opaque):
            raise RuntimeError("the model was called with a %s, which is not replayed" % leaf.what)
        if isinstance(leaf, _TensorMeta):
            shape = list(leaf.shape)
            if shape and shape[0] == recorded_batch:
                shape[0] = batch
            with mode:
                t = torch.empty(shape, dtype=leaf.dtype, device=leaf.device)
            if leaf.requires_grad:
                t.requires_grad_(True)
            return t
        return leaf
    from torch.utils._pytree import tree_map
    return tree_map(make, meta)


class _TensorMeta:
    __slots__ = ("shape", "dtype", "device", "requires_grad")

    def __init__(self, t):
        self.shape = tuple(t.shape)
        self.dtype, self.device, self.requires_grad = t.dtype, t.device, t.requires_grad


class _Opaque:
    __slots__ = ("what",)

    def __init__(self, x):
        self.what = type(x).__name__


def describe_call(torch, args, kwargs):
    """What a forward was called with, tensors as their shape and dtype only (nothing of the
    program's is kept alive by it). The batch: the first dimension of the first tensor."""
    from torch.utils._pytree import tree_map, tree_leaves

    def meta(x):
        if isinstance(x, torch.Tensor):
            return _TensorMeta(x)
        if x is None or isinstance(x, (bool, int, float, str, torch.dtype, torch.device)):
            return x
        return _Opaque(x)  # never kept: it may hold the program's tensors
    described = tree_map(meta, (tuple(args), dict(kwargs)))
    batch = 0
    for leaf in tree_leaves(described):
        if isinstance(leaf, _TensorMeta) and leaf.shape:
            batch = leaf.shape[0]
            break
    return described, batch


def caller_frame(frame, skip):
    """The frame that called the model: the first whose file is not under `skip` (the context's
    skip: PyTorch's folder, the hook's, contextlib and functools, as its site() passes them)."""
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    return frame


def output_dies_with_call(frame):
    """Whether the output of the model call `frame` is making is let go before the program's
    next training forward, read from that frame's bytecode: the output bound to a local of a
    function (not a generator) that does not loop around the call and reads that local only
    through its attributes or items (`out.loss.backward()`, `return out.loss`): a
    train_step(batch) called once a batch, whose locals go when it returns. Otherwise (a loop
    body's `out = model(x)`, the output passed on, stored elsewhere or returned) it is held
    until the next one is assigned: the stand-in step's assumption, the larger of the two."""
    import dis
    try:
        code = frame.f_code
        # CO_OPTIMIZED (a function's fast locals), not CO_GENERATOR, CO_COROUTINE,
        # CO_ASYNC_GENERATOR or CO_ITERABLE_COROUTINE.
        if not code.co_flags & 0x1 or code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
            return False
        ops = list(dis.get_instructions(code))
        # The call: the last instruction at or before f_lasti (which may point into the
        # call's inline cache).
        at = max(i for i, ins in enumerate(ops) if ins.offset <= frame.f_lasti)
        if at + 1 >= len(ops) or ops[at + 1].opname != "STORE_FAST":
            return False
        name = ops[at + 1].argval
        for i, ins in enumerate(ops):
            # A jump back (JUMP_BACKWARD, POP_JUMP_BACKWARD_IF_TRUE, JUMP_ABSOLUTE...): a loop
            # from its target to it.
            back = ("JUMP" in ins.opname and isinstance(ins.argval, int)
                    and ins.argval <= ins.offset)
            if back and ins.argval <= frame.f_lasti <= ins.offset:
                return False  # the call is in a loop of this frame
            if ins.opname.startswith("LOAD_FAST") and (
                    ins.argval == name or (isinstance(ins.argval, tuple) and name in ins.argval)):
                if (isinstance(ins.argval, tuple) or i + 1 >= len(ops) or ops[i + 1].opname
                        not in ("LOAD_ATTR", "LOAD_METHOD", "BINARY_SUBSCR")):
                    return False  # the output itself passed on, stored or returned
            if ins.opname in ("STORE_DEREF", "LOAD_CLOSURE") and ins.argval == name:
                return False  # a closure's cell: it may outlive the call
        return True
    except Exception:  # ValueError too: no instruction at f_lasti
        return False


def output_assumption(frame, dies):
    """What the stand-in step assumes of each iteration's output, in a sentence, with where the
    model was called (`frame`: caller_frame's)."""
    where = ("%s (%s:%d)" % (frame.f_code.co_name, frame.f_code.co_filename, frame.f_lineno)
             if frame is not None else "its caller")
    if dies:
        return ("each iteration's output and loss let go as it ends: the model's caller, %s, "
                "keeps the output in a local it reads only through its attributes, gone when it "
                "returns" % where)
    return ("each iteration's output and loss held into the next forward, as a loop's "
            "`out = model(x)` holds them (the model is called in %s)" % where)


def _loss_of(torch, out):
    """The model's own loss when it returns one (transformers' ModelOutput with labels), else
    a cross-entropy over the last dimension of its first floating output."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        LOSSES.append("model")
        return loss
    first = None
    for leaf in _tensors(torch, out):
        if leaf.is_floating_point():
            first = leaf
            break
    if first is None:
        raise RuntimeError("the model returned no floating-point tensor to take a loss of")
    if first.dim() >= 2 and first.shape[-1] > 1:
        logits = first.reshape(-1, first.shape[-1])
        target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        LOSSES.append("cross_entropy")
        return torch.nn.functional.cross_entropy(logits, target)
    LOSSES.append("sum")
    return first.float().sum()


def _tensors(torch, out):
    from torch.utils._pytree import tree_leaves
    if hasattr(out, "to_tuple"):  # transformers' ModelOutput
        out = out.to_tuple()
    return [x for x in tree_leaves(out) if isinstance(x, torch.Tensor)]


def _fake_optimizer(torch, optimizer, fake_of):
    # capturable: the step counts as device tensors, so that no step reads a value (.item()),
    # which fake tensors cannot give; 4 bytes a parameter more than the run's CPU counts.
    groups = []
    for g in optimizer.param_groups:
        group = {k: v for k, v in g.items() if k != "params"}
        if "capturable" in group:
            group["capturable"] = True
        group["params"] = [fake_of[id(p)] for p in g["params"] if id(p) in fake_of]
        groups.append(group)
    return getattr(optimizer, "cls", type(optimizer))(groups)


def model_device(model):
    """The CUDA device of the model's first parameter (0 when it has none there, or no model)."""
    p = next(model.parameters(), None) if model is not None else None
    return (p.device.index or 0) if p is not None and p.device.type == "cuda" else 0


class _OptimizerShape:
    """What a fake step takes of an optimizer the program may have let go of: its class and its
    groups' settings, their parameters those of a ShapeCopy (a setting held in a CUDA tensor is
    left out: its value would be read from the device, and the class's default is taken)."""

    def __init__(self, torch, optimizer, memo):
        self.cls = type(optimizer)
        self.param_groups = []
        for g in optimizer.param_groups:
            group = {k: v for k, v in g.items() if k != "params"
                     and not (isinstance(v, torch.Tensor) and v.device.type != "cpu")}
            group["params"] = [memo[id(p)] for p in g["params"] if id(p) in memo]
            self.param_groups.append(group)


class ShapeCopy:
    """The model as the fake steps need it once the program may have let go of it (at exit the
    model of a `main()` is gone): a deep copy whose every tensor is a meta tensor of the same
    shape, strides and dtype, its CUDA device kept beside it (no memory anywhere), its optimizer
    as an _OptimizerShape, and the M id of each module copied. Made at the end of the first
    optimizer step, in milliseconds (modules and their settings, no data); raises where a
    tensor cannot be copied so (a subclass with its own copy: DTensor, a quantized or sparse
    tensor), so that no copy ever allocates.

    The copy goes through Tensor.__deepcopy__ and Parameter.__deepcopy__, replaced for its
    milliseconds: every plain tensor the modules hold, at any depth, becomes a meta tensor."""

    def __init__(self, torch, model, optimizer, module_ids):
        import copy
        for t in list(model.parameters()) + list(model.buffers()):
            if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided:
                raise RuntimeError("its tensor of class %s and layout %s cannot be copied as "
                                   "shapes" % (type(t).__name__, t.layout))
        devices = self.devices = {}  # id(meta tensor) -> the device of the tensor it copies

        def meta_of(t, memo):
            m = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                    device="meta")
            if isinstance(t, torch.nn.Parameter):
                m = torch.nn.Parameter(m, requires_grad=t.requires_grad)
            elif t.requires_grad and t.is_leaf:
                m.requires_grad_(True)
            devices[id(m)] = t.device
            memo[id(t)] = m
            return m

        def tensor_copy(t, memo):
            if id(t) in memo:
                return memo[id(t)]
            return meta_of(t, memo)

        memo = {}
        # What a module holds besides modules, tensors and plain containers is shared, not
        # copied: a LightningModule's trainer (its loaders, their datasets), a tokenizer, a
        # config. Bound methods and partials are copied (a forward patched as one runs on the
        # copy); a shared object that reaches the model's own modules makes the fake step fail
        # (real tensors in FakeTensorMode), said as its status, never an allocation.
        import functools
        import types
        copied = (torch.nn.Module, torch.Tensor, dict, list, tuple, set, frozenset, str, bytes,
                  int, float, complex, bool, type(None), types.MethodType, functools.partial)
        for m in model.modules():
            for v in m.__dict__.values():
                if not isinstance(v, copied):
                    memo[id(v)] = v
        tensor_deepcopy = torch.Tensor.__deepcopy__
        parameter_deepcopy = torch.nn.Parameter.__deepcopy__
        torch.Tensor.__deepcopy__ = tensor_copy
        torch.nn.Parameter.__deepcopy__ = tensor_copy
        try:
            self.model = copy.deepcopy(model, memo)
        finally:
            torch.Tensor.__deepcopy__ = tensor_deepcopy
            torch.nn.Parameter.__deepcopy__ = parameter_deepcopy
        self.optimizer = (_OptimizerShape(torch, optimizer, memo)
                          if optimizer is not None else None)
        ids = {}
        for m in model.modules():
            c = memo.get(id(m))
            if c is not None:
                ids[id(c)] = module_ids(m)
        self.module_ids = lambda m: ids.get(id(m), 0)
        self.device = model_device(model)


def repeated_blocks(model):
    """The model's repeated blocks, as one checkpoints them: the shallowest siblings of one class
    (two or more) that hold parameters and modules of their own (ResNet's layer1-4, a
    transformer's layers)."""
    level = [model]
    while level:
        found = []
        for parent in level:
            by_class = {}
            for child in parent.children():
                if next(child.children(), None) is not None and \
                        next(child.parameters(), None) is not None:
                    by_class.setdefault(type(child), []).append(child)
            for group in by_class.values():
                if len(group) >= 2:
                    found.extend(group)
        if found:
            return found
        level = [c for m in level for c in m.children()]
    return []


class _Checkpointed:
    """`modules` run under non-reentrant torch.utils.checkpoint while in the `with` (their
    forward put back after)."""

    def __init__(self, torch, modules):
        self.torch, self.modules = torch, modules

    def __enter__(self):
        from torch.utils.checkpoint import checkpoint
        for m in self.modules:
            def run(*args, _forward=m.forward, **kwargs):
                return checkpoint(_forward, *args, use_reentrant=False,
                                  preserve_rng_state=False, **kwargs)
            m.forward = run
        return self

    def __exit__(self, *exc):
        for m in self.modules:
            m.__dict__.pop("forward", None)
        return False


def predict_step(torch, model, call, batch, recorded_batch, optimizer, training, grad,
                 autocast, module_ids, iterations=2, checkpointed=(), devices=None,
                 repeat=False, output_dies=False):
    """The requests of `iterations` training steps of `model` at `batch` on fake tensors (a
    forward alone, once, when the recorded forward was not training); `checkpointed`: modules
    run under torch.utils.checkpoint; `devices`: a ShapeCopy's devices of its meta tensors;
    `repeat`: the iterations after the first repeat its forward, loss and backward's requests
    (run in full, a two-iteration step says in REPEATS whether they may); `output_dies`: the
    output and loss are let go at each iteration's end (output_dies_with_call), not when the
    next ones are assigned."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.utils.stateless import _reparametrize_module
    mode = FakeTensorMode(allow_non_fake_inputs=False)

    def fake(t):
        device = devices.get(id(t)) if devices else None
        if device is None:
            return mode.from_tensor(t)
        with mode:  # a ShapeCopy's meta tensor, made on the device of the tensor it copies
            f = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                    device=device)
        return f.requires_grad_(True) if t.requires_grad else f

    fake_of = {}
    params, buffers = {}, {}
    for name, p in model.named_parameters():
        fake_of[id(p)] = params[name] = fake(p)
    for name, b in model.named_buffers():
        buffers[name] = fake(b)
    args, kwargs = _fake_args(torch, mode, call, batch, recorded_batch)
    rec = _Recorder(torch, module_ids)
    from torch.utils._pytree import tree_leaves
    rec.existing(list(params.values()) + list(buffers.values()) + tree_leaves((args, kwargs)))
    opt = _fake_optimizer(torch, optimizer, fake_of) if (optimizer is not None and training) else None
    hooks = rec.forward_hooks()
    # The first iteration's forward, loss and backward (its requests, where they end, the
    # parameters it gave gradients): what a repeated second iteration asks for again.
    body = None
    repeated = None
    try:
        with _reparametrize_module(model, {**params, **buffers}, tie_weights=True), \
                _Checkpointed(torch, checkpointed), mode, rec.mode:
            out = loss = None
            for _ in range(iterations if training else 1):
                rec.phase = "s"
                if opt is not None:
                    opt.zero_grad(set_to_none=True)
                else:
                    for p in params.values():
                        p.grad = None
                if body is not None and repeat:
                    held = {"out": out, "loss": loss}  # let go by the repeat, as below
                    out = loss = None
                    repeated, late = _repeat_body(torch, rec, body, held)
                    rec.phase = "s"
                    if opt is not None:
                        opt.step()
                    rec.requests.extend(("f", b, 0, 0, "s") for b in late)
                    continue
                rec.phase = "f"
                start = len(rec.requests)
                with torch.set_grad_enabled(grad), \
                        torch.autocast("cuda", dtype=autocast or torch.float16,
                                       enabled=autocast is not None):
                    new_out = model(*args, **kwargs)
                    out = new_out
                    del new_out
                    if not (training and grad):
                        break
                    rec.phase = "l"
                    loss = _loss_of(torch, out)
                rec.phase = "b"
                loss.backward()
                if body is None:
                    body = (rec.requests[start:], len(rec.requests),
                            [p for p in params.values() if p.grad is not None])
                rec.phase = "s"
                if opt is not None:
                    opt.step()
                if output_dies:  # as the step function returns
                    out = loss = None
                    rec.collect()
            rec.collect()
            out = loss = None
            rec.collect()
            if repeated:
                # The repeated output and loss, freed here as the loop's own are.
                rec.requests.extend(("f", b, 0, 0, "s") for b in sorted(repeated))
    finally:
        for h in hooks:
            h.remove()
    if REPEAT_ON and body is not None and not repeat and training and grad and iterations == 2:
        _remember_repeats(model, rec.requests)
    return rec.requests


def _remember_repeats(model, requests):
    """REPEATS of `model` from its first step run in full; a model that takes no weak reference
    is never repeated."""
    try:
        _repeats().setdefault(model, same_bodies(requests))
    except TypeError:
        pass


def _may_repeat(model):
    try:
        return REPEAT_ON and _repeats().get(model, False)
    except TypeError:
        return False


def _repeat_body(torch, rec, body, held):
    """A training iteration's forward, loss and backward after the first, as the first's
    requests again (Recorder.repeat): the previous output and loss (`held`) let go where the
    loop lets them go, the parameters given gradients unrecorded for the optimizer step (the
    repeated requests made them). Returns the repeated blocks the loop frees at its end (those
    of the output and the loss), and those to free after the optimizer step that follows."""
    requests, end, graded = body
    # What the first's optimizer step freed of the body's: before its last allocation (the
    # backward's last temporaries), freed again after the repeat; after it (the output and loss
    # of a step function that lets them go as it returns), after the next optimizer step too.
    # Then the gradients zero_grad let go, the loop's first free of the forward.
    after = rec.requests[end:]
    last = max((i for i, r in enumerate(after) if r[0] == "a"), default=-1)
    freed_after = [r[1] for r in after[:max(last, 0)] if r[0] == "f"]
    freed_late = [r[1] for r in after[last + 1:] if r[0] == "f"]
    rec.freed_now("f")

    def release(phase, has_requests):
        # The loop lets the previous output go when the new one is assigned (its first look
        # after: the loss's first operator), the previous loss when the new loss is (the
        # backward's first); a loss of no operator: both at the backward.
        if phase == "l" and not has_requests:
            return []
        held["out"] = None
        if phase == "b":
            held["loss"] = None
        return rec.freed_now(phase)

    new, released = rec.repeat(requests, freed_after, release)
    late = [new.pop(b) for b in freed_late if b in new]
    rec.off = True
    try:
        for p in graded:
            p.grad = torch.empty_like(p)
            rec.existing([p.grad])
    finally:
        rec.off = False
    return {new[b] for b in released if b in new}, late


def runs_of(requests):
    """A step's requests in runs, as (bodies, optimizer runs): each iteration's forward, loss
    and backward (phases other than "s") and the optimizer's between them (zero_grad, step)."""
    bodies, steps, cur, in_body = [], [], [], None
    for r in requests:
        body = r[4] != "s"
        if body != in_body and cur:
            (bodies if in_body else steps).append(cur)
            cur = []
        in_body = body
        cur.append(r)
    if cur:
        (bodies if in_body else steps).append(cur)
    return bodies, steps


def body_shape(run):
    """What the allocator sees of a run of requests: sizes and phases in order, and each free of
    a block the run made by the place of its allocation (frees of earlier blocks left out)."""
    pos, out = {}, []
    for op, block, nbytes, _module, phase in run:
        if op == "a":
            pos[block] = len(pos)
            out.append(("a", nbytes, phase))
        elif block in pos:
            out.append(("f", pos[block]))
    return out


def same_bodies(requests):
    """Whether a two-iteration step's second forward, loss and backward asked for what its
    first did: the same sizes in the same order and frees at the same places (each free of a
    block the body made itself; the frees of earlier blocks, the previous output and loss and
    the gradients, are the loop's, and the repeat makes them)."""
    bodies, _ = runs_of(requests)
    return len(bodies) == 2 and body_shape(bodies[0]) == body_shape(bodies[1])


def step_runs(torch, model, recorded_batch, training, grad, autocast, module_ids,
              finished=False):
    """The steps a prediction runs, as (batch, change, checkpointed modules): the step at the
    recorded batch ("none" when the process finished it, else "": its completion) and, when
    the process never finished it, at its half; then the same step under bf16 autocast (when
    the run used neither autocast nor a narrower dtype) and with the repeated blocks
    checkpointed."""
    runs = []
    if finished:
        runs.append((recorded_batch, "none", []))
    else:
        runs += [(b, "", []) for b in [recorded_batch] + ([recorded_batch // 2]
                                                          if recorded_batch >= 2 else [])]
    if training and grad:
        p = next(model.parameters(), None)
        if autocast is None and p is not None and p.dtype == torch.float32:
            runs.append((recorded_batch, "bf16_autocast", []))
        blocks = [m for m in repeated_blocks(model) if module_ids(m)]
        if len(blocks) >= 2:
            runs.append((recorded_batch, "checkpoint", blocks))
    return runs


def step_lines(device, step, batch, recorded_batch, step_time_ns, status, change, blocks,
               requests, module_ids):
    """A predicted step's N line, its V line (a change) and its R lines
    (common/side_channel.h)."""
    status = status.replace("\t", " ").replace("\n", " ")
    lines = ["N\t%d\t%d\t%d\t%d\t%d\t%s\n" % (device, step, batch, recorded_batch,
                                                 step_time_ns, status)]
    if change:
        lines.append("V\t%d\t%s\t%s\n" % (step, change, ",".join(
            str(module_ids(m)) for m in blocks) or "-"))
    lines.extend("R\t%d\t%s\t%d\t%d\t%d\t%s\n" % (step, op, block, nbytes, module, phase)
                 for op, block, nbytes, module, phase in requests)
    return lines


def after_the_first(runs):
    """step_runs' list less its first step (the pre-flight's rest)."""
    return runs[1:]


def next_step_id(lines):
    """The id the next predicted step takes after `lines` (one N line each)."""
    return 1 + sum(1 for line in lines if line.startswith("N\t"))


def predicted_lines(torch, device, step_time_ns, model, call, recorded_batch, optimizer,
                    training, grad, autocast, module_ids, first_id=1, finished=False,
                    runs=None, devices=None, deadline_ns=None, output_dies=False):
    """N, V and R lines (common/side_channel.h) of the stand-in step on fake tensors, for each
    of `runs` (step_runs' by default). A status line says why a step could not be run. Past
    `deadline_ns`, before the next step, OverBudget (a step that began runs to its end).
    `output_dies`: predict_step's."""
    if runs is None:
        runs = step_runs(torch, model, recorded_batch, training, grad, autocast, module_ids,
                         finished)
    elif callable(runs):  # a selection of step_runs' (the pre-flight's stages)
        runs = runs(step_runs(torch, model, recorded_batch, training, grad, autocast,
                              module_ids, finished))
    import time
    lines = []
    step = first_id
    for b, change, blocks in runs:
        if deadline_ns is not None and time.monotonic_ns() > deadline_ns:
            raise OverBudget()
        try:
            requests = predict_step(
                torch, model, call, b, recorded_batch, optimizer, training, grad,
                torch.bfloat16 if change == "bf16_autocast" else autocast, module_ids,
                checkpointed=blocks, devices=devices,
                repeat=_may_repeat(model), output_dies=output_dies)
            status = "ok"
        except Exception as ex:  # an operator without a fake kernel, a data-dependent shape...
            requests = []
            status = ("cannot run on fake tensors: %s: %s"
                      % (type(ex).__name__, str(ex).splitlines()[0] if str(ex) else ""))[:1000]
        lines += step_lines(device, step, b, recorded_batch, step_time_ns, status, change,
                            blocks, requests, module_ids)
        step += 1
        if not requests and not change:
            break  # the step as the program runs it failed: no change can be weighed
    return lines


class _Prediction:
    """The context's part that predicts (_vramtrace_context._Context): the first call's
    arguments captured as shapes, and the steps run on fake tensors at exit or as the second
    step begins."""

    def init_prediction(self):
        # The first training step, for predicting its rest when it dies: the first outermost
        # call of a model with parameters, its arguments as shapes only.
        self.want_call = os.environ.get("VRAMTRACE_TORCH_PREDICT", "on") != "off"
        self.first_call = None    # (weakref(model), described args, batch, training, grad, autocast, time_ns)
        self.output_dies = False  # output_dies_with_call of the first call's caller
        self.step_assumptions = []  # what the stand-in step assumes of the loop (SA lines)
        self.standin_ran = False    # a stand-in step's lines are among the predicted
        self.first_done = False   # the first optimizer step (or evaluation forward) ended
        self.oom_seen = False
        self.made_optimizers = []  # weakrefs of every optimizer made, first made first
        self.predicted = []        # N, V and R lines
        # VRAMTRACE_TORCH_PREDICT=always: the step is predicted as the second one begins, the
        # program waiting; else at the exit of a process that ran out, and, by default, at the
        # exit of a run that finished its steps within a share of its time (weigh_at_exit, on
        # the ShapeCopy that keep_shape made at its first step's end).
        mode = os.environ.get("VRAMTRACE_TORCH_PREDICT", "on")
        self.predict_always = mode == "always"
        self.weigh_remedies = mode == "on"
        try:
            self.weigh_budget = max(0.0, float(
                os.environ.get("VRAMTRACE_TORCH_PREDICT_BUDGET", "") or "0.01"))
        except ValueError:
            self.weigh_budget = 0.01
        self.started_ns = self.now()  # the run's start (sitecustomize sets its own)
        self.shape = None          # the ShapeCopy, once made
        self.shape_why = None      # why none was made
        self.shape_ns = 0          # what making it cost
        self.weigh_runs = None     # which of step_runs' they run (all; a pre-flight's rest)
        self.preflight_rest = None  # a pre-flight's steps not run before the first step
        self.first_allocs = None   # PyTorch's count of allocations at the first training call
        self.step_allocs = 0       # the first step's allocations (for what the fake steps cost)
        self.predict_pending = False
        # `vramtrace plan` (VRAMTRACE_PLAN=1): the first training call is predicted and the
        # process stopped before its forward runs (plan_stop).
        self.plan = os.environ.get("VRAMTRACE_PLAN") == "1"
        if self.plan:
            self.want_call = True
        # `vramtrace run --preflight` (VRAMTRACE_PREFLIGHT: the folder where the launcher takes
        # asks): the first training call is predicted, its verdict asked for and waited for
        # (preflight), then the program goes on.
        self.preflight_dir = None if self.plan else os.environ.get("VRAMTRACE_PREFLIGHT") or None
        if self.preflight_dir:
            self.want_call = True
        if self.plan or self.preflight_dir:
            self.weigh_remedies = False
        self.first_call_stops = bool(self.plan or self.preflight_dir)
        self.preflight_line = None  # the PF line, once predicted
        self.preflighting = False   # its fake steps are running
        self.plan_line = None      # the Z line, once stopped
        self.own = None            # the program's own steps on fake tensors, while they run
        self.rng_restored = False  # the last predict_steps put the RNG states back
        self.dump_now = None       # writes the side channel now (set by sitecustomize)

    def capture_call(self, module, args, kwargs):
        """The first outermost call of a module with parameters on the main thread: what it was
        called with (shapes and dtypes, nothing kept alive) and how (training, grad, autocast)."""
        if self.plan_line is not None and self.get_ident() == self.main:
            self.plan_exit()  # the program caught the stop's SystemExit and went on
        if (self.stack or self.in_root or self.in_backward or self.get_ident() != self.main
                or next(module.parameters(), None) is None):
            return
        if ((self.plan or self.preflight_dir)
                and not (module.training and self.torch.is_grad_enabled())):
            return  # an evaluation before training: the plan waits for a training step
        self.want_call = False
        try:
            call, batch = describe_call(self.torch, args, kwargs)
            torch = self.torch
            autocast = None
            if torch.is_autocast_enabled():
                get = getattr(torch, "get_autocast_dtype", None)
                autocast = get("cuda") if get else torch.get_autocast_gpu_dtype()
            self.first_call = (self.weakref.ref(module), call, batch, module.training,
                               torch.is_grad_enabled(), autocast, self.now())
            caller = caller_frame(sys._getframe(1), self.skip)
            self.output_dies = output_dies_with_call(caller)
            self.step_assumptions = [self.clean(output_assumption(caller, self.output_dies))]
            if self.weigh_remedies or self.preflight_dir:
                self.first_allocs = self.allocation_count()
        except Exception as ex:
            self.first_call = None
            if self.plan:
                self.predicted = ["N\t0\t1\t0\t0\t%d\tnot predicted: its arguments could "
                                  "not be read: %s\n" % (self.now(), self.clean(str(ex))[:500])]
        if self.plan:
            self.plan_stop(module)
        elif self.preflight_dir:
            self.preflight(module)

    def preflight(self, module):
        """`vramtrace run --preflight`: the step the program is about to run predicted on fake
        tensors, the side channel written now (with the PF line), the launcher asked for its
        verdict (preflight.<pid>.ask in VRAMTRACE_PREFLIGHT) and its answer waited for
        (VRAMTRACE_PREFLIGHT_WAIT seconds, 30), so that the verdict is said before the step
        can die. In two stages, as the verdict needs them: the step at its batch alone first;
        when the launcher answers that it will not fit ("more"), the step at half the batch and
        with the remedies' changes, and the launcher asked again (the largest batch, each
        remedy). A step that fits has its remedies' changes weighed at exit instead, as a
        finished run's (weigh_at_exit). Nothing of the program changes: the forward runs next,
        as it would have."""
        import time
        global REPEAT_ON
        folder, self.preflight_dir = self.preflight_dir, None  # once
        repeat_was = REPEAT_ON
        REPEAT_ON = REPEAT_SETTING != "0"
        try:
            asked_from = time.monotonic_ns()
            self.preflighting = True
            try:
                self.preflight_line, _, spent = self.predict_first_step(
                    module, "PF\t%d\t%d\t%d\t%d\t%s\n", runs=lambda runs: runs[:1])
            finally:
                self.preflighting = False
            if self.ask_preflight(folder, asked_from, 1) == "more":
                self.preflighting = True
                try:
                    started = time.perf_counter_ns()
                    self.predict_steps(force=True, runs=after_the_first)
                    spent += time.perf_counter_ns() - started
                    fields = self.preflight_line.split("\t")
                    fields[3] = str(spent)
                    self.preflight_line = "\t".join(fields)
                finally:
                    self.preflighting = False
                self.ask_preflight(folder, asked_from, 2)
            elif self.predicted and self.predicted[0].rstrip("\n").endswith("\tok"):
                # Foreseen to fit (or no verdict came): the rest is run at exit, the half batch
                # too if the step ran out of memory after all (at_exit), else the remedies'
                # changes, weighed within the run's share as a finished run's.
                self.preflight_rest = after_the_first
                if not self.predict_always:
                    self.weigh_remedies = True
                    self.weigh_runs = lambda runs: [r for r in runs
                                                    if r[1] not in ("", "none")]
        except Exception as ex:
            try:
                sys.stderr.write("vramtrace: PRE-FLIGHT: not made: %s\n"
                                 % self.clean(str(ex))[:300])
            except Exception:
                pass
        finally:
            REPEAT_ON = repeat_was

    def ask_preflight(self, folder, asked_from, stage):
        """The side channel written now, the launcher asked for the verdict of `stage` (1: the
        step at its batch; 2: with its half and the remedies) and waited for: its answer
        ("more": stage 2 is wanted), or None when none came in time (said)."""
        import time
        if self.dump_now is not None:
            self.dump_now()
        pid = os.getpid()
        ask = os.path.join(folder, "preflight.%d.ask" % pid)
        done = os.path.join(folder, "preflight.%d.done" % pid)
        with open(ask + ".tmp", "w") as f:
            f.write("%d %d\n" % (asked_from, stage))
        os.replace(ask + ".tmp", ask)
        try:
            wait = float(os.environ.get("VRAMTRACE_PREFLIGHT_WAIT", "") or "30")
        except ValueError:
            wait = 30.0
        wait = min(max(wait, 0.0), 600.0)
        deadline = time.monotonic() + wait
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.02)
        answer = None
        if os.path.exists(done):
            try:
                with open(done) as f:
                    answer = f.read().strip()
            except OSError:
                answer = ""
        else:
            sys.stderr.write("vramtrace: PRE-FLIGHT: no verdict within %g s "
                             "(VRAMTRACE_PREFLIGHT_WAIT); the program goes on\n" % wait)
            sys.stderr.flush()
        for path in (ask, done):
            try:
                os.unlink(path)
            except OSError:
                pass
        return answer

    def predict_first_step(self, module, line, runs=None):
        """The step the program is about to run, predicted on fake tensors (at its batch and its
        half, and with the remedies' changes; `runs`, a selection of them: step_runs' list to
        the list run), for `vramtrace plan` (a Z line) and `run --preflight` (a PF line):
        `line`, the caller's line format (common/side_channel.h: when, the batch, the fake
        steps' time, whether the RNG states were put back, the loss taken), filled in, with the
        batch and the nanoseconds the fake steps took."""
        import time
        started = time.perf_counter_ns()
        try:
            self.module_id(module)  # its modules named (M lines) for the predicted requests
        except Exception:
            pass
        first = self.first_call
        batch = first[2] if first is not None else 0
        del LOSSES[:]
        if first is not None and not batch:
            self.predicted = ["N\t0\t1\t0\t0\t%d\t%s\n" % (
                first[6], "not predicted: the model was called with no tensor to take a batch "
                "from")]
        elif first is not None:
            self.predict_steps(force=True, runs=runs)
        spent = time.perf_counter_ns() - started
        loss = LOSSES[0] if LOSSES else ""
        return (line % (self.now(), batch, spent, 1 if self.rng_restored else 0, loss), batch,
                spent)

    def plan_stop(self, module):
        """`vramtrace plan`: the step the program is about to run predicted on fake tensors
        (at its batch and its half, and with the remedies' changes), then the process ended
        with status 0 before the forward runs: SystemExit(0), so that the exit handlers (this
        hook's side channel, the preloaded library's trace) run as at any clean exit. The
        program's own loop runs those steps where it can (_vramtrace_own: its loss, scaler,
        accumulation); VRAMTRACE_PLAN_STEP=standin, or a model that cannot, takes the stand-in
        step."""
        if self.start_own(module):
            return  # the program goes on, on fake tensors; own_done stops it
        self.plan_line, batch, spent = self.predict_first_step(
            module, "Z\t%d\t%d\t%d\t%d\t%s\n")
        # The side channel written now, as the allocator stands at the stop: what the program
        # frees while SystemExit unwinds it (its model, its batch) is no part of the step
        # planned, and the replay would take those frees for the step's.
        if self.dump_now is not None:
            self.dump_now()
        self.want_call = True  # the next outermost call, if the program goes on, ends it
        try:
            sys.stderr.write(
                "vramtrace plan: stopped before the first training step (batch %d): the step "
                "was predicted on fake tensors in %.1f s; nothing of it ran\n"
                % (batch, spent / 1e9))
            sys.stderr.flush()
        except Exception:
            pass
        raise SystemExit(0)

    def module_ids_of(self):
        """The M id of a module (0: none), as the predicted requests name it."""
        modules = self.modules

        def module_ids(m):
            entry = modules.get(id(m))
            return entry[0] if entry is not None and entry[1]() is m else 0
        return module_ids

    def optimizers_of(self, model):
        """The optimizers made so far that step any of the model's parameters, first made
        first."""
        params = {id(q) for q in model.parameters()}
        return [o for o in (w() for w in self.made_optimizers)
                if o is not None and any(id(q) in params for g in o.param_groups
                                         for q in g["params"])]

    def start_own(self, module):
        """The plan's steps run by the program's own loop on fake tensors (_vramtrace_own), from
        this first training call on. False, nothing changed, where it cannot be: a compiled or
        distributed model, a process group (the loop's collectives would wait for the other
        ranks), VRAMTRACE_PLAN_STEP=standin, or a PyTorch without what it needs."""
        import time
        first = self.first_call
        if (first is None or not first[2] or first[0]() is not module
                or os.environ.get("VRAMTRACE_PLAN_STEP", "program") == "standin"):
            return False
        torch = self.torch
        if type(module).__name__ in ("OptimizedModule", "DistributedDataParallel",
                                     "FullyShardedDataParallel", "DataParallel"):
            return False
        try:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                return False
        except Exception:
            pass
        try:
            from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: F401
            from torch.utils._python_dispatch import _disable_current_modes  # noqa: F401
            from _vramtrace_own import OwnSteps
            self.module_id(module)  # its modules named (M lines) for the predicted requests
            own = OwnSteps(self, module, first[1], first[2], first[5], self.module_ids_of(),
                           model_device(module), first[6])
        except Exception:
            return False
        started = time.perf_counter_ns()
        self.set_enabled(False)  # the hook's marks and labels stay out of the fake steps
        if not own.start():
            self.set_enabled(True)
            return False
        self.own, self.own_started = own, started
        try:
            sys.stderr.write(
                "vramtrace plan: the program's own loop runs on fake tensors from its first "
                "training step (batch %d): two optimizer steps for each of %d predicted steps; "
                "nothing of it runs on the GPU\n" % (first[2], len(own.runs)))
            sys.stderr.flush()
        except Exception:
            pass
        return True

    def own_done(self, own, at_exit=False):
        """The program's own steps over (all run, or the program stopped on fake tensors): the
        steps it did not reach predicted with the stand-in step, the plan's Z line, and the
        stop (SystemExit(0)) unless the process is exiting already."""
        import time
        self.own = None
        batch = own.batch
        self.predicted = list(own.lines)
        if own.first_done:
            missing = [r for r in own.runs if (r[0], r[1]) not in own.done]
            if missing:
                model = own.model
                ref, call, _, training, grad, autocast, t = self.first_call
                try:
                    self.standin_ran = True
                    self.predicted += predicted_lines(
                        self.torch, own.device, t, model, call, batch, own.optimizers[0]
                        if own.optimizers else None, training, grad, autocast,
                        self.module_ids_of(), first_id=len(own.done) + 1, runs=missing,
                        output_dies=self.output_dies)
                except Exception:
                    pass
            self.set_enabled(True)
            loss = "program"
            self.rng_restored = own.rng is not None
        else:
            self.set_enabled(True)
            self.predicted = []
            del LOSSES[:]
            self.predict_steps(force=True)
            loss = LOSSES[0] if LOSSES else ""
        spent = time.perf_counter_ns() - self.own_started
        self.plan_line = "Z\t%d\t%d\t%d\t%d\t%s\n" % (self.now(), batch, spent,
                                                        1 if self.rng_restored else 0, loss)
        notes = []
        if own.first_done:
            notes.append("the program's own loop ran %d of %d steps on fake tensors"
                         % (len(own.done), len(own.runs)))
            notes.append("put back: the model's parameters and buffers, its optimizers, the RNG "
                         "states; not put back, as the plan ends the program: what else its "
                         "loop changed (a GradScaler's scale, a learning-rate scheduler, its "
                         "DataLoader's place)")
        if own.failed and not own.first_done:
            notes.append("the program's own step stopped on fake tensors (%s): the steps were "
                         "predicted with a stand-in step instead, whose whole step and largest "
                         "batch are not the program's" % own.failed)
        for b, change, why in own.failures:
            notes.append("the step at batch %d%s: %s" % (b, " with " + change if change else "",
                                                         why))
        if own.values_read:
            notes.append("%d values the program read from fake tensors (.item(), bool()) "
                         "were given as 0" % own.values_read)
        if own.saves_skipped:
            notes.append("%d torch.save calls skipped" % own.saves_skipped)
        # Said in the report (ZN lines: report.json's plan notes, the summary's PLAN lines).
        for n in notes:
            n = self.clean(n).replace("\t", " ").replace("\n", " ")[:1000]
            self.plan_line += "ZN\t%s\n" % n
        try:
            sys.stderr.write(
                "vramtrace plan: stopped %s (batch %d): predicted on fake tensors in %.1f s; "
                "nothing of it ran on the GPU\n"
                % ("after the program's own steps" if own.first_done else
                   "before the first training step", batch, spent / 1e9))
            sys.stderr.flush()
        except Exception:
            pass
        if at_exit:
            return
        if self.dump_now is not None:
            self.dump_now()
        self.want_call = True  # the next outermost call, if the program goes on, ends it
        raise SystemExit(0)

    def plan_exit(self):
        """The program caught the plan's SystemExit and called a module again: the process ends
        at once, with status 0 still (the side channel was written at the stop)."""
        try:
            sys.stderr.flush()
            sys.stdout.flush()
        except Exception:
            pass
        os._exit(0)

    def second_step(self):
        """The second step begins: with VRAMTRACE_TORCH_PREDICT=always, its first step run on
        fake tensors now, the program waiting."""
        if self.predict_always:
            self.predict_steps()

    def keep_shape(self):
        """The first optimizer step ended: by default, a ShapeCopy of the model and its
        optimizer kept for the fake steps at exit (weigh_at_exit), the program's model being
        usually gone by then. Where it cannot be made, why (said at exit)."""
        first = self.first_call
        if not self.weigh_remedies or first is None or self.shape is not None:
            return
        import time
        started = time.perf_counter_ns()
        model = first[0]()
        try:
            if model is None:
                raise RuntimeError("the model was gone at the end of the first step")
            name = type(model).__name__
            if name == "OptimizedModule":
                raise RuntimeError("a compiled model (OptimizedModule)")
            if name in ("DistributedDataParallel", "DataParallel"):
                model = model.module
            optimizers = self.optimizers_of(model)
            self.shape = ShapeCopy(self.torch, model, optimizers[0] if optimizers else None,
                                   self.module_ids_of())
        except Exception as ex:
            self.shape_why = "the model could not be copied as shapes: %s" % self.clean(
                str(ex).splitlines()[0] if str(ex) else type(ex).__name__)[:300]
        self.shape_ns = time.perf_counter_ns() - started
        count = self.allocation_count()
        if count is not None and self.first_allocs is not None:
            self.step_allocs = max(0, count - self.first_allocs)

    def allocation_count(self):
        """PyTorch's count of allocations on the current device so far (None without it)."""
        try:
            return int(self.torch.cuda.memory_stats()["allocation.all.allocated"])
        except Exception:
            return None

    def weigh_at_exit(self):
        """At the exit of a run that finished its first step and never ran out of memory, by
        default: its remedies weighed on fake steps of the ShapeCopy kept at the first step, in
        at most VRAMTRACE_TORCH_PREDICT_BUDGET (0.01) of the run's time so far, copy included.
        None is begun when they are foreseen to take more (from the first step's allocations),
        and none after the share is spent (a step once begun runs to its end); then an N line
        (with its V line, "none") says why they were not weighed, which the report's remedies
        then say (estimated from the recorded requests)."""
        first = self.first_call
        if (not self.weigh_remedies or first is None or self.oom_seen or not self.first_done
                or not first[2] or (self.predicted and self.weigh_runs is None)):
            return
        ref, call, batch, training, grad, autocast, t = first
        if not (training and grad):
            return
        import time
        step_id = next_step_id(self.predicted)
        ran_ns = max(0, self.now() - self.started_ns)
        budget_ns = int(ran_ns * self.weigh_budget) - self.shape_ns
        why = self.shape_why
        if why is None and self.shape is None:
            why = "the model was not copied at its first step"
        if why is None and budget_ns <= 0:
            why = ("the run took %.1f s, and %g %% of it (VRAMTRACE_TORCH_PREDICT_BUDGET) is "
                   "too short for them" % (ran_ns / 1e9, 100 * self.weigh_budget))
        # What they would take, from the first step's allocations: a fake step costs about
        # 0.6 ms of Python per allocation of the real one (two iterations; 0.53 to 0.70 ms on
        # the H100 for ResNet-50 and a 1e9 Llama), taken as 1 ms, three steps. Not begun when
        # over the share: a fake step, once begun, runs to its end.
        if why is None and self.step_allocs:
            steps = 2 if self.weigh_runs is not None else 3
            expect_ns = self.step_allocs * steps * 1000000
            if expect_ns > budget_ns:
                why = ("they would take about %.1f s (%d allocations in the first step, %d "
                       "steps), more than %g %% of the run's %.1f s "
                       "(VRAMTRACE_TORCH_PREDICT_BUDGET)"
                       % (expect_ns / 1e9, self.step_allocs, steps, 100 * self.weigh_budget,
                          ran_ns / 1e9))
        if why is None:
            started = time.monotonic_ns()
            try:
                self.predict_steps(force=True, shape=self.shape,
                                   deadline_ns=started + budget_ns, runs=self.weigh_runs)
            except OverBudget:
                stopped = ("were stopped after %.3f s, past %g %% of the run's %.1f s "
                           "(VRAMTRACE_TORCH_PREDICT_BUDGET)"
                           % ((time.monotonic_ns() - started) / 1e9, 100 * self.weigh_budget,
                              ran_ns / 1e9))
                why = "they " + stopped
                try:
                    sys.stderr.write("vramtrace: the remedies' fake steps %s\n" % stopped)
                except Exception:
                    pass
            weigh_ns = time.monotonic_ns() - started
            if why is None:
                try:
                    sys.stderr.write(
                        "vramtrace: the remedies were weighed on fake tensors in %.2f s (%.2f %% "
                        "of the run's %.1f s; the model's copy as shapes took %.1f ms at its "
                        "first step)\n" % (weigh_ns / 1e9, 100.0 * (
                            weigh_ns + self.shape_ns) / max(ran_ns, 1), ran_ns / 1e9,
                            self.shape_ns / 1e6))
                except Exception:
                    pass
        if why is not None:
            self.predicted = self.predicted + step_lines(
                self.shape.device if self.shape is not None else 0, step_id, batch, batch, t,
                "not weighed on fake steps: %s; VRAMTRACE_TORCH_PREDICT=always runs them as the "
                "second step begins" % why, "none", [], [], None)

    def predict_steps(self, force=False, shape=None, deadline_ns=None, runs=None):
        """At exit of a process that ran out of memory (or of any, with
        VRAMTRACE_TORCH_PREDICT=always; or, `force`, before the first step for `vramtrace
        plan`, and at a finished run's exit for weigh_at_exit): the N, V and R lines of its
        first step run on fake tensors: completed at the recorded batch and its half when the
        process never finished it, and with the changes the report's remedies weigh
        (_vramtrace_step.py). On the model, or on `shape` (a ShapeCopy), or on the one kept
        when the model is gone; past `deadline_ns`, OverBudget. `runs`: a selection of
        step_runs' (a function of its list), whose lines follow those already predicted."""
        first = self.first_call
        if (first is None or (self.predicted and runs is None)
                or not (self.oom_seen or self.predict_always or force)):
            return
        ref, call, batch, training, grad, autocast, t = first
        model = ref() if shape is None else None
        if model is None and shape is None:
            shape = self.shape
        if (model is None and shape is None) or not batch:
            return
        # The fake step must leave no marks of its own, nor move the program's random numbers.
        enabled = self.enabled
        self.set_enabled(False)
        torch = self.torch
        rng = cuda_rng = None
        try:
            rng = torch.get_rng_state()
            cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        except Exception:
            pass
        self.rng_restored = False
        try:
            self.predict_model(first, model, shape, deadline_ns, runs)
        finally:
            try:
                if rng is not None:
                    torch.set_rng_state(rng)
                    if cuda_rng is not None or not torch.cuda.is_initialized():
                        self.rng_restored = True
                if cuda_rng is not None:
                    torch.cuda.set_rng_state_all(cuda_rng)
            except Exception:
                self.rng_restored = False
            if enabled:
                self.set_enabled(True)

    def predict_model(self, first, model, shape=None, deadline_ns=None, runs=None):
        import time
        ref, call, batch, training, grad, autocast, t = first
        before = self.predicted if runs is not None else []
        first_id = next_step_id(before)
        self.predicted = []
        try:
            if self.plan:
                sys.stderr.write("vramtrace plan: running the first training step on fake "
                                 "tensors (a few seconds)\n")
            elif self.preflighting and before:
                sys.stderr.write("vramtrace: PRE-FLIGHT: running it at half its batch and with "
                                 "the remedies' changes on fake tensors (a few seconds)\n")
            elif self.preflighting:
                sys.stderr.write("vramtrace: PRE-FLIGHT: running the first training step on "
                                 "fake tensors (a few seconds)\n")
            elif deadline_ns is not None:
                sys.stderr.write(
                    "vramtrace: weighing the remedies on fake tensors (at most %.3f s, %g %% "
                    "of the run; VRAMTRACE_TORCH_PREDICT=off skips this)\n"
                    % ((deadline_ns - time.monotonic_ns()) / 1e9,
                       100 * self.weigh_budget))
            else:
                sys.stderr.write(
                    "vramtrace: %s: running the step on fake tensors to %s (a few seconds; "
                    "VRAMTRACE_TORCH_PREDICT=off skips this)\n"
                    % (("the first step ran out of memory", "predict the rest of it and weigh "
                        "the remedies") if not self.first_done else
                       ("out of memory" if self.oom_seen else "VRAMTRACE_TORCH_PREDICT=always",
                        "weigh the remedies")))
        except Exception:
            pass
        try:
            self.standin_ran = True
            if shape is not None:
                self.predicted = predicted_lines(
                    self.torch, shape.device, t, shape.model, call, batch, shape.optimizer,
                    training, grad, autocast, shape.module_ids, first_id=first_id,
                    finished=self.first_done, runs=runs, devices=shape.devices,
                    deadline_ns=deadline_ns, output_dies=self.output_dies)
                return
            device = model_device(model)
            optimizers = self.optimizers_of(model)
            optimizer = optimizers[0] if optimizers else None
            module_ids = self.module_ids_of()
            name = type(model).__name__
            if name in ("OptimizedModule", "DistributedDataParallel"):
                inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
                if name == "OptimizedModule" or inner is None:
                    self.predicted = ["N\t%d\t1\t%d\t%d\t%d\tnot predicted: a %s\n"
                                      % (device, batch, batch, t, name)]
                    return
                model = inner
            self.predicted = predicted_lines(self.torch, device, t, model, call, batch,
                                             optimizer, training, grad, autocast, module_ids,
                                             first_id=first_id, finished=self.first_done,
                                             runs=runs, deadline_ns=deadline_ns,
                                             output_dies=self.output_dies)
        except OverBudget:
            raise
        except Exception as ex:
            self.predicted = ["N\t0\t%d\t%d\t%d\t%d\tnot predicted: %s\n"
                              % (first_id, batch, batch, t, self.clean(str(ex))[:500])]
        finally:
            self.predicted = before + self.predicted
