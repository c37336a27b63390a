"""What vramtrace must never do, as a hostile or a careless user tries it, end to end on the
stand-in, each case with its exact outcome:
  - replace what is not a regular file: /dev/null, /dev/full, a FIFO get the bytes written into
    them (as a shell's `>`), a link to a file is refused with --force, never swapped for a file;
  - replace with --force what vramtrace did not write: a user's report.json, report.html or a
    trace of another run in the -o folder is refused (exit 2) and left untouched;
  - call a failed write a success: stdout on a full disk is exit 74 (a regression stays 1), a CI
    file that cannot be written does not keep the other from being written;
  - answer from damaged input: whatif on a cut PyTorch trace gives no verdict unless
    --allow-damaged, says the problems (stderr, "problems" in --json), and refuses two runs;
  - loosen the gate: a second budget for one scope, and categories that are not sizes, exit 2;
  - signal a process that a forged run marker names;
  - and the small ones: whatif --limit without a unit, an empty --fraction, a tiny
    --scale-batch, snapshot --timeout nan, --serve=::1:0, an unknown budget category, a report
    or a lone trace given to whatif.
   trust_test.py BUILD_DIR"""
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
sys.dont_write_bytecode = True
import vtrel  # noqa: E402  (the reliability tests' helpers)
from vtrel import check  # noqa: E402

VT = vtrel.VRAMTRACE
SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BASIC = os.path.join(vtrel.BUILD, "tests", "programs", "basic")
MiB = 1 << 20


def run(args, cwd, stdout=subprocess.PIPE, **kw):
    return subprocess.run([VT] + args, cwd=cwd, env=kw.pop("env", vtrel.env()), stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120, **kw)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def listing(d):
    return {n: read(os.path.join(d, n)) for n in sorted(os.listdir(d))}


def basic_run(work, name):
    d = os.path.join(work, name)
    r = run(["run", "-o", d, "--", BASIC], work)
    check(r.returncode == 0, "run %s: %r" % (name, r.stderr))
    return d


def torch_run(work, name):
    env = vtrel.env(FAKE_TORCH_CUDART=os.path.join(vtrel.BUILD, "standin", "libcudart.so.13"),
                    PYTHONPATH=os.path.join(SRC, "tests", "programs", "fake_torch"),
                    VRAMTRACE_STANDIN_DEVICE_BYTES=str(80 * MiB),
                    VRAMTRACE_TORCH_TRACE="full")  # not sampled by the iterations' time
    d = os.path.join(work, name)
    r = run(["run", "-o", d, "--", "python3",
             os.path.join(SRC, "tests", "programs", "py_torch_train.py")], work, env=env)
    check(r.returncode == 1 and any(n.endswith(".torch") for n in os.listdir(d)),
          "the stand-in PyTorch run (dies of its OOM): %d %r" % (r.returncode, r.stderr[-500:]))
    return d


def special_files(work):
    a = basic_run(work, "a")
    # Devices stay devices: written into, never renamed over. The test's own nodes of /dev/null
    # and /dev/full (a build without the fix would replace them with files: never the machine's).
    devices = []
    for name, minor, rc, why in (("null", 3, 0, ""), ("full", 7, 74, "No space left on device")):
        dev = os.path.join(work, name)
        try:
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        except OSError:
            print("special files: no device nodes can be made here (needs CAP_MKNOD): the FIFO "
                  "and links only")
            break
        devices.append((dev, rc, "vramtrace: cannot write %s: %s\n" % (dev, why) if why else ""))
    for dev, rc, err in devices:
        for option in ("--markdown", "--junit"):
            r = run(["check", a, "--baseline", a, option, dev, "--force"], work)
            check(r.returncode == rc and r.stderr == err,
                  "check %s %s --force: %d %r" % (option, dev, r.returncode, r.stderr))
            check(stat.S_ISCHR(os.stat(dev).st_mode), "%s is no longer a device" % dev)
    # A FIFO gets the page, and stays a FIFO.
    fifo = os.path.join(work, "page.fifo")
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(read(fifo)), daemon=True)
    reader.start()
    r = run(["diff", a, a, "--html", fifo, "--force"], work)
    if os.path.exists(fifo) and stat.S_ISFIFO(os.lstat(fifo).st_mode):
        reader.join(60)
    check(r.returncode == 0 and stat.S_ISFIFO(os.lstat(fifo).st_mode),
          "diff --html FIFO --force: %d %r, a FIFO still: %s" % (
              r.returncode, r.stderr, stat.S_ISFIFO(os.lstat(fifo).st_mode)))
    check(got and got[0].startswith(b"<!doctype html>"),
          "the FIFO's reader got %r" % (got[0][:40] if got else None))
    # A link to a file: refused even with --force; the link and its target as they were.
    target = os.path.join(work, "mine.md")
    write(target, "my notes\n")
    link = os.path.join(work, "link.md")
    os.symlink(target, link)
    r = run(["check", a, "--baseline", a, "--markdown", link, "--force"], work)
    check(r.returncode == 2 and r.stderr == "vramtrace check: --markdown %s is a symbolic link: "
          "vramtrace never replaces one (name the file it points to)\n" % link,
          "--markdown LINK --force: %d %r" % (r.returncode, r.stderr))
    check(os.path.islink(link) and read(target) == b"my notes\n", "the link or its target changed")
    # A link to a pipe (/dev/stdout's kind): written through, the link kept.
    out_link = os.path.join(work, "stdout.md")
    os.symlink("/proc/self/fd/1", out_link)
    r = run(["check", a, "--baseline", a, "--markdown", out_link, "--force"], work)
    check(r.returncode == 0 and "## vramtrace" in r.stdout and os.path.islink(out_link),
          "--markdown LINK-TO-STDOUT: %d %r %r" % (r.returncode, r.stdout[-200:], r.stderr))
    print("special files: devices and FIFOs written into, links never replaced: checked")


def force_only_ours(work):
    a = os.path.join(work, "a")
    trace = [n for n in os.listdir(a) if n.endswith(".vtrace")][0]
    u = os.path.join(work, "users")
    os.mkdir(u)
    write(os.path.join(u, "report.json"), '{"mine": 1}\n')
    write(os.path.join(u, "report.html"), "<p>my pytest-html page</p>\n")
    shutil.copy(os.path.join(a, trace), os.path.join(u, "vramtrace.1.vtrace"))  # another run's
    before = listing(u)
    r = run(["run", "-o", u, "--force", "--", BASIC], work)
    check(r.returncode == 2 and r.stderr == "vramtrace run: %s holds report.html, report.json, "
          "vramtrace.1.vtrace, which vramtrace did not write there (its vramtrace.run does not "
          "name them): --force replaces only an earlier vramtrace output; move them away, or "
          "choose another -o\n" % u, "run --force over a user's files: %d %r" % (
              r.returncode, r.stderr))
    check(listing(u) == before, "run --force changed the user's folder: %r" % sorted(listing(u)))
    r = run(["report", a, "-o", u, "--force"], work)
    check(r.returncode == 2 and listing(u) == before,
          "report --force over a user's report: %d %r" % (r.returncode, r.stderr))
    # What vramtrace wrote is replaced: a run again, a report again.
    r = run(["run", "-o", a, "--force", "--", BASIC], work)
    traces = [n for n in os.listdir(a) if n.endswith(".vtrace")]
    check(r.returncode == 0 and len(traces) == 1 and traces[0] != trace,
          "run --force over its own earlier run: %d %r %r" % (r.returncode, traces, r.stderr))
    rep = os.path.join(work, "rep")
    for i in range(2):
        r = run(["report", a, "-o", rep] + (["--force"] if i else []), work)
        check(r.returncode == 0, "report -o rep, %d: %d %r" % (i, r.returncode, r.stderr))
    marker = os.path.join(rep, "vramtrace.run")
    check(os.path.exists(marker) and json.loads(read(marker)).get("files") ==
          ["report.html", "report.json"], "report's marker: %r" % (
              os.path.exists(marker) and read(marker)))
    # A link put in place of a report that vramtrace wrote is not vramtrace's.
    os.remove(os.path.join(rep, "report.json"))
    os.symlink(os.path.join(work, "mine.md"), os.path.join(rep, "report.json"))
    r = run(["report", a, "-o", rep, "--force"], work)
    check(r.returncode == 2 and os.path.islink(os.path.join(rep, "report.json")),
          "report --force over a link: %d %r" % (r.returncode, r.stderr))
    print("--force replaces only what vramtrace wrote: checked")


def regression_candidate(work, a):
    """A copy of A's report whose peak doubled (a regression against A)."""
    rep = json.loads(read(os.path.join(a, "report.json")))
    rep["devices"][0]["peak"]["bytes"] *= 2
    path = os.path.join(work, "grown.json")
    write(path, json.dumps(rep))
    return path


def failed_writes(work):
    a = os.path.join(work, "a")
    grown = regression_candidate(work, a)
    with open("/dev/full", "w") as full:
        for args, rc in ((["check", a, "--baseline", a], 74), (["diff", a, a], 74),
                         (["check", grown, "--baseline", a], 1)):
            r = run(args, work, stdout=full)
            check(r.returncode == rc and r.stderr.endswith(
                "vramtrace: the output could not be written to stdout\n"),
                "%s > /dev/full: %d %r" % (" ".join(args[:1]), r.returncode, r.stderr))
    # --markdown cannot be written: --junit still is, and the regression stays exit 1.
    junit = os.path.join(work, "gate.xml")
    r = run(["check", grown, "--baseline", a, "--markdown", "/dev/full", "--junit", junit], work)
    check(r.returncode == 1 and r.stderr == "vramtrace: cannot write /dev/full: No space left on "
          "device\nvramtrace check: exit 1 for the verdict above; a CI file could not be written "
          "either (said above)\n", "--markdown /dev/full on a regression: %d %r" % (
              r.returncode, r.stderr))
    check(os.path.exists(junit) and b"<failure" in read(junit), "--junit was not written")
    print("failed writes: stdout checked (74), the verdict kept, both CI files tried: checked")


def whatif_damaged(work):
    t = os.path.join(work, "t")
    # The hook asks the allocator trace for the entries the collector reads only: each block's
    # alloc and free_completed, not the free_requested written beside every free_completed.
    actions = [line.split("\t")[2] for n in os.listdir(t) if n.endswith(".torch")
               for line in read(os.path.join(t, n)).decode().splitlines() if line.startswith("E\t")]
    check("alloc" in actions and "free_completed" in actions and "free_requested" not in actions,
          "the allocator trace's actions: %s" % sorted(set(actions)))
    r = run(["whatif", t, "--json"], work)
    check(r.returncode == 0 and json.loads(r.stdout)["problems"] == [] and r.stderr == "",
          "whatif on a whole run: %d %r" % (r.returncode, r.stderr))
    cut = os.path.join(work, "t-cut")
    os.mkdir(cut)
    for n in os.listdir(t):
        if n.endswith(".vtrace"):
            shutil.copy(os.path.join(t, n), cut)
        if n.endswith(".torch"):
            torch_name = n
            kept = read(os.path.join(t, n))[:1000].decode()
            write(os.path.join(cut, n), kept)
    pid = torch_name.split(".")[1]
    # The line cut in the middle: its number and what the reader says of its kind.
    line = kept.count("\n") + 1
    said = {"F": "bad frame", "E": "bad event"}[kept.rsplit("\n", 1)[-1].split("\t")[0]]
    problem = "%s/%s: line %d: %s" % (cut, torch_name, line, said)
    r = run(["whatif", cut], work)
    check(r.returncode == 2 and r.stdout == "" and r.stderr ==
          "vramtrace whatif: warning: %s\nvramtrace whatif: pid %s's PyTorch allocator trace: "
          "line %d: %s: the traces stop before the end of what they recorded, so no "
          "verdict (a replay of what is left answers for a shorter run); --allow-damaged replays "
          "it anyway\n" % (problem, pid, line, said), "whatif on a cut trace: %d %r %r" % (
              r.returncode, r.stdout, r.stderr))
    r = run(["whatif", cut, "--json", "--allow-damaged"], work)
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    check(r.returncode == 0 and j.get("problems") == [problem] and
          r.stderr.startswith("vramtrace whatif: warning: %s\n" % problem),
          "whatif --allow-damaged --json: %d %r %r" % (r.returncode, j.get("problems"), r.stderr))
    # Two different runs are not one.
    r = run(["whatif", t, os.path.join(work, "a")], work)
    check(r.returncode == 2 and "vramtrace whatif: these traces come from 2 different runs" in
          r.stderr and r.stdout == "", "whatif RUN_A RUN_B: %d %r" % (r.returncode, r.stderr))
    print("whatif on damaged traces and two runs: no verdict: checked")


def gate_not_loosened(work):
    a = os.path.join(work, "a")
    for first, second, scope in (("parameters:0", "parameters:100%", "parameters"),
                                 ("activations:5%", "activations:1000%", "activations"),
                                 ("5%", "50%", "every device"), ("0:5%", "0:50%", "device 0")):
        r = run(["check", a, "--baseline", a, "--max-increase", first, "--max-increase", second],
                work)
        check(r.returncode == 2 and r.stderr == "vramtrace check: '%s': a second --max-increase "
              "for %s (the first: '%s'): give each budget once\n" % (second, scope, first),
              "--max-increase %s then %s: %d %r" % (first, second, r.returncode, r.stderr))
    r = run(["check", a, "--baseline", a, "--max-peak", "1GiB", "--max-peak", "2GiB"], work)
    check(r.returncode == 2 and "a second --max-peak for every device" in r.stderr,
          "--max-peak twice: %d %r" % (r.returncode, r.stderr))
    # Category figures that are not sizes: a malformed report, never a pass.
    t = os.path.join(work, "t")
    base = json.loads(read(os.path.join(t, "report.json")))
    entries = [d for d in base["devices"] + [pd for p in base["processes"] for pd in p["devices"]]
               if isinstance(d.get("categories"), dict) and "at_peak" in d["categories"]]
    check(entries != [], "the stand-in PyTorch run has no categories at the peak")
    for bad in ("lots", None, -5, 1e300):
        cand = json.loads(json.dumps(base))
        for d in cand["devices"] + [pd for p in cand["processes"] for pd in p["devices"]]:
            if isinstance(d.get("categories"), dict) and "at_peak" in d["categories"]:
                d["categories"]["at_peak"]["activations"] = bad
        path = os.path.join(work, "bad-categories.json")
        write(path, json.dumps(cand))
        r = run(["check", path, "--baseline", t, "--max-increase", "activations:5%"], work)
        check(r.returncode == 2 and r.stderr == "vramtrace check: candidate %s: malformed report "
              "(categories.at_peak with a figure that is not a size in bytes)\n" % path,
              "activations %r: %d %r" % (bad, r.returncode, r.stderr))
    print("the gate: a budget given twice, categories that are not sizes: exit 2: checked")


def proc_start_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def forged_marker(work):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        d = os.path.join(work, "forged")
        os.mkdir(d)
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        write(os.path.join(d, "vramtrace.run"), json.dumps({
            "run_id": "0" * 32, "host": socket.gethostname(), "pid": victim.pid,
            "launcher_start_ticks": proc_start_ticks(victim.pid), "boot_id": boot}))
        r = run(["snapshot", d, "--timeout", "1"], work)
        check(r.returncode == 2 and r.stderr == "vramtrace snapshot: pid %d, which %s/vramtrace.run "
              "names, runs %s, not this vramtrace (%s): not signalled\n" % (
                  victim.pid, d, os.path.realpath(shutil.which("sleep")),
                  os.path.realpath(VT)), "a forged marker: %d %r" % (r.returncode, r.stderr))
        check(victim.poll() is None, "the process a forged marker names was signalled")
    finally:
        victim.kill()
        victim.wait()
    print("snapshot signals only the launcher of its folder: checked")


def small_ones(work):
    t = os.path.join(work, "t")
    trace = [n for n in os.listdir(t) if n.endswith(".vtrace")][0]
    for args, err in (
            (["whatif", t, "--limit", "24"],
             "vramtrace whatif: --limit: '24' has no unit: write 24GiB, or 24B for bytes\n"),
            (["whatif", t, "--fraction", ""],
             "vramtrace whatif: --fraction: a fraction of the device in (0, 1], not ''\n"),
            (["whatif", t, "--scale-batch", "1e-300"],
             "vramtrace whatif: --scale-batch: a number from 0.01 to 1000000 (0.5, 2), not "
             "'1e-300'\n"),
            (["whatif", os.path.join(t, "report.json")],
             "vramtrace whatif: %s/report.json is a report, not a trace: whatif replays a run's "
             "traces (give the run's folder, or its vramtrace.PID.vtrace and "
             "vramtrace.PID.torch, or a PyTorch memory snapshot)\n" % t),
            (["whatif", os.path.join(t, trace)],
             "vramtrace whatif: what-if models PyTorch's caching allocator only, and these traces "
             "hold no PyTorch allocator trace (vramtrace.PID.torch: give the run's folder, or the "
             ".torch beside its .vtrace; a native CUDA program, JAX, PyTorch with "
             "backend:cudaMallocAsync or a run without the start-up hook has none)\n"),
            (["check", t, "--baseline", t, "--max-increase", "activation:5%"],
             "vramtrace check: 'activation:5%': expected DEVICE:BUDGET, e.g. 1:10%, or "
             "CATEGORY:BUDGET with one of PyTorch's categories (parameters, gradients, "
             "optimizer_state, activations, temporaries, inputs, workspaces, communication, "
             "private_pool, allocator_cache, outside_pytorch, unclassified), e.g. "
             "activations:5%\n"),
            (["snapshot", t, "--timeout", "nan"],
             "--timeout: Value nan not in range [0.1 - 86400] (seconds)\nRun with --help for "
             "more information.\n")):
        r = run(args, work)
        check(r.returncode == 2 and r.stderr == err and r.stdout == "",
              "%r: %d %r" % (args[:3], r.returncode, r.stderr))
    flag = os.path.join(work, "ran")
    r = run(["run", "--serve=::1:0", "-o", os.path.join(work, "v6"), "--", "touch", flag], work)
    check(r.returncode == 2 and r.stderr.startswith("vramtrace run: --serve: cannot listen on "
                                                    "[::1:0]:0: ") and
          r.stderr.endswith(" (an IPv6 address with a port is written [ADDRESS]:PORT, e.g. "
                            "--serve=[::1]:8080)\n") and not os.path.exists(flag),
          "--serve=::1:0: %d %r" % (r.returncode, r.stderr))
    print("small ones (whatif's values and inputs, --timeout nan, --serve=::1:0, categories): "
          "checked")


def main():
    work = vtrel.temp_dir("vt-trust-")
    special_files(work)
    force_only_ours(work)
    failed_writes(work)
    torch_run(work, "t")
    whatif_damaged(work)
    gate_not_loosened(work)
    forged_marker(work)
    small_ones(work)
    vtrel.finish("cli trust test")


main()
