# Microbenchmark: ns per cudaMalloc(4 KiB)/cudaFree pair from Python (ctypes.PyDLL: the GIL is
# held, so Python frames are captured), over argv[2] pairs (default 50000) from a few Python
# frames deep. Argument 1: the path of libcudart.so.13. Argument 3 "cdll": through ctypes.CDLL,
# which releases the GIL (Python frames then come from the direct frame reader). Prints
# "ns_per_pair=N".
import ctypes
import sys
import time

cudart = (ctypes.CDLL if sys.argv[3:] == ["cdll"] else ctypes.PyDLL)(sys.argv[1])
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
p = ctypes.c_void_p()
ref = ctypes.byref(p)


def pair(depth):
    if depth:
        return pair(depth - 1)
    cudart.cudaMalloc(ref, 4096)
    cudart.cudaFree(p)


for _ in range(1000):
    pair(8)
t0 = time.perf_counter_ns()
for _ in range(n):
    pair(8)
t1 = time.perf_counter_ns()
print(f"ns_per_pair={(t1 - t0) / n:.0f}")
