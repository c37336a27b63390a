# vramtrace's start-up hook for Python programs (`vramtrace run` puts this file's folder first
# on PYTHONPATH; the user's script is not changed). When the program imports torch, PyTorch's
# caching-allocator trace is turned on (segments, blocks, OOMs; with --torch=stacks also the
# Python frames of each block) and written to $VRAMTRACE_TORCH_DIR/vramtrace.<pid>.torch at exit and at each
# out-of-memory (PyTorch's OOM observer), for the collector to merge with the driver's view
# (common/side_channel.h declares every line). Off with `vramtrace run --torch=off`.
#
# It also records what the memory is, at a cost per optimizer step and per module call, never
# per tensor: PyTorch's global module forward hooks (which module was running, its qualified
# name; in the first iterations and every 50th, and around the outermost module calls in the
# others, where the collector aligns each block with the traced iteration), the backward pass (torch.autograd.backward, wrapped) and the optimizer's step hooks
# (phases and iterations), the storages of parameters, buffers, gradients and optimizer state
# by name (their data pointers, at each step and at each OOM), the user's line that called the
# model, backward() and step(), PyTorch's per-process memory fraction, the exception that
# ended the program, and the private pools (their segments at the dump, and which pools CUDA
# graphs captured into: once per capture). The collector turns these into categories
# (collector/torch_memory.h).
#
# It must never change what the program does: every failure is one line on stderr, and any
# sitecustomize the environment had is still run after this one.
import os
import sys

# Mark kinds of the K records (common/side_channel.h; tests/hook/side_channel_test.py checks).
(_MOD, _MOD_END, _FWD, _FWD_EVAL, _FWD_END, _BWD, _BWD_END, _STEP, _STEP_END, _SITE, _OOM,
 _FWD_EVAL_GRAD, _MOVE, _MOVE_END, _NAMED, _FED_BACK) = range(16)
# A LaunchesStopped record's reason when this hook stops them (common/records.h, StopReason).
_STOPPED_BY_HOOK = 1


# The hook's _Context once torch is imported ("context"), for vramtrace_named_storages().
_vramtrace_ctx = {}


def vramtrace_named_storages():
    """{storage data_ptr: "parameters", "gradients" or "optimizer state"}: the storages of the
    models and optimizers the hook has seen, from its weak references (the pytest plugin names
    a test's blocks by them without walking the heap); {} before torch or without categories."""
    context = _vramtrace_ctx.get("context")
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


def _vramtrace_setup():
    out_dir = os.environ.get("VRAMTRACE_TORCH_DIR")
    if not out_dir:
        return
    import importlib.abc
    import importlib.util

    max_entries = int(os.environ.get("VRAMTRACE_TORCH_MAX_ENTRIES", "1000000") or 1000000)
    state = {"done": False}

    def say(msg):
        try:
            sys.stderr.write("vramtrace: " + msg + "\n")
        except Exception:
            pass

    def clean(text):
        return str(text).replace("\t", " ").replace("\n", " ").replace("\r", " ")

    ctx = _vramtrace_ctx

    def dump(torch, realtime_ns, monotonic_ns):
        snap = torch.cuda.memory._snapshot()
        context = ctx.get("context")
        path = os.path.join(out_dir, "vramtrace.%d.torch" % os.getpid())
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        frames = {}
        count = 0
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write("vramtrace.torch/2\t%d\t%d\t%d\t%s\n"
                    % (os.getpid(), realtime_ns, monotonic_ns, clean(torch.__version__)))
            # The allocator's settings, for `vramtrace whatif` to replay the run under them.
            conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
            if conf:
                f.write("C\t%s\n" % clean(conf))
            wrapped = False
            for device, trace in enumerate(snap.get("device_traces", [])):
                if len(trace) >= max_entries:
                    f.write("W\t%d\t%d\n" % (device, len(trace)))
                    wrapped = True
                # Written in chunks, with each action's text cleaned once: about 1 s per million
                # entries at exit instead of 1.8 (the ring holds up to max_entries).
                actions = {}
                out = []
                for e in trace:
                    ids = ""
                    stack = e.get("frames")
                    if stack:
                        refs = []
                        for fr in stack:
                            key = (fr.get("filename", ""), fr.get("line", 0), fr.get("name", ""))
                            i = frames.get(key)
                            if i is None:
                                i = frames[key] = len(frames) + 1
                                out.append("F\t%d\t%s\t%d\t%s\n" % (
                                    i, clean(key[0]), int(key[1] or 0), clean(key[2])))
                            refs.append(str(i))
                        ids = ",".join(refs)
                    a = e.get("action", "")
                    act = actions.get(a)
                    if act is None:
                        act = actions[a] = clean(a)
                    free = e.get("device_free")
                    out.append("E\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n" % (
                        device, act, e.get("addr") or 0, e.get("size") or 0,
                        e.get("stream") or 0, e.get("time_us") or 0, ids,
                        "" if free is None else int(free)))
                    if len(out) >= 4096:
                        f.write("".join(out))
                        out.clear()
                f.write("".join(out))
                count += len(trace)
                if context is not None and trace:
                    context.write_limit(f, device)
            if wrapped:
                # The ring held only the latest entries: what the allocator holds now (its
                # segments and the blocks in use) tells the collector what was live before them,
                # and every named storage labelled now says what those blocks are (a label from
                # before the window may name a storage freed since).
                f.write(_allocator_state(snap))
                if context is not None:
                    context.label_all_now()
            if context is not None:
                context.write_pools(f, snap.get("segments", []))
                context.write(f)
            f.write("END\t%d\n" % count)
        os.replace(tmp, path)

    def attach(torch):
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")
        if "cudaMallocAsync" in conf:
            return  # no allocator trace there; the driver's pool figures cover it
        import atexit
        import time
        realtime_ns = time.time_ns()
        monotonic_ns = time.monotonic_ns()
        try:
            # Python frames per block only when asked (--torch=stacks): gathering them costs
            # about 1.7 us per allocation, +30 % on a launch-bound step.
            with_frames = os.environ.get("VRAMTRACE_TORCH_STACKS") == "1"
            torch.cuda.memory._record_memory_history(
                enabled="all", context="alloc" if with_frames else None, stacks="python",
                max_entries=max_entries)
        except Exception as ex:  # an old PyTorch, no CUDA build, ...
            say("PyTorch allocator trace off: %s" % (str(ex).splitlines() or [""])[0][:200])
            return

        import threading
        dumping = threading.Lock()  # one dump at a time: they share the .tmp file

        def write(why):
            try:
                with dumping:
                    dump(torch, realtime_ns, monotonic_ns)
            except Exception as ex:
                if not state["done"] and why != "live":
                    say("cannot write the PyTorch allocator trace (%s): %s" % (why, str(ex)[:200]))

        if os.environ.get("VRAMTRACE_TORCH_CONTEXT", "on") != "off":
            try:
                ctx["context"] = _Context(torch, clean)
                if not with_frames:
                    ctx["context"].lines_between_phases(max_entries)
            except Exception as ex:
                say("PyTorch memory categories off: %s" % str(ex)[:200])

        def on_oom(device, alloc, device_allocated, device_free):
            context = ctx.get("context")
            if context is not None:
                context.on_oom()
            write("at an OOM")

        try:
            torch._C._cuda_attach_out_of_memory_observer(on_oom)
        except Exception:
            pass
        def at_exit():
            context = ctx.get("context")
            if context is not None:
                context.at_exit()
            write("at exit")
            state["done"] = True

        atexit.register(at_exit)
        request = os.environ.get("VRAMTRACE_TORCH_LIVE")
        if request:
            watch_requests(request, write)

    def watch_requests(request, write):
        # A report of the moment (`vramtrace run --serve`, `vramtrace snapshot`) asks for the
        # allocator's trace of now by touching `request`: a thread of ours looks every 0.25 s
        # (a stat call) and writes it, as at an OOM, in place of the last one. The program's
        # threads only wait for the GIL while it is written; the one at exit replaces it.
        import threading
        import time

        def stamp():
            try:
                return os.stat(request).st_mtime_ns
            except OSError:
                return None

        def loop():
            seen = stamp()
            while not state["done"]:
                time.sleep(0.25)
                now = stamp()
                if now is not None and now != seen:
                    seen = now
                    write("live")

        try:
            threading.Thread(target=loop, name="vramtrace-torch-live", daemon=True).start()
        except Exception as ex:
            say("reports of the moment without PyTorch's view: %s" % str(ex)[:200])

    def attach_jax(jax):
        # XLA's own allocator takes a pool at start (75 % of the GPU by default) and serves
        # every array from it: the driver sees one allocation. What the pool held, its peak and
        # its limit come from the devices' memory_stats() at exit, read before JAX's own exit
        # handler (registered while jax was imported, so after this one) tears the backend
        # down, and only if the program started one: reading them must not start one.
        import atexit
        import time
        realtime_ns, monotonic_ns = time.time_ns(), time.monotonic_ns()

        def at_exit():
            try:
                from jax._src import xla_bridge
                if not getattr(xla_bridge, "_backends", None):
                    return
                lines = []
                for d in jax.local_devices():
                    if d.platform != "gpu":
                        continue
                    st = d.memory_stats() or {}
                    lines.append("J\t%d\t%d\t%d\t%d\t%d\t%d\n" % (
                        getattr(d, "local_hardware_id", None) or 0, st.get("bytes_in_use", 0),
                        st.get("peak_bytes_in_use", 0), st.get("bytes_limit", 0),
                        st.get("bytes_reserved", 0), st.get("largest_alloc_size", 0)))
                if not lines:
                    return
                exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
                if exc is not None:
                    lines.append(_exception_line(exc, clean, time.time_ns()))
                path = os.path.join(out_dir, "vramtrace.%d.jax" % os.getpid())
                fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                             0o600)
                with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
                    f.write("vramtrace.torch/2\t%d\t%d\t%d\tjax %s\n" % (
                        os.getpid(), realtime_ns, monotonic_ns, clean(jax.__version__)))
                    f.write("".join(lines))
                    f.write("END\t0\n")
                os.replace(path + ".tmp", path)
            except Exception as ex:
                say("cannot write XLA's memory statistics: %s" % str(ex)[:200])

        atexit.register(at_exit)

    attachers = {"torch": attach, "jax": attach_jax}

    class ImportHook(importlib.abc.MetaPathFinder):
        # Fires once per framework, at `import torch` / `import jax`: wraps its loader so that
        # the attacher runs right after the framework's own module code (CUDA need not be
        # initialised: the trace waits for it).
        def find_spec(self, name, path=None, target=None):
            if name not in attachers or name in done:
                return None
            done.add(name)
            if len(done) == len(attachers):
                try:
                    sys.meta_path.remove(self)
                except ValueError:
                    pass
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            run_module = spec.loader.exec_module
            attacher = attachers[name]

            def exec_module(module):
                run_module(module)
                try:
                    attacher(module)
                except Exception as ex:
                    say("%s memory figures off: %s" % (name, str(ex)[:200]))

            spec.loader.exec_module = exec_module
            return spec

    done = set()
    for name, attacher in attachers.items():
        if name in sys.modules:
            done.add(name)
            attacher(sys.modules[name])
    if len(done) < len(attachers):
        sys.meta_path.insert(0, ImportHook())


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


def _allocator_state(snap):
    """G lines (segments: device, address, bytes) and A lines (blocks in use: device, address,
    bytes) of a memory snapshot. A segment's blocks are listed in address order. A block in use
    is given the size asked for (requested_size), as the trace's entries give it: its own size
    can be larger by the rest of a segment too small to split off."""
    out = []
    for seg in snap.get("segments", []):
        device, address = int(seg.get("device", 0) or 0), int(seg.get("address", 0) or 0)
        out.append("G\t%d\t%d\t%d\n" % (device, address, int(seg.get("total_size", 0) or 0)))
        for block in seg.get("blocks", []):
            size = int(block.get("size", 0) or 0)
            if block.get("state") in ("active_allocated", "active_pending_free"):
                asked = int(block.get("requested_size", 0) or 0)
                out.append("A\t%d\t%d\t%d\n" % (device, int(block.get("address", address)),
                                                   asked if 0 < asked <= size else size))
            address += size
    return "".join(out)


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
    """What the memory is: module calls, phases, iterations and named storages, kept in two
    arrays (12 bytes a mark) and a few dictionaries; written by write() into the trace file."""

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
        self.module_lines = []   # "M" lines
        self.sites = {}          # (file, line, function) -> sid
        self.site_lines = []
        self.stack = []
        self.in_backward = 0
        # (weakref(root), [(name, weakref(param))], [(name, weakref(buffer))]): weak, so that a
        # model the program drops frees its memory as it would without the hook.
        self.roots = []
        self.param_names = {}    # id(param) -> name
        self.optimizers = []     # weakrefs, first seen first
        self.labels = []         # "L" lines: parameters, buffers, optimizer state
        self.grad_labels = []    # "L" lines of gradients (bounded: made anew each step)
        self.labelled = {}       # storage pointer -> (kind, name, bytes)
        self.steps = 0           # steps of the first optimizer
        self.exception = None
        torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        here = os.path.abspath(__file__)
        self.skip = (torch_dir, here, os.path.dirname(os.__file__) + os.sep + "contextlib.py",
                     os.path.dirname(os.__file__) + os.sep + "functools.py")
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim
        self.compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        self.nn_module, self.optim = nn_module, optim
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
        self.in_root = False      # an outermost call marked between the traced iterations is running
        self.root_module = None   # that call's module, while it runs
        self.root_mid = 0
        # The outermost modules met in the traced iterations (id -> (weakref, their hooks'
        # handles, whether they can have hooks)): between those iterations their own forward
        # hooks mark their calls, and every other module call takes PyTorch's fast path
        # untouched (outermost_calls). A module first called outermost between the traced
        # iterations is marked from the next traced one on.
        self.roots_seen = {}
        # id(module) of an outermost call -> its last forward's first output tensors (id,
        # storage pointer), to tell when the next forward gets them back (fed_back).
        self.root_outputs = {}
        self.forwards = 0         # outermost forwards of the first model (no optimizer)
        self.first_root = None
        # The first training step, for predicting its rest when it dies (_vramtrace_step.py):
        # the first outermost call of a model with parameters, its arguments as shapes only.
        self.want_call = os.environ.get("VRAMTRACE_TORCH_PREDICT", "on") != "off"
        self.first_call = None    # (weakref(model), described args, batch, training, grad, autocast, time_ns)
        self.first_done = False   # the first optimizer step (or evaluation forward) ended
        self.oom_seen = False
        self.made_optimizers = []  # weakrefs of every optimizer made, first made first
        self.predicted = []        # N, V and R lines
        # VRAMTRACE_TORCH_PREDICT=always: the step is predicted as the second one begins (at
        # exit the model is usually gone), else only at the exit of a process that ran out.
        self.predict_always = os.environ.get("VRAMTRACE_TORCH_PREDICT") == "always"
        self.predict_pending = False
        self.watch_optimizers()
        import functools
        autograd = torch.autograd
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
        module_class = torch.nn.Module
        call = module_class.__call__
        compiling = self.compiling

        def traced_call(module, *args, **kwargs):
            try:
                # On in the traced iterations (learns the outermost modules) and, between
                # them, only where an outermost module cannot have hooks of its own
                # (outermost_calls): then it marks the outermost call only (a forward of the
                # model, of the loss), every inner call straight through. is_compiling()
                # first: while torch.compile traces this, nothing of ctx is read (reading
                # ctx.full there would make it guard on it and recompile).
                if compiling() or ctx.in_root or ctx.in_backward:
                    return call(module, *args, **kwargs)
                if ctx.want_call:
                    ctx.capture_call(module, args, kwargs)
                if ctx.predict_pending and ctx.get_ident() == ctx.main:
                    ctx.predict_pending = False
                    ctx.predict_steps()
                if ctx.get_ident() != ctx.main:
                    return call(module, *args, **kwargs)
                if ctx.full:
                    ctx.learn_root(module)
                    return call(module, *args, **kwargs)
                mid = ctx.root_begin(module, (args, kwargs))
                ctx.in_root = True
                output = None
                try:
                    output = call(module, *args, **kwargs)
                    return output
                finally:
                    ctx.in_root = False
                    ctx.root_end(module, mid, output)
            except BaseException as ex:
                _hide_own_frame(ex)
                raise

        self.module_class, self.call, self.traced_call = module_class, call, traced_call

        # Tensors moved to the GPU outside a forward, backward or step (a batch, its targets,
        # model.to("cuda")) are marked with the user's line, so that the blocks they make are
        # not left without one. Inside those phases, on other threads and while torch.compile
        # traces, straight through.
        tensor_class = torch.Tensor
        self.moves = {name: getattr(tensor_class, name) for name in ("to", "cuda")}

        def traced_move(original):
            @functools.wraps(original)
            def move(tensor, *args, **kwargs):
                try:
                    if (compiling() or ctx.in_root or ctx.stack or ctx.in_backward
                            or ctx.in_move or ctx.get_ident() != ctx.main):
                        return original(tensor, *args, **kwargs)
                    ctx.mark(_SITE, ctx.site())
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
        # Python lines of the blocks made between the phases (lines_between_phases).
        self.history = None       # PyTorch's _record_memory_history while the hook switches it
        self.frames_on = False
        self.in_step = False
        self.counting = False     # allocations between phases counted in this iteration
        self.between = 0
        self.between_from = 0
        self.iteration_ns = 0
        self.traced_moves = {name: traced_move(f) for name, f in self.moves.items()}
        self.tensor_class = tensor_class
        self.set_enabled(True)
        self.graph_pools = set()  # pools CUDA graphs captured into (their segment_pool_id)
        self.watch_graphs()

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

    def capture_call(self, module, args, kwargs):
        """The first outermost call of a module with parameters on the main thread: what it was
        called with (shapes and dtypes, nothing kept alive) and how (training, grad, autocast)."""
        if (self.stack or self.in_root or self.in_backward or self.get_ident() != self.main
                or next(module.parameters(), None) is None):
            return
        self.want_call = False
        try:
            from _vramtrace_step import describe_call
            call, batch = describe_call(self.torch, args, kwargs)
            torch = self.torch
            autocast = None
            if torch.is_autocast_enabled():
                get = getattr(torch, "get_autocast_dtype", None)
                autocast = get("cuda") if get else torch.get_autocast_gpu_dtype()
            self.first_call = (self.weakref.ref(module), call, batch, module.training,
                               torch.is_grad_enabled(), autocast, self.now())
        except Exception:
            self.first_call = None

    def predict_steps(self):
        """At exit of a process that ran out of memory (or of any, with
        VRAMTRACE_TORCH_PREDICT=always): the N, V and R lines of its first step run on fake
        tensors: completed at the recorded batch and its half when the process never finished
        it, and with the changes the report's remedies weigh (_vramtrace_step.py)."""
        first = self.first_call
        if first is None or self.predicted or not (self.oom_seen or self.predict_always):
            return
        ref, call, batch, training, grad, autocast, t = first
        model = ref()
        if model is None or not batch:
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
        try:
            self.predict_model(first, model)
        finally:
            try:
                if rng is not None:
                    torch.set_rng_state(rng)
                if cuda_rng is not None:
                    torch.cuda.set_rng_state_all(cuda_rng)
            except Exception:
                pass
            if enabled:
                self.set_enabled(True)

    def predict_model(self, first, model):
        ref, call, batch, training, grad, autocast, t = first
        try:
            sys.stderr.write(
                "vramtrace: %s: running the step on fake tensors to %s (a few seconds; "
                "VRAMTRACE_TORCH_PREDICT=off skips this)\n"
                % (("the first step ran out of memory", "predict the rest of it and weigh the "
                    "remedies") if not self.first_done else
                   ("out of memory" if self.oom_seen else "VRAMTRACE_TORCH_PREDICT=always",
                    "weigh the remedies")))
        except Exception:
            pass
        try:
            from _vramtrace_step import predicted_lines
            device = 0
            p = next(model.parameters(), None)
            if p is not None and p.device.type == "cuda":
                device = p.device.index or 0
            params = {id(q) for q in model.parameters()}
            optimizer = None
            for w in self.made_optimizers:
                o = w()
                if o is not None and any(id(q) in params for g in o.param_groups
                                         for q in g["params"]):
                    optimizer = o
                    break
            modules = self.modules

            def module_ids(m):
                entry = modules.get(id(m))
                return entry[0] if entry is not None and entry[1]() is m else 0
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
                                             finished=self.first_done)
        except Exception as ex:
            self.predicted = ["N\t0\t1\t%d\t%d\t%d\tnot predicted: %s\n"
                              % (batch, batch, t, self.clean(str(ex))[:500])]

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

    def trace_modules(self, full):
        """Module hooks on (full) or off for the next iteration; only between forwards."""
        if self.every or full == self.full or self.dynamo_compiled():
            return
        self.full = full
        self.stack.clear()
        if self.enabled:
            self.module_hooks(full)
            self.outermost_calls(True)

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
        self.outermost_calls(on)

    def outermost_calls(self, on):
        """How an outermost module call is found while the module hooks are off: by that
        module's own forward hooks, so that every call inside it takes PyTorch's fast path
        untouched; by the Module.__call__ wrapper where one of the outermost modules cannot
        have hooks of its own (compiled in place: they would run inside the compiled code;
        PyTorch before 2.1: no always_call). In the traced iterations the wrapper is on: it
        learns the outermost modules and captures the first call's arguments."""
        if self.every:
            return
        hooks = on and all(hookable for _, _, hookable in self.roots_seen.values())
        for key, (ref, handles, hookable) in list(self.roots_seen.items()):
            module = ref()
            if not hooks or module is None:
                for h in handles:
                    h.remove()
                handles.clear()
                if module is None:
                    del self.roots_seen[key]
            elif not handles:
                handles.extend(self.root_hooks(module) or ())
        wrapped = on and (self.full or not hooks)
        self.module_class.__call__ = self.traced_call if wrapped else self.call

    def root_hooks(self, module):
        """The outermost module's own forward hooks, or None where it cannot have them."""
        if getattr(module, "_compiled_call_impl", None) is not None:
            return None
        handles = []
        try:
            handles.append(module.register_forward_hook(self.root_post, always_call=True))
            handles.append(module.register_forward_pre_hook(self.root_pre, with_kwargs=True))
            return handles
        except Exception:
            for h in handles:
                h.remove()
            return None

    def learn_root(self, module):
        """An outermost module call in a traced iteration: its module gets hooks of its own,
        installed once (none is removed while PyTorch runs them) and acting only between the
        traced iterations."""
        key = id(module)
        entry = self.roots_seen.get(key)
        if (entry is not None and entry[0]() is module) or len(self.roots_seen) >= 64:
            return
        handles = self.root_hooks(module) if self.enabled else []
        self.roots_seen[key] = (self.weakref.ref(module), handles or [], handles is not None)

    def root_pre(self, module, args, kwargs):
        """An outermost module's forward pre hook: marks its call between the traced
        iterations (in them, the module hooks do)."""
        if self.full or self.compiling() or self.in_backward or self.get_ident() != self.main:
            return None
        if self.in_root:
            if self.root_module is not module:
                return None
            # The module's last call never reached its post hook (a KeyboardInterrupt in it):
            # that call ended when it raised.
            self.root_post(module, None, None)
        if self.want_call:
            self.capture_call(module, args, kwargs)
        if self.predict_pending:
            self.predict_pending = False
            self.predict_steps()
        self.root_mid = self.root_begin(module, (args, kwargs))
        self.root_module = module
        self.in_root = True
        return None

    def root_post(self, module, args, output):
        if not self.in_root or self.root_module is not module:
            return None
        self.in_root = False
        self.root_module = None
        self.root_end(module, self.root_mid, output)
        return None

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
        self.trace_modules(self.forwards < 3 or self.forwards % 50 == 49)
        if self.forwards == 2:
            _stop_launches()
        self.check_lines(self.forwards)

    def mark(self, kind, ident):
        self.times.append(self.now())
        self.codes.append(kind | (ident << 4))
        if len(self.times) > self.MAX_MARKS:
            half = self.MAX_MARKS // 2
            del self.times[:half]
            del self.codes[:half]
            self.dropped_marks += half

    def site(self):
        """The innermost frame of the user's code (not torch's, not the interpreter's)."""
        f = sys._getframe(2)
        skip = self.skip
        while f is not None and f.f_code.co_filename.startswith(skip):
            f = f.f_back
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
        if self.stack:
            parent = self.stack[-1][1]
            return self.add_module(module, parent + "." + type(module).__name__)
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
        code = getattr(getattr(type(module), "forward", None), "__code__", None)
        self.module_lines.append("M\t%d\t%s\t%s\t%s\t%d\n" % (
            mid, self.clean(name), self.clean(type(module).__name__),
            self.clean(code.co_filename if code else ""), code.co_firstlineno if code else 0))
        return mid

    def pre(self, module, args):
        # is_compiling() first: torch.compile inlines global module hooks into what it traces,
        # and a call it cannot trace (threading.get_ident) would break the graph there.
        if self.compiling() or self.get_ident() != self.main:
            return None
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
        if self.compiling():
            return None
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
        if self.predict_always and not self.first_done and self.first_call is not None:
            self.predict_pending = True
        self.first_done = True
        self.in_step = False
        # Named storages at the first steps, then every 50th (and at each OOM): labelling
        # every gradient at every step cost 2.5 ms a step on a launch-bound model of 200
        # parameters; between labels a gradient is still a gradient (made in backward, kept
        # past it), only its name is missing.
        if first:
            self.steps += 1
            self.trace_modules(self.steps < 3 or self.steps % 50 == 49)
            if self.steps == 2:
                _stop_launches()
        if self.steps <= 3 or self.steps % 50 == 0:
            self.label_all()
        if first:
            self.check_lines(self.steps)
        self.phase_end()

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
        import functools
        budget = os.environ.get("VRAMTRACE_TORCH_LINES", "") or "0.005"
        if budget == "off":
            return
        try:
            self.budget = float(budget)
        except ValueError:
            self.budget = 0.005
        memory = self.torch.cuda.memory
        record = memory._record_memory_history
        ctx = self

        @functools.wraps(record)
        def program_record(*args, **kwargs):
            ctx.history = None
            return record(*args, **kwargs)

        memory._record_memory_history = program_record
        if getattr(self.torch.cuda, "_record_memory_history", None) is record:
            self.torch.cuda._record_memory_history = program_record
        stats = getattr(memory, "memory_stats_as_nested_dict", None)

        def allocations():
            # 0 where PyTorch cannot say: nothing is counted, the frames are never cut.
            try:
                return int(stats()["allocation"]["all"]["allocated"])
            except Exception:
                return 0

        self.allocations = allocations
        self.history = functools.partial(record, enabled="all", stacks="python",
                                         max_entries=max_entries)
        self.frames(True)

    def frames(self, on):
        if on == self.frames_on or self.history is None:
            return
        if self.counting:
            if on:
                self.between_from = self.allocations()
            else:
                self.tally()
        try:
            self.history(context="alloc" if on else None)
            self.frames_on = on
        except Exception:
            self.history = None

    def tally(self):
        """Adds the allocations made since the frames went on, or since the last tally."""
        n = self.allocations()
        self.between += n - self.between_from
        self.between_from = n

    def phase_begin(self):
        if self.frames_on:
            self.frames(False)

    def phase_end(self):
        if (self.history is not None and not self.frames_on and not self.stack
                and not self.in_root and not self.in_backward and not self.in_step):
            self.frames(True)

    def check_lines(self, done):
        """At the end of iteration `done` - 1: frames off for good when those between the
        phases of a counted iteration cost more than 0.5 % of its time; the next counted
        iteration is the first ones' and every 50th."""
        if self.history is None:
            return
        now = self.now()
        if self.counting and self.iteration_ns:
            if self.frames_on:
                self.tally()
            if self.between * 2000 > self.budget * (now - self.iteration_ns):
                self.frames(False)
                self.history = None
                return
        self.between = 0
        self.counting = done < 3 or done % 50 == 49
        if self.counting and self.frames_on:
            self.between_from = self.allocations()
        self.iteration_ns = now

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
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if exc is not None:
            self.exception = _exception_line(exc, self.clean, self.now())
        try:
            self.predict_steps()
        except Exception:
            pass

    def write_limit(self, f, device):
        try:
            cuda = self.torch.cuda
            fraction = cuda.get_per_process_memory_fraction(device)
            total = cuda.get_device_properties(device).total_memory
            f.write("Q\t%d\t%.17g\t%d\n" % (device, fraction, total))
        except Exception:
            pass

    def write_pools(self, f, segments):
        """The P records: each segment of a private pool (segment_pool_id not (0, 0)) now; the
        collector counts a block in one as that pool's. PyTorch before segment_pool_id: none."""
        out = []
        for seg in segments:
            try:
                pool = seg.get("segment_pool_id")
                if pool is None:
                    continue
                pool = tuple(int(x) for x in pool)
                if len(pool) != 2 or pool == (0, 0):
                    continue
                graph = pool in self.graph_pools or (pool[0] != 0 and pool[1] == 0)
                out.append("P\t%d\t%d\t%d\t%d\t%d\t%s\n" % (
                    int(seg.get("device") or 0), int(seg.get("address") or 0),
                    int(seg.get("total_size") or 0), pool[0], pool[1],
                    "graph" if graph else "pool"))
            except Exception:
                continue
        f.write("".join(out))

    def write(self, f):
        f.write("".join(self.module_lines))
        f.write("".join(self.site_lines))
        clean = self.clean
        for lines in (self.labels, self.grad_labels):
            f.write("".join("L\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n" % (
                t, dev, ptr, nbytes, kind, clean(name), "x".join(str(d) for d in shape),
                str(dtype).replace("torch.", "")) for t, dev, ptr, nbytes, kind, name, shape, dtype
                in lines))
        if self.dropped_marks:
            f.write("D\t%d\n" % self.dropped_marks)
        out = []
        for t, c in zip(self.times, self.codes):
            out.append("K\t%d\t%d\t%d\n" % (t, c & 15, c >> 4))
            if len(out) >= 8192:
                f.write("".join(out))
                out.clear()
        f.write("".join(out))
        if self.exception:
            f.write(self.exception)
        f.write("".join(self.predicted))


def _vramtrace_chain():
    # The sitecustomize this one shadows (a distribution's, a virtualenv's) still runs.
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _vramtrace_setup()
except Exception as _ex:
    try:
        sys.stderr.write("vramtrace: PyTorch allocator trace off: %s\n" % str(_ex)[:200])
    except Exception:
        pass
_vramtrace_chain()
