"""The pre-flight's forked copy of the program (_vramtrace_fork): what the child does to the files,
pipes and output it inherited leaves the parent's as they were, its messages reach the parent,
and a child that hangs is ended (past its own deadline, or by the parent); how the pre-flight
shares its steps among its copies and numbers what they send (_vramtrace_prediction).

  python3 tests/hook/fork_test.py"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python", "vramtrace", "_hook"))
import _vramtrace_fork as fork  # noqa: E402
from checks import check, finish  # noqa: E402

folder = tempfile.mkdtemp(prefix="vt-fork-")
data = os.path.join(folder, "data.bin")
with open(data, "wb") as f:
    f.write(bytes(range(100)))
log = os.path.join(folder, "log.txt")

reader = open(data, "rb", buffering=0)
reader.read(5)  # the parent's offset: 5
writer = open(log, "a", buffering=1)
writer.write("parent\n")
pipe_r, pipe_w = os.pipe()

side, end = fork.fork(30)
if side == "child":
    got = reader.read(10)           # its own offset
    writer.write("child\n")         # nowhere
    os.write(pipe_w, b"child")      # nowhere
    print("child's print")          # nowhere
    end.send({"read": list(got), "n": 1})
    end.send({"end": True})
    end.end(0)
check("a child was forked", side, "parent")
enough = end.read(lambda ms: any("end" in m for m in ms), time.monotonic() + 30)
check("the child's messages all came", enough, True)
check("the child read its data from the parent's offset", end.messages[0]["read"],
      list(range(5, 15)))
check("its reason", end.close(grace=30), "ended with status 0")
check("the parent's offset stays where it was", os.lseek(reader.fileno(), 0, os.SEEK_CUR), 5)
check("the parent reads on from it", list(reader.read(3)), [5, 6, 7])
writer.write("parent again\n")
writer.close()
with open(log) as f:
    check("nothing the child wrote reached the parent's file", f.read(),
          "parent\nparent again\n")
os.close(pipe_w)
check("nothing the child wrote reached the parent's pipe", os.read(pipe_r, 100), b"")

# A child that never answers: ended past its own deadline (SIGALRM) with no word from it.
side, end = fork.fork(1)
if side == "child":
    while True:
        time.sleep(1)
enough = end.read(lambda ms: bool(ms), time.monotonic() + 60)
check("the hung child said nothing", (enough, end.eof), (False, True))
check("and ran past its deadline", end.close(), "ran past its deadline")

# One the parent gives up on first: killed and reaped.
side, end = fork.fork(600)
if side == "child":
    while True:
        time.sleep(1)
check("the parent stops waiting", end.read(lambda ms: bool(ms), time.monotonic() + 0.2), False)
check("and stops the child", end.close(), "stopped by the parent")

# The child's standard output and error go nowhere: run in a process of its own, whose output is
# read whole.
program = ("import sys, time; sys.path.insert(0, %r); import _vramtrace_fork as f\n"
           "print('before', flush=True)\n"
           "side, end = f.fork(30)\n"
           "if side == 'child':\n"
           "    print('child out'); sys.stderr.write('child err\\n'); end.send({'end': 1}); "
           "end.end(0)\n"
           "end.read(lambda ms: bool(ms), time.monotonic() + 30); end.close()\n"
           "print('after')\n" % os.path.dirname(fork.__file__))
out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                     timeout=60)
check("the child's output went nowhere", (out.stdout, out.stderr, out.returncode),
      ("before\nafter\n", "", 0))

# The steps shared out among the copies: the batch and its half in one loop, each change in a
# copy of its own, merged from the last where fewer copies are allowed.
from _vramtrace_prediction import renumbered, share_runs  # noqa: E402
runs = [(64, ""), (32, ""), (64, "bf16_autocast"), (64, "checkpoint")]
check("three copies", share_runs(runs, 3),
      [[(64, ""), (32, "")], [(64, "bf16_autocast")], [(64, "checkpoint")]])
check("two copies", share_runs(runs, 2),
      [[(64, ""), (32, "")], [(64, "bf16_autocast"), (64, "checkpoint")]])
check("one copy runs them all in order", share_runs(runs, 1), [runs])
check("a step that cannot be halved, no change", share_runs([(1, "")], 3), [[(1, "")]])
check("a finished run's changes only", share_runs([(8, "checkpoint")], 0),
      [[(8, "checkpoint")]])
# A step sent by a copy as its step 1, numbered 3 in the parent.
check("renumbered", renumbered(["N\t0\t1\t32\t64\t5\tok\n", "V\t1\tcheckpoint\t4,5\n",
                                "R\t1\tm\t7\t512\t4\tf\n"], 3),
      ["N\t0\t3\t32\t64\t5\tok\n", "V\t3\tcheckpoint\t4,5\n", "R\t3\tm\t7\t512\t4\tf\n"])
finish("fork")
