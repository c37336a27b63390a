"""The pytest plugin's cost per test (python/vramtrace/pytest_plugin.py): a generated suite that
imports torch and transformers (a small BERT built once, on the GPU) and runs TESTS short tests
(a forward each; every 4th keeps a tensor, as a cache or a leak would, which makes the plugin
collect the young garbage and measure again), run in the same invocation

  plugin:    pytest --vramtrace        (pytest runs itself under `vramtrace run`, the plugin on)
  no plugin: vramtrace run -- pytest   (the same library in the process, the plugin off)
  bare:      pytest                    (for reference: the library's own cost per test)

alternately, REPEATS times each. Each test's call time is pytest's own (the plugin's wrapper
around the call is inside it), read by a small plugin of this script; the figure is the
difference of the median call times, in ms per test, and their ratio.

  PYTHON=... bench/pytest_cost.py [TESTS=200] [REPEATS=3]

PYTHON: an interpreter that has the vramtrace package (pip install .; scripts/gpu/pytest.sh makes
one: gpu-out/pytest/venv/bin/python), pytest and PyTorch with CUDA; transformers if installed
(without it the model is torch.nn.TransformerEncoder). On a machine without a GPU, PYTHONPATH
pointing at tests/python/fake_torch runs it on the stand-ins (the figures mean nothing there).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

TESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
PYTHON = os.environ.get("PYTHON", sys.executable)

CONFTEST = textwrap.dedent('''
    import json, os
    import pytest
    import torch
    try:
        import transformers
    except ImportError:
        transformers = None

    kept = []

    def _model():
        if not hasattr(torch, "ones"):  # the tests' stand-in PyTorch
            return None
        if transformers is not None:
            config = transformers.BertConfig(hidden_size=128, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=256)
            return transformers.BertModel(config).cuda().eval()
        layer = torch.nn.TransformerEncoderLayer(128, 2, 256, batch_first=True)
        return torch.nn.TransformerEncoder(layer, 2).cuda().eval()

    @pytest.fixture(scope="session")
    def model():
        return _model()

    def work(model, keep):
        if model is None:
            block = torch.cuda.empty(4096)
            if keep:
                kept.append(block)
            else:
                torch.cuda.free(block)
            return
        with torch.no_grad():
            if transformers is not None:
                out = model(torch.ones(2, 16, dtype=torch.long, device="cuda")).last_hidden_state
            else:
                out = model(torch.ones(2, 16, 128, device="cuda"))
            value = out.sum().item()
        if keep:
            kept.append(out)
        return value

    calls = []

    def pytest_runtest_logreport(report):
        if report.when == "call":
            calls.append(report.duration)

    def pytest_sessionfinish(session):
        path = os.environ.get("VT_BENCH_CALLS")
        if path and calls:
            with open(path, "w") as f:
                json.dump(calls, f)
''')

TEST = textwrap.dedent('''
    import pytest
    from conftest import work

    @pytest.mark.parametrize("i", range({tests}))
    def test_forward(model, i):
        work(model, keep=i % 4 == 3)
''')


def vramtrace_command():
    out = subprocess.run([PYTHON, "-c", "import vramtrace; print(vramtrace.command_path() or '')"],
                         stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    if not out:
        sys.exit("pytest_cost: %s has no vramtrace command (pip install the package)" % PYTHON)
    return out


def run(arm, suite, work, i, vt):
    calls = os.path.join(work, "%s-%d.json" % (arm, i))
    out = os.path.join(work, "%s-%d" % (arm, i))
    env = dict(os.environ, VT_BENCH_CALLS=calls)
    pytest = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", suite]
    if arm == "plugin":
        cmd = pytest[:3] + ["--vramtrace", "--vramtrace-output", out] + pytest[3:]
    elif arm == "no plugin":
        cmd = [vt, "run", "-o", out, "--"] + pytest
    else:
        cmd = pytest
    p = subprocess.run(cmd, env=env, cwd=suite, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0 or not os.path.exists(calls):
        sys.exit("pytest_cost: %s run failed (exit %d):\n%s" % (arm, p.returncode, p.stdout[-3000:]))
    with open(calls) as f:
        times = json.load(f)
    return times, p.stdout


def main():
    vt = vramtrace_command()
    work = tempfile.mkdtemp(prefix="vt-pytest-cost-")
    suite = os.path.join(work, "suite")
    os.makedirs(suite)
    with open(os.path.join(suite, "conftest.py"), "w") as f:
        f.write(CONFTEST)
    with open(os.path.join(suite, "test_suite.py"), "w") as f:
        f.write(TEST.format(tests=TESTS))
    arms = ("plugin", "no plugin", "bare")
    medians = {a: [] for a in arms}
    output = ""
    for i in range(REPEATS):
        for arm in arms:
            times, out = run(arm, suite, work, i, vt)
            # The first tests pay CUDA's and cuBLAS's start-up: left out.
            medians[arm].append(statistics.median(times[len(times) // 10:]))
            if arm == "plugin":
                output = out
    med = {a: statistics.median(v) for a, v in medians.items()}
    versions = subprocess.run(
        [PYTHON, "-c", "import torch\ntry:\n import transformers; t = transformers.__version__\n"
                       "except ImportError:\n t = None\nprint(torch.__version__, t)"],
        stdout=subprocess.PIPE, text=True).stdout.split()
    print("pytest_cost: %d tests x %d runs per arm (%s; torch %s, %s), median call time per "
          "test:" % (TESTS, REPEATS, PYTHON, versions[0] if versions else "?",
                     "transformers " + versions[1] if len(versions) > 1 and versions[1] != "None"
                     else "no transformers: torch.nn.TransformerEncoder"))
    for a in arms:
        print("  %-10s %8.3f ms   (runs: %s)" % (a, med[a] * 1e3,
                                                " ".join("%.3f" % (x * 1e3) for x in medians[a])))
    print("  the plugin's cost: %+.3f ms per test (plugin / no plugin: x%.3f)" % (
        (med["plugin"] - med["no plugin"]) * 1e3, med["plugin"] / med["no plugin"]))
    print("  the library's:     %+.3f ms per test (no plugin / bare: x%.3f)" % (
        (med["no plugin"] - med["bare"]) * 1e3, med["no plugin"] / med["bare"]))
    # Nothing but the plugin's own verdicts and table in the user's output.
    noisy = [line for line in output.splitlines() if "arning" in line]
    print("  warnings in the plugin run's output: %d%s" % (
        len(noisy), "" if not noisy else ": " + " | ".join(noisy[:3])))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
