# vramtrace's start-up hook for Python programs (`vramtrace run` puts this file's folder first
# on PYTHONPATH; the user's script is not changed). When the program imports torch, PyTorch's
# caching-allocator trace is turned on (segments, blocks, OOMs; with --torch=stacks also the
# Python frames of each block) and written to $VRAMTRACE_TORCH_DIR/vramtrace.<pid>.torch at exit and at each
# out-of-memory (PyTorch's OOM observer), for the collector to merge with the driver's view
# (collector/torch_trace.h gives the format). Off with `vramtrace run --torch=off`.
#
# It must never change what the program does: every failure is one line on stderr, and any
# sitecustomize the environment had is still run after this one.
import os
import sys


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

    def dump(torch, realtime_ns, monotonic_ns):
        snap = torch.cuda.memory._snapshot()
        path = os.path.join(out_dir, "vramtrace.%d.torch" % os.getpid())
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        frames = {}
        count = 0
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write("vramtrace.torch/1\t%d\t%d\t%d\t%s\n"
                    % (os.getpid(), realtime_ns, monotonic_ns, clean(torch.__version__)))
            for device, trace in enumerate(snap.get("device_traces", [])):
                if len(trace) >= max_entries:
                    f.write("W\t%d\t%d\n" % (device, len(trace)))
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

        def write(why):
            try:
                dump(torch, realtime_ns, monotonic_ns)
            except Exception as ex:
                if not state["done"]:
                    say("cannot write the PyTorch allocator trace (%s): %s" % (why, str(ex)[:200]))

        def on_oom(device, alloc, device_allocated, device_free):
            write("at an OOM")

        try:
            torch._C._cuda_attach_out_of_memory_observer(on_oom)
        except Exception:
            pass
        atexit.register(lambda: (write("at exit"), state.__setitem__("done", True)))

    class TorchImportHook(importlib.abc.MetaPathFinder):
        # Fires once, for `import torch`: wraps its loader so that attach() runs right after
        # torch's own module code (CUDA need not be initialised: the trace waits for it).
        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)
                try:
                    attach(module)
                except Exception as ex:
                    say("PyTorch allocator trace off: %s" % str(ex)[:200])

            spec.loader.exec_module = exec_module
            return spec

    if "torch" in sys.modules:
        attach(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, TorchImportHook())


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
