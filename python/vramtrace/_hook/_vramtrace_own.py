"""The program's own training steps on fake tensors, for `vramtrace plan`.

A plan stops the program at its first training step; the stand-in step of _vramtrace_step
guesses what the program would have done next (a cross-entropy when the model returns no loss,
zero_grad(set_to_none=True), the previous iteration's output freed before the next forward).
Since the plan ends the program anyway, the program's own code can run that step instead, on
PyTorch's fake tensors: its loss, its GradScaler, its dtypes, its gradient checkpointing, its
gradient accumulation and what its loop keeps alive from one iteration to the next are then
what they are, not assumed.

From the first training call on, while the program runs its loop:
- the model's parameters and buffers are fake ones (swapped in as torch.func.functional_call
  does) and each optimizer of the model steps those;
- at the half batch, the program's DataLoader gives its batches cut to half (each tensor whose
  first dimension is the batch); a batch that comes from elsewhere cannot be cut, and that step
  is predicted with the stand-in step;
- every operator on CUDA tensors runs on FakeTensorMode (shapes, dtypes, devices, no memory);
  a real CUDA tensor it is given (the batch already on the GPU) is taken as existing, as the
  run recorded it; work on real CPU tensors (the data pipeline) runs for real;
- a value read from a fake tensor (.item(), bool(), a GradScaler's found-inf check) reads 0;
- a fake tensor's values are known where they come from the batch (a real CPU tensor copied to
  the GPU) through operators on known values only (a mask of the labels, the tokens masked);
  the shapes that depend on data (a boolean mask's index, nonzero, masked_select) are then
  computed from those values on the CPU, as the program's own GPU would have them;
- torch.save is skipped, so that no checkpoint of fake tensors overwrites the user's file.
Every storage made on a CUDA device and when it is freed is recorded, as _vramtrace_step's
recorder does. The loop runs two optimizer steps at the program's batch, then two at half of
it, then two under bf16 autocast around the model's forward and two with the repeated blocks
checkpointed (the changes the report weighs); each pair is one predicted step (N, V and R lines,
common/side_channel.h). Then everything is put back (parameters, optimizers, RNG states, the
dispatch modes, torch.save) and the plan's SystemExit(0) ends the program.

What the program does that fake tensors cannot run (a .numpy(), an operator without a fake
kernel, a shape that depends on values not known) ends it there: what was run is kept, and the
steps not run are predicted with the stand-in step at exit (_vramtrace_step)."""
import sys
from collections.abc import Mapping

from _vramtrace_frames import is_program_file
from _vramtrace_step import _Checkpointed, _Recorder, step_lines, step_runs

# Optimizer steps per predicted step (the second is the steady state: the optimizer's state is
# live in its forward); model calls after which a step with no optimizer step is given up.
STEPS = 2
MAX_CALLS = 64
# The most elements an operator's outputs may have for their values to be computed on the CPU:
# masks and token ids are a batch's size (64 x 512 is 2^15); a 4-D attention mask built from a
# known one (batch x 1 x sequence x sequence, 2^23 and more) would cost the plan seconds of CPU.
KNOWN_NUMEL = 1 << 22


class OwnSteps:
    """The program's loop run on fake tensors from its first training call (start), each
    configuration of step_runs for STEPS optimizer steps, then the plan's stop (ctx.own_done)."""

    def __init__(self, ctx, model, call, batch, autocast, module_ids, device, time_ns,
                 only=None):
        self.ctx, self.torch, self.model = ctx, ctx.torch, model
        # The configurations ((batch, change) pairs) to run, where not all of step_runs' (a
        # pre-flight's copies of the program share them out).
        self.only = only
        self.batch, self.autocast, self.module_ids = batch, autocast, module_ids
        self.device, self.time_ns = device, time_ns
        self.lines = []        # N, V and R lines of the steps done
        self.done = []         # (batch, change) of each step done
        self.failed = None     # why the program's own step could not go on
        self.values_read = 0   # values read from fake tensors (given 0)
        self.saves_skipped = 0
        self.active = False
        self.finished = False
        self.first_done = False  # the step at the program's own batch was recorded whole
        self.failures = []      # (batch, change, why) of each step the loop could not give
        self.internal = False   # this module's own operators: neither recorded nor changed
        self.run_batch = batch
        self.in_backward = 0
        self.uncut = None       # (DataLoader iterator class, its __next__) while batches are cut
        # Called after each configuration with its (batch, change), whether it gave a step and
        # its new lines (a pre-flight's child sends them to its parent as they come).
        self.on_run_end = None
        self.lines_sent = 0

    # ---- setting up and putting back -------------------------------------------------------
    def start(self):
        """Sets the program's loop on fake tensors. False (nothing changed) when this PyTorch
        cannot (no FakeTensorMode, dispatch modes, or stateless reparametrization)."""
        torch = self.torch
        try:
            from torch._subclasses.fake_tensor import FakeTensorMode, FakeTensor
            from torch.nn.utils.stateless import _reparametrize_module
            from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
            from torch.utils._pytree import tree_map, tree_leaves
            from torch.optim.optimizer import (register_optimizer_step_pre_hook,
                                               register_optimizer_step_post_hook)
            import contextlib
            aten = torch.ops.aten
            scalar_op = aten._local_scalar_dense.default
        except Exception:
            return False
        self.FakeTensor, self.reparametrize = FakeTensor, _reparametrize_module
        try:
            from torch.utils.weak import WeakIdKeyDictionary
            self.known = WeakIdKeyDictionary()  # fake tensor -> its values, a CPU tensor
        except Exception:
            self.known = None
        # The ids of the fake tensors with known values, for a quick "no" on every operator
        # (an id of one that is gone is only looked up for nothing); what each operator writes.
        self.known_ids, self.writes = set(), {}
        try:
            self.shape_ops = frozenset((  # data_dependent's
                aten.nonzero.default, aten.masked_select.default, aten.index.Tensor,
                aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default))
        except Exception:
            self.shape_ops = frozenset()
        self.tree_map, self.tree_leaves = tree_map, tree_leaves
        self.no_modes, self.contextlib = _disable_current_modes, contextlib
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.rec = _Recorder(torch, self.module_ids)
        self.runs = step_runs(torch, self.model, self.batch, True, True, self.autocast,
                              self.module_ids)
        if self.only is not None:
            wanted = [tuple(w) for w in self.only]
            self.runs = [r for r in self.runs if (r[0], r[1]) in wanted]
            if not self.runs:
                return False
        self.run_index = 0
        own = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return own.dispatch(func, args, kwargs or {}, scalar_op)

        self.mode = Mode()
        self.optimizers = self.ctx.optimizers_of(self.model)
        # id(optimizer) -> (its groups' parameter lists, its state), put back at the end
        self.saved_optimizers = {id(o): ([list(g["params"]) for g in o.param_groups], o.state)
                                 for o in self.optimizers}
        self.rng = None
        try:
            self.rng = (torch.get_rng_state(), torch.cuda.get_rng_state_all()
                        if torch.cuda.is_initialized() else None)
        except Exception:
            pass
        self.handles = []
        self.entered = []  # the dispatch modes pushed, in order
        self.save, self.excepthook = torch.save, sys.excepthook
        self.backward = torch.autograd.backward
        self.autocast_ctx = None
        try:
            self.begin_run()
            self.handles += self.rec.forward_hooks()
            self.handles.append(self.model.register_forward_pre_hook(self.model_pre,
                                                                     with_kwargs=True))
            self.handles.append(self.model.register_forward_hook(self.model_post,
                                                                 always_call=True))
            self.handles.append(register_optimizer_step_pre_hook(self.step_pre))
            self.handles.append(register_optimizer_step_post_hook(self.step_post))
            torch.autograd.backward = self.traced_backward
            torch.save = self.skipped_save
            sys.excepthook = self.on_exception
            for m in (self.fake_mode, self.mode):
                m.__enter__()
                self.entered.append(m)
            self.active = True
        except Exception:
            self.active = True
            self.put_back()
            return False
        return True

    def put_back(self):
        """Everything as it was before start(): the dispatch modes, the model's parameters, the
        optimizers, torch.save, backward, the excepthook and the RNG states."""
        if not self.active:
            return
        self.active = False
        torch = self.torch
        while self.entered:
            try:
                self.entered.pop().__exit__(None, None, None)
            except Exception:
                pass
        self.end_changes()
        for o in self.optimizers:
            groups, state = self.saved_optimizers[id(o)]
            for g, params in zip(o.param_groups, groups):
                g["params"] = params
            o.state = state
        for h in self.handles:
            try:
                h.remove()
            except Exception:
                pass
        self.handles = []
        torch.autograd.backward = self.backward
        torch.save = self.save
        if sys.excepthook is self.on_exception:
            sys.excepthook = self.excepthook
        try:
            if self.rng is not None:
                torch.set_rng_state(self.rng[0])
                if self.rng[1] is not None:
                    torch.cuda.set_rng_state_all(self.rng[1])
        except Exception:
            self.rng = None

    # ---- one configuration (a predicted step) ----------------------------------------------
    def begin_run(self):
        """Fresh fake parameters and buffers, fresh optimizer state, the run's change."""
        torch = self.torch
        batch, change, blocks = self.runs[self.run_index]
        self.run_batch, self.change, self.blocks = batch, change, blocks
        self.calls = self.steps = 0
        self.bad_batch = None
        self.rec.requests, self.rec.blocks = [], 0
        self.rec.outside.update((k, ref) for k, (ref, _) in self.rec.live.items())
        self.rec.live = {}
        self.rec.phase = "f"
        fakes = {}  # id(real) -> fake: tied weights stay tied
        made = []

        def fake(t, parameter):
            if id(t) not in fakes:
                with self.fake_mode:
                    f = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                            device=t.device)
                if parameter:
                    f = torch.nn.Parameter(f, requires_grad=t.requires_grad)
                fakes[id(t)] = f
                made.append(f)
            return fakes[id(t)]
        self.internal = True
        try:
            params = {n: fake(p, True) for n, p in self.model.named_parameters()}
            buffers = {n: fake(b, False) for n, b in self.model.named_buffers()}
        finally:
            self.internal = False
        self.rec.existing(made)
        self.run_stack = self.contextlib.ExitStack()
        self.run_stack.enter_context(self.reparametrize(self.model, {**params, **buffers},
                                                        tie_weights=True))
        for o in self.optimizers:
            for g, params_of in zip(o.param_groups, self.saved_optimizers[id(o)][0]):
                g["params"] = [fakes.get(id(p), p) for p in params_of]
            o.state = type(o.state)(dict) if hasattr(o.state, "default_factory") else {}
        if batch != self.batch:
            self.cut_batches(batch)
        if change == "checkpoint":
            self.run_stack.enter_context(_Checkpointed(torch, blocks))

    def cut_batches(self, batch):
        """The program's DataLoader batches cut to `batch` (each tensor whose first dimension
        is the recorded batch, in tuples, lists and mappings), until end_changes."""
        try:
            from torch.utils.data import dataloader
        except Exception:
            return
        cls = dataloader._BaseDataLoaderIter
        original = cls.__next__
        torch, B = self.torch, self.batch

        def cut(x):
            if isinstance(x, torch.Tensor):
                return x[:batch] if x.dim() and x.shape[0] == B else x
            if isinstance(x, (list, tuple)):
                out = [cut(y) for y in x]
                if isinstance(x, list):
                    return out
                try:
                    return type(x)(*out) if hasattr(x, "_fields") else type(x)(out)
                except Exception:
                    return tuple(out)
            if isinstance(x, Mapping):
                out = {k: cut(v) for k, v in x.items()}
                try:
                    return type(x)(out)
                except Exception:
                    return out
            return x

        def cut_next(it):
            return cut(original(it))
        cls.__next__ = cut_next
        self.uncut = (cls, original)

    def end_changes(self):
        if self.uncut is not None:
            cls, original = self.uncut
            cls.__next__ = original
            self.uncut = None
        self.leave_autocast()
        stack = getattr(self, "run_stack", None)
        self.run_stack = None
        if stack is not None:
            try:
                stack.close()
            except Exception:
                pass

    def end_run(self, status="ok"):
        """The configuration's requests as a predicted step's lines; the next one set up, or
        the plan's stop after the last."""
        self.rec.collect()
        if self.bad_batch is not None:
            status = self.bad_batch
        requests = self.rec.requests if status == "ok" else []
        if status == "ok":
            self.lines += step_lines(self.device, len(self.done) + 1, self.run_batch,
                                     self.batch, self.time_ns, status, self.change, self.blocks,
                                     requests, self.module_ids)
            self.done.append((self.run_batch, self.change))
            if self.run_index == 0:
                self.first_done = True
        else:
            self.failures.append((self.run_batch, self.change, status))
        if self.on_run_end is not None:
            self.on_run_end(self.run_batch, self.change, status, self.lines[self.lines_sent:])
        self.lines_sent = len(self.lines)
        self.end_changes()
        self.run_index += 1
        if self.run_index >= len(self.runs) or not self.first_done or not self.optimizers:
            self.finish()
            return
        self.begin_run()

    def finish(self):
        """All configurations run (or the first could not be): everything put back and the
        plan's stop (ctx.own_done raises SystemExit(0))."""
        self.finished = True
        self.put_back()
        self.ctx.own_done(self)

    # ---- what the program does, seen through hooks -------------------------------------------
    def model_pre(self, module, args, kwargs):
        if not self.active:
            return
        self.calls += 1
        self.rec.phase = "f"
        if self.run_batch != self.batch and self.bad_batch is None:
            first = next((t for t in self.tree_leaves((args, kwargs))
                          if isinstance(t, self.torch.Tensor) and t.dim()), None)
            if first is not None and first.shape[0] != self.run_batch:
                self.bad_batch = ("not run by the program's loop: its model was called with "
                                  "batch %d where %d was asked (its batches do not come from a "
                                  "DataLoader)" % (first.shape[0], self.run_batch))
        if self.change == "bf16_autocast":
            self.enter_autocast()
        if self.calls > MAX_CALLS or (not self.optimizers and self.calls > STEPS):
            # No optimizer step within reach: the loop's shape is not a training step's.
            self.calls = 0
            self.end_run("ok" if not self.optimizers else
                         "not predicted: %d calls of the model without an optimizer step"
                         % MAX_CALLS)

    def enter_autocast(self):
        """The bf16 step's autocast, around the model's forward about to run."""
        self.leave_autocast()
        self.autocast_ctx = self.torch.autocast("cuda", dtype=self.torch.bfloat16)
        self.autocast_ctx.__enter__()

    def leave_autocast(self):
        """The bf16 step's autocast, entered before the model's forward, left after it."""
        if self.autocast_ctx is not None:
            try:
                self.autocast_ctx.__exit__(None, None, None)
            except Exception:
                pass
            self.autocast_ctx = None

    def model_post(self, module, args, output):
        self.leave_autocast()
        if self.active:
            self.rec.phase = "l"

    def traced_backward(self, *args, **kwargs):
        if not self.active:
            return self.backward(*args, **kwargs)
        self.rec.phase = "b"
        self.in_backward += 1  # a reentrant checkpoint's backward runs inside the outer one
        try:
            return self.backward(*args, **kwargs)
        finally:
            self.in_backward -= 1
            if not self.in_backward:
                self.rec.phase = "l"

    def step_pre(self, optimizer, args, kwargs):
        if self.active and optimizer in self.optimizers:
            self.rec.phase = "s"

    def step_post(self, optimizer, args, kwargs):
        if not self.active or not self.optimizers or optimizer is not self.optimizers[0]:
            return
        self.steps += 1
        self.rec.phase = "f"
        if self.steps >= STEPS:
            self.end_run()

    def skipped_save(self, *args, **kwargs):
        self.saves_skipped += 1
        return None

    def on_exception(self, kind, value, tb):
        """The program's own step raised on fake tensors and nothing caught it: said in one line
        (the steps not run are predicted with the stand-in at exit), not as the program's
        death."""
        # The program's own line that ran it (the innermost frame of the program's own code:
        # _vramtrace_frames), else the innermost.
        where = inner = ""
        while tb is not None:
            f = tb.tb_frame.f_code.co_filename
            inner = "%s:%d" % (f, tb.tb_lineno)
            if is_program_file(f):
                where = inner
            tb = tb.tb_next
        where = where or inner
        self.failed = "%s: %s%s" % (kind.__name__, (str(value).splitlines() or [""])[0][:300],
                                    " (at %s)" % where if where else "")
        try:
            sys.stderr.write("vramtrace plan: the program's own step stopped on fake tensors: "
                             "%s; the steps it did not reach are predicted with a stand-in "
                             "step\n" % self.ctx.clean(self.failed))
        except Exception:
            pass

    # ---- every operator ----------------------------------------------------------------------
    def dispatch(self, func, args, kwargs, scalar_op):
        torch = self.torch
        if self.internal:
            return func(*args, **kwargs)
        tensors = [x for x in self.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        fake = any(isinstance(x, self.FakeTensor) for x in tensors)
        if func is scalar_op:  # a value the program reads (.item(), bool(), a scaler's check)
            if not fake:
                with self.no_modes():
                    return func(*args, **kwargs)
            v = self.value_of(args[0]) if self.known is not None else None
            if v is not None:  # a value of the batch's
                with self.no_modes():
                    return func(v)
            self.values_read += 1  # fake tensors have none
            t = args[0]
            return False if t.dtype == torch.bool else 0.0 if t.is_floating_point() else 0
        device = kwargs.get("device")
        cuda = (device is not None and torch.device(device).type == "cuda") or any(
            x.device.type == "cuda" for x in tensors)
        if not fake and not cuda:
            with self.no_modes():  # the data pipeline's work on the CPU stays real
                return func(*args, **kwargs)
        rec = self.rec

        def existing(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, self.FakeTensor):
                f = self.fake_mode.from_tensor(x)
                if x.device.type == "cuda":
                    rec.existing([f])  # on the GPU already: the run recorded it
                if (self.known is not None and x.numel() <= KNOWN_NUMEL and
                        self.value_of(f) is None):
                    try:
                        with self.no_modes():  # its values, read once (a batch, a mask)
                            self.keep_value(f, x.detach().cpu())
                    except Exception:
                        pass
                return f
            return x
        args, kwargs = self.tree_map(existing, (args, kwargs))
        rec.collect()
        out = self.data_dependent(func, args, kwargs) if self.known is not None else None
        if out is None:
            out = rec.result(func, args, kwargs, func(*args, **kwargs))
        rec.made(out)
        if self.known is not None:
            try:
                self.know(func, args, kwargs, out)
            except Exception:
                pass
        return out

    # ---- values known on the CPU ---------------------------------------------------------------
    def value_of(self, x):
        """The known values of a fake tensor (a CPU tensor), else None."""
        if id(x) not in self.known_ids or not isinstance(x, self.FakeTensor):
            return None
        return self.known.get(x)

    def keep_value(self, fake, value):
        self.known[fake] = value
        self.known_ids.add(id(fake))

    def know(self, func, args, kwargs, out):
        """Keeps the values of `out` where they can be known: an operator whose every tensor has
        known values (the batch copied to the GPU, a mask made of its labels) is run again on
        the CPU. What an operator writes in place is known no more unless so computed."""
        torch = self.torch
        schema = func._schema
        writes = self.writes.get(func)
        if writes is None:
            writes = self.writes[func] = [
                i for i, a in enumerate(schema.arguments)
                if a.alias_info is not None and a.alias_info.is_write]
        leaves = [x for x in self.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        computable = leaves and all(self.value_of(x) is not None for x in leaves)
        if computable:
            outs = [t for t in self.tree_leaves(out) if isinstance(t, torch.Tensor)]
            computable = (sum(t.numel() for t in outs) <= KNOWN_NUMEL and
                          not any(s in schema.name for s in ("rand", "normal", "bernoulli",
                                                             "uniform", "dropout", "empty")))
        if not computable:
            for i in writes:
                a = schema.arguments[i]
                x = args[i] if i < len(args) else kwargs.get(a.name)
                if isinstance(x, self.FakeTensor) and id(x) in self.known_ids:
                    self.known.pop(x, None)
            return

        def on_cpu(x):
            if isinstance(x, torch.Tensor):
                v = self.value_of(x)
                return v.clone() if writes else v  # what it writes: a copy, then kept
            if isinstance(x, torch.device) or (isinstance(x, str) and x.startswith("cuda")):
                return torch.device("cpu")
            return x
        cpu_args, cpu_kwargs = self.tree_map(on_cpu, (args, kwargs))
        with self.no_modes():
            cpu_out = func(*cpu_args, **cpu_kwargs)
        cpu_leaves = [t for t in self.tree_leaves(cpu_out) if isinstance(t, torch.Tensor)]
        if len(cpu_leaves) == len(outs):
            for f, v in zip(outs, cpu_leaves):
                if isinstance(f, self.FakeTensor) and tuple(f.shape) == tuple(v.shape):
                    self.keep_value(f, v)

    def data_dependent(self, func, args, kwargs):
        """The operators whose output's shape depends on values (nonzero, a boolean mask's
        index or assignment, masked_select), run on fake tensors with that shape computed from
        the known values; None for any other (or when the values are not known)."""
        if func not in self.shape_ops:
            return None
        torch = self.torch
        aten = torch.ops.aten
        try:
            if func is aten.nonzero.default:
                v = self.value_of(args[0])
                if v is None:
                    return None
                with self.no_modes():
                    n = int(torch.count_nonzero(v))
                return args[0].new_empty((n, args[0].dim()), dtype=torch.long)
            if func is aten.masked_select.default:
                m = self.value_of(args[1])
                if m is None:
                    return None
                with self.no_modes():
                    shape = torch.broadcast_shapes(tuple(args[0].shape), tuple(args[1].shape))
                    n = int(torch.count_nonzero(m.expand(shape)))
                return args[0].new_empty((n,))
            if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default,
                        aten._index_put_impl_.default):
                indices = args[1]
                if not any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
                           for i in indices):
                    return None
                new = []
                for i in indices:
                    if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
                        m = self.value_of(i)
                        if m is None:
                            return None
                        # As PyTorch's own index does: the mask's nonzero, one column for each of
                        # its dimensions (views of one long tensor).
                        with self.no_modes():
                            nz = torch.nonzero(m)
                        rows = i.new_empty((nz.shape[0], i.dim()), dtype=torch.long)
                        self.rec.made(rows)
                        self.keep_value(rows, nz)
                        for d in range(i.dim()):
                            col = rows.select(1, d)
                            self.keep_value(col, nz.select(1, d))
                            new.append(col)
                    else:
                        new.append(i)
                return self.rec.result(func, args, kwargs, func(args[0], new, *args[2:], **kwargs))
        except Exception:
            return None
        return None
