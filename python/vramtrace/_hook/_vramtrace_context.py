"""The context of vramtrace's start-up hook (sitecustomize.py): what the memory of a PyTorch
program is, at a cost per optimizer step and per outermost module call, never per tensor.
PyTorch's global module forward hooks (which module was running, its qualified name) in the
first iterations and every 50th, and the outermost modules' own hooks in the others, where the
collector aligns each block with the traced iteration; the backward pass (torch.autograd.backward,
wrapped) and the optimizer's step hooks (phases and iterations); tensors moved to the GPU outside
them (the user's line); the carried state (a forward's outputs fed back to it). Kept in two
arrays (12 bytes a mark) and a few dictionaries, written by _vramtrace_write.

Its parts: _vramtrace_storages (named storages), _vramtrace_lines (the lines of the blocks made
between the phases), _vramtrace_windows (the allocator trace in the sampled iterations only,
--torch=sampled), _vramtrace_step (the first step predicted on fake tensors) and
_vramtrace_write (the lines written)."""
import os
import sys

from _vramtrace_frames import is_program_file
from _vramtrace_lines import _Lines
from _vramtrace_marks import (_BWD, _BWD_END, _FED_BACK, _FWD, _FWD_END, _FWD_EVAL,
                              _FWD_EVAL_GRAD, _MOD, _MOD_END, _MOVE, _MOVE_END, _OOM, _SITE,
                              _STEP, _STEP_END, _STOPPED_BY_HOOK)
from _vramtrace_step import _Prediction
from _vramtrace_storages import _Storages
from _vramtrace_windows import _Windows
from _vramtrace_write import _Writer


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


class _Context(_Storages, _Lines, _Windows, _Prediction, _Writer):
    """What the memory is: module calls, phases, iterations and named storages."""

    MAX_MARKS = 4_000_000  # the oldest half is dropped past this: long runs stay bounded

    def __init__(self, torch, clean):
        import array
        import threading
        import time
        import weakref
        self.torch, self.clean, self.weakref = torch, clean, weakref
        self.now = time.time_ns
        self.main = threading.main_thread().ident
        self.get_ident = threading.get_ident
        self.times, self.codes = array.array("q"), array.array("q")
        self.dropped_marks = 0
        self.modules = {}        # id(module) -> (mid, weakref)
        self.module_names = {}   # mid -> qualified name, as its M line gives it
        self.hooks_failed = None  # why the module hooks stopped (a bug of this hook's)
        self.module_lines = []   # "M" lines
        self.sites = {}          # (file, line, function) -> sid
        self.program_files = {}  # file -> whether it is the program's own code
        self.site_lines = []
        self.stack = []
        self.in_backward = 0
        self.steps = 0           # steps of the first optimizer
        self.exception = None
        # The user's line is the innermost frame in none of these: torch, the hook's own
        # files (this folder), contextlib and functools.
        torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        here = os.path.dirname(os.path.abspath(__file__)) + os.sep
        self.skip = (torch_dir, here, os.path.dirname(os.__file__) + os.sep + "contextlib.py",
                     os.path.dirname(os.__file__) + os.sep + "functools.py")
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim
        self.compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        self.nn_module, self.optim = nn_module, optim
        self.init_storages()
        self.init_calls()
        self.init_prediction()
        self.init_windows()
        self.init_lines()
        self.watch_optimizers()
        self.wrap_backward()
        self.wrap_call()
        self.wrap_moves()
        self.set_enabled(True)
        self.graph_pools = set()  # pools CUDA graphs captured into (their segment_pool_id)
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
        self.in_root = False      # an outermost call marked by traced_call is running
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
        ctx = self

        @functools.wraps(backward)
        def traced_backward(*args, **kwargs):
            try:
                if ctx.get_ident() != ctx.main:
                    return backward(*args, **kwargs)
                ctx.phase_begin()
                ctx.mark(_SITE, ctx.site())
                ctx.mark(_BWD, 0)
                ctx.in_backward += 1
                try:
                    return backward(*args, **kwargs)
                finally:
                    ctx.in_backward -= 1
                    ctx.mark(_BWD_END, 0)
                    ctx.phase_end()
            except BaseException as ex:
                _hide_own_frame(ex)
                raise

        self.backward, self.traced_backward = backward, traced_backward

    def wrap_call(self):
        """Module.__call__ wrapped (self.traced_call): the outermost calls between the traced
        iterations, and the first call's arguments."""
        ctx = self
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
                if compiling() or ctx.in_backward:
                    return call(module, *args, **kwargs)
                # What the hook itself does before the call never raises into the program
                # (`vramtrace plan`'s SystemExit, a BaseException, is the one thing meant to).
                try:
                    if ctx.want_call:
                        ctx.capture_call(module, args, kwargs)
                    if ctx.predict_pending and ctx.get_ident() == ctx.main:
                        ctx.predict_pending = False
                        ctx.second_step()
                except Exception as ex:
                    ctx.hooks_broke(ex)
                if ctx.get_ident() != ctx.main:
                    return call(module, *args, **kwargs)
                if ctx.window_record is not None:
                    # Larger inputs than ever between the sampled iterations: this iteration
                    # is traced from here (its peak, or its OOM, would otherwise go unseen).
                    try:
                        ctx.larger_inputs(id(module), (args, kwargs))
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
                ctx.in_root = ctx.inside = True
                output = None
                try:
                    output = call(module, *args, **kwargs)
                    return output
                finally:
                    ctx.in_root = ctx.inside = False
                    ctx.root_end(module, mid, output)
            except BaseException as ex:
                _hide_own_frame(ex)
                raise

        self.module_class, self.call, self.traced_call = module_class, call, traced_call

    def wrap_moves(self):
        """Tensor.to and Tensor.cuda wrapped (self.traced_moves)."""
        import functools
        ctx = self
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
                    if (compiling() or ctx.in_root or ctx.stack or ctx.in_backward
                            or ctx.in_move or ctx.get_ident() != ctx.main):
                        return original(tensor, *args, **kwargs)
                    site = ctx.site()
                    if ctx.window_record is not None:
                        ctx.larger_inputs(("move", site), tensor)
                    ctx.mark(_SITE, site)
                    ctx.mark(_MOVE, 0)
                    ctx.in_move = True
                    try:
                        return original(tensor, *args, **kwargs)
                    finally:
                        ctx.in_move = False
                        ctx.mark(_MOVE_END, 0)
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
        made = self.made_optimizers
        weakref = self.weakref
        import functools

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
        pools = self.graph_pools
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
        del self.stack[:]
        return None

    def trace_modules(self, full):
        """Module hooks on (full) or off for the next iteration; only between forwards."""
        if self.every or full == self.full or self.dynamo_compiled():
            return
        self.full = full
        self.stack.clear()
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
        if not self.every or self.first_call_stops:
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
        self.phase_begin()
        mid = self.module_id(module)
        self.mark(_SITE, self.site())
        kind, ident = self.forward_kind(module, mid)
        # Bit 30: the module calls inside this forward were not traced.
        self.mark(kind, ident | (1 << 30))
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
            self.mark(_FED_BACK, mid | (min(n, 255) << 24))

    def root_end(self, module, mid, output):
        self.root_outputs[id(module)] = _tensors(output, self.tensor_class, [])
        if self.first_call is not None and not self.first_call[3]:
            self.first_done = True  # an evaluation's first forward ended
        self.mark(_FWD_END, mid)
        self.count_forward(mid)
        self.phase_end()

    def count_forward(self, mid):
        # Without an optimizer the iterations are the first model's forwards.
        if self.optimizers or mid != self.first_root:
            return
        self.forwards += 1
        self.sample_next(self.forwards)
        if self.forwards == 2:
            _stop_launches()
        self.check_lines(self.forwards)

    def sample_next(self, done):
        """After iteration `done` - 1: whether the next is a sampled one (the first ones and
        every 50th) sets its module hooks and the allocator trace's window (--torch=sampled)."""
        sampled = done < 3 or done % 50 == 49
        self.trace_modules(sampled)
        self.trace_window(sampled)

    def mark(self, kind, ident):
        self.times.append(self.now())
        self.codes.append(kind | (ident << 4))
        if len(self.times) > self.MAX_MARKS:
            half = self.MAX_MARKS // 2
            del self.times[:half]
            del self.codes[:half]
            self.dropped_marks += half

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

    def module_id(self, module):
        entry = self.modules.get(id(module))
        if entry is not None and entry[1]() is module:
            return entry[0]
        # A module called for the first time: a root (called from outside any module) names
        # its whole tree; one called inside another is named under the caller.
        # (A module made while a forward runs, as a loss made inside a model's forward.)
        if self.stack:
            parent = self.module_names.get(self.stack[-1][0], "")
            return self.add_module(module, (parent + "." if parent else "") +
                                   type(module).__name__)
        root_prefix = "" if not any(r[1] for r in self.roots) else type(module).__name__ + "."
        named = list(module.named_modules())
        for name, m in named:
            if id(m) not in self.modules or self.modules[id(m)][1]() is not m:
                self.add_module(m, (root_prefix + name) if name else type(module).__name__)
        ref = self.weakref.ref
        named_params = list(module.named_parameters())
        for n, p in named_params:
            self.param_names[id(p)] = root_prefix + n
        params = [(root_prefix + n, ref(p)) for n, p in named_params]
        buffers = [(root_prefix + n, ref(b)) for n, b in module.named_buffers()]
        del named_params
        self.roots.append((self.weakref.ref(module), params, buffers))
        self.label_root(params, buffers)
        return self.modules[id(module)][0]

    def add_module(self, module, name):
        mid = len(self.module_lines) + 1
        self.modules[id(module)] = (mid, self.weakref.ref(module))
        self.module_names[mid] = name
        code = getattr(getattr(type(module), "forward", None), "__code__", None)
        self.module_lines.append("M\t%d\t%s\t%s\t%s\t%d\n" % (
            mid, self.clean(name), self.clean(type(module).__name__),
            self.clean(code.co_filename if code else ""), code.co_firstlineno if code else 0))
        return mid

    def pre(self, module, args):
        # is_compiling() first: torch.compile inlines global module hooks into what it traces,
        # and a call it cannot trace (threading.get_ident) would break the graph there.
        if self.compiling() or self.get_ident() != self.main or self.hooks_failed is not None:
            return None
        try:
            return self.pre_call(module, args)
        except Exception as ex:
            return self.hooks_broke(ex)

    def pre_call(self, module, args):
        if not self.always_call:
            # A module called again while still on the stack raised the last time (models do
            # not call the very module that is running).
            for i, entry in enumerate(self.stack):
                if entry[1] is module:
                    del self.stack[i:]
                    break
        mid = self.module_id(module)
        if not self.stack and not self.in_backward:
            self.phase_begin()
            self.mark(_SITE, self.site())
            if self.first_root is None:
                self.first_root = mid
            self.mark(*self.forward_kind(module, mid))
            self.fed_back(module, mid, args)
        else:
            self.mark(_MOD, mid)
        self.stack.append((mid, module))
        return None

    def post(self, module, args, output):
        if self.compiling() or self.hooks_failed is not None:
            return None
        try:
            return self.post_call(module, args, output)
        except Exception as ex:
            return self.hooks_broke(ex)

    def post_call(self, module, args, output):
        stack = self.stack
        if not stack or self.get_ident() != self.main:
            return None
        # A module that raised never reaches its post hook: unwind to the one returning now.
        if stack[-1][1] is not module:
            while stack and stack[-1][1] is not module:
                stack.pop()
            if not stack:
                return None
        mid = stack.pop()[0]
        if not stack and not self.in_backward:
            self.root_outputs[id(module)] = _tensors(output, self.tensor_class, [])
            if self.first_call is not None and not self.first_call[3]:
                self.first_done = True  # an evaluation's first forward ended
            self.mark(_FWD_END, mid)
            self.count_forward(mid)
            self.phase_end()
            return None
        self.times.append(self.now())
        self.codes.append(_MOD_END | (mid << 4))
        return None

    def step_pre(self, optimizer, args, kwargs):
        if self.get_ident() != self.main:
            return
        if not any(w() is optimizer for w in self.optimizers):
            self.optimizers.append(self.weakref.ref(optimizer))
        first = self.optimizers[0]() is optimizer
        self.phase_begin()
        self.in_step = True
        self.mark(_SITE, self.site())
        self.mark(_STEP, 1 if first else 0)

    def step_post(self, optimizer, args, kwargs):
        if self.get_ident() != self.main:
            return
        first = bool(self.optimizers) and self.optimizers[0]() is optimizer
        self.mark(_STEP_END, 1 if first else 0)
        if not self.first_done and self.first_call is not None:
            if self.predict_always:
                self.predict_pending = True
            else:
                self.keep_shape()
        self.first_done = True
        self.in_step = False
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
            self.label_all()
        if first:
            self.check_lines(self.steps)
        self.phase_end()

    def modules_running(self):
        """The modules whose forward is on the Python stack now, outermost first (an OOM
        inside a forward whose module calls were not traced)."""
        out = []
        f = sys._getframe(2)
        while f is not None:
            if f.f_code.co_name == "forward":
                m = f.f_locals.get("self")
                entry = self.modules.get(id(m)) if m is not None else None
                if entry is not None and entry[1]() is m and (not out or out[-1] != entry[0]):
                    out.append(entry[0])
            f = f.f_back
        out.reverse()
        return out

    def on_oom(self):
        # Between traced iterations the modules running are read off the Python stack: marked
        # around the OOM mark, so that they name the failed request's module and nothing else.
        self.oom_seen = True
        running = self.modules_running() if self.in_root else []
        for mid in running:
            self.mark(_MOD, mid)
        self.mark(_OOM, 0)
        for mid in reversed(running):
            self.mark(_MOD_END, mid)
        self.label_all()
        # A program that catches it and goes on is traced whole until its next step.
        if not self.stack and not self.in_root:
            self.trace_modules(True)

    def at_exit(self):
        own = self.own
        if own is not None:
            # The plan's own steps did not get to the stop: the program raised on fake tensors
            # (not its death: said by OwnSteps.on_exception) or ended first.
            own.put_back()
            try:
                self.own_done(own, at_exit=True)
            except Exception:
                pass
            return
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if exc is not None:
            self.exception = _exception_line(exc, self.clean, self.now())
        try:
            if self.oom_seen and self.preflight_rest is not None:
                # Foreseen to fit, it ran out of memory: the pre-flight's rest (the half batch,
                # the remedies' changes) predicted now, as at any first step's death.
                self.predict_steps(force=True, runs=self.preflight_rest)
            self.predict_steps()
            self.weigh_at_exit()
        except Exception:
            pass
