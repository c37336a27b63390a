"""The context of vramtrace's start-up hook (sitecustomize.py): what the memory of a PyTorch
program is, at a cost per optimizer step and per outermost module call, never per tensor.
PyTorch's global module forward hooks (which module was running, its qualified name) in the
first iterations and every 50th, and the outermost modules' own hooks in the others, where the
collector aligns each block with the traced iteration; the backward pass (torch.autograd.backward,
wrapped) and the optimizer's step hooks (phases and iterations); tensors moved to the GPU outside
them (the user's line); the carried state (a forward's outputs fed back to it). Kept in two
arrays (12 bytes a mark) and a few dictionaries, written by _vramtrace_write.

This file wires PyTorch's calls to the context's parts, each around the one Marks object
(_vramtrace_marks: what was seen, where the program is) and nothing of the others': Storages
(_vramtrace_storages: named storages), Modules (_vramtrace_modules: the module table), Lines and
Windows (_vramtrace_lines, _vramtrace_windows: the allocator trace's frames between the phases
and its sampled windows, around the Trace switch they share) and Prediction
(_vramtrace_prediction: the first step predicted on fake tensors); _vramtrace_write writes their
lines."""
import os
import sys

from _vramtrace_lines import Lines, Trace
from _vramtrace_marks import (_BWD, _BWD_END, _FED_BACK, _FWD, _FWD_END, _FWD_EVAL,
                              _FWD_EVAL_GRAD, _MOD, _MOD_END, _MOVE, _MOVE_END, _OOM, _SITE,
                              _STEP, _STEP_END, _STOPPED_BY_HOOK, Marks)
from _vramtrace_modules import Modules
from _vramtrace_prediction import Prediction
from _vramtrace_storages import Storages
from _vramtrace_windows import Windows


def _tensors(obj, tensor_class, out, depth=0):
    """(id, storage pointer) of the first 8 tensors of a forward's inputs or outputs: a tensor,
    or tuples, lists and dicts of them nested up to 4 deep (an LSTM's (out, (h, c)))."""
    if len(out) >= 8:
        return out
    if isinstance(obj, tensor_class):
        try:
            out.append((id(obj), obj.untyped_storage().data_ptr()))
        except Exception:
            pass
    elif depth < 4 and isinstance(obj, (tuple, list, dict)):
        for x in (obj.values() if isinstance(obj, dict) else obj):
            if len(out) >= 8:
                break
            _tensors(x, tensor_class, out, depth + 1)
    return out


def _stop_launches():
    """Kernel launches recorded no more in this process, once the hook has marked two
    iterations (optimizer steps, or forwards of the first model): the iterations and phases are
    the hook's marks, and the launch callbacks cost about 1 us a launch, 5 to 8 % of a
    launch-bound step. libvramtrace.so records when they stopped; `vramtrace run --launches=on`
    (VRAMTRACE_LAUNCHES=on) keeps them, and with launches off there is nothing to stop."""
    if os.environ.get("VRAMTRACE_LAUNCHES", "") in ("on", "off"):
        return
    try:
        import ctypes
        try:
            stop = ctypes.CDLL(None).vramtrace_v1_stop_launches  # preloaded: in the global scope
        except AttributeError:
            stop = None
            with open("/proc/self/maps") as maps:  # injected by the driver only
                for line in maps:
                    path = line.split(None, 5)[-1].strip()
                    if os.path.basename(path).startswith("libvramtrace") and path.endswith(".so"):
                        stop = ctypes.CDLL(path).vramtrace_v1_stop_launches
                        break
        if stop is not None:
            stop.argtypes, stop.restype = [ctypes.c_uint], ctypes.c_int
            stop(_STOPPED_BY_HOOK)
    except Exception:
        pass  # launches stay recorded


def _hide_own_frame(ex):
    """Drops the caller's frame (a wrapper of this hook's) from the traceback of an exception
    passing through it, before a bare `raise` sends it on (which adds no frame): a traceback
    printed by the program reads as it would without vramtrace."""
    tb = ex.__traceback__
    if tb is not None and tb.tb_next is not None and tb.tb_frame is sys._getframe(1):
        ex.__traceback__ = tb.tb_next


def _exception_line(exc, clean, now_ns):
    """The X record of the exception that reached the top: type, message, frames."""
    import traceback
    frames = traceback.extract_tb(exc.__traceback__)[-32:]
    where = "|".join("%s:%d:%s" % (clean(fr.filename).replace("|", "/"), fr.lineno or 0,
                                   clean(fr.name).replace("|", "/"))
                     for fr in reversed(frames))
    return "X\t%d\t%s\t%s\t%s\n" % (
        now_ns, clean(type(exc).__module__ + "." + type(exc).__qualname__),
        clean(str(exc))[:1000], where)


class _Context:
    """What the memory is: module calls, phases, iterations and named storages."""

    def __init__(self, torch, clean):
        self.torch, self.clean = torch, clean
        self.marks = marks = Marks(torch, clean)
        self.storages = Storages(torch, marks)
        self.modules = Modules(marks, self.storages)
        self.trace = Trace(torch)
        self.lines = Lines(torch, marks, self.trace)
        self.windows = Windows(torch, clean, self.trace, lambda full: self.trace_modules(full))
        self.prediction = Prediction(torch, marks, self.modules, self.switch_hooks)
        self.hooks_failed = None  # why the module hooks stopped (a bug of this hook's)
        self.steps = 0           # steps of the first optimizer
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim
        self.compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        self.nn_module, self.optim = nn_module, optim
        self.init_calls()
        self.watch_optimizers()
        self.wrap_backward()
        self.wrap_call()
        self.wrap_moves()
        self.set_enabled(True)
        self.watch_graphs()

    def init_calls(self):
        self.handles = []         # module hooks
        self.other_handles = []   # optimizer hooks
        self.always_call = True
        # Module hooks put every module call on PyTorch's slow path (about 20 us a call with
        # ours): they run in the first iterations and every 50th ("every": always); the other
        # iterations only mark the outermost calls, through Module.__call__, and the collector
        # takes each of their blocks' module from the traced iteration of the same model.
        self.every = os.environ.get("VRAMTRACE_TORCH_MODULES", "sampled") == "every"
        self.full = True          # module hooks on for this iteration
        self.enabled = False
        self.inside = False       # an outermost call is running (traced iteration or not)
        # id(module) of an outermost call -> its last forward's first output tensors (id,
        # storage pointer), to tell when the next forward gets them back (fed_back).
        self.root_outputs = {}
        self.forwards = 0         # outermost forwards of the first model (no optimizer)
        self.first_root = None

    def wrap_backward(self):
        """torch.autograd.backward wrapped (self.traced_backward): the backward phase's marks."""
        import functools
        autograd = self.torch.autograd
        backward = autograd.backward
        marks, lines = self.marks, self.lines

        @functools.wraps(backward)
        def traced_backward(*args, **kwargs):
            try:
                if not marks.on_main():
                    return backward(*args, **kwargs)
                lines.phase_begin()
                marks.mark(_SITE, marks.site())
                marks.mark(_BWD, 0)
                marks.in_backward += 1
                try:
                    return backward(*args, **kwargs)
                finally:
                    marks.in_backward -= 1
                    marks.mark(_BWD_END, 0)
                    lines.phase_end()
            except BaseException as ex:
                _hide_own_frame(ex)
                raise

        self.backward, self.traced_backward = backward, traced_backward

    def wrap_call(self):
        """Module.__call__ wrapped (self.traced_call): the outermost calls between the traced
        iterations, and the first call's arguments."""
        ctx, marks, prediction = self, self.marks, self.prediction
        trace, windows = self.trace, self.windows
        module_class = self.torch.nn.Module
        call = module_class.__call__
        compiling = self.compiling

        def traced_call(module, *args, **kwargs):
            try:
                # Inside an outermost call (a forward of the model, of the loss) every call goes
                # straight through before anything else is asked: they are nearly all of a
                # step's module calls (200 on a model of 100 layers), and each further check
                # cost them about 0.6 us. ctx.inside is the one thing read before
                # is_compiling(): a region torch.compile traces is inside an outermost call at
                # every call or at none, so the guard it takes on it always holds; reading
                # ctx.full there instead would make it compile again when the sampled
                # iterations switch it.
                if ctx.inside:
                    return call(module, *args, **kwargs)
                if compiling() or marks.in_backward:
                    return call(module, *args, **kwargs)
                # What the hook itself does before the call never raises into the program
                # (`vramtrace plan`'s SystemExit, a BaseException, is the one thing meant to).
                try:
                    if prediction.want_call:
                        prediction.capture_call(module, args, kwargs)
                    if prediction.predict_pending and marks.on_main():
                        prediction.predict_pending = False
                        prediction.second_step()
                except Exception as ex:
                    ctx.hooks_broke(ex)
                if not marks.on_main():
                    return call(module, *args, **kwargs)
                if trace.window_record is not None:
                    # Larger inputs than ever between the sampled iterations: this iteration
                    # is traced from here (its peak, or its OOM, would otherwise go unseen).
                    try:
                        windows.larger_inputs(id(module), (args, kwargs))
                    except Exception as ex:
                        ctx.hooks_broke(ex)
                if ctx.full:
                    # A traced iteration: the module hooks mark every call.
                    ctx.inside = True
                    try:
                        return call(module, *args, **kwargs)
                    finally:
                        ctx.inside = False
                # Between the traced iterations: the outermost call only.
                mid = ctx.root_begin(module, (args, kwargs))
                marks.in_root = ctx.inside = True
                output = None
                try:
                    output = call(module, *args, **kwargs)
                    return output
                finally:
                    marks.in_root = ctx.inside = False
                    ctx.root_end(module, mid, output)
            except BaseException as ex:
                _hide_own_frame(ex)
                raise

        self.module_class, self.call, self.traced_call = module_class, call, traced_call

    def wrap_moves(self):
        """Tensor.to and Tensor.cuda wrapped (self.traced_moves)."""
        import functools
        ctx, marks, trace, windows = self, self.marks, self.trace, self.windows
        compiling = self.compiling
        # Tensors moved to the GPU outside a forward, backward or step (a batch, its targets,
        # model.to("cuda")) are marked with the user's line, so that the blocks they make are
        # not left without one. Inside those phases, on other threads and while torch.compile
        # traces, straight through.
        tensor_class = self.torch.Tensor
        self.moves = {name: getattr(tensor_class, name) for name in ("to", "cuda")}

        def traced_move(original):
            @functools.wraps(original)
            def move(tensor, *args, **kwargs):
                try:
                    if (compiling() or marks.in_root or marks.stack or marks.in_backward
                            or ctx.in_move or not marks.on_main()):
                        return original(tensor, *args, **kwargs)
                    site = marks.site()
                    if trace.window_record is not None:
                        windows.larger_inputs(("move", site), tensor)
                    marks.mark(_SITE, site)
                    marks.mark(_MOVE, 0)
                    ctx.in_move = True
                    try:
                        return original(tensor, *args, **kwargs)
                    finally:
                        ctx.in_move = False
                        marks.mark(_MOVE_END, 0)
                except BaseException as ex:
                    _hide_own_frame(ex)
                    raise
            return move

        self.in_move = False
        self.traced_moves = {name: traced_move(f) for name, f in self.moves.items()}
        self.tensor_class = tensor_class

    def watch_optimizers(self):
        """Every optimizer made, weakly: a job that dies in its first step never called step(),
        where the step hooks would have seen it."""
        init = self.optim.Optimizer.__init__
        made = self.prediction.made_optimizers
        import functools
        import weakref

        @functools.wraps(init)
        def traced_init(optimizer, *args, **kwargs):
            init(optimizer, *args, **kwargs)
            if len(made) < 64:
                made.append(weakref.ref(optimizer))

        self.optim.Optimizer.__init__ = traced_init

    def watch_graphs(self):
        """Records the private pool of each CUDA graph capture (torch.cuda.graph,
        make_graphed_callables and torch.compile's CUDA graphs all go through
        CUDAGraph.capture_end): once per capture, so that the pools the report shows can say
        which are CUDA graphs'. A pool of graph_pool_handle() or torch.cuda.MemPool has an id
        (0, n) like any other user-made pool; a graph's own pool is (n, 0). Read at the end of
        the capture: PyTorch's CUDAGraph.pool() refuses before it."""
        graphs = getattr(self.torch.cuda, "graphs", None)
        cls = getattr(graphs, "CUDAGraph", None)
        end = getattr(cls, "capture_end", None)
        if end is None:
            return
        pools = self.marks.graph_pools
        import functools

        @functools.wraps(end)
        def capture_end(graph, *args, **kwargs):
            try:
                result = end(graph, *args, **kwargs)
            except BaseException as ex:
                _hide_own_frame(ex)
                raise
            try:
                pools.add(tuple(int(x) for x in graph.pool()))
            except Exception:
                pass
            return result

        cls.capture_end = capture_end

    def module_hooks(self, on):
        for h in self.handles:
            h.remove()
        self.handles = []
        if not on:
            return
        try:
            # Also when a forward raises (an OOM the program catches and retries smaller):
            # without it the raising modules stay on the stack, and every later forward
            # would be taken for a module call inside the one that raised.
            post = self.nn_module.register_module_forward_hook(self.post, always_call=True)
        except TypeError:  # PyTorch 2.0: no always_call; pre() drops what was left instead
            self.always_call = False
            post = self.nn_module.register_module_forward_hook(self.post)
        self.handles = [self.nn_module.register_module_forward_pre_hook(self.pre), post]

    def hooks_broke(self, ex):
        """A module hook of this hook's own raised: the program must not see it. Said once on
        stderr; module calls are no longer traced (the categories of what follows are the
        stacks'), and the program goes on as without vramtrace."""
        if self.hooks_failed is None:
            self.hooks_failed = "%s: %s" % (type(ex).__name__, str(ex).splitlines()[0]
                                            if str(ex) else "")
            try:
                sys.stderr.write("vramtrace: the start-up hook's module hooks failed (%s): module "
                                 "calls are no longer traced; the program goes on\n"
                                 % self.clean(self.hooks_failed)[:300])
            except Exception:
                pass
        del self.marks.stack[:]
        return None

    def trace_modules(self, full):
        """Module hooks on (full) or off for the next iteration; only between forwards."""
        if self.every or full == self.full or self.dynamo_compiled():
            return
        self.full = full
        self.marks.stack.clear()
        if self.enabled:
            self.module_hooks(full)

    @staticmethod
    def dynamo_compiled():
        """Whether torch.compile has made a graph in this process. Its graphs guard on the
        number of global module hooks: adding or removing ours afterwards would make it compile
        again, so from then on the module hooks stay as they are."""
        utils = sys.modules.get("torch._dynamo.utils")
        try:
            return bool(utils is not None and utils.counters["stats"]["unique_graphs"])
        except Exception:
            return False

    def switch_hooks(self, on):
        """The hooks on or off for the fake steps (set_enabled); whether they were on."""
        was = self.enabled
        self.set_enabled(on)
        return was

    def set_enabled(self, on):
        """Registers the hooks (on) or removes them (off): with none registered, PyTorch's
        module calls take their fast path again (the benchmark switches this)."""
        self.enabled = on
        self.module_hooks(on and self.full)
        for h in self.other_handles:
            h.remove()
        self.other_handles = []
        if on:
            self.other_handles = [self.optim.register_optimizer_step_pre_hook(self.step_pre),
                                  self.optim.register_optimizer_step_post_hook(self.step_post)]
        self.torch.autograd.backward = self.traced_backward if on else self.backward
        for name, f in (self.traced_moves if on else self.moves).items():
            setattr(self.tensor_class, name, f)
        # With every module call traced the outermost calls need no wrapper, but a plan and a
        # pre-flight stop at the first training call, which the wrapper sees.
        if not self.every or self.prediction.first_call_stops:
            self.module_class.__call__ = self.traced_call if on else self.call

    def forward_kind(self, module, mid):
        # Evaluation: a model in eval() or under no_grad; with grad on, what it keeps past
        # the forward is a graph kept alive (activations), not outputs.
        grad = self.torch.is_grad_enabled()
        kind = _FWD if module.training and grad else _FWD_EVAL_GRAD if grad else _FWD_EVAL
        # The top bit of the id: autocast (mixed precision) was on for this forward.
        autocast = self.torch.is_autocast_enabled()
        return kind, mid | (1 << 31) if autocast else mid

    def root_begin(self, module, inputs):
        self.lines.phase_begin()
        mid = self.modules.module_id(module)
        marks = self.marks
        marks.mark(_SITE, marks.site())
        kind, ident = self.forward_kind(module, mid)
        # Bit 30: the module calls inside this forward were not traced.
        marks.mark(kind, ident | (1 << 30))
        if self.first_root is None:
            self.first_root = mid
        self.fed_back(module, mid, inputs)
        return mid

    def fed_back(self, module, mid, inputs):
        """A carried state: tensors that this outermost module's previous forward returned
        (the same tensor objects, at the same storage) come back among its inputs, as an RNN's
        (h, c) does chunk after chunk. With autograd on such a state links each forward's graph
        to the one before, so that none is ever freed: the collector says so when it finds
        memory kept across iterations. A mark with the module's id and, from bit 24, how many
        input tensors came back; one look at the first 8 tensors, once per outermost call."""
        previous = self.root_outputs.get(id(module))
        if not previous:
            return
        n = sum(1 for t in _tensors(inputs, self.tensor_class, []) if t in previous)
        if n:
            self.marks.mark(_FED_BACK, mid | (min(n, 255) << 24))

    def root_end(self, module, mid, output):
        self.root_outputs[id(module)] = _tensors(output, self.tensor_class, [])
        self.prediction.forward_ended()
        self.marks.mark(_FWD_END, mid)
        self.count_forward(mid)
        self.lines.phase_end()

    def count_forward(self, mid):
        # Without an optimizer the iterations are the first model's forwards.
        if self.storages.optimizers or mid != self.first_root:
            return
        self.forwards += 1
        self.sample_next(self.forwards)
        if self.forwards == 2:
            _stop_launches()
        self.lines.check_lines(self.forwards)

    def sample_next(self, done):
        """After iteration `done` - 1: whether the next is a sampled one (the first ones and
        every 50th) sets its module hooks and the allocator trace's window (--torch=sampled)."""
        sampled = done < 3 or done % 50 == 49
        self.trace_modules(sampled)
        self.windows.trace_window(sampled)

    def pre(self, module, args):
        # is_compiling() first: torch.compile inlines global module hooks into what it traces,
        # and a call it cannot trace (threading.get_ident) would break the graph there.
        if self.compiling() or not self.marks.on_main() or self.hooks_failed is not None:
            return None
        try:
            return self.pre_call(module, args)
        except Exception as ex:
            return self.hooks_broke(ex)

    def pre_call(self, module, args):
        if not self.always_call:
            # A module called again while still on the stack raised the last time (models do
            # not call the very module that is running).
            stack = self.marks.stack
            for i, entry in enumerate(stack):
                if entry[1] is module:
                    del stack[i:]
                    break
        mid = self.modules.module_id(module)
        marks = self.marks
        if not marks.stack and not marks.in_backward:
            self.lines.phase_begin()
            marks.mark(_SITE, marks.site())
            if self.first_root is None:
                self.first_root = mid
            marks.mark(*self.forward_kind(module, mid))
            self.fed_back(module, mid, args)
        else:
            marks.mark(_MOD, mid)
        marks.stack.append((mid, module))
        return None

    def post(self, module, args, output):
        if self.compiling() or self.hooks_failed is not None:
            return None
        try:
            return self.post_call(module, args, output)
        except Exception as ex:
            return self.hooks_broke(ex)

    def post_call(self, module, args, output):
        marks = self.marks
        stack = marks.stack
        if not stack or not marks.on_main():
            return None
        # A module that raised never reaches its post hook: unwind to the one returning now.
        if stack[-1][1] is not module:
            while stack and stack[-1][1] is not module:
                stack.pop()
            if not stack:
                return None
        mid = stack.pop()[0]
        if not stack and not marks.in_backward:
            self.root_outputs[id(module)] = _tensors(output, self.tensor_class, [])
            self.prediction.forward_ended()
            marks.mark(_FWD_END, mid)
            self.count_forward(mid)
            self.lines.phase_end()
            return None
        marks.times.append(marks.now())
        marks.codes.append(_MOD_END | (mid << 4))
        return None

    def step_pre(self, optimizer, args, kwargs):
        marks = self.marks
        if not marks.on_main():
            return
        first = self.storages.stepped(optimizer)
        self.lines.phase_begin()
        marks.in_step = True
        marks.mark(_SITE, marks.site())
        marks.mark(_STEP, 1 if first else 0)

    def step_post(self, optimizer, args, kwargs):
        marks = self.marks
        if not marks.on_main():
            return
        first = self.storages.first_optimizer(optimizer)
        marks.mark(_STEP_END, 1 if first else 0)
        self.prediction.step_ended()
        marks.in_step = False
        # Named storages at the first steps, then every 50th (and at each OOM): labelling
        # every gradient at every step cost 2.5 ms a step on a launch-bound model of 200
        # parameters; between labels a gradient is still a gradient (made in backward, kept
        # past it), only its name is missing.
        if first:
            self.steps += 1
            self.sample_next(self.steps)
            if self.steps == 2:
                _stop_launches()
        if self.steps <= 3 or self.steps % 50 == 0:
            self.storages.label_all()
        if first:
            self.lines.check_lines(self.steps)
        self.lines.phase_end()

    def on_oom(self):
        # Between traced iterations the modules running are read off the Python stack: marked
        # around the OOM mark, so that they name the failed request's module and nothing else.
        marks = self.marks
        marks.oom_seen = True
        running = self.modules.running() if marks.in_root else []
        for mid in running:
            marks.mark(_MOD, mid)
        marks.mark(_OOM, 0)
        for mid in reversed(running):
            marks.mark(_MOD_END, mid)
        self.storages.label_all()
        # A program that catches it and goes on is traced whole until its next step.
        if not marks.stack and not marks.in_root:
            self.trace_modules(True)

    def at_exit(self):
        # The plan's own steps still running at exit raised on fake tensors: not the
        # program's exception (OwnSteps.on_exception says it).
        if self.prediction.own is None:
            exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
            if exc is not None:
                self.marks.exception = _exception_line(exc, self.clean, self.marks.now())
        self.prediction.at_exit()
