"""A forked copy of the program that can change nothing of it, for `run --preflight`: the
program's own loop runs its first steps on fake tensors in the child while the parent, stopped
at its first training call, waits for what the child saw and then goes on for real.

What a child shares with its parent is the open files' offsets and whatever is at the other end
of its pipes and sockets. So before the child runs anything, every file descriptor it inherited
is made its own: a regular file opened for reading only is opened again at the same offset (a
dataset the child reads leaves the parent's offset where it was); everything else (standard
input and output, files open for writing, pipes, sockets, devices: the GPU driver's among them)
becomes /dev/null, so that the child's prints, log lines, checkpoints and messages go nowhere
and a device call fails instead of acting on the parent's context. The child reports to the
parent in JSON lines on a pipe of its own, ends with os._exit (no exit handler of the program
runs in it), and is killed past its deadline (SIGALRM, its default action)."""
import fcntl
import json
import os
import select
import signal
import stat
import sys
import time


def isolate(keep):
    """Every file descriptor of this (child) process but `keep` made its own (above). Returns
    how many were opened again and how many became /dev/null."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    reopened = nulled = 0
    try:
        fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    except OSError:
        fds = list(range(0, 256))
    for fd in fds:
        if fd in (keep, null):
            continue
        try:
            st = os.fstat(fd)
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue  # closed meanwhile (listdir's own)
        inheritable = os.get_inheritable(fd)
        own = None
        if fd > 2 and stat.S_ISREG(st.st_mode) and flags & os.O_ACCMODE == os.O_RDONLY:
            try:
                own = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY | os.O_CLOEXEC)
                os.lseek(own, os.lseek(fd, 0, os.SEEK_CUR), os.SEEK_SET)
            except OSError:
                if own is not None:
                    os.close(own)
                own = None
        try:
            os.dup2(own if own is not None else null, fd, inheritable=inheritable)
        except OSError:
            continue
        finally:
            if own is not None:
                os.close(own)
        if own is not None:
            reopened += 1
        else:
            nulled += 1
    os.close(null)
    return reopened, nulled


class ChildEnd:
    """The child's end: send() a message (a JSON object) to the parent, end() the child."""

    def __init__(self, fd):
        self.fd = fd

    def send(self, message):
        data = (json.dumps(message) + "\n").encode()
        while data:
            try:
                data = data[os.write(self.fd, data):]
            except InterruptedError:
                continue
            except OSError:
                self.end(1)  # the parent is gone

    def end(self, status=0):
        os._exit(status)


class ParentEnd:
    """The parent's end: the child's messages as they come (read), and the child ended (close):
    killed when still running."""

    def __init__(self, pid, fd):
        self.pid, self.fd = pid, fd
        self.messages = []
        self.buffer = b""
        self.eof = False
        self.status = None  # the child's wait status, once reaped

    def read(self, enough, deadline):
        """Reads messages until enough(messages) is true, the child closes its end, or the
        monotonic clock reaches `deadline`. Returns whether enough(messages) holds."""
        while not enough(self.messages) and not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                ready, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            except InterruptedError:
                continue
            if not ready:
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                self.eof = True
                break
            self.buffer += chunk
            *lines, self.buffer = self.buffer.split(b"\n")
            for line in lines:
                try:
                    self.messages.append(json.loads(line.decode()))
                except ValueError:
                    pass
        return enough(self.messages)

    def close(self, grace=0.0):
        """The child killed (when still running `grace` seconds on, its end of the pipe still
        open) and reaped. Returns why it ended, in words."""
        if self.status is None:
            if grace > 0 and not self.eof:
                self.read(lambda ms: False, time.monotonic() + grace)
            try:
                # A child whose end of the pipe closed is exiting: it is given a moment to be
                # reaped as it ended, not stopped.
                exiting_by = time.monotonic() + (2.0 if self.eof else 0.0)
                while True:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                    if pid != 0 or time.monotonic() >= exiting_by:
                        break
                    time.sleep(0.005)
                if pid == 0:
                    os.kill(self.pid, signal.SIGKILL)
                    _, status = os.waitpid(self.pid, 0)
                    self.status = -1
                else:
                    self.status = status
            except OSError:
                self.status = -2
        try:
            os.close(self.fd)
        except OSError:
            pass
        s = self.status
        if s == -1:
            return "stopped by the parent"
        if s < 0:
            return "not found"
        if os.WIFSIGNALED(s):
            sig = os.WTERMSIG(s)
            return ("ran past its deadline" if sig == signal.SIGALRM else
                    "killed by signal %d" % sig)
        return "ended with status %d" % os.WEXITSTATUS(s)


def fork(deadline_s):
    """Forks a child that can change nothing of this process (isolate). Returns
    ("child", ChildEnd) in the child, ("parent", ParentEnd) in the parent, or (None, why) when
    no child could be made. The child is killed `deadline_s` seconds on."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()  # nothing the program wrote is written twice
        except Exception:
            pass
    try:
        r, w = os.pipe()
    except OSError as ex:
        return None, "no pipe: %s" % ex
    try:
        pid = os.fork()
    except OSError as ex:
        os.close(r)
        os.close(w)
        return None, "no fork: %s" % ex
    if pid == 0:
        try:
            os.close(r)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(max(1, int(deadline_s + 0.999)))
            isolate(w)
            return "child", ChildEnd(w)
        except BaseException:
            os._exit(1)
    os.close(w)
    return "parent", ParentEnd(pid, r)
