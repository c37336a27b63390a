"""vramtrace's Python API: mark iterations and phases, read this process's device memory while it
runs, write a report now, and show a report in a notebook.

    import vramtrace
    for i, batch in enumerate(loader):
        vramtrace.step(i)                      # iteration i starts (growth per iteration)
        with vramtrace.region("forward"):      # a phase of the report, like an NVTX range
            loss = model(batch)
    print(vramtrace.live())                    # bytes live, in use and peaks, per device

Everything here talks to the libvramtrace.so already loaded in the process (`vramtrace run --
python train.py`, or LD_PRELOAD); without it every call does nothing (and the readers return
None), after one warning on stderr.
"""
import ctypes
import html as _html
import os
import re
import shutil
import subprocess
import tempfile
import time

from . import _native

__all__ = ["step", "region", "enabled", "live", "mark", "sites", "cupti_path", "report",
           "notebook_html", "show", "parse_size", "format_bytes", "command_path"]

_step = [0]


def enabled():
    """True when libvramtrace.so is loaded in this process."""
    return _native.library() is not None


def step(i=None):
    """Iteration `i` starts (default: the one after the previous call's). The report gives
    growth per iteration from these marks."""
    if i is None:
        i = _step[0]
    _step[0] = int(i) + 1
    lib = _native.library()
    if lib is None:
        _native.warn_once("vramtrace.step")
        return
    lib.vramtrace_v1_step(int(i))


class region:
    """A named phase of the calling thread: `with vramtrace.region("eval"): ...`, or as a
    decorator. Recorded like an NVTX range (the report's phases: the phase of each allocation
    and of the peak)."""

    def __init__(self, name):
        self.name = str(name)
        self._pushed = False

    def __enter__(self):
        lib = _native.library()
        if lib is None:
            _native.warn_once("vramtrace.region")
        else:
            lib.vramtrace_v1_range_push(self.name.encode("utf-8", "replace"))
            self._pushed = True
        return self

    def __exit__(self, *exc):
        if self._pushed:
            self._pushed = False
            _native.library().vramtrace_v1_range_pop()
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with region(self.name):
                return fn(*args, **kwargs)

        return wrapper


_FIELDS = ("live_bytes", "peak_bytes", "in_use_bytes", "in_use_peak_since_mark",
           "live_peak_since_mark", "untracked_allocations")


def live(device=None):
    """This process's device memory now, from the library's own counters (driver allocations
    and VMM physical memory; what pools declared with vramtrace.h only cache is live but not in
    use). A dict per device: live_bytes, peak_bytes (the most live so far), in_use_bytes,
    cached_bytes, in_use_peak_since_mark and live_peak_since_mark (see mark()),
    untracked_allocations. With `device`, that device's dict; otherwise a list of them. None
    without the library."""
    lib = _native.library()
    if lib is None:
        _native.warn_once("vramtrace.live")
        return None
    devices = [device] if device is not None else range(lib.vramtrace_v1_live_devices())
    out = []
    for d in devices:
        buf = (ctypes.c_longlong * len(_FIELDS))()
        n = lib.vramtrace_v1_live_figures(int(d), buf, len(_FIELDS))
        figures = {"device": int(d)}
        figures.update({name: (int(buf[i]) if i < n else 0) for i, name in enumerate(_FIELDS)})
        figures["cached_bytes"] = figures["live_bytes"] - figures["in_use_bytes"]
        out.append(figures)
    return out[0] if device is not None else out


def mark():
    """Starts a measurement: the peaks "since the mark" restart from what is live now. Returns a
    number for sites(what="new", since=...): allocations made after this mark. None without the
    library."""
    lib = _native.library()
    if lib is None:
        _native.warn_once("vramtrace.mark")
        return None
    return int(lib.vramtrace_v1_live_mark())


def sites(device=0, what="peak", since=0, top=10):
    """The allocation sites holding the most device memory, as (bytes, count, site) tuples, most
    bytes first. what="peak": bytes in use at the in-use peak since the last mark() (count is 0,
    not kept); what="new": allocations made since `since` (a mark() result) and still in use
    now. A site is the innermost Python frame of the allocating thread, else the first native
    frame outside CUDA and vramtrace; "(no stack recorded)" for allocations without a stack
    (stream-ordered ones below VRAMTRACE_ASYNC_STACK_MIN_BYTES)."""
    lib = _native.library()
    if lib is None:
        _native.warn_once("vramtrace.sites")
        return []
    kinds = {"peak": 0, "new": 1}
    if what not in kinds:
        raise ValueError("what must be 'peak' or 'new'")
    buf = ctypes.create_string_buffer(64 * 1024)
    n = lib.vramtrace_v1_live_sites(int(device), kinds[what], int(since or 0), int(top), buf,
                                    len(buf))
    out = []
    for line in buf.raw[:n].decode("utf-8", "replace").splitlines():
        size, count, site = line.split("\t", 2)
        out.append((int(size), int(count), site))
    return out


def cupti_path():
    """The file CUPTI was loaded from in this process, or None (no library, or CUDA not started)."""
    lib = _native.library()
    if lib is None or not hasattr(lib, "vramtrace_v1_cupti_path"):
        return None
    p = lib.vramtrace_v1_cupti_path()
    return os.path.normpath(p.decode("utf-8", "surrogateescape")) if p else None


def command_path():
    """The vramtrace command that goes with the loaded library (the same folder, or ../bin in a
    build tree), else the one on PATH, else None."""
    lib_path = _native.library_path()
    candidates = []
    if lib_path:
        d = os.path.dirname(lib_path)
        candidates += [os.path.join(d, "vramtrace"), os.path.join(d, "..", "bin", "vramtrace")]
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "vramtrace")
    candidates.append(here)
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.normpath(c)
    return shutil.which("vramtrace")


def _own_trace_file():
    """The trace file this process writes (preload mode), found among its open files."""
    fd_dir = "/proc/self/fd"
    try:
        for fd in os.listdir(fd_dir):
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.endswith(".vtrace") and os.path.isfile(target):
                return target
    except OSError:
        pass
    return None


def report(out_dir, force=False):
    """Writes report.html and report.json of this process so far into `out_dir` and returns the
    path of report.html, or None (after one line on stderr saying why) when it cannot.

    Possible when the process writes its own trace file (LD_PRELOAD, preload mode): the trace
    written so far (the library flushes every VRAMTRACE_FLUSH_MS, 100 ms by default; this waits
    two periods) is copied and handed to `vramtrace report`. The report then says the trace is
    not complete: the process had not exited. A report already in `out_dir` is replaced only
    with force=True (other files there are never touched). Under `vramtrace run` the trace goes
    to the launcher, which writes the reports when the command ends; there this warns and
    returns None.
    """
    import sys

    if _native.library() is None:
        _native.warn_once("vramtrace.report")
        return None
    if os.environ.get("VRAMTRACE_SOCKET"):
        sys.stderr.write("vramtrace.report: under `vramtrace run` the launcher writes the reports "
                         "when the command ends; nothing written now\n")
        return None
    trace = _own_trace_file()
    exe = command_path()
    if not trace or not exe:
        sys.stderr.write("vramtrace.report: %s\n" % (
            "no trace file open in this process" if not trace else "no vramtrace command found"))
        return None
    earlier = [n for n in ("report.json", "report.html")
               if os.path.lexists(os.path.join(out_dir, n))]
    if earlier and not force:
        sys.stderr.write("vramtrace.report: %s holds an earlier report (%s): pass force=True to "
                         "replace it, or another folder; nothing written\n"
                         % (out_dir, ", ".join(earlier)))
        return None
    try:
        flush_ms = max(1, min(60000, int(os.environ.get("VRAMTRACE_FLUSH_MS", "100"))))
    except ValueError:
        flush_ms = 100
    time.sleep(2 * flush_ms / 1000.0 + 0.05)
    try:
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
    except OSError as ex:
        sys.stderr.write("vramtrace.report: cannot create %s: %s; nothing written\n"
                         % (out_dir, ex.strerror or ex))
        return None
    with tempfile.TemporaryDirectory(prefix="vramtrace-report-") as tmp:
        copy = os.path.join(tmp, os.path.basename(trace))
        shutil.copyfile(trace, copy)
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)  # the reader is not a CUDA program
        # Its summary stays out of the program's output; a failure says why.
        p = subprocess.run([exe, "report", copy, "-o", out_dir, "--no-progress"] +
                           (["--force"] if force else []), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            lines = p.stderr.strip().splitlines()
            sys.stderr.write("vramtrace.report: vramtrace report failed (exit %d): %s\n"
                             % (p.returncode, lines[-1] if lines else "no message"))
            return None
    return os.path.join(out_dir, "report.html")


def notebook_html(report_html, height=720):
    """The report as one <iframe> whose srcdoc is the whole offline report.html (scripts run in a
    sandbox without the notebook's origin). `report_html`: a path to report.html, a run folder
    holding one, or the HTML text itself."""
    text = str(report_html)
    if "<" not in text:
        path = os.path.join(text, "report.html") if os.path.isdir(text) else text
        with open(path, encoding="utf-8") as f:
            text = f.read()
    return ('<iframe srcdoc="%s" style="width:100%%;height:%dpx;border:0" '
            'sandbox="allow-scripts"></iframe>' % (_html.escape(text, quote=True), int(height)))


def show(report_html, height=720):
    """Shows a report inline in Jupyter (IPython.display.HTML of notebook_html()); returns the
    HTML string where IPython is not installed."""
    snippet = notebook_html(report_html, height)
    try:
        from IPython.display import HTML
    except ImportError:
        return snippet
    return HTML(snippet)


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text):
    """Bytes of "2 GiB", "16MiB", "500 MB", "4096" (KB/MB/GB are powers of 1000, KiB/MiB/GiB of
    1024). A size is 0 or more, written in decimal digits: "-5 MiB", "1e3" and "0x10" are not
    sizes (ValueError)."""
    example = "(e.g. '2 GiB', '16 MiB', '500 MB')"
    if isinstance(text, bool):
        raise ValueError("not a size: %r %s" % (text, example))
    if isinstance(text, int):
        if text < 0:
            raise ValueError("not a size: %r, below 0 %s" % (text, example))
        return text
    if isinstance(text, float):
        if not (text >= 0) or text == float("inf"):
            raise ValueError("not a size: %r %s" % (text, example))
        return int(text)
    s = str(text).strip().lower().replace(" ", "")
    m = re.fullmatch(r"(\d+\.?\d*|\.\d+)([a-z]*)", s)
    if not m or m.group(2) not in _UNITS:
        raise ValueError("not a size: %r %s" % (text, example))
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def format_bytes(n):
    n = int(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return "%s%.2f %s" % (sign, n / size, unit)
    return "%s%d B" % (sign, n)
