"""What vramtrace does at the edges, as a careful or a hostile user meets them, end to end on the
stand-in, each case with its exact outcome:
  - a user's files are never touched: a .python folder or sitecustomize.py in the -o folder
    stays as it was (the start-up hook lives in a private temporary folder, removed after);
  - outputs (--markdown, --junit, diff --html) never replace a file without --force, and never
    one of the inputs, even with --force, however the path is spelled;
  - the gate refuses a baseline with no data (exit 2), whatever the baseline run's fate;
  - --max-increase refuses a bare number, naming both spellings that work;
  - a command whose CUDA cannot start (no driver) is named with what CUDA answered; a command
    that cannot be run leaves nothing behind;
  - small ones: a mistyped subcommand is named, `-o --` is refused, a trace of only its header
    is no report, a damaged trace is not a run of its own, JSON errors in plain words, file
    names with control characters and "::" escaped.
   edges_test.py BUILD_DIR"""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
sys.dont_write_bytecode = True
import vtrel  # noqa: E402  (the reliability tests' helpers)
from vtrel import check  # noqa: E402

VT = vtrel.VRAMTRACE
BASIC = os.path.join(vtrel.BUILD, "tests", "programs", "basic")
ESC = "\x1b"


def run(args, cwd, **kw):
    return subprocess.run([VT] + args, cwd=cwd, env=kw.pop("env", vtrel.env()),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120, **kw)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def users_files_untouched(work):
    tmp = os.path.join(work, "tmp")
    os.mkdir(tmp)
    env = vtrel.env(TMPDIR=tmp)
    d = os.path.join(work, "d")
    os.makedirs(os.path.join(d, ".python"))
    os.chmod(os.path.join(d, ".python"), 0o755)
    write(os.path.join(d, ".python", "sitecustomize.py"), "mine\n")
    r = run(["run", "-o", d, "--", "true"], work, env=env)
    check(r.returncode == 0, "run -o d: exit %d (%r)" % (r.returncode, r.stderr))
    check(read(os.path.join(d, ".python", "sitecustomize.py")) == b"mine\n",
          "the user's d/.python/sitecustomize.py was replaced")
    check(os.stat(os.path.join(d, ".python")).st_mode & 0o777 == 0o755,
          "d/.python's mode changed: %o" % os.stat(os.path.join(d, ".python")).st_mode)
    # A plain file named .python keeps its mode and bytes too.
    e = os.path.join(work, "e")
    os.mkdir(e)
    write(os.path.join(e, ".python"), "notes\n")
    os.chmod(os.path.join(e, ".python"), 0o644)
    r = run(["run", "-o", e, "--", "true"], work, env=env)
    check(r.returncode == 0, "run -o e: exit %d (%r)" % (r.returncode, r.stderr))
    check(read(os.path.join(e, ".python")) == b"notes\n" and
          os.stat(os.path.join(e, ".python")).st_mode & 0o777 == 0o644, "e/.python changed")
    # The hook still runs (from a private folder of its own), and is gone after the run.
    probe = "import sitecustomize, os; print(os.path.basename(os.path.dirname(sitecustomize.__file__))[:15], oct(os.stat(os.path.dirname(sitecustomize.__file__)).st_mode & 0o777))"
    r = run(["run", "-o", os.path.join(work, "hook"), "--", "python3", "-c", probe], work,
            env=env)
    check(r.returncode == 0 and r.stdout == "vramtrace-hook- 0o700\n",
          "the hook's folder: %r (%r)" % (r.stdout, r.stderr))
    check(os.listdir(tmp) == [], "left in TMPDIR: %r" % os.listdir(tmp))
    check(sorted(os.listdir(os.path.join(work, "hook"))) == ["report.html", "report.json",
                                                             "vramtrace.run"],
          "the run folder: %r" % sorted(os.listdir(os.path.join(work, "hook"))))
    print("a user's files untouched by the start-up hook: checked")


def outputs_never_replace(work):
    base, cand = os.path.join(work, "base"), os.path.join(work, "cand")
    for d in (base, cand):
        r = run(["run", "-o", d, "--", BASIC], work)
        check(r.returncode == 0, "run %s: %r" % (d, r.stderr))
    report = os.path.join(cand, "report.json")
    before = {p: read(p) for p in (report, os.path.join(base, "report.json"))}
    f = os.path.join(work, "notes.md")
    write(f, "mine\n")
    for args, opt in ((["check", cand, "--baseline", base, "--markdown", f], "--markdown"),
                      (["check", cand, "--baseline", base, "--junit", f], "--junit"),
                      (["diff", base, cand, "--html", f], "--html"),
                      (["run", "--baseline", base, "--markdown", f, "-o",
                        os.path.join(work, "never"), "--", BASIC], "--markdown")):
        r = run(args, work)
        tag = " ".join(args[:1] + [opt])
        check(r.returncode == 2, "%s over a file: exit %d (%r)" % (tag, r.returncode, r.stderr))
        check(r.stderr == "vramtrace %s: %s %s exists: use --force to replace it, or name "
              "another file\n" % (args[0], opt, f), "%s over a file: %r" % (tag, r.stderr))
        check(r.stdout == "", "%s over a file: compared anyway: %r" % (tag, r.stdout))
        check(read(f) == b"mine\n", "%s: the file was replaced without --force" % tag)
    check(not os.path.exists(os.path.join(work, "never")), "run --baseline ran the command")
    r = run(["check", cand, "--baseline", base, "--markdown", f, "--force"], work)
    check(r.returncode == 0 and read(f).startswith(b"### vramtrace: peak device memory within"),
          "check --markdown --force: exit %d, %r" % (r.returncode, read(f)[:60]))
    r = run(["diff", base, cand, "--html", f, "--force"], work)
    check(r.returncode == 0 and read(f).startswith(b"<!doctype html>"),
          "diff --html --force: exit %d (%r)" % (r.returncode, r.stderr))

    # An input is never an output, however it is named, even with --force.
    os.symlink(report, os.path.join(work, "link.json"))
    os.link(report, os.path.join(work, "hard.json"))
    spellings = [report, os.path.join(cand, ".", "report.json"), cand + "//report.json",
                 os.path.join(cand, "..", "cand", "report.json"), os.path.join(work, "link.json"),
                 os.path.join(work, "hard.json"), os.path.relpath(report, work)]
    cases = 0
    for spelled in spellings:
        for args, opt in ((["check", cand, "--baseline", base], "--markdown"),
                          (["check", cand, "--baseline", base], "--junit"),
                          (["check", base, "--baseline", cand], "--markdown"),
                          (["check", os.path.join(work, "link.json"), "--baseline", base],
                           "--junit"),
                          (["diff", base, cand], "--html"),
                          (["diff", cand, base], "--html")):
            r = run(args + [opt, spelled, "--force"], work)
            tag = "%s %s %s --force" % (args[0], opt, spelled)
            check(r.returncode == 2, "%s: exit %d (%r)" % (tag, r.returncode, r.stderr))
            check(r.stderr.startswith("vramtrace %s: %s %s is read or written by this command ("
                                      % (args[0], opt, spelled)) and
                  r.stderr.endswith("): name another file\n") and r.stderr.count("\n") == 1,
                  "%s: %r" % (tag, r.stderr))
            cases += 1
    # A trace of a folder given as the input is one of its files too.
    trace = [n for n in os.listdir(cand) if n.endswith(".vtrace")][0]
    r = run(["check", cand, "--baseline", base, "--junit", os.path.join(cand, trace), "--force"],
            work)
    check(r.returncode == 2 and "is read or written by this command" in r.stderr,
          "--junit over the candidate's trace: %d %r" % (r.returncode, r.stderr))
    r = run(["check", cand, "--baseline", base, "--markdown", f, "--junit", f, "--force"], work)
    check(r.returncode == 2 and r.stderr == "vramtrace check: --markdown and --junit name the "
          "same file (%s): name two files\n" % f, "--markdown and --junit one file: %r" % r.stderr)
    r = run(["check", cand, "--baseline", base, "--markdown", work, "--force"], work)
    check(r.returncode == 2 and r.stderr == "vramtrace check: --markdown %s is a folder: name a "
          "file\n" % work, "--markdown a folder: %r" % r.stderr)
    # run --baseline: the baseline, and the reports the run writes.
    for target in (os.path.join(base, "report.json"), os.path.join(work, "r2", "report.json")):
        os.makedirs(os.path.join(work, "r2"), exist_ok=True)
        r = run(["run", "--force", "--baseline", base, "--junit", target, "-o",
                 os.path.join(work, "r2"), "--", BASIC], work)
        check(r.returncode == 2 and "is read or written by this command" in r.stderr and
              r.stdout == "", "run --junit %s: %d %r" % (target, r.returncode, r.stderr))
    # A refused command line (CLI11) does not write over an existing CI file either.
    r = run(["check", cand, "--baseline", base, "--markdown", f, "--device", "x"], work)
    check(r.returncode == 2 and read(f).startswith(b"<!doctype html>"),
          "a refused command line replaced --markdown's file: %r" % read(f)[:40])
    r = run(["check", cand, "--baseline", base, "--markdown", report, "--device", "x", "--force"],
            work)
    check(r.returncode == 2, "refused command line over an input: %d" % r.returncode)
    for p, b in before.items():
        check(read(p) == b, "an input changed: %s" % p)
    print("outputs never replace a file without --force, nor an input (%d spellings): checked"
          % cases)


def clean_run(work):
    """A run of basic that no case writes over (the output cases aim at base and cand)."""
    d = os.path.join(work, "clean")
    if not os.path.exists(d):
        r = run(["run", "-o", d, "--", BASIC], work)
        check(r.returncode == 0, "run clean: %r" % r.stderr)
    return d


def baselines_without_data(work):
    cand = clean_run(work)
    md = os.path.join(work, "gate.md")
    # Each a run whose report has no process: nothing to compare with.
    runs = {"true": (["true"], ""),
            "exit3": (["sh", "-c", "exit 3"], " (its command exited 3)"),
            "missing": (["sh", "-c", "exec /nonexistent-cmd 2>/dev/null"],
                        " (its command exited 127: not found)"),
            "killed": (["sh", "-c", "kill -TERM $$"], " (its command was killed by signal 15)")}
    for name, (cmd, how) in sorted(runs.items()):
        d = os.path.join(work, "bad-" + name)
        run(["run", "-o", d, "--"] + cmd, work)
        for baseline in (d, os.path.join(d, "report.json")):
            if os.path.exists(md):
                os.remove(md)
            r = run(["check", cand, "--baseline", baseline, "--markdown", md], work)
            why = ("baseline %s: no profiled process, so no peak to compare with%s; record the "
                   "baseline again from a run whose command used CUDA" % (baseline, how))
            check(r.returncode == 2, "baseline %s: exit %d (%r %r)" % (baseline, r.returncode,
                                                                      r.stdout, r.stderr))
            check(r.stderr == "vramtrace check: %s\n" % why and r.stdout == "",
                  "baseline %s: %r %r" % (baseline, r.stdout, r.stderr))
            check(os.path.exists(md) and "**Failed**" in open(md).read(),
                  "baseline %s: the CI file does not fail" % baseline)
        r = run(["run", "--baseline", d, "-o", os.path.join(work, "never-" + name), "--", BASIC],
                work)
        check(r.returncode == 2 and r.stdout == "" and
              not os.path.exists(os.path.join(work, "never-" + name)),
              "run --baseline %s: %d %r" % (name, r.returncode, r.stderr))
    print("baselines without data refused (exit 2): checked")


def budgets(work):
    cand = clean_run(work)
    for value, msg in (("5", "'5' has no unit: write 5% for a share of the baseline's peak, or "
                             "5MiB for a size"),
                       ("abc", "'abc' is not a percentage or a size (examples: 5%, 256MiB)")):
        r = run(["check", cand, "--baseline", cand, "--max-increase", value], work)
        check(r.returncode == 2 and r.stderr == "vramtrace check: %s\n" % msg,
              "--max-increase %s: %d %r" % (value, r.returncode, r.stderr))
    for value in ("5%", "5MiB", "5B", "0:5%"):
        r = run(["check", cand, "--baseline", cand, "--max-increase", value], work)
        check(r.returncode == 0, "--max-increase %s: %d %r" % (value, r.returncode, r.stderr))
    print("--max-increase refuses a bare number: checked")


def cuda_cannot_start(work):
    # The stand-in off the library path: the program loads the toolkit's CUDA runtime, which
    # finds no driver on this machine.
    env = vtrel.env()
    env.pop("LD_LIBRARY_PATH")
    alone = subprocess.run([BASIC], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    if "driver version is insufficient" not in alone.stderr:
        print("SKIP: CUDA cannot start: without the stand-in, basic says %r" % alone.stderr)
        return
    d = os.path.join(work, "nodriver")
    r = run(["run", "-o", d, "--", BASIC], work, env=env)
    check(r.returncode == alone.returncode, "exit %d, alone %d" % (r.returncode, alone.returncode))
    check(r.stdout == alone.stdout, "the program's output changed: %r" % r.stdout)
    check(r.stderr.startswith(alone.stderr), "the program's own stderr first: %r" % r.stderr)
    why = ("CUDA cannot start in this process: it loaded the CUDA runtime (libcudart.so.13) "
           "but no CUDA driver can be loaded (libcuda.so.1 not found: no driver installed, or "
           "not on the library path), so its CUDA calls answer 'CUDA driver version is "
           "insufficient for CUDA runtime version' and there is no device memory to profile")
    check(r.stderr.count("vramtrace: " + why + "\n") == 1, "the library's line: %r" % r.stderr)
    check("no process of the command used CUDA" not in r.stderr, "misleading: %r" % r.stderr)
    rep = vtrel.load(os.path.join(d, "report.json"))
    procs = rep["processes"]
    check(len(procs) == 1 and procs[0]["profiled"] is False and
          procs[0]["not_profiled_reason"] == why and rep["run"]["processes_not_profiled"] == 1,
          "the report: %r" % [(p.get("profiled"), p.get("not_profiled_reason")) for p in procs])
    check(procs != [] and ("NOT PROFILED: pid %d (basic): " % procs[0]["pid"]) in r.stderr,
          "the summary names it: %r" % r.stderr)
    # A runtime loaded and never used where a driver can be found (the driver is loaded at the
    # first call) is no such case: nothing said. The same where none can be: said.
    fake = os.path.join(work, "fake-driver")
    os.mkdir(fake)
    write(os.path.join(fake, "libcuda.so.1"), "")
    load = ["python3", "-c", "import ctypes; ctypes.CDLL('libcudart.so.13')"]
    for libpath, said in ((fake, False), (None, True)):
        e = dict(env)
        if libpath:
            e["LD_LIBRARY_PATH"] = libpath
        d = os.path.join(work, "loaded-%s" % said)
        r = run(["run", "-o", d, "--"] + load, work, env=e)
        check(r.returncode == 0 and (("vramtrace: " + why + "\n") in r.stderr) == said and
              len(vtrel.load(os.path.join(d, "report.json"))["processes"]) == int(said),
              "a runtime loaded, never used, a driver %s: %r"
              % ("findable" if libpath else "nowhere", r.stderr))
    # A command that cannot be run at all: its line alone, no folder left, each time.
    out = os.path.join(work, "mistyped")
    os.mkdir(out)
    for _ in range(2):
        r = run(["run", "--", "/nonexistent"], out)
        check(r.returncode == 127, "run /nonexistent: exit %d" % r.returncode)
        check(r.stderr == "vramtrace run: cannot run '/nonexistent': No such file or directory\n",
              "run /nonexistent: %r" % r.stderr)
    check(os.listdir(out) == [], "run /nonexistent left %r" % os.listdir(out))
    r = run(["run", "-o", "given", "--", "/nonexistent"], out)
    check(r.returncode == 127 and not os.path.exists(os.path.join(out, "given")),
          "run -o given /nonexistent: %d, left %r" % (r.returncode, os.listdir(out)))
    md = os.path.join(out, "g.md")
    r = run(["run", "--baseline", clean_run(work), "--markdown", md, "--", "/nonexistent"], out)
    check(r.returncode == 127 and "**Failed**: the command could not be run (No such file or "
          "directory): not checked" in open(md).read(), "run --baseline /nonexistent: %r"
          % (open(md).read() if os.path.exists(md) else None))
    print("CUDA that cannot start, a command that cannot run: checked")


def small_ones(work):
    r = run(["frobnicate"], work)
    check(r.returncode == 2 and r.stderr == "vramtrace: 'frobnicate' is not a vramtrace command: "
          "use run, plan, check, diff, report, whatif, snapshot or export (vramtrace --help)\n",
          "frobnicate: %r" % r.stderr)
    r = run(["run", "-o", "--", "true"], work)
    check(r.returncode == 2 and not os.path.exists(os.path.join(work, "--")),
          "run -o -- true: %d %r" % (r.returncode, r.stderr))
    check(r.stderr.startswith("--output: '--' is not a folder name: give -o a folder"),
          "run -o --: %r" % r.stderr)

    # A trace of only its header: nothing recorded, no report (as a longer cut).
    hdr = os.path.join(work, "hdr")
    os.mkdir(hdr)
    clean = clean_run(work)
    trace = [n for n in os.listdir(clean) if n.endswith(".vtrace")][0]
    good = read(os.path.join(clean, trace))
    with open(os.path.join(hdr, "vramtrace.1.vtrace"), "wb") as f:
        f.write(good[:16])
    r = run(["report", os.path.join(hdr, "vramtrace.1.vtrace"), "-o", os.path.join(work, "hdr-out")],
            work)
    check(r.returncode == 2 and r.stderr == "vramtrace report: %s: no process record (empty "
          "stream)\nvramtrace report: nothing could be read from the input: no report written\n"
          % os.path.join(hdr, "vramtrace.1.vtrace"),
          "a header-only trace: %d %r" % (r.returncode, r.stderr))
    check(not os.path.exists(os.path.join(work, "hdr-out", "report.json")),
          "a header-only trace gave a report")
    # A good trace beside one cut before its process record: one run, the cut one damaged.
    both = os.path.join(work, "both")
    os.mkdir(both)
    shutil.copy(os.path.join(clean, trace), os.path.join(both, "vramtrace.2.vtrace"))
    with open(os.path.join(both, "vramtrace.3.vtrace"), "wb") as f:
        f.write(good[:40])
    r = run(["report", both, "-o", os.path.join(work, "both-out")], work)
    check("older vramtrace" not in r.stderr and "different runs" not in r.stderr,
          "a cut trace taken for another run: %r" % r.stderr)
    check(r.returncode == 0, "good + cut: exit %d (%r)" % (r.returncode, r.stderr))
    if os.path.exists(os.path.join(work, "both-out", "report.json")):
        rep = vtrel.load(os.path.join(work, "both-out", "report.json"))
        check(rep["run"]["complete"] is False and rep["devices"][0]["peak"]["bytes"] == 13 << 20,
              "good + cut: complete %r" % rep["run"]["complete"])
    r = run(["check", both, "--baseline", clean], work)
    check("different runs" not in r.stderr and r.returncode == 4,
          "check of good + cut: %d %r" % (r.returncode, r.stderr))

    # Names with ESC, a newline and "::" (a CI runner's workflow command) are escaped.
    evil = os.path.join(work, "x" + ESC + "[31m\n::error::pwned")
    for args in (["report", evil], ["check", evil, "--baseline", evil],
                 ["check", clean, "--baseline", evil],
                 ["diff", evil, evil], ["run", "-o", evil + "/a" + ESC, "--baseline", evil, "--",
                                        "true"]):
        r = run(args, work)
        tag = "vramtrace %s with an evil name" % args[0]
        check(r.returncode == 2, "%s: exit %d (%r)" % (tag, r.returncode, r.stderr))
        for text in (r.stdout, r.stderr):
            check(ESC not in text, "%s: an ESC byte: %r" % (tag, text))
            check(not any(line.lstrip().startswith("::") for line in text.splitlines()),
                  "%s: a line starting '::': %r" % (tag, text))
        check("x\\x1b[31m\\n::error::pwned" in r.stderr, "%s: the name escaped: %r"
              % (tag, r.stderr))
    r = run(["report", "::error::x"], work)
    check(r.returncode == 2 and r.stderr == "vramtrace: \\x3a:error::x: no such file or "
          "directory\n", "a name starting '::': %r" % r.stderr)
    print("small ones (subcommand, -o --, header-only and cut traces, escapes): checked")


def main():
    work = vtrel.temp_dir("vt-edges-")
    clean_run(work)
    for case in (users_files_untouched, outputs_never_replace, baselines_without_data, budgets,
                 cuda_cannot_start, small_ones):
        case(work)
    vtrel.finish("cli edges test")


main()
