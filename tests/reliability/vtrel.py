"""Shared by the reliability tests (tests/reliability/*_test.py): paths of the build, the
environment that runs a stand-in CUDA program under vramtrace, reading the progress file of
the churn program, and the figures of a report.json that the tests compare."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build"
VRAMTRACE = os.path.join(BUILD, "bin", "vramtrace")
LIB = os.path.join(BUILD, "lib", "libvramtrace.so")
CHURN = os.path.join(BUILD, "tests", "programs", "churn")
# A sanitizer build's runtime, to come first in LD_PRELOAD (cmake/Sanitize.cmake).
SAN_RT = os.environ.get("VT_SANITIZER_RUNTIME", "")
PAIR_BYTES = 4096

failures = []


def check(cond, what):
    """Records a failed assertion (the test goes on, so that one run shows every failure)."""
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def finish(name):
    if failures:
        print("%s: %d failure(s); kept for a look: %s" % (name, len(failures), " ".join(_temps)))
        sys.exit(1)
    if os.environ.get("VT_KEEP_TEMP") != "1":
        for d in _temps:
            shutil.rmtree(d, ignore_errors=True)
    print("%s: all checks passed" % name)


def env(**extra):
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = os.path.join(BUILD, "standin")
    for k in ("VRAMTRACE_OUTPUT", "VRAMTRACE_SOCKET", "LD_PRELOAD", "CUDA_INJECTION64_PATH"):
        e.pop(k, None)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def preload_env(**extra):
    """Plain LD_PRELOAD file mode."""
    if not SAN_RT:
        return env(LD_PRELOAD=LIB, **extra)
    # A sanitizer build: its runtime first; the target's own leaks and SIGSEGV are its own.
    return env(LD_PRELOAD=SAN_RT + ":" + LIB, ASAN_OPTIONS="detect_leaks=0:handle_segv=0",
               TSAN_OPTIONS="handle_segv=0", **extra)


_temps = []  # removed by finish() when every check passed


def temp_dir(prefix):
    d = tempfile.mkdtemp(prefix=prefix)
    _temps.append(d)
    return d


def progress(path):
    """Pairs the churn program had completed (0 when it never got to create the file)."""
    try:
        with open(path, "rb") as f:
            data = f.read(8)
    except FileNotFoundError:
        return 0
    return struct.unpack("<Q", data)[0] if len(data) == 8 else 0


def load(path):
    with open(path) as f:
        return json.load(f)


def figures(report):
    """(allocs, frees, final live bytes, peak bytes, dropped, events) of a report of churn."""
    allocs = frees = live = peak = 0
    for d in report["devices"]:
        live += d["final_live_bytes"]
        peak = max(peak, d["peak"]["bytes"])
    for p in report["processes"]:
        for d in p["devices"]:
            allocs += d["apis"].get("cuMemAlloc", {}).get("calls", 0)
            frees += d["apis"].get("cuMemFree", {}).get("calls", 0)
    return dict(allocs=allocs, frees=frees, live=live, peak=peak,
                dropped=report["run"]["dropped_events"], events=report["run"]["events"])


def report_traces(traces, out):
    """`vramtrace report` of trace files: (exit code, output)."""
    r = subprocess.run([VRAMTRACE, "report", *traces, "-o", out], env=env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout
