#!/usr/bin/env python3
"""The start-up hook's reading of PyTorch's memory snapshot at the dump of a wrapped ring
(python/vramtrace/_hook/_vramtrace_write.py, allocator_state), and of the state at the end of a gap
of the trace (--torch=sampled), on snapshots shaped as PyTorch 2.x gives
them: the function is taken from the hook's source alone, so that nothing of the hook starts."""
import ast
import os
import sys

HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                    "vramtrace", "_hook", "_vramtrace_write.py")
tree = ast.parse(open(HOOK, encoding="utf-8").read())
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "allocator_state")
space = {}
exec(compile(ast.Module(body=[fn], type_ignores=[]), HOOK, "exec"), space)
state = space["allocator_state"]
MiB = 1 << 20
failed = 0


def check(name, got, expected):
    global failed
    ok = got == expected
    failed += not ok
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, "" if ok else ": got %r, expected %r" % (got, expected)))


# A 20 MiB segment of the large pool: a 9.5 MiB tensor in a 10 MiB block (the 0.5 MiB rest is
# too small for PyTorch to split off), a free 4 MiB block, a 6 MiB tensor; and a block freed on
# one stream while another still used it (active_pending_free).
snap = {"segments": [
    {"device": 1, "address": 0x7f0000000000, "total_size": 20 * MiB, "blocks": [
        {"address": 0x7f0000000000, "size": 10 * MiB, "requested_size": 9 * MiB + MiB // 2,
         "state": "active_allocated"},
        {"address": 0x7f0000a00000, "size": 4 * MiB, "requested_size": 0, "state": "inactive"},
        {"address": 0x7f0000e00000, "size": 6 * MiB, "requested_size": 6 * MiB,
         "state": "active_pending_free"}]},
    # A snapshot without addresses or requested sizes (older PyTorch): blocks follow each other
    # from the segment's address and keep their own size.
    {"device": 0, "address": 4096, "total_size": 2 * MiB, "blocks": [
        {"size": 512, "state": "active_allocated"},
        {"size": 2 * MiB - 512, "state": "inactive"}]},
]}
lines = state(snap).splitlines()
check("segment lines", [l for l in lines if l.startswith("G")],
      ["G\t1\t%d\t%d" % (0x7f0000000000, 20 * MiB), "G\t0\t4096\t%d" % (2 * MiB)])
check("blocks in use at the size asked for", [l for l in lines if l.startswith("A")],
      ["A\t1\t%d\t%d" % (0x7f0000000000, 9 * MiB + MiB // 2),
       "A\t1\t%d\t%d" % (0x7f0000e00000, 6 * MiB),
       "A\t0\t4096\t512"])
# A requested size larger than the block (not a shape PyTorch makes) is not believed.
odd = {"segments": [{"device": 0, "address": 0, "total_size": MiB, "blocks": [
    {"address": 0, "size": 1024, "requested_size": 4096, "state": "active_allocated"}]}]}
check("a requested size above the block's is not taken", state(odd).splitlines()[1], "A\t0\t0\t1024")
# At a gap's end the same state, as H and B lines.
check("a gap's end: the same lines as H and B", state(snap, gap=True),
      state(snap).replace("G\t", "H\t").replace("A\t", "B\t"))
sys.exit(1 if failed else 0)
