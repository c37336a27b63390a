#!/usr/bin/env python3
"""A target that crashes: churn does 20000 cudaMalloc/cudaFree pairs, waits 300 ms (three flush
periods) and then dies of SIGSEGV, or of an uncaught C++ exception (std::terminate: SIGABRT).
Under `vramtrace run` and in plain LD_PRELOAD file mode, each must give:
  - the target's own death: vramtrace dies of the same signal; the target's stdout and stderr
    are what they are without vramtrace (the terminate message; vramtrace's own lines aside);
  - a report marked incomplete (run.complete false, run.signal = the signal), holding exactly
    20000 allocations and 20000 frees, 0 bytes live at the end, peak 4096 bytes, none dropped.
A clean exit of the same program is the control: complete true, the same exact figures."""
import os
import re
import shutil
import signal
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
import vtrel  # noqa: E402
from vtrel import check

PAIRS = 20000


def without_vramtrace(end, d):
    r = subprocess.run([vtrel.CHURN, str(PAIRS), os.path.join(d, "p0"), "4096", end],
                       env=vtrel.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return r.returncode, r.stdout, r.stderr


def same(out):
    """Output without the resident-set figure, which the library's buffers change."""
    return re.sub(rb", VmHWM \d+ kB", b"", out)


def exact(tag, r, sig):
    fig = vtrel.figures(r)
    check(fig["allocs"] == PAIRS and fig["frees"] == PAIRS,
          "%s: %d allocs, %d frees, not %d each" % (tag, fig["allocs"], fig["frees"], PAIRS))
    check(fig["live"] == 0 and fig["peak"] == 4096 and fig["dropped"] == 0,
          "%s: live %d, peak %d, dropped %d" % (tag, fig["live"], fig["peak"], fig["dropped"]))
    check(r["run"]["complete"] is (sig == 0), "%s: run.complete is %s" % (tag, r["run"]["complete"]))
    return fig


def main():
    for end, sig in (("segv", signal.SIGSEGV), ("throw", signal.SIGABRT), ("exit", 0)):
        d = vtrel.temp_dir("vt-crash-%s-" % end)
        rc0, out0, err0 = without_vramtrace(end, d)
        check(rc0 == -sig, "%s without vramtrace: exit %d" % (end, rc0))

        # Under the launcher.
        out = os.path.join(d, "run")
        r = subprocess.run([vtrel.VRAMTRACE, "run", "-o", out, "--", vtrel.CHURN, str(PAIRS),
                            os.path.join(d, "p1"), "4096", end],
                           env=vtrel.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tag = "run, " + end
        check(r.returncode == -sig, "%s: vramtrace exit %d, the target's %d" % (tag, r.returncode, rc0))
        check(same(r.stdout) == same(out0), "%s: stdout %r, without vramtrace %r" % (tag, r.stdout, out0))
        own = b"".join(l for l in r.stderr.splitlines(True) if not l.startswith(b"vramtrace"))
        check(own == err0, "%s: stderr %r, without vramtrace %r" % (tag, own, err0))
        rep = vtrel.load(os.path.join(out, "report.json"))
        if sig:
            check(rep["run"].get("signal") == sig, "%s: run.signal %s" % (tag, rep["run"].get("signal")))
        else:
            check(rep["run"].get("exit_code") == 0, tag + ": run.exit_code")
        print("%s: %s" % (tag, exact(tag, rep, sig)))

        # Plain LD_PRELOAD, then vramtrace report.
        trace = os.path.join(d, "t.vtrace")
        p = subprocess.run([vtrel.CHURN, str(PAIRS), os.path.join(d, "p2"), "4096", end], cwd=d,
                           env=vtrel.preload_env(VRAMTRACE_OUTPUT=trace),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tag = "preload, " + end
        check(p.returncode == -sig, "%s: exit %d" % (tag, p.returncode))
        check(same(p.stdout) == same(out0) and p.stderr == err0, "%s: output %r %r" % (tag, p.stdout, p.stderr))
        rc, text = vtrel.report_traces([trace], os.path.join(d, "rep"))
        if check(rc == 0, "%s: vramtrace report exit %d: %s" % (tag, rc, text)):
            print("%s: %s" % (tag, exact(tag, vtrel.load(os.path.join(d, "rep", "report.json")), sig)))
        if not vtrel.failures:
            shutil.rmtree(d)
    vtrel.finish("crash test")


main()
