"""Checks of scripts/gpu/pytest.sh, run by the virtual environment's Python that has the package:
the pytest plugin on tests/gpu/test_torch_plugin.py (plain, and with pytest-xdist when it is
installed), then a PyTorch step under the installed `vramtrace run` with every /usr/local/cuda*
folder hidden by an empty tmpfs in a private mount namespace (root only).

  scripts/gpu/pytest_check.py ROOT VENV OUT_DIR
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

ROOT, VENV, OUT = sys.argv[1:4]
PY = os.path.join(VENV, "bin", "python")
EXE = os.path.join(VENV, "bin", "vramtrace")
CASES = os.path.join(ROOT, "tests", "gpu", "test_torch_plugin.py")
results = []


def check(cond, what):
    results.append((bool(cond), what))
    print(("PASS " if cond else "FAIL ") + what, flush=True)
    return cond


def env():
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "VRAMTRACE_SOCKET", "VRAMTRACE_OUTPUT", "VRAMTRACE_CUPTI",
              "VRAMTRACE_PYTEST_REEXEC", "PYTEST_ADDOPTS"):
        e.pop(k, None)
    return e


def plugin(xdist):
    tag = " (xdist)" if xdist else ""
    args = [PY, "-m", "pytest", "--vramtrace", "-p", "no:cacheprovider", "-q",
            "--vramtrace-output", os.path.join(OUT, "session-xdist" if xdist else "session"), CASES]
    if xdist:
        args[4:4] = ["-n", "2"]
    p = subprocess.run(args, env=env(), cwd=OUT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    with open(os.path.join(OUT, "pytest%s.log" % ("-xdist" if xdist else "")), "w") as f:
        f.write(p.stdout)
    out = p.stdout
    check(p.returncode == 1, "pytest exits 1%s (got %d)" % (tag, p.returncode))
    check(re.search(r"2 failed, 3 passed", out), "2 failed, 3 passed" + tag)
    check("peaked at 256.00 MiB above its start, over the limit of 128.00 MiB" in out,
          "over budget: 256 MiB over 128 MiB" + tag)
    # The innermost frame of the test file: tensor(), which allocate_big_buffer() called.
    check(re.search(r"256\.00 MiB  \S*test_torch_plugin\.py:12 in tensor  \(inputs and data, "
                    r"1 block\)", out),
          "over budget: PyTorch's block at test_torch_plugin.py:12" + tag)
    check("the test leaked 32.00 MiB of device memory" in out, "the leak: 32 MiB" + tag)
    check(re.search(r"32\.00 MiB  \S*test_torch_plugin\.py:12 in tensor  \(inputs and data, "
                    r"1 block\)", out), "the leak: PyTorch's block and its line" + tag)
    rows = {}
    for m in re.finditer(r"^\s*(\S+ \S+)\s+(\S+ \S+)\s+(\d+)\s+(\S+::\S+)$", out, re.M):
        rows[m.group(4).split("::")[-1]] = (m.group(1), m.group(2))
    print("summary%s: %r" % (tag, rows))
    for name, want in (("test_within_budget", ("64.00 MiB", "0 B")),
                       ("test_over_budget", ("256.00 MiB", "0 B")),
                       ("test_leaks", ("32.00 MiB", "32.00 MiB")),
                       ("test_cached_block_is_not_a_leak", ("96.00 MiB", "0 B"))):
        check(rows.get(name) == want, "%s: peak, leaked = %r%s" % (name, want, tag))
    check(rows.get("test_training_step", ("", ""))[1] == "0 B",
          "test_training_step leaks nothing" + tag)
    check(os.path.isfile(os.path.join(OUT, "session-xdist" if xdist else "session",
                                      "report.json")),
          "the whole session's report was written" + tag)


PROBE = """
import torch, vramtrace
m = torch.nn.Linear(2048, 2048).cuda()
for i in range(3):
    vramtrace.step(i)
    with vramtrace.region("train"):
        m(torch.randn(256, 2048, device="cuda")).sum().backward()
torch.cuda.synchronize()
print("CUPTI", vramtrace.cupti_path())
print("LIVE", vramtrace.live(0))
"""


def hidden_toolkit():
    dirs = sorted(d for d in glob.glob("/usr/local/cuda*") if os.path.isdir(d) and
                  not os.path.islink(d))
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("SKIP the hidden-toolkit run: needs root and unshare")
        return
    out = os.path.join(OUT, "hidden-toolkit")
    hide = "; ".join("mount -t tmpfs none %s" % d for d in dirs) or "true"
    script = ("mount --make-rprivate / && %s && "
              "if command -v nvcc >/dev/null || ls /usr/local/cuda/lib64/libcupti* 2>/dev/null; "
              "then echo TOOLKIT-STILL-VISIBLE; fi; "
              "exec %s run -o %s -- %s -c '%s'") % (hide, EXE, out, PY, PROBE.replace("'", '"'))
    p = subprocess.run(["unshare", "--mount", "--", "sh", "-c", script], env=env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(os.path.join(OUT, "hidden-toolkit.log"), "w") as f:
        f.write(p.stdout)
    print("hidden: %s" % ", ".join(dirs))
    check(p.returncode == 0 and "TOOLKIT-STILL-VISIBLE" not in p.stdout,
          "a PyTorch step ran with the toolkit hidden (exit %d)" % p.returncode)
    cupti = [l[6:] for l in p.stdout.splitlines() if l.startswith("CUPTI ")]
    print("CUPTI used with the toolkit hidden: %s" % (cupti[0] if cupti else "(none)"))
    check(cupti and "/nvidia/" in cupti[0], "CUPTI came from NVIDIA's pip wheel")
    try:
        with open(os.path.join(out, "report.json")) as f:
            rep = json.load(f)
        check(rep["run"]["processes_not_profiled"] == 0 and rep["devices"][0]["peak"]["bytes"] > 0,
              "the report has the step's peak: %d bytes" % rep["devices"][0]["peak"]["bytes"])
    except (OSError, KeyError, IndexError, ValueError) as e:
        check(False, "report.json of the hidden-toolkit run: %s" % e)


plugin(False)
try:
    import xdist  # noqa: F401
    plugin(True)
except ImportError:
    print("SKIP the xdist run: pytest-xdist is not installed")
hidden_toolkit()
failed = sum(1 for ok, _ in results if not ok)
print("gpu-pytest: %d passed, %d failed" % (len(results) - failed, failed))
sys.exit(1 if failed else 0)
