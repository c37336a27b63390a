#!/usr/bin/env python3
"""Bounded memory at a high event rate, and drops counted exactly.
The churn program does cudaMalloc/cudaFree pairs as fast as it can (on the stand-in about
2.5 million pairs, 5 million events, a second) with VRAMTRACE_BUFFER_KB=64, and the trace goes
to a FIFO whose reader stalls until the program has done all its pairs (a stuck disk or
collector: the writer thread blocks in write() while the program goes on), then drains it. The
stall is tied to the program's own progress, not to a rate, so drops happen on a fast machine and
a slow one alike (a rate-limited reader kept up with zstd frames on some machines). Asserted:
  - the program exits 0 with its own output, the trace ends cleanly (run.complete true);
  - drops are counted exactly: allocs + frees + dropped = 2 x pairs; dropped > 0 here, and the
    summary of `vramtrace report` says "WARNING: <dropped> events were dropped";
  - the program's peak resident set (VmHWM) after 2,000,000 pairs is within 3 MiB of that
    after 200,000 pairs: the library's memory does not grow with the number of events;
  - control: the same 200,000 pairs to a plain file with the default buffers drop nothing and
    are all in the report;
  - under `vramtrace run` (socket, 64 KiB buffers) the same identity holds and VmHWM is bounded."""
import os
import re
import shutil
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
import vtrel  # noqa: E402
from vtrel import check

SMALL, LARGE = 200_000, 2_000_000
HWM_SLACK_KB = 3 * 1024


def stalled_reader(fifo, dest, progress, pairs):
    """Opens the FIFO (the library's open() waits for a reader), reads nothing until the program
    has stored `pairs` in its progress file, then drains everything to dest."""
    with open(fifo, "rb", buffering=0) as src, open(dest, "wb") as out:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with open(progress, "rb") as f:
                    done = int.from_bytes(f.read(8).ljust(8, b"\0"), "little")
            except OSError:
                done = 0
            if done >= pairs:
                break
            time.sleep(0.01)
        while True:
            chunk = src.read(65536)
            if not chunk:
                return
            out.write(chunk)


def hwm_kb(stdout):
    m = re.search(rb"VmHWM (\d+) kB", stdout)
    return int(m.group(1)) if m else -1


def identity(tag, fig, pairs):
    total = fig["allocs"] + fig["frees"] + fig["dropped"]
    check(total == 2 * pairs, "%s: allocs %d + frees %d + dropped %d = %d, not %d"
          % (tag, fig["allocs"], fig["frees"], fig["dropped"], total, 2 * pairs))


def fifo_run(d, pairs):
    fifo, trace = os.path.join(d, "fifo-%d" % pairs), os.path.join(d, "t-%d.vtrace" % pairs)
    os.mkfifo(fifo, 0o600)
    progress = os.path.join(d, "p-%d" % pairs)
    reader = threading.Thread(target=stalled_reader, args=(fifo, trace, progress, pairs))
    reader.start()
    t0 = time.monotonic()
    p = subprocess.run([vtrel.CHURN, str(pairs), progress],
                       env=vtrel.preload_env(VRAMTRACE_OUTPUT=fifo, VRAMTRACE_BUFFER_KB=64),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    took = time.monotonic() - t0
    reader.join(timeout=120)
    tag = "fifo %d pairs" % pairs
    check(p.returncode == 0 and b"churn done %d pairs" % pairs in p.stdout and p.stderr == b"",
          "%s: exit %d, %r %r" % (tag, p.returncode, p.stdout, p.stderr))
    rc, text = vtrel.report_traces([trace], os.path.join(d, "rep-%d" % pairs))
    check(rc == 0, "%s: vramtrace report exit %d: %s" % (tag, rc, text))
    r = vtrel.load(os.path.join(d, "rep-%d" % pairs, "report.json"))
    fig = vtrel.figures(r)
    check(r["run"]["complete"] is True, "%s: run.complete false: %s" % (tag, r["run"]["problems"]))
    identity(tag, fig, pairs)
    check(fig["dropped"] > 0, tag + ": nothing dropped although the reader stalled for the whole run")
    check(("WARNING: %d events were dropped" % fig["dropped"]) in text,
          "%s: the summary does not say %d events were dropped: %s" % (tag, fig["dropped"], text))
    kb = hwm_kb(p.stdout)
    print("%s: %.2f s, trace %d bytes, VmHWM %d kB, %s"
          % (tag, took, os.path.getsize(trace), kb, fig))
    return kb


def main():
    d = vtrel.temp_dir("vt-bounded-")
    small, large = fifo_run(d, SMALL), fifo_run(d, LARGE)
    check(small > 0 and large > 0 and large - small < HWM_SLACK_KB,
          "VmHWM %d kB after %d pairs, %d kB after %d" % (small, SMALL, large, LARGE))

    # Control: a plain file, default buffers: nothing dropped, every event reported.
    trace = os.path.join(d, "plain.vtrace")
    p = subprocess.run([vtrel.CHURN, str(SMALL), os.path.join(d, "p")],
                       env=vtrel.preload_env(VRAMTRACE_OUTPUT=trace), stdout=subprocess.PIPE)
    check(p.returncode == 0, "plain file: exit %d" % p.returncode)
    rc, text = vtrel.report_traces([trace], os.path.join(d, "plain"))
    fig = vtrel.figures(vtrel.load(os.path.join(d, "plain", "report.json")))
    check(fig["allocs"] == SMALL and fig["frees"] == SMALL and fig["dropped"] == 0,
          "plain file: %s" % fig)
    check("dropped" not in text, "plain file: the summary speaks of drops: " + text)
    print("plain file %d pairs: %s" % (SMALL, fig))

    # The launcher (socket), tiny buffers: exact accounting and bounded memory there too.
    hwm = {}
    for pairs in (SMALL, LARGE):
        out = os.path.join(d, "run-%d" % pairs)
        r = subprocess.run([vtrel.VRAMTRACE, "run", "-o", out, "--", vtrel.CHURN, str(pairs),
                            os.path.join(d, "p")], env=vtrel.env(VRAMTRACE_BUFFER_KB=64),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        tag = "run %d pairs" % pairs
        check(r.returncode == 0, "%s: exit %d" % (tag, r.returncode))
        rep = vtrel.load(os.path.join(out, "report.json"))
        fig = vtrel.figures(rep)
        check(rep["run"]["complete"] is True, tag + ": run.complete false")
        identity(tag, fig, pairs)
        check((fig["dropped"] > 0) == (b"events were dropped" in r.stderr),
              "%s: %d dropped, summary: %r" % (tag, fig["dropped"], r.stderr))
        hwm[pairs] = hwm_kb(r.stdout)
        print("%s: VmHWM %d kB, %s" % (tag, hwm[pairs], fig))
    check(hwm[LARGE] - hwm[SMALL] < HWM_SLACK_KB, "run: VmHWM %s" % hwm)
    if not vtrel.failures:
        shutil.rmtree(d)
    vtrel.finish("bounded test")


main()
