#!/usr/bin/env python3
"""A machine where libcupti cannot be loaded at all. The chatty program (stdout and stderr lines
before and after CUDA starts, 1 MiB through device memory, exit code 7) runs on the stand-in's
libcuda and libcudart from a directory without libcupti, and the toolkit's CUPTI (which
ld.so.cache and the library's fallback directories find) is hidden too, in two ways:
  - "shim": libno_cupti.so, preloaded after libvramtrace.so, fails every dlopen of libcupti*
    (runs everywhere);
  - "namespace": a private mount namespace (unshare -rm) where every libcupti.so* file on the
    library's search path is an empty file (runs where unshare is permitted, skipped elsewhere).
Each way, in plain LD_PRELOAD mode and under `vramtrace run`, asserts:
  - the target's stdout and exit code (7) are what they are without vramtrace;
  - its stderr is its own plus exactly one line, NOTICE below, and nothing else from the library;
  - preload mode: one trace, and `vramtrace report` of it exits 0 with a report without devices
    whose process carries the notice and is marked not profiled (profiled false,
    not_profiled_reason the notice's text, run.processes_not_profiled 1), and prints exactly the
    NOT PROFILED and WARNING lines (summary()) and the report line;
  - `vramtrace run` exits 7, prints exactly those lines after the target's output, and writes
    such a report.json, with exit_code 7 and complete;
  - the CI gate refuses it: `vramtrace check` of it as the candidate exits 3 (not profiled)
    with exactly the verdict gate_text() gives, Markdown and JUnit saying so; `run --baseline`
    of chatty exiting 0 likewise; as a baseline (check, run --baseline) it is bad input, exit 2
    with exactly the message baseline_refused() gives, before the command runs; and the ready
    CI job (scripts/ci/memory-gate.sh) does not record it as a baseline (exit 2)."""
import glob
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
import vtrel  # noqa: E402
from vtrel import check

CHATTY = os.path.join(vtrel.BUILD, "tests", "programs", "chatty")
SHIM = os.path.join(vtrel.BUILD, "tests", "programs", "libno_cupti.so")
STANDIN = os.path.join(vtrel.BUILD, "standin")
CODE = 7
# interpose/cupti_hooks.cpp, subscribe_cupti(), when open_cupti() finds nothing.
NOTICE_TEXT = ("CUPTI (libcupti.so.13) not found; this process runs without memory profiling "
               "(set VRAMTRACE_CUPTI to its path)")
NOTICE = b"vramtrace: " + NOTICE_TEXT.encode() + b"\n"
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tests/fuzz/baseline.json: a real report of the stand-in's basic program (device 0, 13 MiB).
BASELINE = os.path.join(SRC, "tests", "fuzz", "baseline.json")
EXIT_NOT_PROFILED = 3  # report/check.h kExitNotProfiled


def summary(pid):
    """report/json_report.cpp, summary_text(), for the one process that was not profiled."""
    return [b"vramtrace: NOT PROFILED: pid %d (chatty): %s\n" % (pid, NOTICE_TEXT.encode()),
            b"vramtrace: WARNING: 1 of 1 process(es) not profiled: the device memory they used "
            b"is unknown and not in this report\n"]


def gate_text(pid, exited=0):
    """report/check.cpp, check_text(), of such a candidate against BASELINE; a process that
    exited non-zero (its trace keeps the status) is also not a whole measurement."""
    incomplete = exited != 0
    return ("vramtrace check: device 0 (vramtrace stand-in (CPU)): baseline 13.00 MiB, candidate "
            "-, budget +5%% (up to 13.65 MiB): ok (not in the candidate, which has a process "
            "not profiled)\n"
            "  shrank: cuMemAlloc -13.00 MiB at the peak (3 -> 0 allocations)\n"
            "vramtrace check: candidate NOT PROFILED: pid %d (chatty): %s\n" % (pid, NOTICE_TEXT) +
            ("vramtrace check: candidate INCOMPLETE: cut short: pid %d (chatty) exited %d\n"
             % (pid, exited) if incomplete else "") +
            "vramtrace check: FAILED: 1 process(es) of the candidate not profiled: their device "
            "memory is unknown\n" +
            ("vramtrace check: FAILED: incomplete measurement: the candidate's peaks are not a "
             "whole measurement of the baseline's command\n" if incomplete else ""))


def baseline_refused(cmd, path, pid):
    """collector/analysis/compare.cpp, require_profiled_baseline(), through `vramtrace CMD`."""
    return ("vramtrace %s: baseline %s: 1 process(es) not profiled, so its peaks are unknown "
            "(pid %d (chatty): %s); record the baseline again where vramtrace can profile every "
            "process\n" % (cmd, path, pid, NOTICE_TEXT))


def base_env(libdir, preload=None):
    """The stand-in's libcuda and libcudart only; nothing that points at a CUPTI."""
    e = vtrel.env()
    e["LD_LIBRARY_PATH"] = libdir
    for k in ("VRAMTRACE_CUPTI", "CUDA_HOME", "VRAMTRACE_DISABLE", "VRAMTRACE_STACKS"):
        e.pop(k, None)
    if preload is not None:
        e["LD_PRELOAD"] = preload
        if vtrel.SAN_RT:
            e["ASAN_OPTIONS"] = "detect_leaks=0:handle_segv=0"
            e["TSAN_OPTIONS"] = "handle_segv=0"
    return e


def cupti_files():
    """Every libcupti.so* the library could reach: the directories of open_cupti()
    (interpose/cupti_hooks.cpp), ld.so.cache, and the loader's default directories."""
    dirs = [os.environ.get("VT_CUDA_LIBDIR", ""), "/usr/local/cuda/lib64",
            "/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
            "/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu"]
    try:
        cache = subprocess.run(["ldconfig", "-p"], stdout=subprocess.PIPE, text=True).stdout
    except OSError:
        cache = ""
    for line in cache.splitlines():
        if "libcupti" in line and "=>" in line:
            dirs.append(os.path.dirname(line.split("=>")[1].strip()))
    files = set()
    for d in dirs:
        if d:
            for f in glob.glob(os.path.join(d, "libcupti.so*")):
                if os.path.isfile(f):
                    files.add(os.path.realpath(f))
    return sorted(files)


def namespace_prefix(work):
    """The command prefix that runs a command with every CUPTI file replaced by an empty one,
    or None where mount namespaces are not permitted."""
    empty = os.path.join(work, "empty")
    open(empty, "w").close()
    script = ('e=$1; shift; while [ "$1" != -- ]; do mount --bind "$e" "$1" || exit 97; shift; '
              'done; shift; exec "$@"')
    prefix = ["unshare", "-rm", "--", "sh", "-c", script, "sh", empty] + cupti_files() + ["--"]
    try:
        probe = subprocess.run(prefix + ["true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        print("namespace: skipped (%s)" % e)
        return None
    if probe.returncode != 0:
        print("namespace: skipped, unshare -rm / mount not permitted here: %r" % probe.stderr)
        return None
    return prefix


def split_stderr(err):
    lines = err.splitlines(True)
    notices = [l for l in lines if l == NOTICE]
    others = [l for l in lines if l != NOTICE]
    return notices, others


def one_way(tag, prefix, libdir, shim, out0, err0, work):
    # Plain LD_PRELOAD: the trace goes to the working directory (default name).
    d = os.path.join(work, tag + "-preload")
    os.mkdir(d)
    preload = (vtrel.SAN_RT + ":" if vtrel.SAN_RT else "") + vtrel.LIB
    if shim:
        preload += ":" + shim
    p = subprocess.run(prefix + [CHATTY, str(CODE)], cwd=d, env=base_env(libdir, preload),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t = tag + ", preload"
    check(p.returncode == CODE, "%s: exit %d, not %d" % (t, p.returncode, CODE))
    check(p.stdout == out0, "%s: stdout %r, without vramtrace %r" % (t, p.stdout, out0))
    notices, own = split_stderr(p.stderr)
    check(len(notices) == 1, "%s: %d notices in stderr %r" % (t, len(notices), p.stderr))
    check(b"".join(own) == err0, "%s: stderr %r, without vramtrace %r" % (t, p.stderr, err0))
    traces = sorted(glob.glob(os.path.join(d, "*.vtrace")))
    if check(len(traces) == 1, "%s: traces %r" % (t, os.listdir(d))):
        pid = int(os.path.basename(traces[0]).split(".")[1])
        rc, text = vtrel.report_traces(traces, os.path.join(d, "rep"))
        want = (b"".join(summary(pid)).decode() +
                "vramtrace: report: %s/rep/report.html (and report.json)\n" % d)
        check(rc == 0 and text == want, "%s: vramtrace report exit %d: %r" % (t, rc, text))
        if rc == 0:
            no_data(t, vtrel.load(os.path.join(d, "rep", "report.json")), None, pid)
            gate(t, os.path.join(d, "rep"), pid, work)
    print("%s: exit %d, stdout as without vramtrace, stderr + %d notice" % (t, p.returncode,
                                                                           len(notices)))

    # Under the launcher. The shim way adds the shim to the child's LD_PRELOAD (after the
    # launcher's libvramtrace.so), through a shell that then execs the target.
    out = os.path.join(work, tag + "-run")
    target = [CHATTY, str(CODE)]
    if shim:
        target = ["sh", "-c", 'LD_PRELOAD="$LD_PRELOAD %s" exec "$0" "$@"' % shim] + target
    r = subprocess.run(prefix + [vtrel.VRAMTRACE, "run", "-o", out, "--"] + target,
                       env=base_env(libdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t = tag + ", run"
    check(r.returncode == CODE, "%s: vramtrace exit %d, not %d: %r" % (t, r.returncode, CODE,
                                                                     r.stderr))
    check(r.stdout == out0, "%s: stdout %r, without vramtrace %r" % (t, r.stdout, out0))
    notices, own = split_stderr(r.stderr)
    rtraces = glob.glob(os.path.join(out, "*.vtrace"))
    pid = int(os.path.basename(rtraces[0]).split(".")[1]) if len(rtraces) == 1 else -1
    tail = summary(pid) + [b"vramtrace: report: %s/report.html (and report.json)\n" %
                           out.encode()]
    check(len(notices) == 1, "%s: %d notices in stderr %r" % (t, len(notices), r.stderr))
    check(own == err0.splitlines(True) + tail,
          "%s: stderr %r, expected the target's %r, the notice and %r" % (t, r.stderr, err0, tail))
    if check(os.path.exists(os.path.join(out, "report.json")), t + ": no report.json"):
        no_data(t, vtrel.load(os.path.join(out, "report.json")), CODE, pid)
        check(len(rtraces) == 1, "%s: traces %r" % (t, os.listdir(out)))
    print("%s: vramtrace exit %d, stdout as without vramtrace, stderr + %d notice + %d lines"
          % (t, r.returncode, len(notices), len(tail)))

    # `run --baseline`: chatty exits 0, so the gate judges the run, and refuses it (exit 3).
    gated = os.path.join(work, tag + "-gated")
    target0 = target[:-1] + ["0"]
    md, xml = os.path.join(work, tag + "-gate.md"), os.path.join(work, tag + "-gate.xml")
    g = subprocess.run(prefix + [vtrel.VRAMTRACE, "run", "--baseline", BASELINE, "--markdown",
                                 md, "--junit", xml, "-o", gated, "--"] + target0,
                       env=base_env(libdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t = tag + ", run --baseline"
    gtraces = glob.glob(os.path.join(gated, "*.vtrace"))
    gpid = int(os.path.basename(gtraces[0]).split(".")[1]) if len(gtraces) == 1 else -1
    check(g.returncode == EXIT_NOT_PROFILED, "%s: vramtrace exit %d, not %d: %r"
          % (t, g.returncode, EXIT_NOT_PROFILED, g.stderr))
    want = out0 + gate_text(gpid).encode()  # chatty prints the same whatever its exit code
    check(g.stdout == want, "%s: stdout %r, not %r" % (t, g.stdout, want))
    _, gown = split_stderr(g.stderr)
    check(gown[-3:-1] == summary(gpid), "%s: stderr %r" % (t, g.stderr))
    check_ci_files(t, md, xml, gpid)
    print("%s: vramtrace exit %d, the verdict says the process was not profiled"
          % (t, g.returncode))
    # The same report as the baseline of `run`: refused before the command runs.
    refused = os.path.join(work, tag + "-refused")
    b = subprocess.run(prefix + [vtrel.VRAMTRACE, "run", "--baseline", out, "-o", refused, "--"]
                       + target0, env=base_env(libdir), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    check(b.returncode == 2 and b.stdout == "" and
          b.stderr == baseline_refused("run", out, pid) and not os.path.exists(refused),
          "%s: unprofiled baseline: exit %d, stdout %r, stderr %r"
          % (t, b.returncode, b.stdout, b.stderr))
    # The ready CI job (scripts/ci/memory-gate.sh) does not record such a run as its baseline.
    jd = os.path.join(work, tag + "-job")
    os.mkdir(jd)
    e = base_env(libdir)
    e["VRAMTRACE"] = vtrel.VRAMTRACE
    j = subprocess.run(prefix + [os.path.join(SRC, "scripts", "ci", "memory-gate.sh"),
                                 "ci/base.json", "--"] + target0, cwd=jd, env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jtraces = glob.glob(os.path.join(jd, "vramtrace-ci", "*.vtrace"))
    jpid = int(os.path.basename(jtraces[0]).split(".")[1]) if len(jtraces) == 1 else -1
    check(j.returncode == 2 and not os.path.exists(os.path.join(jd, "ci")) and
          j.stderr.endswith(baseline_refused("check", "vramtrace-ci", jpid)),
          "%s: memory-gate.sh recording a baseline: exit %d, stderr %r"
          % (t, j.returncode, j.stderr))


def check_ci_files(t, md, xml, pid):
    """The Markdown summary and the JUnit result of a candidate that was not profiled."""
    try:
        mtext, xtext = open(md).read(), open(xml).read()
    except OSError as e:
        check(False, "%s: CI files: %s" % (t, e))
        return
    # Nothing in the notice is Markdown there: it reads as it is.
    want_md = ("### vramtrace: peak device memory unknown: a process was not profiled\n\n"
               "**Not profiled** (its device memory is unknown): pid %d (chatty): %s\n\n"
               % (pid, NOTICE_TEXT))
    check(mtext.startswith(want_md), "%s: markdown %r, not starting %r" % (t, mtext, want_md))
    want_xml = ('<testsuite name="vramtrace peak memory" tests="2" failures="1">\n'
                '  <testcase classname="vramtrace.profiled" name="every process profiled">'
                '<failure message="1 process(es) not profiled: their device memory is unknown">'
                'pid %d (chatty): %s\n</failure></testcase>\n' % (pid, NOTICE_TEXT))
    check(want_xml in xtext, "%s: junit %r, without %r" % (t, xtext, want_xml))


def gate(t, rep, pid, work):
    """`vramtrace check` of the report of a process that was not profiled: as the candidate,
    exit 3 with the verdict saying so (never PASSED); as the baseline, bad input (exit 2)."""
    c = subprocess.run([vtrel.VRAMTRACE, "check", rep, "--baseline", BASELINE], env=vtrel.env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(c.returncode == EXIT_NOT_PROFILED and c.stdout == gate_text(pid, 7) and c.stderr == "",
          "%s: check as candidate: exit %d, stdout %r, stderr %r"
          % (t, c.returncode, c.stdout, c.stderr))
    b = subprocess.run([vtrel.VRAMTRACE, "check", BASELINE, "--baseline", rep], env=vtrel.env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(b.returncode == 2 and b.stdout == "" and
          b.stderr == baseline_refused("check", rep, pid),
          "%s: check as baseline: exit %d, stdout %r, stderr %r"
          % (t, b.returncode, b.stdout, b.stderr))
    print("%s: check exits %d as the candidate, %d as the baseline" % (t, c.returncode,
                                                                       b.returncode))


def no_data(tag, rep, code, pid):
    """A report of the chatty process that recorded nothing, for the reason the notice gives."""
    check(rep["devices"] == [] and rep["oom"] == [] and rep["leaks"] == [],
          "%s: devices %r, oom %r, leaks %r" % (tag, rep["devices"], rep["oom"], rep["leaks"]))
    check(rep["run"]["processes_not_profiled"] == 1,
          "%s: processes_not_profiled %r" % (tag, rep["run"].get("processes_not_profiled")))
    procs = rep["processes"]
    if check(len(procs) == 1, "%s: %d processes" % (tag, len(procs))):
        check(procs[0]["notices"] == [NOTICE_TEXT], "%s: notices %r" % (tag, procs[0]["notices"]))
        check(procs[0]["pid"] == pid and procs[0]["profiled"] is False and
              procs[0]["not_profiled_reason"] == NOTICE_TEXT,
              "%s: pid %r, profiled %r, not_profiled_reason %r"
              % (tag, procs[0]["pid"], procs[0].get("profiled"),
                 procs[0].get("not_profiled_reason")))
        check(procs[0]["devices"] == [], "%s: process devices %r" % (tag, procs[0]["devices"]))
        check(procs[0]["exe"] == os.path.realpath(CHATTY), "%s: exe %r" % (tag, procs[0]["exe"]))
    check(rep["run"]["dropped_events"] == 0, "%s: dropped %r" % (tag, rep["run"]["dropped_events"]))
    if code is not None:
        check(rep["run"].get("exit_code") == code and rep["run"]["complete"] is True,
              "%s: run %r" % (tag, rep["run"]))


def main():
    work = vtrel.temp_dir("vt-nocupti-")
    libdir = os.path.join(work, "lib")
    os.mkdir(libdir)
    for name in ("libcuda.so.1", "libcudart.so.13"):
        os.symlink(os.path.join(STANDIN, name), os.path.join(libdir, name))

    base = subprocess.run([CHATTY, str(CODE)], env=base_env(libdir), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    check(base.returncode == CODE, "without vramtrace: exit %d" % base.returncode)
    check(b"262144 of 262144 words came back" in base.stdout,
          "without vramtrace: stdout %r" % base.stdout)
    check(base.stderr == b"chatty: on stderr before CUDA\nchatty: on stderr after CUDA\n",
          "without vramtrace: stderr %r" % base.stderr)

    one_way("shim", [], libdir, SHIM, base.stdout, base.stderr, work)
    prefix = namespace_prefix(work)
    if prefix is not None:
        print("namespace: CUPTI files hidden: %s" % prefix[8:-1])
        one_way("namespace", prefix, libdir, None, base.stdout, base.stderr, work)
    if not vtrel.failures:
        shutil.rmtree(work)
    vtrel.finish("nocupti")


if __name__ == "__main__":
    main()
