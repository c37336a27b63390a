"""The progress bar of `vramtrace report` and `vramtrace run` (cli/progress.h): nothing at all
on a stderr that is not a terminal, whatever VRAMTRACE_PROGRESS says; on a pseudo-terminal, a bar
that ends at 100% and is cleared before the summary, at most 10 redraws a second, only for
traces of 64 MiB or more unless VRAMTRACE_PROGRESS=on, and none with --no-progress or =off.
   progress_test.py BUILD_DIR"""
import os
import pty
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tty

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
from vtrel import BUILD, VRAMTRACE, check, finish  # noqa: E402  (the reliability tests' helpers)

SYNTH = os.path.join(BUILD, "bin", "vt_synth_trace")
BASIC = os.path.join(BUILD, "tests", "programs", "basic")
BAR = re.compile(rb"\rvramtrace: reading traces [^\r]*")


def env(**extra):
    e = dict(os.environ)
    e.pop("VRAMTRACE_PROGRESS", None)
    e["LD_LIBRARY_PATH"] = os.path.join(BUILD, "standin")
    e.update(extra)
    return e


def run_pipe(args, **extra):
    """stderr as a pipe: (exit code, stderr bytes)."""
    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, env=env(**extra), timeout=120)
    return p.returncode, p.stderr


def run_pty(args, **extra):
    """stderr on a pseudo-terminal in raw mode (no '\\n' -> '\\r\\n'): (code, bytes, seconds)."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave, env=env(**extra))
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        out += chunk
    code = p.wait(timeout=120)
    os.close(master)
    return code, out, time.monotonic() - t0


def split_bar(out):
    """(bars drawn, what follows the clearing of the line) of a pty capture."""
    bars = BAR.findall(out)
    if not bars:
        return [], out
    last = out.rfind(bars[-1]) + len(bars[-1])
    clear = re.match(rb"\r( +)\r", out[last:])
    if not check(clear is not None, "the bar's line is cleared after the last draw"):
        return bars, out[last:]
    check(len(clear.group(1)) >= len(bars[-1]) - 1, "the clearing covers the whole bar")
    return bars, out[last + clear.end():]


def check_bar(bars, seconds, what):
    if not check(len(bars) >= 2, what + ": a bar is drawn (first and last)"):
        return
    pcts = [int(re.search(rb"(\d+)%", b).group(1)) for b in bars]
    check(pcts == sorted(pcts), what + ": the percentage never goes back: %r" % pcts)
    check(pcts[-1] == 100, what + ": the last draw is 100%%, got %r" % pcts)
    sizes = re.search(rb"([\d.]+)/([\d.]+) MiB", bars[-1])
    check(sizes is not None and sizes.group(1) == sizes.group(2),
          what + ": the last draw has every byte read: %r" % bars[-1])
    # First draw, final draw, and at most one per 100 ms between them.
    check(len(bars) <= 2 + 10 * seconds + 1,
          what + ": at most 10 redraws a second (%d in %.2f s)" % (len(bars), seconds))


def main():
    work = tempfile.mkdtemp(prefix="vt-progress-")
    try:
        small = os.path.join(work, "small.vtrace")  # 1 M events, 12 MB: under the 64 MiB
        large = os.path.join(work, "large.vtrace")  # 5.5 M events, 68 MB: over it
        subprocess.run([SYNTH, small, "1000000"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([SYNTH, large, "5500000"], check=True, stdout=subprocess.DEVNULL)
        check(os.path.getsize(large) >= 64 << 20, "the large trace is over 64 MiB")
        out = os.path.join(work, "out")
        report = [VRAMTRACE, "report", small, "-o", out, "--force"]

        # Not a terminal: byte for byte the stderr of --no-progress, in every mode.
        code, plain = run_pipe(report + ["--no-progress"])
        check(code == 0, "report --no-progress exits 0")
        check(plain.endswith(b"vramtrace: report: " + out.encode() +
                             b"/report.html (and report.json)\n"),
              "the summary ends with the report line: %r" % plain[-200:])
        for mode in (None, "auto", "on", "1", "off"):
            extra = {} if mode is None else {"VRAMTRACE_PROGRESS": mode}
            code, err = run_pipe(report, **extra)
            check(code == 0 and err == plain,
                  "not a terminal, VRAMTRACE_PROGRESS=%s: stderr exactly as with --no-progress "
                  "(got %r)" % (mode, err[:300]))
            check(b"\r" not in err and b"\x1b" not in err, "no carriage return or escape")
        code, err = run_pipe([VRAMTRACE, "report", large, "-o", out, "--force"])
        check(code == 0 and b"\r" not in err and b"reading traces" not in err,
              "not a terminal, a 68 MB trace: no bar")

        # A terminal, VRAMTRACE_PROGRESS=on: the bar for a trace of any size.
        code, tty_out, secs = run_pty(report, VRAMTRACE_PROGRESS="on")
        check(code == 0, "report on a terminal exits 0")
        bars, rest = split_bar(tty_out)
        check_bar(bars, secs, "terminal, =on, 12 MB")
        check(rest == plain, "after the bar, exactly the summary of --no-progress: %r" % rest[:300])

        # A terminal, default (auto): no bar under 64 MiB, a bar over it.
        for extra in ({}, {"VRAMTRACE_PROGRESS": "auto"}):
            code, tty_out, _ = run_pty(report, **extra)
            check(code == 0 and tty_out == plain, "terminal, auto, 12 MB: no bar, same stderr")
        code, big_plain = run_pipe([VRAMTRACE, "report", large, "-o", out, "--force"])
        code, tty_out, secs = run_pty([VRAMTRACE, "report", large, "-o", out, "--force"])
        check(code == 0, "report of the large trace exits 0")
        bars, rest = split_bar(tty_out)
        check_bar(bars, secs, "terminal, auto, 68 MB")
        check(rest == big_plain, "after the bar, the summary of the large trace")

        # A terminal, switched off.
        for args, extra in ((report + ["--no-progress"], {"VRAMTRACE_PROGRESS": "on"}),
                            (report, {"VRAMTRACE_PROGRESS": "off"}),
                            ([VRAMTRACE, "report", large, "-o", out, "--force", "--no-progress"], {})):
            code, tty_out, _ = run_pty(args, **extra)
            check(code == 0 and BAR.search(tty_out) is None and b"\r" not in tty_out,
                  "terminal, %r %r: no bar" % (args[-1], extra))

        # `vramtrace run`: its final report step draws the bar too, and --no-progress stops it.
        run_dir = os.path.join(work, "run")
        run = [VRAMTRACE, "run", "--force", "-o", run_dir, "--", BASIC]
        code, tty_out, secs = run_pty(run, VRAMTRACE_PROGRESS="on")
        check(code == 0, "run on a terminal exits 0")
        bars, rest = split_bar(tty_out)
        check_bar(bars, secs, "run, terminal, =on")
        check(b"peak 13.00 MiB" in rest, "run: the summary follows the bar")
        code, tty_out, _ = run_pty(run[:2] + ["--no-progress"] + run[2:], VRAMTRACE_PROGRESS="on")
        check(code == 0 and BAR.search(tty_out) is None, "run --no-progress: no bar")
        code, err = run_pipe(run, VRAMTRACE_PROGRESS="on")
        check(code == 0 and b"\r" not in err and b"reading traces" not in err,
              "run, not a terminal: no bar")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("progress_test")


if __name__ == "__main__":
    main()
