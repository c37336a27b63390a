"""pytest plugin: device memory per test, as pytest-memray does for host memory.

    pytest --vramtrace                        # each test's device peak and leaks, in a summary
    @pytest.mark.limit_gpu_memory("2 GiB")    # fails the test when it peaks higher
    @pytest.mark.limit_gpu_leaks("16 MiB")    # fails the test when it leaves more in use

A test's figures are measured around its call (not its fixtures), per device:
  peak   the most device memory in use during the call, above what was in use when it started;
  leaked what is still in use when the call ends, above that same start (after a collection
         of the young garbage; a test over its leak limit after a full one).
"In use" leaves out what an allocator only caches: with PyTorch imported, PyTorch's allocated
bytes (torch.cuda.memory_allocated, max_memory_allocated), not its reserved ones; otherwise the
driver allocations that libvramtrace.so counts in the process, less what pools declared with
vramtrace.h hold but have not handed out. With PyTorch, a failure message names PyTorch's blocks
behind the peak or the leak by the Python line that made them, from PyTorch's allocator trace
read by the start-up hook's rules (_vramtrace_blocks; the plugin keeps its Python frames on for
a test with a limit marker), and their category
(parameters, gradients, optimizer state, activations, temporaries, inputs and data), which the
start-up hook gives from the models and optimizers it has seen run and the phases it marked
(its vramtrace_categories(): the collector's rules, never a walk of the heap). Otherwise the
sites come from libvramtrace.so (driver allocations: with PyTorch, the segments of its caching
allocator).

The figures come from libvramtrace.so in the process, so pytest must run under it: when it is
not loaded, `pytest --vramtrace` runs itself again as `vramtrace run -o DIR -- pytest ...`
(DIR: --vramtrace-output, else a new temporary folder, which then holds the whole session's
report). With pytest-xdist each worker is a child of that run and is measured on its own; the
figures travel to the controller with the test reports.
"""
import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import time

import pytest

import vramtrace
from vramtrace._hook import _vramtrace_blocks
from vramtrace import _launcher, _native

_FAILURE = pytest.StashKey[str]()
_PROPERTY = "vramtrace"


def pytest_addoption(parser):
    group = parser.getgroup("vramtrace", "device memory per test (vramtrace)")
    group.addoption("--vramtrace", action="store_true", default=False,
                    help="measure each test's device memory (peak, leaks) and enforce the "
                         "limit_gpu_memory and limit_gpu_leaks markers")
    group.addoption("--vramtrace-output", default=None, metavar="DIR",
                    help="where `vramtrace run` writes the whole session's report when pytest "
                         "runs itself under it (default: a new temporary folder)")
    group.addoption("--vramtrace-tests", type=int, default=10, metavar="N",
                    help="tests shown in the summary, highest peak first (0: all; default 10)")
    group.addoption("--vramtrace-sites", type=int, default=5, metavar="N",
                    help="allocation sites shown in a failure message (default 5)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.addinivalue_line(
        "markers", "limit_gpu_memory(size): with --vramtrace, fail the test when the device "
        "memory in use during its call peaks more than SIZE (e.g. '2 GiB') above the start")
    config.addinivalue_line(
        "markers", "limit_gpu_leaks(size): with --vramtrace, fail the test when more than SIZE "
        "of device memory is still in use after its call than before it (memory an allocator "
        "only caches is not counted)")
    if not config.getoption("vramtrace"):
        return
    if (_native.library() is None and "PYTEST_XDIST_WORKER" not in os.environ
            and not os.environ.get("VRAMTRACE_PYTEST_REEXEC")):
        _run_under_vramtrace(config)  # returns only when it cannot
    config.pluginmanager.register(Plugin(config), "vramtrace-plugin")


def _run_under_vramtrace(config):
    """Runs this pytest command again as `vramtrace run -o DIR -- <this pytest command>` and
    exits as it did; returns only when it cannot."""
    exe = vramtrace.command_path()
    args = [str(a) for a in config.invocation_params.args]
    if exe is None or args != sys.argv[1:]:
        sys.stderr.write("vramtrace: libvramtrace.so is not loaded and pytest cannot run itself "
                         "under it here; run `vramtrace run -- pytest --vramtrace ...`\n")
        return
    given = config.getoption("vramtrace_output")
    out = given or tempfile.mkdtemp(prefix="vramtrace-pytest-")
    argv0 = sys.argv[0]
    if os.path.basename(argv0) == "__main__.py" or not os.access(argv0, os.X_OK):
        command = [sys.executable, "-m", "pytest"]
    else:
        command = [argv0]
    env = _launcher.environment(os.environ)
    env["VRAMTRACE_PYTEST_REEXEC"] = "1"  # never twice, even if the library fails to load
    env["VRAMTRACE_PYTEST_OUTPUT"] = os.path.abspath(out)
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # --force: the folder is the session's, and a session run again replaces its report. It
    # replaces only what an earlier vramtrace run wrote there (its run marker names the files):
    # a user's report.json or report.html, or a trace of another run, is refused (exit 2) and
    # left as it is.
    argv = [exe, "run", "--force", "-o", out, "--"] + command + sys.argv[1:]
    if given:
        os.execve(exe, argv, env)
    # A temporary folder is this session's alone: waited for, so that it can be removed when
    # no test used CUDA (its report would be empty).
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(exe, argv, env)
        finally:
            os._exit(127)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda number, frame: os.kill(pid, number))
    _, status = os.waitpid(pid, 0)
    if _empty_run(out):
        shutil.rmtree(out, ignore_errors=True)
        sys.stderr.write("vramtrace: no test used CUDA: nothing to keep, %s removed\n" % out)
    sys.stderr.flush()
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _empty_run(out):
    """Whether the run in `out` recorded no process, and the folder holds only its own files."""
    try:
        with open(os.path.join(out, "report.json")) as f:
            processes = json.load(f).get("processes")
        own = {"report.json", "report.html", "vramtrace.run"}
        return processes == [] and set(os.listdir(out)) <= own
    except (OSError, ValueError, AttributeError):
        return False


def _limit(item, name):
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    try:
        if len(marker.args) != 1 or marker.kwargs:
            raise ValueError("one size expected, got %d argument(s)"
                             % (len(marker.args) + len(marker.kwargs)))
        return vramtrace.parse_size(marker.args[0])
    except ValueError as ex:
        # One line, not the plugin's traceback: the marker is wrong, not the test.
        pytest.fail("vramtrace: %s takes one size of 0 or more, e.g. %s(\"16 MiB\"): %s"
                    % (name, name, ex), pytrace=False)


def _torch():
    """PyTorch, when the test process uses it on a GPU (imported and CUDA initialised)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch
    except Exception:
        pass
    return None


# This package's folder: its frames (the plugin's) are never the user's line either (the hook's
# rules leave out its own files and installed packages; a source tree's plugin is neither).
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _torch_frames_on(torch):
    """PyTorch's allocator trace with the Python frames of every block, for the lines of a
    failure message (vramtrace's start-up hook keeps them off inside forward, backward and the
    optimizer step, where a training loop makes nearly all of its blocks); from then on for the
    session, at about 2 us an allocation. Under `vramtrace run` the start-up hook is asked, so
    that it keeps its own windows of the trace instead of taking the plugin for the program."""
    hook = sys.modules.get("sitecustomize")
    ask = getattr(hook, "vramtrace_frames_for_good", None)
    if ask is not None:
        try:
            if ask():
                return True
        except Exception:
            pass
    try:
        entries = int(os.environ.get("VRAMTRACE_TORCH_MAX_ENTRIES", "") or 1000000)
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc",
                                                 stacks="python", max_entries=entries)
        return True
    except Exception:
        return False


def _categories(blocks):
    """The category of each block of [(address, made_us, freed_us)], from vramtrace's start-up
    hook (its vramtrace_categories(): the models and optimizers it has seen, by weak reference,
    and the phases it marked; the heap is never walked, and no other object is looked at).
    None for each without the hook (--torch=off, pytest not under `vramtrace run`)."""
    hook = sys.modules.get("sitecustomize")
    categories = getattr(hook, "vramtrace_categories", None)
    if categories is not None:
        try:
            return categories(blocks)
        except Exception:
            pass
    return [None] * len(blocks)


def _torch_lines(rows):
    return ["  %10s  %s  (%s%d block%s)" % (vramtrace.format_bytes(b), line,
                                            cat + ", " if cat else "", n, "" if n == 1 else "s")
            for b, n, line, cat in rows]


class _Measure:
    """The figures of one test's call: started before it, finished after it."""

    def __init__(self, lines=False):
        self.since_us = time.time_ns() // 1000  # PyTorch's trace is on the Unix epoch
        if lines and _torch() is not None:
            _torch_frames_on(_torch())
        self.lib = _native.library() is not None
        self.seq = vramtrace.mark() if self.lib else None
        self.lib_before = {f["device"]: f for f in vramtrace.live()} if self.lib else {}
        self.torch_before = {}
        torch = _torch()
        if torch is not None:
            for d in range(torch.cuda.device_count()):
                torch.cuda.reset_peak_memory_stats(d)
                self.torch_before[d] = torch.cuda.memory_allocated(d)

    def _devices(self):
        out = {}
        if self.lib:
            for f in vramtrace.live():
                b = self.lib_before.get(f["device"], {"in_use_bytes": 0, "live_bytes": 0})
                out[f["device"]] = {
                    "peak": max(0, f["in_use_peak_since_mark"] - b["in_use_bytes"]),
                    "leaked": f["in_use_bytes"] - b["in_use_bytes"],
                    "cached": f["live_bytes"] - f["in_use_bytes"],
                    "source": "vramtrace"}
        torch = _torch()
        if torch is not None:
            for d in range(torch.cuda.device_count()):
                base = self.torch_before.get(d, 0)  # CUDA started during the test: nothing before
                peak = torch.cuda.max_memory_allocated(d)
                now = torch.cuda.memory_allocated(d)
                if peak == 0 and now == 0 and d not in out:
                    continue
                out[d] = {"peak": max(0, peak - base), "leaked": now - base,
                          "cached": torch.cuda.memory_reserved(d) - now, "source": "torch"}
        return out

    def finish(self, leak_limit=None):
        devices = self._devices()
        if any(v["leaked"] > 0 for v in devices.values()):
            # Garbage in reference cycles is not a leak: it is freed at collection. The young
            # generations first (what the test made and dropped is there, unless it lived
            # through many collections): a full collection walks the whole heap, tens of ms in a
            # process that imported torch and transformers, and is left for a test still over
            # its leak limit, whose verdict must not rest on garbage.
            gc.collect(1)
            self._release_workspaces()
            devices = self._devices()
            if leak_limit is not None and any(v["leaked"] > leak_limit
                                              for v in devices.values()):
                gc.collect()
                devices = self._devices()
        return devices

    @staticmethod
    def _release_workspaces():
        # cuBLAS's workspaces (32 MiB a handle and stream on recent GPUs), made through
        # PyTorch's allocator at the first matmul and kept for the process, are not the test's
        # leak: released before measuring, as PyTorch's own leak check does (the next matmul
        # makes them again).
        torch = _torch()
        clear = getattr(getattr(torch, "_C", None), "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            try:
                clear()
            except Exception:
                pass


class Plugin:
    def __init__(self, config):
        self.config = config
        self.results = {}
        self.sites_shown = config.getoption("vramtrace_sites")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        # A bad marker fails here, before the test runs; nothing after the yield raises, so
        # that the other plugins' wrappers around the call always finish.
        limits = (_limit(item, "limit_gpu_memory"), _limit(item, "limit_gpu_leaks"))
        measure = _Measure(lines=limits != (None, None))
        yield
        try:
            devices = measure.finish(limits[1])
            if not devices:  # nothing on a device: no row in the summary
                return
            item.user_properties.append((_PROPERTY, json.dumps(
                {str(d): v for d, v in devices.items()}, sort_keys=True)))
            failure = self._over_budget(devices, measure, *limits)
        except Exception as ex:  # the test's own outcome stands
            failure = None
            sys.stderr.write("vramtrace: %s: could not measure: %s\n" % (item.nodeid, ex))
        if failure:
            item.stash[_FAILURE] = failure

    def _sites(self, device, what, since):
        lines = []
        for size, count, site in vramtrace.sites(device, what, since, self.sites_shown):
            extra = "" if what == "peak" else "  (%d allocation%s)" % (count, "" if count == 1
                                                                         else "s")
            lines.append("  %10s  %s%s" % (vramtrace.format_bytes(size), site, extra))
        return lines

    def _torch_rows(self, device, figures, measure, what):
        torch = _torch()
        if figures["source"] != "torch" or torch is None:
            return []
        return _vramtrace_blocks.blocks_behind(torch, device, measure.since_us, what,
                                               self.sites_shown, _categories, exclude=(_HERE,))

    def _over_budget(self, devices, measure, memory, leaks):
        messages = []
        for d, f in sorted(devices.items()):
            segments = " (driver allocations: PyTorch's segments)" if f["source"] == "torch" else ""
            if memory is not None and f["peak"] > memory:
                messages.append("device %d: the test's device memory in use peaked at %s above "
                                "its start, over the limit of %s" % (
                                    d, vramtrace.format_bytes(f["peak"]),
                                    vramtrace.format_bytes(memory)))
                rows = self._torch_rows(d, f, measure, "peak")
                if rows:
                    messages.append("PyTorch's blocks in use at the test's peak, by line:")
                    messages += _torch_lines(rows)
                lines = self._sites(d, "peak", 0) if measure.lib and not rows else []
                if lines:
                    messages.append("top sites in use at the peak%s:" % segments)
                    messages += lines
            if leaks is not None and f["leaked"] > leaks:
                messages.append("device %d: the test leaked %s of device memory (still in use "
                                "after it; %s cached by allocators not counted), over the limit "
                                "of %s" % (d, vramtrace.format_bytes(f["leaked"]),
                                           vramtrace.format_bytes(max(0, f["cached"])),
                                           vramtrace.format_bytes(leaks)))
                rows = self._torch_rows(d, f, measure, "leak")
                if rows:
                    messages.append("PyTorch's blocks made during the test and still in use, "
                                    "by line:")
                    messages += _torch_lines(rows)
                lines = self._sites(d, "new", measure.seq) if measure.lib and not rows else []
                if lines:
                    messages.append("allocated during the test and still held%s:" % segments)
                    messages += lines
                elif measure.lib and not rows:
                    messages.append("no driver allocation made during the test is still held: "
                                    "the leaked memory is inside segments the allocator "
                                    "obtained before the test")
        return "\n".join(messages)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if call.when != "call":
            return
        report = outcome.get_result()
        failure = item.stash.get(_FAILURE, None)
        if failure and report.passed:
            report.outcome = "failed"
            report.longrepr = "vramtrace: " + failure
        elif failure:  # failed on its own too: the budget is one more section of its report
            report.sections.append(("vramtrace", failure))

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        for name, value in getattr(report, "user_properties", ()):
            if name == _PROPERTY:
                self.results[report.nodeid] = json.loads(value)

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.write_sep("=", "vramtrace: device memory per test")
        if not any(self.results.values()):
            tr.write_line("no device memory measured: no test used CUDA under "
                          "libvramtrace.so or through PyTorch")
            return
        rows = []
        for nodeid, devices in self.results.items():
            for d, f in devices.items():
                rows.append((f["peak"], f["leaked"], int(d), nodeid))
        rows.sort(key=lambda r: (-r[0], -r[1], r[3], r[2]))
        shown = self.config.getoption("vramtrace_tests")
        if shown > 0:
            rows = rows[:shown]
        tr.write_line("%10s  %10s  %6s  %s" % ("peak", "leaked", "device", "test"))
        for peak, leaked, d, nodeid in rows:
            tr.write_line("%10s  %10s  %6d  %s" % (vramtrace.format_bytes(peak),
                                                   vramtrace.format_bytes(leaked), d, nodeid))
        out = os.environ.get("VRAMTRACE_PYTEST_OUTPUT")
        if out:
            tr.write_line("the whole session's report: %s (written when pytest exits)"
                          % os.path.join(out, "report.html"))
