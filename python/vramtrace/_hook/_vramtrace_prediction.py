"""The part of vramtrace's start-up hook (sitecustomize.py) that predicts: the first training
call's arguments captured as shapes and dtypes, and the step run on fake tensors
(_vramtrace_step) when a process that ran out of memory exits, as the second step begins
(VRAMTRACE_TORCH_PREDICT=always), at `vramtrace plan`'s stop (the program's own loop on fake
tensors where it can: _vramtrace_own), before the first step of `run --preflight`, and at a
finished run's exit to weigh its remedies. It reads the shared Marks (where the program is, the
time) and the module table, and switches the context's hooks off while fake steps run."""
import os
import sys
import weakref

import _vramtrace_step as step

# What runs a pre-flight's steps unless VRAMTRACE_PREFLIGHT_STEP says: "program" (the program's
# own loop, in a forked copy of the process) or "standin" (the stand-in step, in the process).
PREFLIGHT_STEP = "standin"


def share_runs(runs, most):
    """step_runs' configurations ((batch, change) pairs, in its order) shared out among at most
    `most` copies of the program: the program's batch and its half in the first (one loop gives
    both, the half from its next batch), each change in one of its own, the last copies' merged
    where there are too few."""
    groups = [[r for r in runs if r[1] == ""]] + [[r] for r in runs if r[1] != ""]
    if not groups[0]:
        groups = groups[1:]
    while len(groups) > max(1, most):
        groups[-2:] = [groups[-2] + groups[-1]]
    return groups


def renumbered(lines, new_id):
    """A predicted step's N, V and R lines (common/side_channel.h), given as another process
    numbered them, under the step id `new_id`."""
    out = []
    for line in lines:
        f = line.split("\t")
        if f[0] == "N" and len(f) > 2:
            f[2] = str(new_id)
        elif f[0] in ("V", "R") and len(f) > 1:
            f[1] = str(new_id)
        out.append("\t".join(f))
    return out


class Prediction:
    """The first call's arguments captured as shapes, and the steps run on fake tensors at exit,
    as the second step begins, at a plan's stop or a pre-flight."""

    def __init__(self, torch, marks, modules, switch_hooks):
        """`modules`: the module table (the predicted requests name its modules);
        `switch_hooks(on)`: the context's hooks on or off (the fake steps leave no marks), which
        says whether they were on."""
        self.torch, self.marks, self.modules = torch, marks, modules
        self.clean = marks.clean
        self.switch_hooks = switch_hooks
        # The first training step, for predicting its rest when it dies: the first outermost
        # call of a model with parameters, its arguments as shapes only.
        self.want_call = os.environ.get("VRAMTRACE_TORCH_PREDICT", "on") != "off"
        # (weakref(model), described args, batch, training, grad, autocast, time_ns)
        self.first_call = None
        self.output_dies = False  # output_dies_with_call of the first call's caller
        self.step_assumptions = []  # what the stand-in step assumes of the loop (SA lines)
        self.standin_ran = False    # a stand-in step's lines are among the predicted
        self.first_done = False   # the first optimizer step (or evaluation forward) ended
        self.made_optimizers = []  # weakrefs of every optimizer made, first made first
        self.predicted = []        # N, V and R lines
        # VRAMTRACE_TORCH_PREDICT=always: the step is predicted as the second one begins, the
        # program waiting; else at the exit of a process that ran out, and, by default, at the
        # exit of a run that finished its steps within a share of its time (weigh_at_exit, on
        # the ShapeCopy that keep_shape made at its first step's end).
        mode = os.environ.get("VRAMTRACE_TORCH_PREDICT", "on")
        self.predict_always = mode == "always"
        self.weigh_remedies = mode == "on"
        try:
            self.weigh_budget = max(0.0, float(
                os.environ.get("VRAMTRACE_TORCH_PREDICT_BUDGET", "") or "0.01"))
        except ValueError:
            self.weigh_budget = 0.01
        self.started_ns = marks.now()  # the run's start (sitecustomize sets its own)
        self.shape = None          # the ShapeCopy, once made
        self.shape_why = None      # why none was made
        self.shape_ns = 0          # what making it cost
        self.weigh_runs = None     # which of step_runs' they run (all; a pre-flight's rest)
        self.preflight_rest = None  # a pre-flight's steps not run before the first step
        self.first_allocs = None   # PyTorch's count of allocations at the first training call
        self.step_allocs = 0       # the first step's allocations (for what the fake steps cost)
        self.predict_pending = False
        # `vramtrace plan` (VRAMTRACE_PLAN=1): the first training call is predicted and the
        # process stopped before its forward runs (plan_stop).
        self.plan = os.environ.get("VRAMTRACE_PLAN") == "1"
        if self.plan:
            self.want_call = True
        # `vramtrace run --preflight` (VRAMTRACE_PREFLIGHT: the folder where the launcher takes
        # asks): the first training call is predicted, its verdict asked for and waited for
        # (preflight), then the program goes on.
        self.preflight_dir = None if self.plan else os.environ.get("VRAMTRACE_PREFLIGHT") or None
        if self.preflight_dir:
            self.want_call = True
        if self.plan or self.preflight_dir:
            self.weigh_remedies = False
        self.first_call_stops = bool(self.plan or self.preflight_dir)
        self.preflight_line = None  # the PF line, once predicted
        self.preflighting = False   # its fake steps are running
        self.plan_line = None      # the Z line, once stopped
        self.own = None            # the program's own steps on fake tensors, while they run
        # A pre-flight runs the program's own loop in a forked copy of the process
        # (_vramtrace_fork) with VRAMTRACE_PREFLIGHT_STEP=program: the child's end there.
        self.child = None
        self.batches = None        # (iterator class, its __next__) while batches are kept
        if self.preflight_dir and os.environ.get("VRAMTRACE_PREFLIGHT_STEP",
                                                 PREFLIGHT_STEP) == "program":
            self.keep_batches()
        self.rng_restored = False  # the last predict_steps put the RNG states back
        self.dump_now = None       # writes the side channel now (set by sitecustomize)

    def forward_ended(self):
        """An outermost forward ended: an evaluation's first is its first step's end."""
        if self.first_call is not None and not self.first_call[3]:
            self.first_done = True

    def step_ended(self):
        """An optimizer step ended: at the first, the model kept as shapes for the fake steps
        at exit (keep_shape), or, with VRAMTRACE_TORCH_PREDICT=always, the step predicted as the
        next outermost call begins (second_step)."""
        if not self.first_done and self.first_call is not None:
            if self.predict_always:
                self.predict_pending = True
            else:
                self.keep_shape()
        self.first_done = True

    def at_exit(self):
        """The process exits: the plan's own steps that did not get to the stop ended (the
        program raised on fake tensors, not its death: said by OwnSteps.on_exception, or it
        ended first), or else the steps predicted (a death, VRAMTRACE_TORCH_PREDICT=always)
        and the remedies weighed."""
        own = self.own
        if own is not None:
            own.put_back()
            try:
                self.own_done(own, at_exit=True)
            except Exception:
                pass
            return
        try:
            if self.marks.oom_seen and self.preflight_rest is not None:
                # Foreseen to fit, it ran out of memory: the pre-flight's rest (the half batch,
                # the remedies' changes) predicted now, as at any first step's death.
                self.predict_steps(force=True, runs=self.preflight_rest)
            self.predict_steps()
            self.weigh_at_exit()
        except Exception:
            pass

    def capture_call(self, module, args, kwargs):
        """The first outermost call of a module with parameters on the main thread: what it was
        called with (shapes and dtypes, nothing kept alive) and how (training, grad, autocast)."""
        marks = self.marks
        if self.plan_line is not None and marks.on_main():
            self.plan_exit()  # the program caught the stop's SystemExit and went on
        if (marks.stack or marks.in_root or marks.in_backward or not marks.on_main()
                or next(module.parameters(), None) is None):
            return
        if ((self.plan or self.preflight_dir)
                and not (module.training and self.torch.is_grad_enabled())):
            return  # an evaluation before training: the plan waits for a training step
        self.want_call = False
        try:
            call, batch = step.describe_call(self.torch, args, kwargs)
            torch = self.torch
            autocast = None
            if torch.is_autocast_enabled():
                get = getattr(torch, "get_autocast_dtype", None)
                autocast = get("cuda") if get else torch.get_autocast_gpu_dtype()
            self.first_call = (weakref.ref(module), call, batch, module.training,
                               torch.is_grad_enabled(), autocast, self.marks.now())
            caller = step.caller_frame(sys._getframe(1), marks.skip)
            self.output_dies = step.output_dies_with_call(caller)
            self.step_assumptions = [self.clean(step.output_assumption(caller, self.output_dies))]
            if self.weigh_remedies or self.preflight_dir:
                self.first_allocs = self.allocation_count()
        except Exception as ex:
            self.first_call = None
            if self.plan:
                self.predicted = ["N\t0\t1\t0\t0\t%d\tnot predicted: its arguments could "
                                  "not be read: %s\n"
                                  % (self.marks.now(), self.clean(str(ex))[:500])]
        if self.plan:
            self.plan_stop(module)
        elif self.preflight_dir:
            self.preflight(module)

    def preflight(self, module):
        """`vramtrace run --preflight`: the step the program is about to run predicted on fake
        tensors, the side channel written now (with the PF line), the launcher asked for its
        verdict (preflight.<pid>.ask in VRAMTRACE_PREFLIGHT) and its answer waited for
        (VRAMTRACE_PREFLIGHT_WAIT seconds, 30), so that the verdict is said before the step
        can die. In two stages, as the verdict needs them: the step at its batch alone first;
        when the launcher answers that it will not fit ("more"), the step at half the batch and
        with the remedies' changes, and the launcher asked again (the largest batch, each
        remedy). A step that fits has its remedies' changes weighed at exit instead, as a
        finished run's (weigh_at_exit). Nothing of the program changes: the forward runs next,
        as it would have."""
        import time
        folder, self.preflight_dir = self.preflight_dir, None  # once
        repeat_was = step.REPEAT_ON
        step.REPEAT_ON = step.REPEAT_SETTING != "0"
        child = None
        try:
            asked_from = time.monotonic_ns()
            started = time.perf_counter_ns()
            child = self.fork_own(module)
            if child == "child":
                return  # the program's loop goes on here, on fake tensors (own_done ends it)
            self.preflighting = True
            try:
                if child is not None and self.own_first(child):
                    spent = time.perf_counter_ns() - started
                    self.preflight_line = "PF\t%d\t%d\t%d\t%d\t%s\n" % (
                        self.marks.now(), self.first_call[2], spent, 1, "program")
                else:
                    self.preflight_line, _, spent = self.predict_first_step(
                        module, "PF\t%d\t%d\t%d\t%d\t%s\n", runs=lambda runs: runs[:1])
            finally:
                self.preflighting = False
            if self.ask_preflight(folder, asked_from, 1) == "more":
                self.preflighting = True
                try:
                    started = time.perf_counter_ns()
                    if child is not None and not self.standin_ran:
                        self.own_rest(child)
                    else:
                        self.predict_steps(force=True, runs=step.after_the_first)
                    spent += time.perf_counter_ns() - started
                    fields = self.preflight_line.split("\t")
                    fields[3] = str(spent)
                    self.preflight_line = "\t".join(fields)
                finally:
                    self.preflighting = False
                self.ask_preflight(folder, asked_from, 2)
            elif self.predicted and self.predicted[0].rstrip("\n").endswith("\tok"):
                # Foreseen to fit (or no verdict came): the rest is run at exit, the half batch
                # too if the step ran out of memory after all (at_exit), else the remedies'
                # changes, weighed within the run's share as a finished run's.
                self.preflight_rest = step.after_the_first
                if not self.predict_always:
                    self.weigh_remedies = True
                    self.weigh_runs = lambda runs: [r for r in runs
                                                    if r[1] not in ("", "none")]
        except Exception as ex:
            try:
                sys.stderr.write("vramtrace: PRE-FLIGHT: not made: %s\n"
                                 % self.clean(str(ex))[:300])
            except Exception:
                pass
        finally:
            if child is not None and child != "child":
                for end in child:
                    end.close()
            if child != "child":
                self.unkeep_batches()
            step.REPEAT_ON = repeat_was

    def ask_preflight(self, folder, asked_from, stage):
        """The side channel written now, the launcher asked for the verdict of `stage` (1: the
        step at its batch; 2: with its half and the remedies) and waited for: its answer
        ("more": stage 2 is wanted), or None when none came in time (said)."""
        import time
        if self.dump_now is not None:
            self.dump_now()
        pid = os.getpid()
        ask = os.path.join(folder, "preflight.%d.ask" % pid)
        done = os.path.join(folder, "preflight.%d.done" % pid)
        with open(ask + ".tmp", "w") as f:
            f.write("%d %d\n" % (asked_from, stage))
        os.replace(ask + ".tmp", ask)
        try:
            wait = float(os.environ.get("VRAMTRACE_PREFLIGHT_WAIT", "") or "30")
        except ValueError:
            wait = 30.0
        wait = min(max(wait, 0.0), 600.0)
        deadline = time.monotonic() + wait
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.02)
        answer = None
        if os.path.exists(done):
            try:
                with open(done) as f:
                    answer = f.read().strip()
            except OSError:
                answer = ""
        else:
            sys.stderr.write("vramtrace: PRE-FLIGHT: no verdict within %g s "
                             "(VRAMTRACE_PREFLIGHT_WAIT); the program goes on\n" % wait)
            sys.stderr.flush()
        for path in (ask, done):
            try:
                os.unlink(path)
            except OSError:
                pass
        return answer

    # ---- a pre-flight's own loop, in a forked copy of the program ----------------------------
    def fork_own(self, module):
        """The program's own loop started on fake tensors in a forked copy of this process
        (_vramtrace_fork), from this first training call on, as a plan's (start_own): "child" in
        the child, which goes on with the program's loop; in the parent the copies' ends (their
        steps read by own_first and own_rest), or None where the loop cannot run there (said
        why on stderr when it was tried), and the stand-in step predicts instead."""
        first = self.first_call
        if (os.environ.get("VRAMTRACE_PREFLIGHT_STEP", PREFLIGHT_STEP) != "program"
                or not self.own_loop_can_run(module)):
            return None
        torch = self.torch
        try:
            import _vramtrace_fork
        except Exception:
            return None
        try:
            self.modules.module_id(module)  # its modules named (M lines) here, in the parent
        except Exception:
            pass
        try:
            wait = float(os.environ.get("VRAMTRACE_PREFLIGHT_CHILD_S", "") or "90")
        except ValueError:
            wait = 90.0
        self.child_wait = min(max(wait, 1.0), 3600.0)
        try:
            sys.stderr.write("vramtrace: PRE-FLIGHT: running the program's own first training "
                             "step on fake tensors, in a copy of the process (a few seconds)\n")
        except Exception:
            pass
        devices = None
        try:
            # What the copy cannot do itself, done here where CUDA may be called, and kept by
            # PyTorch for the copy: the device's properties (an attention's backend is chosen by
            # them) and the CUDA context fake tensors make once per device (a one-element
            # tensor, as a pre-flight in this process makes it); and the current device and the
            # device count, which the copy's runtime is asked for and cannot answer (the
            # preloaded library answers them there: answer_devices).
            if torch.cuda.is_initialized():
                device = torch.device("cuda", step.model_device(module))
                torch.cuda.get_device_properties(device)
                from torch._subclasses.fake_tensor import init_gpu_context
                init_gpu_context(device)
                devices = (torch.cuda.current_device(), torch.cuda.device_count())
        except Exception:
            pass
        groups = self.copy_groups(module, first)
        ends = []
        for index, only in enumerate(groups):
            side, end = _vramtrace_fork.fork(self.child_wait)
            if side is None:
                if not ends:
                    self.say_standin("no copy of the process: %s" % end)
                    return None
                break  # fewer copies: what they would have run is the stand-in's (own_rest)
            if side == "parent":
                ends.append(end)
                continue
            self.run_copy(module, first, devices, end, only, index)
            return "child"
        return ends

    def copy_groups(self, module, first):
        """The configurations (batch, change) each copy of the program runs, in step_runs'
        order: the program's batch and its half in the first copy (the half batch comes from
        the loop's next batch, cut), each other change in a copy of its own, started at the same
        first call, so that the whole pre-flight takes about as long as the first copy's two
        steps; VRAMTRACE_PREFLIGHT_COPIES copies at most (3, or 1 on a machine of fewer than 4
        processors: one copy runs every configuration, one after the other)."""
        runs = [(b, c) for b, c, _ in step.step_runs(self.torch, module, first[2], True, True,
                                                      first[5], self.modules.ids())]
        self.copy_runs = runs  # the order own_rest puts their steps in
        try:
            most = int(os.environ.get("VRAMTRACE_PREFLIGHT_COPIES", "") or
                       (3 if (os.cpu_count() or 1) >= 4 else 1))
        except ValueError:
            most = 1
        return share_runs(runs, most)

    def run_copy(self, module, first, devices, end, only, index):
        """In a copy of the program: the program's own loop set on fake tensors for the
        configurations `only` ((batch, change) pairs), each step sent to the parent as it ends;
        the copy ends once they have run (own_done, child_ends)."""
        from _vramtrace_own import OwnSteps
        self.child = end
        try:
            if index:
                os.nice(5)  # the first copy's step is the one the parent waits for first
            self.answer_devices(devices)
            self.quiet_cuda()
            self.replay_batches()
            own = OwnSteps(self, module, first[1], first[2], first[5], self.modules.ids(),
                           step.model_device(module), first[6], only=only)
            own.on_run_end = lambda b, change, status, lines: end.send(
                {"batch": b, "change": change, "ok": status == "ok", "why": status,
                 "lines": lines})
            self.switch_hooks(False)
            if not own.start():
                end.send({"end": True, "failed": "the loop could not be set on fake tensors "
                          "in this PyTorch"})
                end.end(0)
            self.own = own
            self.own_started = 0
            if own.change == "bf16_autocast":
                own.enter_autocast()  # this first call's forward too, as model_pre does later
            kept_hook = sys.excepthook  # own's: the loop stopped on fake tensors

            def stopped(kind, value, tb):
                kept_hook(kind, value, tb)
                self.child_ends(own)
            sys.excepthook = stopped
            import atexit
            atexit.register(self.child_ends, own)  # before every exit handler made before it
        except BaseException as ex:
            end.send({"end": True, "failed": "%s: %s" % (type(ex).__name__, ex)})
            end.end(1)

    def child_ends(self, own):
        """In the pre-flight's child: what the program's own loop gave, sent to the parent, and
        the child ended (no exit handler of the program's runs here)."""
        end = self.child
        try:
            end.send({"end": True, "failed": own.failed, "first_done": own.first_done,
                      "values_read": own.values_read, "saves_skipped": own.saves_skipped,
                      "done": [list(d) for d in own.done],
                      "failures": [list(f) for f in own.failures]})
        finally:
            end.end(0)

    def answer_devices(self, devices):
        """In the pre-flight's child: the CUDA runtime's device queries (the current device, the
        count), which PyTorch makes on fake CUDA tensors too and which a forked child's runtime
        refuses, answered with the parent's `devices` by the preloaded library
        (vramtrace_v1_forked_copy rebinds this process's imports of them; the parent's stay).
        Raises where it cannot, and the copy says so."""
        if devices is None:
            return  # CUDA never started in the parent: the child's may start as usual
        import ctypes
        try:
            answer = ctypes.CDLL(None).vramtrace_v1_forked_copy
        except AttributeError:
            raise RuntimeError("the preloaded library cannot answer the CUDA runtime in the copy")
        answer.argtypes, answer.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        if answer(int(devices[0]), int(devices[1])) <= 0:
            raise RuntimeError("no import of the CUDA runtime's device queries was found")

    def quiet_cuda(self):
        """In the pre-flight's child: torch.cuda's lazy start a no-op (CUDA is the parent's and
        fake tensors need none), and the calls a loop makes around its steps that would reach
        the device (synchronize, empty_cache, the peak's reset) nothing; the memory figures it
        reads are 0, as torch.cuda gives them in a process whose CUDA is not started."""
        cuda = self.torch.cuda

        def nothing(*args, **kwargs):
            return None
        cuda._lazy_init = nothing
        for name in ("synchronize", "empty_cache", "reset_peak_memory_stats",
                     "reset_max_memory_allocated", "reset_max_memory_cached",
                     "reset_accumulated_memory_stats", "ipc_collect"):
            if hasattr(cuda, name):
                setattr(cuda, name, nothing)

    def keep_batches(self):
        """Until the pre-flight: the last batch each DataLoader iterator gave (when all its
        tensors are on the CPU, as a DataLoader's are), for the pre-flight's child to be given
        again instead of reading what the parent's workers, files and queues hold."""
        try:
            from torch.utils.data import dataloader
            from torch.utils._pytree import tree_leaves
            cls = dataloader._BaseDataLoaderIter
            original = cls.__next__
        except Exception:
            return
        torch = self.torch
        kept = weakref.WeakSet()

        def next_kept(it):
            batch = original(it)
            try:
                cpu = all(t.device.type == "cpu" for t in tree_leaves(batch)
                          if isinstance(t, torch.Tensor))
                it._vramtrace_batch = (batch,) if cpu else None
                kept.add(it)
            except Exception:
                pass
            return batch
        cls.__next__ = next_kept
        self.batches = (cls, original, kept)

    def unkeep_batches(self):
        """The pre-flight over: the DataLoader as it was, no batch kept."""
        if self.batches is None:
            return
        cls, original, kept = self.batches
        self.batches = None
        cls.__next__ = original
        for it in list(kept):
            try:
                del it._vramtrace_batch
            except Exception:
                pass

    def replay_batches(self):
        """In the pre-flight's child: each DataLoader iterator gives the last batch it gave the
        parent again (a copy: the parent's tensors in shared memory stay untouched); one that
        gave none reads its dataset itself when it has no worker processes, else stops the
        child's loop (the workers and their queues are the parent's), as does a new iterator
        with workers."""
        if self.batches is None:
            return
        cls, original, _ = self.batches
        torch = self.torch
        from torch.utils.data import dataloader
        from torch.utils._pytree import tree_map
        from torch.utils._python_dispatch import _disable_current_modes

        def next_replayed(it):
            kept = getattr(it, "_vramtrace_batch", None)
            if kept is None:
                if getattr(it, "_num_workers", 0) == 0:
                    return original(it)
                raise RuntimeError("a DataLoader whose batches come from worker processes, "
                                   "which the pre-flight's copy of the program must not read")
            with _disable_current_modes():
                return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t,
                                kept[0])

        def no_workers(it, *args, **kwargs):
            raise RuntimeError("a new DataLoader iterator with worker processes, which the "
                               "pre-flight's copy of the program does not start")
        cls.__next__ = next_replayed
        dataloader._MultiProcessingDataLoaderIter.__init__ = no_workers

    def own_first(self, ends):
        """The parent's side of a pre-flight's own loop, at its first stage: the first copy's
        step at the program's batch read (the predicted lines); False, said why, when it gave
        none (every copy then stopped)."""
        import time
        child = ends[0]
        deadline = time.monotonic() + self.child_wait
        child.read(lambda ms: any("lines" in m or "end" in m for m in ms), deadline)
        got = next((m for m in child.messages if "lines" in m or "end" in m), None)
        if got is not None and got.get("ok") and got.get("lines"):
            self.predicted = [str(x) for x in got["lines"]]
            self.standin_ran = False
            return True
        if got is None:
            why = ("no answer within %g s (VRAMTRACE_PREFLIGHT_CHILD_S)" % self.child_wait
                   if not child.eof else "the copy %s" % child.close())
        else:
            why = str(got.get("why") or got.get("failed") or "it gave no step")
        self.say_standin("its own loop stopped on fake tensors: %s" % why)
        for end in ends:
            end.close()
        return False

    def own_rest(self, ends):
        """The parent's side, at the second stage: the copies' other steps (the half batch, the
        remedies' changes) read as they come, in step_runs' order and numbered after the first,
        and those they could not give predicted with the stand-in step here."""
        import time
        deadline = time.monotonic() + self.child_wait
        for end in ends:
            end.read(lambda ms: any("end" in m for m in ms), deadline)
        steps, whys = {}, []
        for i, end in enumerate(ends):
            for m in end.messages[1 if i == 0 else 0:]:
                if "lines" in m and m.get("ok") and m.get("lines"):
                    steps.setdefault((m.get("batch"), m.get("change")),
                                     [str(x) for x in m["lines"]])
            last = next((m for m in end.messages if "end" in m), None)
            if last is None:
                whys.append("the copy " + end.close())
                continue
            if last.get("failed"):
                whys.append(last["failed"])
            end.close(grace=5.0)
        for key in self.copy_runs:
            if key in steps:
                self.predicted += renumbered(steps[key], step.next_step_id(self.predicted))

        def missing(runs):
            return [r for r in runs[1:] if (r[0], r[1]) not in steps]
        self.predict_steps(force=True, runs=missing)
        if self.standin_ran:
            self.say_standin("the program's own loop gave %d of the pre-flight's steps, the "
                             "stand-in step the others (%s)" % (1 + len(steps),
                                                                 "; ".join(whys) or
                                                                 "it stopped before them"))

    def say_standin(self, why):
        """Said on stderr: where the pre-flight's steps are the stand-in step's, and why."""
        try:
            sys.stderr.write("vramtrace: PRE-FLIGHT: the stand-in step ran, not the program's "
                             "own loop: %s\n" % self.clean(why)[:400])
        except Exception:
            pass

    def predict_first_step(self, module, line, runs=None):
        """The step the program is about to run, predicted on fake tensors (at its batch and its
        half, and with the remedies' changes; `runs`, a selection of them: step_runs' list to
        the list run), for `vramtrace plan` (a Z line) and `run --preflight` (a PF line):
        `line`, the caller's line format (common/side_channel.h: when, the batch, the fake
        steps' time, whether the RNG states were put back, the loss taken), filled in, with the
        batch and the nanoseconds the fake steps took."""
        import time
        started = time.perf_counter_ns()
        try:
            self.modules.module_id(module)  # its modules named (M lines) for the predicted requests
        except Exception:
            pass
        first = self.first_call
        batch = first[2] if first is not None else 0
        del step.LOSSES[:]
        if first is not None and not batch:
            self.predicted = ["N\t0\t1\t0\t0\t%d\t%s\n" % (
                first[6], "not predicted: the model was called with no tensor to take a batch "
                "from")]
        elif first is not None:
            self.predict_steps(force=True, runs=runs)
        spent = time.perf_counter_ns() - started
        loss = step.LOSSES[0] if step.LOSSES else ""
        return (line % (self.marks.now(), batch, spent, 1 if self.rng_restored else 0, loss), batch,
                spent)

    def plan_stop(self, module):
        """`vramtrace plan`: the step the program is about to run predicted on fake tensors
        (at its batch and its half, and with the remedies' changes), then the process ended
        with status 0 before the forward runs: SystemExit(0), so that the exit handlers (this
        hook's side channel, the preloaded library's trace) run as at any clean exit. The
        program's own loop runs those steps where it can (_vramtrace_own: its loss, scaler,
        accumulation); VRAMTRACE_PLAN_STEP=standin, or a model that cannot, takes the stand-in
        step."""
        if self.start_own(module):
            return  # the program goes on, on fake tensors; own_done stops it
        self.plan_line, batch, spent = self.predict_first_step(
            module, "Z\t%d\t%d\t%d\t%d\t%s\n")
        # The side channel written now, as the allocator stands at the stop: what the program
        # frees while SystemExit unwinds it (its model, its batch) is no part of the step
        # planned, and the replay would take those frees for the step's.
        if self.dump_now is not None:
            self.dump_now()
        self.want_call = True  # the next outermost call, if the program goes on, ends it
        try:
            sys.stderr.write(
                "vramtrace plan: stopped before the first training step (batch %d): the step "
                "was predicted on fake tensors in %.1f s; nothing of it ran\n"
                % (batch, spent / 1e9))
            sys.stderr.flush()
        except Exception:
            pass
        raise SystemExit(0)

    def optimizers_of(self, model):
        """The optimizers made so far that step any of the model's parameters, first made
        first."""
        params = {id(q) for q in model.parameters()}
        return [o for o in (w() for w in self.made_optimizers)
                if o is not None and any(id(q) in params for g in o.param_groups
                                         for q in g["params"])]

    def own_loop_can_run(self, module):
        """Whether the program's own loop can run on fake tensors from this first training call
        (a plan's in the process, a pre-flight's in copies of it): not for a compiled or
        distributed model, nor with a process group (the loop's collectives would wait for the
        other ranks), nor in a PyTorch without what it needs."""
        first = self.first_call
        if (first is None or not first[2] or first[0]() is not module
                or type(module).__name__ in ("OptimizedModule", "DistributedDataParallel",
                                             "FullyShardedDataParallel", "DataParallel")):
            return False
        try:
            dist = self.torch.distributed
            if dist.is_available() and dist.is_initialized():
                return False
        except Exception:
            pass
        try:
            from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: F401
            from torch.utils._python_dispatch import _disable_current_modes  # noqa: F401
            from _vramtrace_own import OwnSteps  # noqa: F401
        except Exception:
            return False
        return True

    def start_own(self, module):
        """The plan's steps run by the program's own loop on fake tensors (_vramtrace_own), from
        this first training call on. False, nothing changed, where it cannot be: a compiled or
        distributed model, a process group (the loop's collectives would wait for the other
        ranks), VRAMTRACE_PLAN_STEP=standin, or a PyTorch without what it needs."""
        import time
        first = self.first_call
        if (os.environ.get("VRAMTRACE_PLAN_STEP", "program") == "standin"
                or not self.own_loop_can_run(module)):
            return False
        try:
            from _vramtrace_own import OwnSteps
            self.modules.module_id(module)  # its modules named (M lines) for the predicted requests
            own = OwnSteps(self, module, first[1], first[2], first[5], self.modules.ids(),
                           step.model_device(module), first[6])
        except Exception:
            return False
        started = time.perf_counter_ns()
        self.switch_hooks(False)  # the hook's marks and labels stay out of the fake steps
        if not own.start():
            self.switch_hooks(True)
            return False
        self.own, self.own_started = own, started
        try:
            sys.stderr.write(
                "vramtrace plan: the program's own loop runs on fake tensors from its first "
                "training step (batch %d): two optimizer steps for each of %d predicted steps; "
                "nothing of it runs on the GPU\n" % (first[2], len(own.runs)))
            sys.stderr.flush()
        except Exception:
            pass
        return True

    def own_done(self, own, at_exit=False):
        """The program's own steps over (all run, or the program stopped on fake tensors): the
        steps it did not reach predicted with the stand-in step, the plan's Z line, and the
        stop (SystemExit(0)) unless the process is exiting already."""
        import time
        if self.child is not None:
            self.child_ends(own)
        self.own = None
        batch = own.batch
        self.predicted = list(own.lines)
        if own.first_done:
            missing = [r for r in own.runs if (r[0], r[1]) not in own.done]
            if missing:
                model = own.model
                ref, call, _, training, grad, autocast, t = self.first_call
                try:
                    self.standin_ran = True
                    self.predicted += step.predicted_lines(
                        self.torch, own.device, t, model, call, batch, own.optimizers[0]
                        if own.optimizers else None, training, grad, autocast,
                        self.modules.ids(), first_id=len(own.done) + 1, runs=missing,
                        output_dies=self.output_dies)
                except Exception:
                    pass
            self.switch_hooks(True)
            loss = "program"
            self.rng_restored = own.rng is not None
        else:
            self.switch_hooks(True)
            self.predicted = []
            del step.LOSSES[:]
            self.predict_steps(force=True)
            loss = step.LOSSES[0] if step.LOSSES else ""
        spent = time.perf_counter_ns() - self.own_started
        self.plan_line = "Z\t%d\t%d\t%d\t%d\t%s\n" % (self.marks.now(), batch, spent,
                                                        1 if self.rng_restored else 0, loss)
        notes = []
        if own.first_done:
            notes.append("the program's own loop ran %d of %d steps on fake tensors"
                         % (len(own.done), len(own.runs)))
            notes.append("put back: the model's parameters and buffers, its optimizers, the RNG "
                         "states; not put back, as the plan ends the program: what else its "
                         "loop changed (a GradScaler's scale, a learning-rate scheduler, its "
                         "DataLoader's place)")
        if own.failed and not own.first_done:
            notes.append("the program's own step stopped on fake tensors (%s): the steps were "
                         "predicted with a stand-in step instead, whose whole step and largest "
                         "batch are not the program's" % own.failed)
        for b, change, why in own.failures:
            notes.append("the step at batch %d%s: %s" % (b, " with " + change if change else "",
                                                         why))
        if own.values_read:
            notes.append("%d values the program read from fake tensors (.item(), bool()) "
                         "were given as 0" % own.values_read)
        if own.saves_skipped:
            notes.append("%d torch.save calls skipped" % own.saves_skipped)
        # Said in the report (ZN lines: report.json's plan notes, the summary's PLAN lines).
        for n in notes:
            n = self.clean(n).replace("\t", " ").replace("\n", " ")[:1000]
            self.plan_line += "ZN\t%s\n" % n
        try:
            sys.stderr.write(
                "vramtrace plan: stopped %s (batch %d): predicted on fake tensors in %.1f s; "
                "nothing of it ran on the GPU\n"
                % ("after the program's own steps" if own.first_done else
                   "before the first training step", batch, spent / 1e9))
            sys.stderr.flush()
        except Exception:
            pass
        if at_exit:
            return
        if self.dump_now is not None:
            self.dump_now()
        self.want_call = True  # the next outermost call, if the program goes on, ends it
        raise SystemExit(0)

    def plan_exit(self):
        """The program caught the plan's SystemExit and called a module again: the process ends
        at once, with status 0 still (the side channel was written at the stop)."""
        try:
            sys.stderr.flush()
            sys.stdout.flush()
        except Exception:
            pass
        os._exit(0)

    def second_step(self):
        """The second step begins: with VRAMTRACE_TORCH_PREDICT=always, its first step run on
        fake tensors now, the program waiting."""
        if self.predict_always:
            self.predict_steps()

    def keep_shape(self):
        """The first optimizer step ended: by default, a ShapeCopy of the model and its
        optimizer kept for the fake steps at exit (weigh_at_exit), the program's model being
        usually gone by then. Where it cannot be made, why (said at exit)."""
        first = self.first_call
        if not self.weigh_remedies or first is None or self.shape is not None:
            return
        import time
        started = time.perf_counter_ns()
        model = first[0]()
        try:
            if model is None:
                raise RuntimeError("the model was gone at the end of the first step")
            name = type(model).__name__
            if name == "OptimizedModule":
                raise RuntimeError("a compiled model (OptimizedModule)")
            if name in ("DistributedDataParallel", "DataParallel"):
                model = model.module
            optimizers = self.optimizers_of(model)
            self.shape = step.ShapeCopy(self.torch, model,
                                        optimizers[0] if optimizers else None,
                                        self.modules.ids())
        except Exception as ex:
            self.shape_why = "the model could not be copied as shapes: %s" % self.clean(
                str(ex).splitlines()[0] if str(ex) else type(ex).__name__)[:300]
        self.shape_ns = time.perf_counter_ns() - started
        count = self.allocation_count()
        if count is not None and self.first_allocs is not None:
            self.step_allocs = max(0, count - self.first_allocs)

    def allocation_count(self):
        """PyTorch's count of allocations on the current device so far (None without it)."""
        try:
            return int(self.torch.cuda.memory_stats()["allocation.all.allocated"])
        except Exception:
            return None

    def weigh_at_exit(self):
        """At the exit of a run that finished its first step and never ran out of memory, by
        default: its remedies weighed on fake steps of the ShapeCopy kept at the first step, in
        at most VRAMTRACE_TORCH_PREDICT_BUDGET (0.01) of the run's time so far, copy included.
        None is begun when they are foreseen to take more (from the first step's allocations),
        and none after the share is spent (a step once begun runs to its end); then an N line
        (with its V line, "none") says why they were not weighed, which the report's remedies
        then say (estimated from the recorded requests)."""
        first = self.first_call
        if (not self.weigh_remedies or first is None or self.marks.oom_seen or not self.first_done
                or not first[2] or (self.predicted and self.weigh_runs is None)):
            return
        ref, call, batch, training, grad, autocast, t = first
        if not (training and grad):
            return
        import time
        step_id = step.next_step_id(self.predicted)
        ran_ns = max(0, self.marks.now() - self.started_ns)
        budget_ns = int(ran_ns * self.weigh_budget) - self.shape_ns
        why = self.shape_why
        if why is None and self.shape is None:
            why = "the model was not copied at its first step"
        if why is None and budget_ns <= 0:
            why = ("the run took %.1f s, and %g %% of it (VRAMTRACE_TORCH_PREDICT_BUDGET) is "
                   "too short for them" % (ran_ns / 1e9, 100 * self.weigh_budget))
        # What they would take, from the first step's allocations: a fake step costs about
        # 0.6 ms of Python per allocation of the real one (two iterations; 0.53 to 0.70 ms on
        # the H100 for ResNet-50 and a 1e9 Llama), taken as 1 ms, three steps. Not begun when
        # over the share: a fake step, once begun, runs to its end.
        if why is None and self.step_allocs:
            steps = 2 if self.weigh_runs is not None else 3
            expect_ns = self.step_allocs * steps * 1000000
            if expect_ns > budget_ns:
                why = ("they would take about %.1f s (%d allocations in the first step, %d "
                       "steps), more than %g %% of the run's %.1f s "
                       "(VRAMTRACE_TORCH_PREDICT_BUDGET)"
                       % (expect_ns / 1e9, self.step_allocs, steps, 100 * self.weigh_budget,
                          ran_ns / 1e9))
        if why is None:
            started = time.monotonic_ns()
            try:
                self.predict_steps(force=True, shape=self.shape,
                                   deadline_ns=started + budget_ns, runs=self.weigh_runs)
            except step.OverBudget:
                stopped = ("were stopped after %.3f s, past %g %% of the run's %.1f s "
                           "(VRAMTRACE_TORCH_PREDICT_BUDGET)"
                           % ((time.monotonic_ns() - started) / 1e9, 100 * self.weigh_budget,
                              ran_ns / 1e9))
                why = "they " + stopped
                try:
                    sys.stderr.write("vramtrace: the remedies' fake steps %s\n" % stopped)
                except Exception:
                    pass
            weigh_ns = time.monotonic_ns() - started
            if why is None:
                try:
                    sys.stderr.write(
                        "vramtrace: the remedies were weighed on fake tensors in %.2f s (%.2f %% "
                        "of the run's %.1f s; the model's copy as shapes took %.1f ms at its "
                        "first step)\n" % (weigh_ns / 1e9, 100.0 * (
                            weigh_ns + self.shape_ns) / max(ran_ns, 1), ran_ns / 1e9,
                            self.shape_ns / 1e6))
                except Exception:
                    pass
        if why is not None:
            self.predicted = self.predicted + step.step_lines(
                self.shape.device if self.shape is not None else 0, step_id, batch, batch, t,
                "not weighed on fake steps: %s; VRAMTRACE_TORCH_PREDICT=always runs them as the "
                "second step begins" % why, "none", [], [], None)

    def predict_steps(self, force=False, shape=None, deadline_ns=None, runs=None):
        """At exit of a process that ran out of memory (or of any, with
        VRAMTRACE_TORCH_PREDICT=always; or, `force`, before the first step for `vramtrace
        plan`, and at a finished run's exit for weigh_at_exit): the N, V and R lines of its
        first step run on fake tensors: completed at the recorded batch and its half when the
        process never finished it, and with the changes the report's remedies weigh
        (_vramtrace_step.py). On the model, or on `shape` (a ShapeCopy), or on the one kept
        when the model is gone; past `deadline_ns`, OverBudget. `runs`: a selection of
        step_runs' (a function of its list), whose lines follow those already predicted."""
        first = self.first_call
        if (first is None or (self.predicted and runs is None)
                or not (self.marks.oom_seen or self.predict_always or force)):
            return
        ref, call, batch, training, grad, autocast, t = first
        model = ref() if shape is None else None
        if model is None and shape is None:
            shape = self.shape
        if (model is None and shape is None) or not batch:
            return
        # The fake step must leave no marks of its own, nor move the program's random numbers.
        enabled = self.switch_hooks(False)
        torch = self.torch
        rng = cuda_rng = None
        try:
            rng = torch.get_rng_state()
            cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        except Exception:
            pass
        self.rng_restored = False
        try:
            self.predict_model(first, model, shape, deadline_ns, runs)
        finally:
            try:
                if rng is not None:
                    torch.set_rng_state(rng)
                    if cuda_rng is not None or not torch.cuda.is_initialized():
                        self.rng_restored = True
                if cuda_rng is not None:
                    torch.cuda.set_rng_state_all(cuda_rng)
            except Exception:
                self.rng_restored = False
            if enabled:
                self.switch_hooks(True)

    def predict_model(self, first, model, shape=None, deadline_ns=None, runs=None):
        import time
        ref, call, batch, training, grad, autocast, t = first
        before = self.predicted if runs is not None else []
        first_id = step.next_step_id(before)
        self.predicted = []
        try:
            if self.plan:
                sys.stderr.write("vramtrace plan: running the first training step on fake "
                                 "tensors (a few seconds)\n")
            elif self.preflighting and before:
                sys.stderr.write("vramtrace: PRE-FLIGHT: running it at half its batch and with "
                                 "the remedies' changes on fake tensors (a few seconds)\n")
            elif self.preflighting:
                sys.stderr.write("vramtrace: PRE-FLIGHT: running the first training step on "
                                 "fake tensors (a few seconds)\n")
            elif deadline_ns is not None:
                sys.stderr.write(
                    "vramtrace: weighing the remedies on fake tensors (at most %.3f s, %g %% "
                    "of the run; VRAMTRACE_TORCH_PREDICT=off skips this)\n"
                    % ((deadline_ns - time.monotonic_ns()) / 1e9,
                       100 * self.weigh_budget))
            else:
                sys.stderr.write(
                    "vramtrace: %s: running the step on fake tensors to %s (a few seconds; "
                    "VRAMTRACE_TORCH_PREDICT=off skips this)\n"
                    % (("the first step ran out of memory", "predict the rest of it and weigh "
                        "the remedies") if not self.first_done else
                       ("out of memory" if self.marks.oom_seen
                        else "VRAMTRACE_TORCH_PREDICT=always", "weigh the remedies")))
        except Exception:
            pass
        try:
            self.standin_ran = True
            if shape is not None:
                self.predicted = step.predicted_lines(
                    self.torch, shape.device, t, shape.model, call, batch, shape.optimizer,
                    training, grad, autocast, shape.module_ids, first_id=first_id,
                    finished=self.first_done, runs=runs, devices=shape.devices,
                    deadline_ns=deadline_ns, output_dies=self.output_dies)
                return
            device = step.model_device(model)
            optimizers = self.optimizers_of(model)
            optimizer = optimizers[0] if optimizers else None
            module_ids = self.modules.ids()
            name = type(model).__name__
            if name in ("OptimizedModule", "DistributedDataParallel"):
                inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
                if name == "OptimizedModule" or inner is None:
                    self.predicted = ["N\t%d\t1\t%d\t%d\t%d\tnot predicted: a %s\n"
                                      % (device, batch, batch, t, name)]
                    return
                model = inner
            self.predicted = step.predicted_lines(self.torch, device, t, model, call, batch,
                                                  optimizer, training, grad, autocast,
                                                  module_ids, first_id=first_id,
                                                  finished=self.first_done, runs=runs,
                                                  deadline_ns=deadline_ns,
                                                  output_dies=self.output_dies)
        except step.OverBudget:
            raise
        except Exception as ex:
            self.predicted = ["N\t0\t%d\t%d\t%d\t%d\tnot predicted: %s\n"
                              % (first_id, batch, batch, t, self.clean(str(ex))[:500])]
        finally:
            self.predicted = before + self.predicted
