# Test script: cudaMalloc through ctypes with the GIL held (PyDLL), from known lines.
# Expected: a 4 MiB allocation from load_model() (line 15), leaked, and a 2 MiB one from main()
# (line 22), freed; the peak is 6 MiB. Argument: the path of libcudart.so.13.
import ctypes
import sys

cudart = ctypes.PyDLL(sys.argv[1])  # PyDLL: the GIL stays held during the call
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]
MiB = 1 << 20


def load_model():
    p = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(p), 4 * MiB) == 0  # py_alloc.py:15
    return p


def main():
    kept = load_model()
    q = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(q), 2 * MiB) == 0  # py_alloc.py:22
    assert cudart.cudaFree(q) == 0
    print("py_alloc done", bool(kept.value))


main()
