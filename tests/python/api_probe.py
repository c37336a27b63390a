# The Python API in a stand-in CUDA process (tests/python/package_test.py): known allocations
# through the stand-in's cudaMalloc, then what the API reads back. With an argument, it also
# writes a report of the process so far into that folder.
import ctypes
import sys

import vramtrace

MiB = 1 << 20
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]


# Each function calls cudaMalloc itself: a site is the innermost Python frame.
def cuda_malloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    return p


def allocate_weights():
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 16 * MiB) == 0
    return p


def grow():
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 8 * MiB) == 0
    return p


if not vramtrace.enabled():
    step = vramtrace.step()
    with vramtrace.region("eval"):
        live = vramtrace.live()
    print("step=%r live=%r mark=%r sites=%r report=%r" % (
        step, live, vramtrace.mark(), vramtrace.sites(), vramtrace.report("unused")))
    sys.exit(0)

weights = allocate_weights()
for i in range(2):
    vramtrace.step()
    with vramtrace.region("eval"):
        activations = cuda_malloc(24 * MiB if i else 8 * MiB)
        rt.cudaFree(activations)
f = vramtrace.live(0)
since = vramtrace.mark()
kept = grow()
temp = cuda_malloc(8 * MiB)
rt.cudaFree(temp)
f = vramtrace.live(0)
print("live 0 live=%d in_use=%d peak=%d" % (f["live_bytes"], f["in_use_bytes"], f["peak_bytes"]))
print("mark peak_since_mark=%d" % f["in_use_peak_since_mark"])
for size, count, site in vramtrace.sites(0, "peak", top=1):
    print("site %d %d %s" % (size, count, site))
for size, count, site in vramtrace.sites(0, "new", since=since):
    print("new %d %d %s" % (size, count, site))
if len(sys.argv) > 1:
    vramtrace.report(sys.argv[1])
    # Many small allocations, freed in a shuffled order: the library's table grows twice (from
    # 16384 slots, half full at most) and moves entries back on deletion; every free must
    # still find its allocation.
    import random

    blocks = [(cuda_malloc(256 * (1 + i % 5)), 256 * (1 + i % 5)) for i in range(20000)]
    random.Random(1).shuffle(blocks)
    for p, _ in blocks[:13000]:
        rt.cudaFree(p)
    left = sum(n for _, n in blocks[13000:])
    print("stress live=%d expected=%d" % (vramtrace.live(0)["live_bytes"], 24 * MiB + left))
    for p, _ in blocks[13000:]:
        rt.cudaFree(p)
    print("stress after=%d" % vramtrace.live(0)["live_bytes"])
