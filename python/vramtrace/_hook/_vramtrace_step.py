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
    opt = (_fake_optimizer(torch, optimizer, fake_of) if (optimizer is not None and training)
           else None)
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
