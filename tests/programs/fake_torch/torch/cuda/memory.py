# torch.cuda.memory of the stand-in PyTorch. segment() takes memory from cudaMalloc (the CUDA
# stand-in, library path in FAKE_TORCH_CUDART); alloc()/free() hand out and take back blocks
# inside segments; oom() asks the driver for a new segment and, when that fails, records an
# OOM, calls the observers and raises, as PyTorch's caching allocator does.
import ctypes
import os
import sys
import time

_cudart = ctypes.PyDLL(os.environ["FAKE_TORCH_CUDART"])
_cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
_cudart.cudaMemGetInfo.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
_trace = []
_recording = False
_context = None
_observers = []
_sizes = {}


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=0, **kw):
    global _recording, _context
    _recording = bool(enabled)
    _context = context


def _snapshot():
    return {"segments": [], "device_traces": [list(_trace)]}


def _frames():
    out = []
    f = sys._getframe(2)
    while f is not None:
        out.append({"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return out  # innermost first, like PyTorch's


def _entry(action, addr, size, **extra):
    if _recording:
        e = {"action": action, "addr": addr, "size": size, "stream": 0,
             "time_us": time.time_ns() // 1000, "frames": _frames() if _context else []}
        e.update(extra)
        _trace.append(e)


def segment(nbytes):
    p = ctypes.c_void_p()
    if _cudart.cudaMalloc(ctypes.byref(p), nbytes) != 0:
        return None
    _entry("segment_alloc", p.value, nbytes)
    return p.value


def alloc(addr, nbytes):
    _sizes[addr] = nbytes
    _entry("alloc", addr, nbytes)
    return addr


def free(addr):
    _entry("free_requested", addr, _sizes[addr])
    _entry("free_completed", addr, _sizes.pop(addr))


def oom(nbytes, segment_bytes):
    if segment(segment_bytes) is not None:
        raise AssertionError("the stand-in device should be full")
    free_b, total_b = ctypes.c_size_t(), ctypes.c_size_t()
    _cudart.cudaMemGetInfo(ctypes.byref(free_b), ctypes.byref(total_b))
    _entry("oom", 0, nbytes, device_free=free_b.value)
    for cb in _observers:
        cb(0, nbytes, 0, free_b.value)
    raise RuntimeError("CUDA out of memory. Tried to allocate %d bytes" % nbytes)
