"""The remedies of a run that finishes its steps, weighed on fake tensors without the run waiting.

bf16 autocast and checkpointing change what each request is, which the recorded requests do not
say; the report weighs them on the first step run on fake tensors with the change and without
it (_vramtrace_step.predicted_lines, "none", "bf16_autocast" and "checkpoint" steps). Those
fake steps cost seconds of Python, too much to take from the program's own time by default. So
as the second step begins, the process is forked (as a DataLoader forks its workers: after
CUDA is initialised, the child never touching the GPU) and the child runs the fake steps on a
copy of the model and optimizer and writes their lines into a private file, then exits; the
program goes on at once. At the program's exit the lines are read if the child is done; it is
waited for at most 1 % of the run's time so far, else stopped, and the report says that the
remedies were weighed by the transforms instead, and why (an N line with that status).

VRAMTRACE_TORCH_PREDICT=always runs the fake steps in the program as the second step begins
(waiting for them); =oom only completes a step that ran out of memory; =off never."""
import os
import sys
import time

# The share of the run's time the exit may wait for the fake steps.
BUDGET = 0.01


class Weighing:
    """One child running the fake steps of the first step (start), its lines read at exit
    (collect)."""

    def __init__(self, run_started):
        self.run_started = run_started  # time.monotonic() when the hook started
        self.child = None               # (pid, path of its lines, when it was forked)

    def start(self, ctx, first, model):
        """Forks the child that runs ctx.predict_model on `first` (the captured first call)."""
        torch = ctx.torch
        try:
            from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: F401
        except Exception:
            return False  # nothing to weigh with: the transforms stand
        import tempfile
        try:
            device = torch.cuda.current_device()
            bf16 = bool(torch.cuda.is_bf16_supported())
        except Exception:
            return False
        fd, path = tempfile.mkstemp(prefix="vramtrace-weigh-", suffix=".lines")
        parent = os.getpid()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            pid = os.fork()
        except OSError:
            os.close(fd)
            os.unlink(path)
            return False
        if pid == 0:  # the child: fake tensors only, then out without the parent's exit handlers
            status = 1
            try:
                try:
                    os.nice(10)
                    torch.set_num_threads(1)
                except Exception:
                    pass
                # CUDA cannot be used again in a forked child: what fake tensors ask of it is
                # what the parent read above.
                cuda = torch.cuda
                cuda._lazy_init = lambda: None
                cuda.current_device = lambda: device
                cuda.is_bf16_supported = lambda *a, **k: bf16
                ctx.set_enabled(False)
                ctx.quiet = True
                ctx.predict_model(first, model)
                data = "".join(ctx.predicted).encode("utf-8", "replace")
                while data:
                    data = data[os.write(fd, data):]
                os.close(fd)
                status = 0
                if os.getppid() != parent:
                    os.unlink(path)  # the program is gone: nobody will read it
            except BaseException:
                pass
            finally:
                os._exit(status)
        os.close(fd)
        self.child = (pid, path, time.monotonic())
        return True

    def collect(self, discard=False):
        """The child's lines (N, V, R), or one N line saying why the remedies were not weighed;
        None with no child. `discard`: the child's work is not wanted (the process ran out of
        memory: its own prediction runs at exit)."""
        if self.child is None:
            return None
        import signal
        pid, path, forked = self.child
        self.child = None
        now = time.monotonic()
        deadline = now + (0 if discard else BUDGET * max(0.0, now - self.run_started))
        done, status = 0, 0
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, -1  # reaped by the program (a SIGCHLD handler): not ours
            if done or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        lines, why = None, None
        if not done:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
            why = ("not weighed on fake steps: they took more than 1 %% of the run's %.1f s "
                   "(%.1f s when the run ended; VRAMTRACE_TORCH_PREDICT=always waits for "
                   "them)" % (now - self.run_started, now - forked))
        elif status != 0:
            why = "not weighed on fake steps: their process failed (status %d)" % status
        else:
            try:
                with open(path, encoding="utf-8") as f:
                    lines = f.read().splitlines(keepends=True)
            except OSError as ex:
                why = "not weighed on fake steps: %s" % ex
        try:
            os.unlink(path)
        except OSError:
            pass
        if discard:
            return None
        if lines is not None:
            return [x for x in lines if x[:2] in ("N\t", "V\t", "R\t") and x.endswith("\n")]
        return why
