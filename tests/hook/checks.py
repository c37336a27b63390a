"""What the start-up hook's Python tests share: a named check of a value against the one
expected, one PASS or FAIL line each, and the exit status the failures give; and the stand-in
PyTorch (tests/programs/fake_torch) with the hook's files put first on the path."""
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def use_standin_torch(build_dir):
    """`import torch` then gives the stand-in (its CUDA runtime the build's stand-in one) and
    the hook's modules import by name; the hook attaches nothing (no VRAMTRACE_TORCH_DIR)."""
    os.environ["FAKE_TORCH_CUDART"] = os.path.join(os.path.abspath(build_dir), "standin",
                                                   "libcudart.so.13")
    os.environ.pop("VRAMTRACE_TORCH_DIR", None)
    sys.path[:0] = [os.path.join(ROOT, "tests", "programs", "fake_torch"),
                    os.path.join(ROOT, "python", "vramtrace", "_hook")]

failed = 0


def check(name, got, expected):
    global failed
    ok = got == expected
    failed += not ok
    print("%s %s%s" % ("PASS" if ok else "FAIL", name,
                       "" if ok else ": got %r, expected %r" % (got, expected)))


def finish(what):
    """Says how many checks failed, and exits 1 if any did."""
    print("%s: %d failure(s)" % (what, failed))
    sys.exit(1 if failed else 0)
