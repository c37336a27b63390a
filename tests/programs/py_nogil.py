# Test script: cudaMalloc through ctypes.CDLL, which RELEASES the GIL around the call (as
# PyTorch's bindings do before they allocate), from known lines; and one allocation from a
# plain native thread with no Python state. Expected: 4 MiB from load_model() (line 17), leaked;
# 2 MiB from main() (line 24), freed; 1 MiB from the native thread, leaked.
# Arguments: the path of libcudart.so.13, the path of libnative_thread.so.
import ctypes
import sys

cudart = ctypes.CDLL(sys.argv[1])  # CDLL: the GIL is released during the call
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]
MiB = 1 << 20


def load_model():
    p = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(p), 4 * MiB) == 0  # py_nogil.py:17
    return p


def main():
    kept = load_model()
    q = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(q), 2 * MiB) == 0  # py_nogil.py:24
    assert cudart.cudaFree(q) == 0
    native = ctypes.CDLL(sys.argv[2])
    native.native_thread_allocate.restype = ctypes.c_void_p
    assert native.native_thread_allocate()
    print("py_nogil done", sys.version.split()[0], bool(kept.value))


main()
