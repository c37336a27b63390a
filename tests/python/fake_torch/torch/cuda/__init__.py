# torch.cuda of the plugin's stand-in PyTorch: one device, segments from the stand-in's
# cudaMalloc, blocks carved from them first-fit and never given back to the driver (cached);
# each block's alloc and free_completed in the allocator trace, with its Python frames, as
# torch.cuda.memory._snapshot()["device_traces"] has them.
import ctypes
import time
import traceback

from . import memory  # noqa: F401

_rt = None
_segments = []  # [base, size, [(offset, size), ...] blocks in use]
_allocated = 0
_peak = 0


def is_available():
    return True


def is_initialized():
    return _rt is not None


def device_count():
    return 1


def _init():
    global _rt
    if _rt is None:
        _rt = ctypes.CDLL("libcudart.so.13")
        _rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]


def _segment_malloc(size):
    p = ctypes.c_void_p()
    assert _rt.cudaMalloc(ctypes.byref(p), size) == 0
    return p.value


def empty(nbytes):
    """A block of `nbytes` (a handle for free()), from a cached segment when one has room."""
    global _allocated, _peak
    _init()
    for seg in _segments:
        used = sum(s for _, s in seg[2])
        if seg[1] - used >= nbytes:
            offset = used  # blocks are freed whole; first-fit at the end is enough here
            break
    else:
        seg = [_segment_malloc(nbytes), nbytes, []]
        _segments.append(seg)
        offset = 0
    seg[2].append((offset, nbytes))
    frames = [{"filename": f.filename, "line": f.lineno, "name": f.name}
              for f in reversed(traceback.extract_stack()[:-1])]  # innermost first
    memory._trace.append({"action": "alloc", "addr": seg[0] + offset, "size": nbytes,
                          "time_us": time.time_ns() // 1000, "frames": frames})
    _allocated += nbytes
    _peak = max(_peak, _allocated)
    return (seg, offset, nbytes)


def free(block):
    global _allocated
    seg, offset, nbytes = block
    seg[2].remove((offset, nbytes))
    memory._trace.append({"action": "free_completed", "addr": seg[0] + offset, "size": nbytes,
                          "time_us": time.time_ns() // 1000, "frames": []})
    _allocated -= nbytes


def memory_allocated(device=0):
    return _allocated


def max_memory_allocated(device=0):
    return _peak


def reset_peak_memory_stats(device=0):
    global _peak
    _peak = _allocated


def memory_reserved(device=0):
    return sum(seg[1] for seg in _segments)
