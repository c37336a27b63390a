#!/usr/bin/env python3
"""The GPU runner reads tests/programs/expected.json as the e2e tests do: scripts/gpu/check.py's
expect() applied to stand-in runs of the test programs must pass every figure, stand-in-only
ones included (the C++ reader, tests/e2e/expected.h, is exercised by the e2e tests).

    tests/programs/expected_test.py BUILD_DIR
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def main(build):
    spec = importlib.util.spec_from_file_location("gpu_check",
                                                  os.path.join(ROOT, "scripts", "gpu", "check.py"))
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "standin"))
    prog = lambda p: os.path.join(build, "tests", "programs", p)
    runs = [  # (program in expected.json, argv, extra environment)
        ("basic", [prog("basic")], {}),
        ("oom", [prog("oom")], {"VRAMTRACE_STANDIN_DEVICE_BYTES": "67108864"}),
        ("oom_death", [prog("oom_death"), "exit"], {"VRAMTRACE_STANDIN_DEVICE_BYTES": "67108864"}),
        ("apis", [prog("apis")], {}),
        ("arrays", [prog("arrays")], {}),
        ("crash", [prog("crash"), "exit7"], {}),
        ("threads", [prog("threads")], {}),
        ("forker", [prog("forker")], {}),
        ("workers", [prog("workers")], {}),
        ("rank_alloc", ["sh", os.path.join(HERE, "launch_ranks.sh"), "4", prog("rank_alloc")], {}),
        ("two_devices", [prog("two_devices")], {"VRAMTRACE_STANDIN_DEVICES": "2"}),
        ("callchain", [prog("callchain")], {}),
        ("native_loop", [prog("native_loop")], {}),
        ("native_loop_oom", [prog("native_loop")], {"VRAMTRACE_STANDIN_DEVICE_BYTES": "1048576000"}),
    ]
    tmp = tempfile.mkdtemp(prefix="vt-expected-")
    for name, argv, extra in runs:
        out = os.path.join(tmp, name)
        subprocess.run([os.path.join(build, "bin", "vramtrace"), "run", "-o", out, "--", *argv],
                       env=dict(env, **extra), capture_output=True, timeout=120)
        report = gpu_check.load(os.path.join(out, "report.json"))
        gpu_check.expect(name, report, name, standin=True)
    failed = [r for r in gpu_check.results if not r[4]]
    print(f"{len(gpu_check.results) - len(failed)} passed, {len(failed)} failed")
    if not failed:
        shutil.rmtree(tmp)
    return 1 if failed or not gpu_check.results else 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")))
