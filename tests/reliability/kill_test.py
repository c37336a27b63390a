#!/usr/bin/env python3
"""SIGKILL at random points: the churn program (cudaMalloc/cudaFree pairs, forever) is killed
after a seeded random delay, VT_KILL_RUNS times (default 200, delays of 2 to 120 ms) under
`vramtrace run` and VT_KILL_FILE_RUNS times (default 50, delays of 5 to 500 ms) in plain
LD_PRELOAD file mode. Every run must give:
  - vramtrace (socket mode) dying of the target's signal, SIGKILL; report.json that parses,
    schema vramtrace.report/1, run.signal 9 and run.complete false;
  - in file mode, a trace that `vramtrace report` turns into a report (complete false), or, only
    when the kill came before the 16-byte header was written, exit 2 saying it is no trace;
  - a report consistent with what the program did: allocs <= pairs completed + 1, the frees
    one behind the allocs at most, final live bytes = (allocs - frees) * 4096, nothing dropped;
  - socket mode: zero events lost: every pair the program completed (its shared progress file
    says exactly how many) is in the report, whatever the moment of the kill: the collector
    reads what the process recorded but had not sent from the buffers it shares with it;
  - file mode: every pair completed 200 ms (four flush periods) before the kill is in the report
    (the stated bound: SIGKILL loses at most the last flush period), when the program ran in
    those 200 ms (completed a pair more) and so did its writer thread (the trace file grew twice
    after the snapshot, a flush period apart: a whole flush began after it): on a machine so
    loaded that they did not, the run is counted, not judged;
  - also when the command is killed before any process used CUDA (no trace at all);
  - socket mode, every tenth run: the report holds every event that reached the collector: its
    figures equal those of `vramtrace report` on the raw trace the collector wrote.
The assertions do not depend on the machine's speed: a slower machine only completes fewer pairs
before each kill.
Usage: kill_test.py BUILD_DIR   (VT_KILL_SEED, VT_KILL_RUNS, VT_KILL_FILE_RUNS)"""
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
import vtrel  # noqa: E402
from vtrel import check

SEED = int(os.environ.get("VT_KILL_SEED", "20261202"))
SOCKET_RUNS = int(os.environ.get("VT_KILL_RUNS", "200"))
FILE_RUNS = int(os.environ.get("VT_KILL_FILE_RUNS", "50"))
SNAPSHOT_BEFORE_S = 0.2  # pairs done this long before the kill must have been flushed
FLUSH_MS = 50


def child_of(pid, timeout=5.0):
    """The pid of the launcher's child (the churn program itself: vramtrace execs it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except FileNotFoundError:
            return None
        time.sleep(0.001)
    return None


def consistent(tag, fig, done, before, writer_ran=True):
    a, f = fig["allocs"], fig["frees"]
    check(a <= done + 1, "%s: %d allocs but the program completed only %d pairs" % (tag, a, done))
    check(f <= a and a - f <= 1, "%s: %d allocs, %d frees" % (tag, a, f))
    check(fig["live"] == (a - f) * vtrel.PAIR_BYTES,
          "%s: final live %d bytes with %d allocs, %d frees" % (tag, fig["live"], a, f))
    check(fig["dropped"] == 0, "%s: %d events dropped" % (tag, fig["dropped"]))
    # The flush bound is a matter of time: it holds only if the process ran in the window. On a
    # machine so loaded that the program did not complete one more pair in it, the writer
    # thread may not have run either; such a run is counted, not judged.
    if done > before and writer_ran:
        check(a >= before, "%s: %d allocs, but %d pairs were done %.0f ms before the kill"
              % (tag, a, before, SNAPSHOT_BEFORE_S * 1000))
    elif before:
        starved.append(tag)


starved = []  # runs whose program or writer thread did not run in the last SNAPSHOT_BEFORE_S


def none_lost(tag, fig, done):
    """Every pair completed before the kill is in the report: its alloc and its free."""
    check(fig["allocs"] >= done and fig["frees"] >= done,
          "%s: %d pairs completed, but the report has %d allocs and %d frees: events lost"
          % (tag, done, fig["allocs"], fig["frees"]))


def sleep_and_snapshot(delay, progress_file, trace=None):
    """Sleeps `delay` seconds; returns the pairs done SNAPSHOT_BEFORE_S before its end and,
    with `trace`, whether the writer flushed wholly after that snapshot (the file grew at two
    moments at least a flush period apart after it)."""
    before = 0
    if delay <= SNAPSHOT_BEFORE_S:
        time.sleep(delay)
        return before, False
    time.sleep(delay - SNAPSHOT_BEFORE_S)
    before = vtrel.progress(progress_file)
    if trace is None:
        time.sleep(SNAPSHOT_BEFORE_S)
        return before, True
    end = time.monotonic() + SNAPSHOT_BEFORE_S
    size = os.path.getsize(trace) if os.path.exists(trace) else 0
    grew = []
    while True:
        now = time.monotonic()
        if now >= end:
            break
        time.sleep(min(0.005, end - now))
        s = os.path.getsize(trace) if os.path.exists(trace) else 0
        if s != size:
            size = s
            grew.append(time.monotonic())
    return before, bool(grew) and grew[-1] - grew[0] >= FLUSH_MS / 1000


def socket_run(i, delay, log):
    d = vtrel.temp_dir("vt-kill-s%02d-" % i)
    socket_checks(i, delay, log, d)
    return d


def socket_checks(i, delay, log, d):
    prog = os.path.join(d, "progress")
    out = os.path.join(d, "out")
    launcher = subprocess.Popen(
        [vtrel.VRAMTRACE, "run", "-o", out, "--", vtrel.CHURN, "0", prog],
        env=vtrel.env(VRAMTRACE_FLUSH_MS=FLUSH_MS),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    target = child_of(launcher.pid)
    before, _ = sleep_and_snapshot(delay, prog)
    if target:
        os.kill(target, signal.SIGKILL)
    _, err = launcher.communicate(timeout=60)
    done = vtrel.progress(prog)
    tag = "socket run %d (%.0f ms)" % (i, delay * 1000)
    entry = {"mode": "socket", "run": i, "delay_ms": round(delay * 1000), "pairs_done": done,
             "pairs_before": before, "launcher_rc": launcher.returncode}
    log.append(entry)
    check(target is not None, tag + ": no child found")
    check(launcher.returncode == -signal.SIGKILL,
          "%s: vramtrace exited %d, not by SIGKILL" % (tag, launcher.returncode))
    path = os.path.join(out, "report.json")
    if not check(os.path.exists(path), "%s: no report.json; vramtrace said: %s"
                 % (tag, err.decode(errors="replace"))):
        return
    try:
        r = vtrel.load(path)
    except ValueError as e:
        check(False, "%s: report.json does not parse: %s" % (tag, e))
        return
    check(r["schema"] == "vramtrace.report/1", tag + ": schema")
    check(r["run"]["complete"] is False, tag + ": run.complete is not false")
    check(r["run"].get("signal") == 9, tag + ": run.signal is not 9")
    fig = vtrel.figures(r)
    entry.update(fig)
    traces = sorted(glob.glob(os.path.join(out, "vramtrace.*.vtrace")))
    entry["traces"] = len(traces)
    check(len(traces) <= 1, tag + ": %d traces" % len(traces))
    consistent(tag, fig, done, before)
    none_lost(tag, fig, done)
    if traces and i % 10 == 0:  # a report costs a quarter of a second: every tenth run
        rc, text = vtrel.report_traces(traces, os.path.join(d, "again"))
        if rc == 2 and text.endswith("nothing could be read from the input: no report written\n"):
            # Cut inside its first frame: nothing to read, as run's own report found.
            check(fig["allocs"] == 0 and fig["events"] == 0,
                  "%s: report of the trace found nothing, the run's report %s" % (tag, fig))
            return
        check(rc == 0, "%s: vramtrace report of the collector's trace: exit %d: %s"
              % (tag, rc, text))
        if rc == 0:
            again = vtrel.figures(vtrel.load(os.path.join(d, "again", "report.json")))
            check(again == fig, "%s: report %s but its trace holds %s" % (tag, fig, again))
    elif not traces:
        check(fig["allocs"] == 0 and before == 0, tag + ": pairs done but no trace")


def file_run(i, delay, log):
    d = vtrel.temp_dir("vt-kill-f%02d-" % i)
    file_checks(i, delay, log, d)
    return d


def file_checks(i, delay, log, d):
    prog = os.path.join(d, "progress")
    trace = os.path.join(d, "t.vtrace")
    target = subprocess.Popen([vtrel.CHURN, "0", prog], cwd=d,
                              env=vtrel.preload_env(VRAMTRACE_OUTPUT=trace,
                                                    VRAMTRACE_FLUSH_MS=FLUSH_MS),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before, writer_ran = sleep_and_snapshot(delay, prog, trace)
    target.kill()
    target.wait(timeout=60)
    done = vtrel.progress(prog)
    tag = "file run %d (%.0f ms)" % (i, delay * 1000)
    entry = {"mode": "file", "run": i, "delay_ms": round(delay * 1000), "pairs_done": done,
             "pairs_before": before, "target_rc": target.returncode}
    log.append(entry)
    check(target.returncode == -signal.SIGKILL, tag + ": exit %d" % target.returncode)
    if not os.path.exists(trace):
        entry["trace_bytes"] = None
        check(done == 0 and before == 0, tag + ": pairs done but no trace file")
        return
    size = os.path.getsize(trace)
    entry["trace_bytes"] = size
    rc, text = vtrel.report_traces([trace], os.path.join(d, "out"))
    entry["report_rc"] = rc
    if size < 16:
        check(rc == 2 and ("not a vramtrace trace" in text or "too short" in text),
              "%s: %d-byte trace: exit %d: %s" % (tag, size, rc, text))
        check(done == 0 and before == 0, tag + ": pairs done but an empty trace")
        return
    if rc == 2 and size == 16 and "no process record (empty stream)" in text:
        # Killed before its first write: a header and nothing else, nothing to report (exit 2),
        # as when the first frame is cut.
        check(text.endswith("vramtrace report: nothing could be read from the input: no report "
                            "written\n"), "%s: only a header: %s" % (tag, text))
        check(not os.path.exists(os.path.join(d, "out", "report.json")),
              tag + ": only a header: a report was written")
        return
    if rc == 2 and "trace ends inside a frame at byte 16 " in text:
        # Killed while writing its first frame: nothing of the trace can be read, and report
        # says so (exit 2) rather than "no CUDA device memory was used".
        check(text.endswith("vramtrace report: nothing could be read from the input: no report "
                            "written\n"), "%s: first frame cut: %s" % (tag, text))
        check(not os.path.exists(os.path.join(d, "out", "report.json")),
              tag + ": first frame cut: a report was written")
        return
    if not check(rc == 0, "%s: vramtrace report exit %d: %s" % (tag, rc, text)):
        return
    r = vtrel.load(os.path.join(d, "out", "report.json"))
    check(r["run"]["complete"] is False, tag + ": run.complete is not false")
    fig = vtrel.figures(r)
    entry.update(fig)
    consistent(tag, fig, done, before, writer_ran)


def killed_before_cuda():
    """The command killed before any process used CUDA: still a report, and not complete."""
    d = vtrel.temp_dir("vt-kill-early-")
    r = subprocess.run([vtrel.VRAMTRACE, "run", "-o", d, "--", "sh", "-c", "kill -9 $$"],
                       env=vtrel.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    check(r.returncode == -signal.SIGKILL, "early kill: vramtrace exit %d" % r.returncode)
    rep = vtrel.load(os.path.join(d, "report.json"))
    check(rep["run"]["complete"] is False and rep["run"]["signal"] == 9 and not rep["devices"],
          "early kill: run %s" % rep["run"])
    shutil.rmtree(d)


def main():
    killed_before_cuda()
    rng = random.Random(SEED)
    log = []
    for run, runs, longest in ((socket_run, SOCKET_RUNS, 0.12), (file_run, FILE_RUNS, 0.5)):
        for i in range(runs):
            failed = len(vtrel.failures)
            d = run(i, rng.uniform(0.002 if run is socket_run else 0.005, longest), log)
            if len(vtrel.failures) == failed:
                shutil.rmtree(d)  # traces of a passing run are not kept (tens of MB each)
            else:
                print("kept " + d)
    out = os.path.join(vtrel.BUILD, "tests", "reliability")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "kill-runs.json"), "w") as f:
        json.dump({"seed": SEED, "runs": log}, f, indent=1)
    for mode in ("socket", "file"):
        runs = [e for e in log if e["mode"] == mode]
        if not runs:
            continue
        with_events = [e for e in runs if e.get("allocs")]
        lost = sum(1 for e in runs if "allocs" in e and e["allocs"] < e["pairs_done"])
        print("%s mode: %d kills, %d with allocations in the report, allocs %s..%s, "
              "pairs done %s..%s, %d runs with pairs missing" % (
                  mode, len(runs), len(with_events),
                  min((e["allocs"] for e in with_events), default=0),
                  max((e["allocs"] for e in with_events), default=0),
                  min(e["pairs_done"] for e in runs), max(e["pairs_done"] for e in runs),
                  lost))
    if starved:
        print("%d run(s) where the program or its writer did not run in the last %.0f ms (a loaded machine): "
              "the flush bound not judged: %s" % (len(starved), SNAPSHOT_BEFORE_S * 1000,
                                                  ", ".join(starved)))
    vtrel.finish("kill test (seed %d, %d runs under the launcher, %d in file mode)"
                 % (SEED, SOCKET_RUNS, FILE_RUNS))


main()
