# torch.cuda.memory of the stand-in PyTorch. segment() takes memory from cudaMalloc (the CUDA
# stand-in, library path in FAKE_TORCH_CUDART); alloc()/free() hand out and take back blocks
# inside segments; oom() asks the driver for a new segment and, when that fails, records an
# OOM, calls the observers and raises, as PyTorch's caching allocator does.
# malloc()/release() are the caching allocator that the stand-in tensors use: best fit among
# the free blocks of the segments (the smallest that fits, the oldest segment first), split
# and merged again on release, a new segment (the request rounded up to 2 MiB) only when none
# fits; the cache is never given back to the driver. Each segment belongs to one pool: the
# default (0, 0), or the private pool that was current when it was made (a CUDA graph's
# capture, torch.cuda.use_mem_pool: see cuda/graphs.py); a block comes only from segments of
# the current pool, and _snapshot() lists the segments with their segment_pool_id. With a per-process memory fraction, a
# segment that would take what the allocator reserved past fraction x the device's memory is
# refused without asking the driver, as PyTorch refuses it.
import collections
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
_skipped = frozenset()  # the actions not recorded (skip_actions)
_observers = []
_sizes = {}
_segments = []  # [base, bytes, blocks, pool]; blocks: [offset, bytes, in_use], by offset
_pool = (0, 0)  # the pool new blocks come from (segment_pool_id)
_reserved = 0
_allocations = 0
_allocated = 0  # bytes in blocks now, and at most
_peak = 0
_fraction = 1.0
_SEGMENT_ROUND = 2 << 20


class OutOfMemoryError(RuntimeError):
    # PyTorch's torch.OutOfMemoryError (torch.cuda.OutOfMemoryError), a RuntimeError.
    pass


OutOfMemoryError.__module__ = "torch"


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=0,
                           skip_actions=None, **kw):
    global _recording, _context, _trace, _skipped
    _recording = bool(enabled)
    _context = context
    # As a PyTorch that takes skip_actions: each call sets the actions it does not record.
    _skipped = frozenset(skip_actions or ())
    # A ring of the latest max_entries entries, as PyTorch keeps them; switched off, emptied
    # (as PyTorch 2.11 does), unless FAKE_TORCH_KEEP_RING=1 (a PyTorch that would keep it).
    keep = enabled or os.environ.get("FAKE_TORCH_KEEP_RING") == "1"
    _trace = collections.deque(_trace if keep else (), maxlen=max_entries or None)


def _snapshot():
    # The segments with their pool and their blocks in address order (size, state), as
    # PyTorch lists them.
    segments = [{"device": 0, "address": seg[0], "total_size": seg[1], "segment_pool_id": seg[3],
                 "allocated_size": sum(b[1] for b in seg[2] if b[2]), "is_expandable": False,
                 "blocks": [{"size": b[1], "state": "active_allocated" if b[2] else "inactive"}
                            for b in seg[2]]}
                for seg in _segments]
    return {"segments": segments, "device_traces": [list(_trace)]}


def _frames():
    out = []
    f = sys._getframe(2)
    while f is not None:
        out.append({"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return out  # innermost first, like PyTorch's


def _entry(action, addr, size, **extra):
    if _recording and action not in _skipped:
        e = {"action": action, "addr": addr, "size": size, "stream": 0,
             "time_us": time.time_ns() // 1000, "frames": _frames() if _context else []}
        e.update(extra)
        _trace.append(e)


def mem_get_info():
    free_b, total_b = ctypes.c_size_t(), ctypes.c_size_t()
    _cudart.cudaMemGetInfo(ctypes.byref(free_b), ctypes.byref(total_b))
    return free_b.value, total_b.value


class _Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


_kernels = {}  # name -> (its name's bytes, the host function's stand-in: a byte whose address keys it)


def launch(name):
    """Launches the kernel `name` on the stand-in (a cudaLaunchKernel that CUPTI's launch
    callbacks see, as PyTorch's kernels are), registered once as nvcc's host code would."""
    k = _kernels.get(name)
    if k is None:
        _cudart.cudaLaunchKernel.argtypes = [ctypes.c_void_p, _Dim3, _Dim3, ctypes.c_void_p,
                                             ctypes.c_size_t, ctypes.c_void_p]
        k = _kernels[name] = (ctypes.create_string_buffer(name.encode()), ctypes.create_string_buffer(1))
        register = getattr(_cudart, "__cudaRegisterFunction")
        register.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] + [ctypes.c_void_p] * 5
        register(None, ctypes.addressof(k[1]), None, ctypes.addressof(k[0]), -1, None, None, None,
                 None, None)
    if _cudart.cudaLaunchKernel(ctypes.addressof(k[1]), _Dim3(1, 1, 1), _Dim3(1, 1, 1), None, 0,
                                None) != 0:
        raise RuntimeError("launch of %s failed" % name)


def segment(nbytes):
    global _reserved
    if _fraction < 1.0 and _reserved + nbytes > _fraction * mem_get_info()[1]:
        return None
    p = ctypes.c_void_p()
    if _cudart.cudaMalloc(ctypes.byref(p), nbytes) != 0:
        return None
    _reserved += nbytes
    _entry("segment_alloc", p.value, nbytes)
    return p.value


def memory_stats_as_nested_dict(device=None):
    # Only the count of blocks handed out, as PyTorch keeps it (allocation.all.allocated).
    return {"allocation": {"all": {"allocated": _allocations}}}


def memory_stats(device=None):
    # PyTorch's flat form of the same: "allocation.all.allocated".
    return {"allocation.all.allocated": _allocations}


def memory_allocated(device=None):
    return _allocated


def max_memory_allocated(device=None):
    # The most bytes in blocks at once (PyTorch's allocated_bytes.all.peak).
    return _peak


def alloc(addr, nbytes):
    global _allocations, _allocated, _peak
    _allocations += 1
    _allocated += nbytes
    _peak = max(_peak, _allocated)
    _sizes[addr] = nbytes
    _entry("alloc", addr, nbytes)
    return addr


def free(addr):
    global _allocated
    _entry("free_requested", addr, _sizes[addr])
    _allocated -= _sizes[addr]
    _entry("free_completed", addr, _sizes.pop(addr))


def _fail(nbytes):
    free_b = mem_get_info()[0]
    _entry("oom", 0, nbytes, device_free=free_b)
    for cb in _observers:
        cb(0, nbytes, 0, free_b)
    raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % nbytes)


def oom(nbytes, segment_bytes):
    if segment(segment_bytes) is not None:
        raise AssertionError("the stand-in device should be full")
    _fail(nbytes)


def malloc(nbytes):
    best = None
    for seg in _segments:
        if seg[3] != _pool:
            continue
        for i, b in enumerate(seg[2]):
            if not b[2] and b[1] >= nbytes and (best is None or b[1] < best[0][2][best[1]][1]):
                best = (seg, i)
    if best is None:
        size = -(-nbytes // _SEGMENT_ROUND) * _SEGMENT_ROUND
        base = segment(size)
        if base is None:
            _fail(nbytes)
        _segments.append([base, size, [[0, size, False]], _pool])
        best = (_segments[-1], 0)
    seg, i = best
    b = seg[2][i]
    if b[1] > nbytes:
        seg[2].insert(i + 1, [b[0] + nbytes, b[1] - nbytes, False])
        b[1] = nbytes
    b[2] = True
    return alloc(seg[0] + b[0], nbytes)


def release(addr):
    free(addr)
    for seg in _segments:
        if seg[0] <= addr < seg[0] + seg[1]:
            blocks = seg[2]
            i = next(k for k, b in enumerate(blocks) if seg[0] + b[0] == addr)
            blocks[i][2] = False
            if i + 1 < len(blocks) and not blocks[i + 1][2]:
                blocks[i][1] += blocks.pop(i + 1)[1]
            if i > 0 and not blocks[i - 1][2]:
                blocks[i - 1][1] += blocks.pop(i)[1]
            return
