#!/usr/bin/env python3
"""Permissions and paths, with umask 000 so that nothing depends on the caller's umask:
  - while `vramtrace run` is in progress: the socket's directory is 0700, the socket 0600, both
    ours; the output directory it creates is 0700;
  - after the run: report.json, report.html and the traces are 0600, the socket directory is
    gone, and nothing under the output directory is group- or world-writable;
  - plain LD_PRELOAD: the trace file is 0600;
  - VRAMTRACE_OUTPUT naming a symlink (to an existing file, or dangling) is not followed: the
    file it points to is unchanged (or not created), the program's exit code and stdout are
    unchanged, and the library says once on stderr that this process is not profiled;
  - `vramtrace run -o DIR` where DIR/report.json is a symlink: the file it points to is unchanged."""
import glob
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
import vtrel  # noqa: E402
from vtrel import check


def umask0():
    os.umask(0)


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def socket_of(pid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                for kv in f.read().split(b"\0"):
                    if kv.startswith(b"VRAMTRACE_SOCKET="):
                        return kv.split(b"=", 1)[1].decode()
        except (FileNotFoundError, ProcessLookupError):
            pass
        time.sleep(0.01)
    return None


def child_of(pid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = f.read().split()
        if kids:
            return int(kids[0])
        time.sleep(0.005)
    return None


def during_run(d):
    out = os.path.join(d, "out")
    prog = os.path.join(d, "progress")
    launcher = subprocess.Popen([vtrel.VRAMTRACE, "run", "-o", out, "--", vtrel.CHURN, "0", prog],
                                env=vtrel.env(), preexec_fn=umask0,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = child_of(launcher.pid)
    sock = socket_of(target) if target else None
    deadline = time.monotonic() + 10
    while vtrel.progress(prog) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # the target has connected once it allocates
    if check(sock is not None, "no VRAMTRACE_SOCKET in the target's environment"):
        sdir = os.path.dirname(sock)
        st = os.lstat(sock)
        check(stat.S_ISSOCK(st.st_mode) and mode(sock) == 0o600 and st.st_uid == os.getuid(),
              "socket %s: mode %o" % (sock, mode(sock)))
        check(stat.S_ISDIR(os.lstat(sdir).st_mode) and mode(sdir) == 0o700 and
              os.lstat(sdir).st_uid == os.getuid(), "socket dir %s: mode %o" % (sdir, mode(sdir)))
        print("during the run: %s %o, %s %o" % (sdir, mode(sdir), sock, mode(sock)))
    check(mode(out) == 0o700, "output dir: mode %o" % mode(out))
    os.kill(target, signal.SIGTERM)
    launcher.wait(timeout=60)
    check(launcher.returncode == -signal.SIGTERM, "launcher exit %d" % launcher.returncode)
    if sock:
        check(not os.path.exists(os.path.dirname(sock)), "socket dir left behind")
    files = [os.path.join(out, "report.json"), os.path.join(out, "report.html")]
    files += glob.glob(os.path.join(out, "vramtrace.*.vtrace"))
    check(len(files) == 3, "outputs: %s" % files)
    for f in files:
        check(mode(f) == 0o600, "%s: mode %o" % (f, mode(f)))
    for root, dirs, names in os.walk(out):
        for n in dirs + names:
            p = os.path.join(root, n)
            check(mode(p) & 0o022 == 0, "%s: group/world-writable (%o)" % (p, mode(p)))
    print("after the run: %s" % ", ".join("%s %o" % (os.path.basename(f), mode(f)) for f in files))


def preload_file(d):
    trace = os.path.join(d, "t.vtrace")
    p = subprocess.run([vtrel.CHURN, "10", os.path.join(d, "p")], cwd=d, preexec_fn=umask0,
                       env=vtrel.preload_env(VRAMTRACE_OUTPUT=trace), stdout=subprocess.PIPE)
    check(p.returncode == 0 and mode(trace) == 0o600, "preload trace: mode %o" % mode(trace))


def symlinks(d):
    p0 = subprocess.run([vtrel.CHURN, "10", os.path.join(d, "p")], env=vtrel.env(),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    victim = os.path.join(d, "victim")
    with open(victim, "w") as f:
        f.write("keep me\n")
    os.chmod(victim, 0o644)
    link, dangling = os.path.join(d, "link.vtrace"), os.path.join(d, "dangling.vtrace")
    os.symlink(victim, link)
    os.symlink(os.path.join(d, "created-through-link"), dangling)
    for path in (link, dangling):
        p = subprocess.run([vtrel.CHURN, "10", os.path.join(d, "p")], cwd=d,
                           env=vtrel.preload_env(VRAMTRACE_OUTPUT=path),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tag = "VRAMTRACE_OUTPUT=" + os.path.basename(path)
        check(p.returncode == 0 and p.stdout.split(b",")[0] == p0.stdout.split(b",")[0],
              "%s: exit %d, %r" % (tag, p.returncode, p.stdout))
        lines = p.stderr.decode().splitlines()
        check(len(lines) == 1 and "not profiled" in lines[0], "%s: stderr %r" % (tag, lines))
        check(os.path.islink(path), tag + ": the symlink was replaced")
    with open(victim) as f:
        check(f.read() == "keep me\n", "the symlink's target was written")
    check(not os.path.exists(os.path.join(d, "created-through-link")),
          "a file was created through the dangling symlink")

    out = os.path.join(d, "linkout")
    os.mkdir(out, 0o700)
    os.symlink(victim, os.path.join(out, "report.json"))
    subprocess.run([vtrel.VRAMTRACE, "run", "-o", out, "--", vtrel.CHURN, "10",
                    os.path.join(d, "p")], env=vtrel.env(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(victim) as f:
        check(f.read() == "keep me\n", "run -o: report.json written through a symlink")
    print("symlinks: not followed")


def main():
    d = vtrel.temp_dir("vt-security-")
    during_run(d)
    preload_file(d)
    symlinks(d)
    if not vtrel.failures:
        shutil.rmtree(d)
    vtrel.finish("security test")


main()
