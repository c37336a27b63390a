# vramtrace's start-up hook for Python programs (`vramtrace run` puts this file's folder first
# on PYTHONPATH; the user's script is not changed). When the program imports torch, PyTorch's
# caching-allocator trace is turned on (segments, blocks, OOMs; with --torch=stacks also the
# Python frames of each block) and written to $VRAMTRACE_TORCH_DIR/vramtrace.<pid>.torch at exit
# and at each out-of-memory (PyTorch's OOM observer), for the collector to merge with the
# driver's view (common/side_channel.h declares every line). Off with `vramtrace run --torch=off`.
# When it imports jax, XLA's pool figures are written at exit (vramtrace.<pid>.jax).
#
# The files beside this one: _vramtrace_context (what the memory is: modules, phases,
# iterations), which wires its parts around one _vramtrace_marks.Marks (_vramtrace_storages,
# _vramtrace_modules, _vramtrace_lines, _vramtrace_windows, _vramtrace_prediction with the fake
# steps of _vramtrace_step and _vramtrace_own); _vramtrace_write (the lines written).
#
# It must never change what the program does: every failure is one line on stderr, and any
# sitecustomize the environment had is still run after this one.
import os
import sys
import time

# The run's start, near enough (the interpreter's own start-up before this is milliseconds):
# the fake steps at a finished run's exit take at most a share of the time since.
_STARTED_NS = time.time_ns()
# The hook's _Context once torch is imported ("context"), for vramtrace_categories().
_vramtrace_ctx = {}


def vramtrace_categories(blocks):
    """The category of each of PyTorch's blocks in `blocks`, [(address, made_us, freed_us)]
    (the allocator trace's times, on the Unix epoch; freed_us None while the block lives), as
    the collector gives it: "parameters", "gradients", "optimizer state", "activations",
    "temporaries" or "inputs and data" (_vramtrace_storages.categories). From the hook's weak
    references and marks only (the pytest plugin names a test's blocks by this without walking
    the heap); [None, ...] before torch or without categories (VRAMTRACE_TORCH_CONTEXT=off)."""
    blocks = list(blocks)
    context = _vramtrace_ctx.get("context")
    if context is None:
        return [None] * len(blocks)
    from _vramtrace_storages import categories
    return categories(context.storages, context.marks, blocks)


def vramtrace_frames_for_good():
    """PyTorch's allocator trace with the Python frames of every block from now on, for the
    pytest plugin's failure messages, through the hook (_vramtrace_lines.frames_for_good), so
    that the hook keeps its trace windows. False when the hook cannot (no context, or the program
    set the trace itself): the caller sets the trace then."""
    context = _vramtrace_ctx.get("context")
    if context is None:
        return False
    try:
        return bool(context.lines.frames_for_good(_max_entries()))
    except Exception:
        return False


def _max_entries():
    """The allocator trace's ring, as the launcher passes it (VRAMTRACE_TORCH_MAX_ENTRIES)."""
    return int(os.environ.get("VRAMTRACE_TORCH_MAX_ENTRIES", "1000000") or 1000000)


def _say(msg):
    try:
        sys.stderr.write("vramtrace: " + msg + "\n")
    except Exception:
        pass


def _clean(text):
    return str(text).replace("\t", " ").replace("\n", " ").replace("\r", " ")


def _vramtrace_setup():
    out_dir = os.environ.get("VRAMTRACE_TORCH_DIR")
    if not out_dir:
        return
    max_entries = _max_entries()
    state = {"done": False}
    attachers = {"torch": lambda torch: _attach_torch(torch, out_dir, max_entries, state),
                 "jax": lambda jax: _attach_jax(jax, out_dir)}
    done = set()
    for name, attacher in attachers.items():
        if name in sys.modules:
            done.add(name)
            attacher(sys.modules[name])
    if len(done) < len(attachers):
        sys.meta_path.insert(0, _ImportHook(attachers, done))


def _trace_budget():
    """The share of an iteration PyTorch's allocator trace may cost before it is sampled
    (VRAMTRACE_TORCH_TRACE_BUDGET, default 0.01)."""
    try:
        return max(0.0, float(os.environ.get("VRAMTRACE_TORCH_TRACE_BUDGET", "") or "0.01"))
    except ValueError:
        return 0.01


def _attach_torch(torch, out_dir, max_entries, state):
    """PyTorch imported: its allocator trace on, the context made, the file written at each OOM,
    at exit and when a report of the moment asks (_vramtrace_write.dump)."""
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
        from _vramtrace_lines import allocator_trace
        record = torch.cuda.memory._record_memory_history
        history = allocator_trace(record, max_entries)
        history(context="alloc" if with_frames else None)
    except Exception as ex:  # an old PyTorch, no CUDA build, ...
        _say("PyTorch allocator trace off: %s" % (str(ex).splitlines() or [""])[0][:200])
        return

    import threading
    from _vramtrace_write import dump
    ctx = _vramtrace_ctx
    dumping = threading.Lock()  # one dump at a time: they share the .tmp file

    def write(why):
        try:
            with dumping:
                dump(torch, ctx.get("context"), out_dir, max_entries, _clean,
                     realtime_ns, monotonic_ns)
        except Exception as ex:
            if not state["done"] and why != "live":
                _say("cannot write the PyTorch allocator trace (%s): %s" % (why, str(ex)[:200]))

    if os.environ.get("VRAMTRACE_TORCH_CONTEXT", "on") != "off":
        try:
            from _vramtrace_context import _Context
            context = ctx["context"] = _Context(torch, _clean)
            context.prediction.started_ns = _STARTED_NS
            # `vramtrace plan`'s stop, when the program swallows its SystemExit, writes the
            # side channel itself before os._exit.
            context.prediction.dump_now = lambda: write("at the plan's stop")
            if not with_frames:
                context.lines.lines_between_phases(max_entries)
                # The trace on in the sampled iterations only: --torch=sampled, or by default
                # where it would cost more than its budget; not with expandable segments,
                # whose maps a gap's state would not show.
                mode = os.environ.get("VRAMTRACE_TORCH_TRACE", "auto")
                if (mode != "full"
                        and "expandable_segments:True" not in conf.replace(" ", "")):
                    context.trace.watch_program()
                    context.windows.sample_trace(history, max_entries,
                                         None if mode == "sampled" else _trace_budget())
        except Exception as ex:
            _say("PyTorch memory categories off: %s" % str(ex)[:200])

    def on_oom(device, alloc, device_allocated, device_free):
        context = ctx.get("context")
        if context is not None:
            context.windows.gap_oom(device, alloc, device_free)
            context.on_oom()
        write("at an OOM")

    try:
        torch._C._cuda_attach_out_of_memory_observer(on_oom)
    except Exception:
        pass

    def at_exit():
        context = ctx.get("context")
        prediction = context.prediction if context is not None else None
        if prediction is not None and prediction.plan_line and prediction.dump_now is not None:
            state["done"] = True  # `vramtrace plan` stopped it: written at the stop
            return
        if context is not None:
            context.at_exit()
        write("at exit")
        state["done"] = True

    atexit.register(at_exit)
    request = os.environ.get("VRAMTRACE_TORCH_LIVE")
    if request:
        _watch_requests(request, write, state)


def _watch_requests(request, write, state):
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
        _say("reports of the moment without PyTorch's view: %s" % str(ex)[:200])


def _attach_jax(jax, out_dir):
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
                from _vramtrace_context import _exception_line
                lines.append(_exception_line(exc, _clean, time.time_ns()))
            path = os.path.join(out_dir, "vramtrace.%d.jax" % os.getpid())
            fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                         0o600)
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
                f.write("vramtrace.torch/2\t%d\t%d\t%d\tjax %s\n" % (
                    os.getpid(), realtime_ns, monotonic_ns, _clean(jax.__version__)))
                f.write("".join(lines))
                f.write("END\t0\n")
            os.replace(path + ".tmp", path)
        except Exception as ex:
            _say("cannot write XLA's memory statistics: %s" % str(ex)[:200])

    atexit.register(at_exit)


class _ImportHook:
    # Fires once per framework, at `import torch` / `import jax`: wraps its loader so that
    # the attacher runs right after the framework's own module code (CUDA need not be
    # initialised: the trace waits for it).
    def __init__(self, attachers, done):
        self.attachers, self.done = attachers, done

    def find_spec(self, name, path=None, target=None):
        if name not in self.attachers or name in self.done:
            return None
        self.done.add(name)
        if len(self.done) == len(self.attachers):
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module
        attacher = self.attachers[name]

        def exec_module(module):
            run_module(module)
            try:
                attacher(module)
            except Exception as ex:
                _say("%s memory figures off: %s" % (name, str(ex)[:200]))

        spec.loader.exec_module = exec_module
        return spec


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
