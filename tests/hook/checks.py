"""What the start-up hook's Python tests share: a named check of a value against the one
expected, one PASS or FAIL line each, and the exit status the failures give."""
import sys

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
