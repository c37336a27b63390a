"""vramtrace.parse_size, the sizes of the pytest markers, over the inputs a user may write:
each accepted value is a size of 0 or more with its unit's exact bytes; negative, exponent,
hexadecimal and unit-less garbage are ValueError, never a number.
   size_test.py (the package from the source tree; nothing is loaded)"""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.dont_write_bytecode = True
import vramtrace  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20,
         "GiB": 2**30, "TiB": 2**40}
rng = random.Random(20261204)
for _ in range(20000):
    n = rng.randrange(0, 10**6)
    unit = rng.choice(sorted(UNITS))
    text = "%d%s%s" % (n, rng.choice(["", " "]), unit)
    check(vramtrace.parse_size(text) == n * UNITS[unit], "parse_size(%r)" % text)
for bad in ("-5 MiB", "-1", "1e3", "1e3 MiB", "0x10", "inf", "nan", "-inf MiB", "", "MiB", "5 MiBs",
            "5..5 MiB", "+5 MiB", "5 - MiB", -1, -0.5, float("nan"), float("inf"), True):
    try:
        got = vramtrace.parse_size(bad)
        check(False, "parse_size(%r) accepted: %r" % (bad, got))
    except ValueError as ex:
        check(str(ex).startswith("not a size: %r" % (bad,)), "parse_size(%r): %s" % (bad, ex))
# Random strings of what sizes are made of: a size of 0 or more, or ValueError.
alphabet = "0123456789.-+eExXiIbBkKmMgG "
for _ in range(50000):
    text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 9)))
    try:
        got = vramtrace.parse_size(text)
        check(isinstance(got, int) and got >= 0, "parse_size(%r) = %r" % (text, got))
        check("-" not in text and "+" not in text and "x" not in text.lower(),
              "parse_size(%r) accepted a sign or a hexadecimal" % text)
    except ValueError:
        pass
print("size_test: %s" % ("%d failure(s)" % len(failures) if failures else "all checks passed"))
sys.exit(1 if failures else 0)
