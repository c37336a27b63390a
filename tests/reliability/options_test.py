#!/usr/bin/env python3
"""Bad options and bad input files, each with its exact message and exit code.
  - the command line (CLI11 and collector/analysis/budgets.cpp's budget parsing): every subcommand's
    options with values that are not numbers, out of range, unknown, missing, or not writable;
    budgets given to `run` without --baseline (they would be ignored, and a CI job would pass
    without its gate);
  - the readers of report.json / baselines / run directories (report::load_report) as
    `check` candidate and baseline, `diff` and `run --baseline` read them: not JSON, not a
    report, another schema, keys missing or of the wrong type, empty files, empty directories;
    and traces given to `report`;
  - the library's own environment options (VRAMTRACE_*) with bad values: the chatty program
    (exit code 7) runs untouched every time, stdout and stderr its own plus the one notice the
    case expects, and a trace that `vramtrace report` reads with the 1 MiB peak when the
    process is profiled.
Every case runs; the failures are listed at the end."""
import json
import os
import shutil
import stat
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
import vtrel  # noqa: E402
from vtrel import check

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(SRC, "tests", "fuzz", "baseline.json")
RANKS = os.path.join(SRC, "tests", "fuzz", "baseline-ranks.json")
CHATTY = os.path.join(vtrel.BUILD, "tests", "programs", "chatty")
FAIL_IO = os.path.join(vtrel.BUILD, "tests", "programs", "libfail_io.so")
HELP = "Run with --help for more information.\n"
NOT_PROFILED = "; this process is not profiled"


def cli(work, args, code, err, out=""):
    """`vramtrace ARGS` in WORK: exit CODE, exactly ERR on stderr, and on stdout exactly OUT
    (or, when OUT ends with "...", what starts with the rest)."""
    r = subprocess.run([vtrel.VRAMTRACE] + args, cwd=work, env=vtrel.env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tag = "vramtrace " + " ".join(args)
    check(r.returncode == code, "%s: exit %d, not %d (%r)" % (tag, r.returncode, code, r.stderr))
    check(r.stderr == err, "%s: stderr %r, not %r" % (tag, r.stderr, err))
    if out.endswith("..."):
        check(r.stdout.startswith(out[:-3]), "%s: stdout %r" % (tag, r.stdout))
    else:
        check(r.stdout == out, "%s: stdout %r" % (tag, r.stdout))


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def bad_files(work):
    """Report files that load_report must refuse, and the problem it names."""
    base = json.load(open(BASE))
    ranks = json.load(open(RANKS))

    def variant(name, report, edit):
        r = json.loads(json.dumps(report))
        edit(r)
        write(os.path.join(work, name), json.dumps(r))

    write(os.path.join(work, "corrupt.json"), '{"schema": "vramtrace.rep')
    write(os.path.join(work, "future.json"), '{"schema": "vramtrace.report/9"}')
    write(os.path.join(work, "array.json"), "[1, 2]")
    write(os.path.join(work, "empty.json"), "")
    write(os.path.join(work, "syntax.json"), '{"schema":\n  "vramtrace"; "devices": []}')
    os.mkdir(os.path.join(work, "emptydir"))
    os.mkdir(os.path.join(work, "emptytrace"))
    write(os.path.join(work, "emptytrace", "vramtrace.1.vtrace"), "")
    variant("noleaks.json", base, lambda r: r.pop("leaks"))
    variant("devices-object.json", base, lambda r: r.update(devices={}))
    variant("noname.json", base, lambda r: r["devices"][0].pop("name"))
    variant("peak-string.json", base, lambda r: r["devices"][0]["peak"].update(bytes="13 MiB"))
    variant("index-negative.json", base, lambda r: r["devices"][0].update(index=-1))
    variant("site-2p53.json", base,
            lambda r: r["devices"][0]["peak"]["by_site"][0].update(bytes=2**53 + 1))
    variant("library-number.json", ranks,
            lambda r: r["devices"][0]["peak"].update(by_library=[5]))
    variant("library-nocount.json", ranks,
            lambda r: r["processes"][0]["devices"][0]["peak"].update(
                by_library=[{"library": "x", "bytes": 1}]))
    variant("worst-nodevice.json", ranks, lambda r: r["worst_rank"].pop("device"))
    variant("worst-number.json", ranks, lambda r: r.update(worst_rank=7))
    variant("rank-number.json", ranks, lambda r: r["processes"][0].update(ranks={"RANK": 0}))
    variant("process-nodevices.json", base, lambda r: r["processes"][0].pop("devices"))
    variant("profiled-string.json", base, lambda r: r["processes"][0].update(profiled="no"))
    parse = "not a vramtrace report (not JSON: it ends too early, at line 1, column %d)"
    malformed = "malformed report (%s)"
    return [
        ("/nonexistent.json", "no such file or directory"),
        ("corrupt.json", parse % 26),
        ("syntax.json", "not a vramtrace report (not JSON: a syntax error at line 2, column 14)"),
        ("empty.json", "not a vramtrace report (an empty file)"),
        ("array.json", 'not a vramtrace report (no "schema" key)'),
        ("future.json", 'report schema "vramtrace.report/9", this vramtrace reads '
                        '"vramtrace.report/1"'),
        ("emptydir", "a directory with neither report.json nor traces"),
        ("emptytrace", "emptytrace/vramtrace.1.vtrace: empty file, not a vramtrace trace"),
        ("noleaks.json", malformed % 'no "leaks" array'),
        ("devices-object.json", malformed % 'no "devices" array'),
        ("noname.json", malformed % "a device without index, name or peak.bytes"),
        ("peak-string.json", malformed % "a device without index, name or peak.bytes"),
        ("index-negative.json", malformed % "a device without index, name or peak.bytes"),
        ("site-2p53.json", malformed % "a device without index, name or peak.bytes"),
        ("library-number.json",
         malformed % "a peak.by_library entry without library, bytes or count"),
        ("library-nocount.json",
         malformed % "a peak.by_library entry without library, bytes or count"),
        ("worst-nodevice.json", malformed % "a worst_rank without rank, peak_bytes or device"),
        ("worst-number.json", malformed % "a worst_rank without rank, peak_bytes or device"),
        ("rank-number.json", malformed % "a rank that is not a string"),
        ("process-nodevices.json", malformed % "a process without devices"),
        ("profiled-string.json", malformed % "a process whose pid, exe, profiled, "
                                             "not_profiled_reason or notices are of the wrong "
                                             "type"),
    ]


def command_line(work):
    B = BASE
    open(os.path.join(work, "afile"), "w").close()
    with open(os.path.join(work, "junk.vtrace"), "w") as f:
        f.write("junk\n")
    open(os.path.join(work, "empty.vtrace"), "w").close()
    os.mkdir(os.path.join(work, "notraces"))
    usage = [
        ([], "A subcommand is required\n" + HELP),
        (["frobnicate"], "vramtrace: 'frobnicate' is not a vramtrace command: use run, plan, "
                         "check, diff, report, whatif, snapshot or export (vramtrace --help)\n"),
        (["fr\x1b[2Job"], "vramtrace: 'fr\\x1b[2Job' is not a vramtrace command: use run, "
                          "plan, check, diff, report, whatif, snapshot or export "
                          "(vramtrace --help)\n"),
        (["--bogus"], "A subcommand is required\n" + HELP),
        (["run"], "command is required\n" + HELP),
        (["run", "-o", "out"], "command is required\n" + HELP),
        (["run", "--grace-ms", "abc", "--", "true"],
         "--grace-ms: Value abc not in range 0 to 3600000\n" + HELP),
        # CLI11 alone took -5 (as 0), read 0x10 as 16 and 010 as 8 (octal): decimal digits only.
        (["run", "--grace-ms", "-5", "--", "true"],
         "--grace-ms: Value -5 not in range 0 to 3600000\n" + HELP),
        (["run", "--grace-ms", "+5", "--", "true"],
         "--grace-ms: Value +5 not in range 0 to 3600000\n" + HELP),
        (["run", "--grace-ms", "0x10", "--", "true"],
         "--grace-ms: Value 0x10 not in range 0 to 3600000\n" + HELP),
        (["run", "--grace-ms", "1e3", "--", "true"],
         "--grace-ms: Value 1e3 not in range 0 to 3600000\n" + HELP),
        (["run", "--grace-ms", "3600001", "--", "true"],
         "--grace-ms: Value 3600001 not in range 0 to 3600000\n" + HELP),
        (["run", "--grace-ms", "99999999999999999999", "--", "true"],
         "--grace-ms: Value 99999999999999999999 not in range 0 to 3600000\n" + HELP),
        (["run", "--max-depth", "0x10", "--", "true"],
         "--max-depth: Value 0x10 not in range 1 to 128\n" + HELP),
        (["run", "--stacks", "bogus", "--", "true"],
         "--stacks: bogus not in {auto,none,native,python,all}\n" + HELP),
        (["run", "--launches", "maybe", "--", "true"],
         "--launches: maybe not in {on,off}\n" + HELP),
        (["run", "--launches=OFF", "--", "true"], "--launches: OFF not in {on,off}\n" + HELP),
        (["run", "--max-depth", "0", "--", "true"],
         "--max-depth: Value 0 not in range 1 to 128\n" + HELP),
        (["run", "--max-depth", "129", "--", "true"],
         "--max-depth: Value 129 not in range 1 to 128\n" + HELP),
        (["run", "--max-depth", "abc", "--", "true"],
         "--max-depth: Value abc not in range 1 to 128\n" + HELP),
        (["run", "-o", "afile", "--", "true"], "vramtrace: afile exists and is not a directory\n"),
        (["run", "--lib", "/nonexistent.so", "--", "true"],
         "vramtrace run: cannot find libvramtrace.so (use --lib or VRAMTRACE_LIB)\n"),
        (["run", "--baseline", B, "--device", "abc", "--", "true"],
         "--device: Value abc not in range 0 to 4095\n" + HELP),
        (["run", "--baseline", B, "--max-increase", "5parsecs", "--", "true"],
         "vramtrace run: '5parsecs': unknown unit 'parsecs' (use %, B, KiB, MiB, GiB, TiB)\n"),
        (["check", B], "--baseline is required\n" + HELP),
        (["check", "--baseline", B], "candidate is required\n" + HELP),
        (["check", B, "--baseline", B, "--device", "-1"],
         "--device: Value -1 not in range 0 to 4095\n" + HELP),
        (["check", B, "--baseline", B, "--device", "4294967296"],
         "--device: Value 4294967296 not in range 0 to 4095\n" + HELP),
        (["check", B, "--baseline", B, "--device", "4096"],
         "--device: Value 4096 not in range 0 to 4095\n" + HELP),
        (["check", B, "--baseline", B, "--device", "0x1"],
         "--device: Value 0x1 not in range 0 to 4095\n" + HELP),
        (["check", B, "--baseline", B, "--markdown", "/nonexistent/x.md"],
         "vramtrace: cannot write /nonexistent/x.md: No such file or directory\n"),
        (["check", B, "--baseline", B, "--junit", "/nonexistent/x.xml"],
         "vramtrace: cannot write /nonexistent/x.xml: No such file or directory\n"),
        (["diff", B], "b is required\n" + HELP),
        (["diff", B, B, "--html", "/nonexistent/d.html"],
         "vramtrace: cannot write /nonexistent/d.html: No such file or directory\n"),
        (["report"], "traces is required\n" + HELP),
        (["report", "/nonexistent.vtrace"],
         "vramtrace: /nonexistent.vtrace: no such file or directory\n"),
        (["report", "notraces"], "vramtrace: notraces: no .vtrace files in this directory\n"),
        (["report", "junk.vtrace"],
         "vramtrace report: junk.vtrace: too short to be a vramtrace trace (5 bytes)\n"),
        (["report", "empty.vtrace"],
         "vramtrace report: empty.vtrace: empty file, not a vramtrace trace\n"),
        (["report", B, "-o", "afile"], "vramtrace: afile exists and is not a directory\n"),
    ]
    # Budgets for `run` without --baseline: refused, not ignored.
    for opt, val in (("--max-increase", "5%"), ("--max-peak", "1GiB"), ("--device", "0"),
                     ("--markdown", "m.md"), ("--junit", "j.xml")):
        usage.append((["run", opt, val, "--", "true"], "%s requires --baseline\n%s" % (opt, HELP)))
    # Budget values (collector/analysis/budgets.cpp parse_increase / parse_size / split_device).
    not_size = "'%s' is not a size (examples: 256MiB, 40GiB, 1048576)"
    not_budget = "'%s' is not a percentage or a size (examples: 5%%, 256MiB)"
    no_unit = "'%s' has no unit: write %s%% for a share of the baseline's peak, or %sMiB for a size"
    not_pct = "'%s' is not a percentage (example: 5%%)"
    device = ("'%s': expected DEVICE:BUDGET, e.g. 1:10%%, or CATEGORY:BUDGET with one of "
              "PyTorch's categories (parameters, gradients, optimizer_state, activations, "
              "temporaries, inputs, workspaces, communication, private_pool, allocator_cache, "
              "outside_pytorch, unclassified), e.g. activations:5%%")
    budgets = [
        ("--max-increase", "5 percent", "'5 percent': unknown unit 'percent' (use %, B, KiB, "
                                        "MiB, GiB, TiB)"),
        ("--max-increase", ".", not_budget % "."),
        ("--max-increase", "abc", not_budget % "abc"),
        ("--max-increase", "5", no_unit % ("5", "5", "5")),
        ("--max-increase", "2.5", no_unit % ("2.5", "2.5", "2.5")),
        ("--max-increase", "1:5", no_unit % ("5", "5", "5")),
        ("--max-increase", "9" * 400, no_unit % (("9" * 400,) * 3)),
        ("--max-increase", "1e999%", not_pct % "1e999%"),
        ("--max-increase", "nan%", not_pct % "nan%"),
        ("--max-increase", "inf%", not_pct % "inf%"),
        ("--max-increase", "-3%", not_pct % "-3%"),
        # strtod's hexadecimal (0x10% was 16%), exponents, signs: digits and one '.' only.
        ("--max-increase", "0x10%", not_pct % "0x10%"),
        ("--max-increase", "0X1p4%", not_pct % "0X1p4%"),
        ("--max-increase", "1e1%", not_pct % "1e1%"),
        ("--max-increase", "+5%", not_pct % "+5%"),
        ("--max-increase", "5.0.1%", not_pct % "5.0.1%"),
        ("--max-increase", "0:0x10%", not_pct % "0x10%"),
        ("--max-increase", "0x10", not_budget % "0x10"),
        ("--max-increase", "1e3", not_budget % "1e3"),
        ("--max-peak", "0x10MiB", not_size % "0x10MiB"),
        ("--max-peak", "1.5e9", not_size % "1.5e9"),
        ("--max-peak", "1 2", not_size % "1 2"),
        ("--max-peak", "40GiB5", not_size % "40GiB5"),
        ("--max-increase", "%", not_pct % "%"),
        ("--max-increase", "99999999999999999999:5%", device % "99999999999999999999:5%"),
        ("--max-increase", ":5%", device % ":5%"),
        ("--max-increase", "a:5%", device % "a:5%"),
        ("--max-increase", "1:", not_budget % ""),
        ("--max-increase", "1:2:3%", not_pct % "2:3%"),
        ("--max-increase", "18446744073709551616", no_unit % (("18446744073709551616",) * 3)),
        ("--max-increase", "18446744073709551616B", "'18446744073709551616B': too large"),
        ("--max-increase", "99999999999TiB", "'99999999999TiB': too large"),
        ("--max-peak", "40GiB%", "'40GiB%': unknown unit 'GiB%' (use B, KiB, MiB, GiB, TiB)"),
        ("--max-peak", "-1", not_size % "-1"),
        ("--max-peak", "", not_size % ""),
        ("--max-peak", "0:", not_size % ""),
    ]
    for opt, val, msg in budgets:
        usage.append((["check", B, "--baseline", B, opt, val], "vramtrace check: %s\n" % msg))
    for args, err in usage:
        # check and diff print their verdict before they find the file they cannot write.
        out = ""
        if args[:1] == ["run"]:
            pass
        elif "--markdown" in args or "--junit" in args:
            out = "vramtrace check: device 0 (vramtrace stand-in (CPU)): baseline 13.00 MiB..."
        elif "--html" in args:
            out = "vramtrace diff: A has 1 device(s), 1 process(es); B has 1 device(s)..."
        # A file that cannot be written is 74, not a usage error.
        cli(work, args, 74 if "cannot write" in err else 2, err, out)

    # The readers: each bad file as check's candidate and baseline, diff's A and B, and the
    # baseline of `run` (refused before the command runs).
    bad = bad_files(work)
    for name, problem in bad:
        cli(work, ["check", name, "--baseline", B], 2,
            "vramtrace check: candidate %s: %s\n" % (name, problem))
        cli(work, ["check", B, "--baseline", name], 2,
            "vramtrace check: baseline %s: %s\n" % (name, problem))
        cli(work, ["diff", name, B], 2, "vramtrace diff: A %s: %s\n" % (name, problem))
        cli(work, ["diff", B, name], 2, "vramtrace diff: B %s: %s\n" % (name, problem))
        cli(work, ["run", "--baseline", name, "-o", "out", "--", "false"], 2,
            "vramtrace run: baseline %s: %s\n" % (name, problem))
    check(not os.path.exists(os.path.join(work, "out")), "run with a bad baseline wrote out/")
    # What is accepted is read in decimal: 010 is 10 (CLI11 alone read it as 8, octal).
    r = subprocess.run([vtrel.VRAMTRACE, "run", "--max-depth", "010", "--grace-ms", "0010", "-o",
                        "depth", "--", "sh", "-c", 'echo "$VRAMTRACE_MAX_DEPTH"'], cwd=work,
                       env=vtrel.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(r.returncode == 0 and r.stdout == "10\n",
          "run --max-depth 010: exit %d, stdout %r, stderr %r" % (r.returncode, r.stdout, r.stderr))
    print("command line: %d usage and budget cases, %d bad report files x 5 readers"
          % (len(usage), len(bad)))


def environment(work):
    """The library's VRAMTRACE_* options: (variable, value, the notice expected or None,
    whether the process is profiled[, the environment of libfail_io.so, preloaded too]).
    A process that is not profiled leaves no file behind: not an empty trace, not a header."""
    long_socket = "/tmp/" + "s" * 200
    cases = [
        ("VRAMTRACE_BUFFER_KB", "abc", None, True),
        ("VRAMTRACE_BUFFER_KB", "0", None, True),
        # x 1024 wrapped to 0 (then 64 KiB): now capped at the reader's 64 MiB frame limit, as
        # is a number too large (interpose/options.h); "-5" is not a number: the default.
        ("VRAMTRACE_BUFFER_KB", "18014398509481984", None, True),
        ("VRAMTRACE_BUFFER_KB", "-5", None, True),
        ("VRAMTRACE_BUFFER_KB", "99999999999999999999", None, True),
        ("VRAMTRACE_FLUSH_MS", "abc", None, True),
        ("VRAMTRACE_FLUSH_MS", "0", None, True),
        # x 10^6 wrapped (2^58 ms to a period of 0: the writer woke without pause): now capped
        # at 60 s (interpose/options.h; the exact values are in the unit test: chatty runs too
        # briefly for the period to show here); "-5" is not a number: the default, 100 ms.
        ("VRAMTRACE_FLUSH_MS", "99999999999999", None, True),
        ("VRAMTRACE_FLUSH_MS", "288230376151711744", None, True),
        ("VRAMTRACE_FLUSH_MS", "-5", None, True),
        ("VRAMTRACE_MAX_DEPTH", "-1", None, True),
        ("VRAMTRACE_MAX_DEPTH", "0", None, True),
        ("VRAMTRACE_MAX_DEPTH", "abc", None, True),
        ("VRAMTRACE_MAX_DEPTH", "99999999999999999999", None, True),
        ("VRAMTRACE_STACKS", "bogus", None, True),
        ("VRAMTRACE_LAUNCHES", "off", None, True),
        ("VRAMTRACE_LAUNCHES", "", None, True),
        # Not on or off: said once, and launches are recorded (the default).
        ("VRAMTRACE_LAUNCHES", "bogus", "VRAMTRACE_LAUNCHES=bogus is not on or off; kernel "
         "launches are recorded (the default)", True),
        ("VRAMTRACE_LAUNCHES", "x" * 100, "VRAMTRACE_LAUNCHES=" + "x" * 64 + " is not on or "
         "off; kernel launches are recorded (the default)", True),
        ("VRAMTRACE_ASYNC_STACK_MIN_BYTES", "abc", None, True),
        ("VRAMTRACE_ASYNC_STACK_MIN_BYTES", "-1", None, True),
        ("VRAMTRACE_CUPTI", "/nonexistent/libcupti.so.13", None, True),  # then the usual places
        ("VRAMTRACE_DISABLE", "0", None, True),
        ("VRAMTRACE_DISABLE", "yes", None, False),
        ("VRAMTRACE_OUTPUT", "", None, True),  # the default name in the working directory
        ("VRAMTRACE_OUTPUT", "%p%p%", None, True),
        ("VRAMTRACE_OUTPUT", "/nonexistent/t.vtrace",
         "cannot create the trace file" + NOT_PROFILED + " (No such file or directory)", False),
        ("VRAMTRACE_OUTPUT", ".", "cannot create the trace file" + NOT_PROFILED +
         " (Is a directory)", False),
        ("VRAMTRACE_SOCKET", "/nonexistent/sock", "cannot connect to the vramtrace collector" +
         NOT_PROFILED + " (No such file or directory)", False),
        ("VRAMTRACE_SOCKET", long_socket, "cannot connect to the vramtrace collector" +
         NOT_PROFILED + " (File name too long)", False),
        # Failures after the trace file was created (libfail_io.so): the file is removed.
        # The first of the two 64 MiB event buffers cannot be mapped, then the second; the
        # control (both mapped) is profiled.
        ("VRAMTRACE_BUFFER_KB", "65536", "cannot map the event buffer" + NOT_PROFILED +
         " (Cannot allocate memory)", False, {"VT_FAIL_MMAP_BYTES": 64 << 20}),
        ("VRAMTRACE_BUFFER_KB", "65536", "cannot map the event buffer" + NOT_PROFILED +
         " (Cannot allocate memory)", False,
         {"VT_FAIL_MMAP_BYTES": 64 << 20, "VT_FAIL_MMAP_AFTER": 1}),
        ("VRAMTRACE_BUFFER_KB", "65536", None, True,
         {"VT_FAIL_MMAP_BYTES": 64 << 20, "VT_FAIL_MMAP_AFTER": 2}),
        # The header cannot be written: into a file it created (removed), or into /dev/full,
        # which it did not create (left alone).
        ("VRAMTRACE_OUTPUT", "t.vtrace", "cannot write the trace" + NOT_PROFILED +
         " (No space left on device)", False, {"VT_FAIL_WRITEV": 1}),
        ("VRAMTRACE_OUTPUT", "/dev/full", "cannot write the trace" + NOT_PROFILED +
         " (No space left on device)", False),
    ]
    base = subprocess.run([CHATTY, "7"], env=vtrel.env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    check(base.returncode == 7, "chatty without vramtrace: exit %d" % base.returncode)
    for i, (var, value, notice, profiled, *shim) in enumerate(cases):
        d = os.path.join(work, "env%d" % i)
        os.mkdir(d)
        tag = "%s=%r" % (var, value)
        e = vtrel.preload_env(**{var: value})
        if shim:
            tag += " %r" % shim[0]
            e.update({k: str(v) for k, v in shim[0].items()})
            e["LD_PRELOAD"] += ":" + FAIL_IO
        p = subprocess.run([CHATTY, "7"], cwd=d, env=e, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        lines = p.stderr.decode(errors="replace").splitlines(True)
        ours = [l for l in lines if l.startswith("vramtrace:")]
        own = "".join(l for l in lines if not l.startswith("vramtrace:"))
        check(p.returncode == 7, "%s: exit %d" % (tag, p.returncode))
        check(p.stdout == base.stdout, "%s: stdout %r" % (tag, p.stdout))
        check(own == base.stderr.decode(), "%s: stderr %r" % (tag, p.stderr))
        want = ["vramtrace: %s\n" % notice] if notice else []
        check(ours == want, "%s: library lines %r, not %r" % (tag, ours, want))
        traces = sorted(f for f in os.listdir(d))
        if not profiled:
            check(traces == [], "%s: files %r" % (tag, traces))
            continue
        if var == "VRAMTRACE_OUTPUT" and value == "%p%p%":
            check(len(traces) == 1 and traces[0].endswith("%") and traces[0][:-1].isdigit(),
                  "%s: files %r" % (tag, traces))
        else:
            check(len(traces) == 1 and traces[0].startswith("vramtrace.") and
                  traces[0].endswith(".vtrace"), "%s: files %r" % (tag, traces))
        if len(traces) != 1:
            continue
        rc, text = vtrel.report_traces([os.path.join(d, traces[0])], os.path.join(d, "rep"))
        if check(rc == 0, "%s: vramtrace report exit %d: %s" % (tag, rc, text)):
            rep = vtrel.load(os.path.join(d, "rep", "report.json"))
            peak = rep["devices"][0]["peak"]["bytes"] if rep["devices"] else None
            check(peak == 1 << 20 and rep["run"]["dropped_events"] == 0,
                  "%s: peak %r, dropped %r" % (tag, peak, rep["run"]["dropped_events"]))
    check(stat.S_ISCHR(os.stat("/dev/full").st_mode), "/dev/full is no longer a device")
    print("environment: %d cases" % len(cases))


def main():
    work = vtrel.temp_dir("vt-options-")
    command_line(work)
    environment(work)
    if not vtrel.failures:
        shutil.rmtree(work)
    vtrel.finish("options")


if __name__ == "__main__":
    main()
