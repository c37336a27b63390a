# Test cases for the pytest plugin's own test (tests/python/package_test.py runs this file with
# `pytest --vramtrace` on the CPU stand-in for CUDA): device memory comes from the stand-in's
# cudaMalloc through ctypes, so each test's figures are known exactly.
import ctypes

import pytest

import vramtrace
from vramtrace import _native

MiB = 1 << 20
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
held = []


def cuda_malloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    return p


# These call cudaMalloc themselves: a site is the innermost Python frame.
def allocate_big_buffer():
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 64 * MiB) == 0
    return p


def leak_buffer():
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 8 * MiB) == 0
    return p


@pytest.mark.limit_gpu_memory("32 MiB")
def test_within_budget():
    p = cuda_malloc(16 * MiB)
    assert rt.cudaFree(p) == 0


@pytest.mark.limit_gpu_memory("32 MiB")
def test_over_budget():
    p = allocate_big_buffer()
    assert rt.cudaFree(p) == 0


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leaks():
    held.append(leak_buffer())


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_cached_block_is_not_a_leak():
    # A caching allocator declared with vramtrace.h: it keeps its 32 MiB segment after the block
    # it handed out comes back, as PyTorch's does. The segment is cached, not leaked; until it
    # is declared, the fresh cudaMalloc counts as in use (the test's peak is 32 MiB).
    lib = _native.library()
    lib.vramtrace_v1_pool_create.restype = ctypes.c_ulonglong
    lib.vramtrace_v1_pool_create.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.vramtrace_v1_pool_segment.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p,
                                              ctypes.c_size_t, ctypes.c_int]
    lib.vramtrace_v1_block.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t]
    pool = lib.vramtrace_v1_pool_create(b"test cache", 0)
    segment = cuda_malloc(32 * MiB)
    lib.vramtrace_v1_pool_segment(pool, segment, 32 * MiB, 1)
    lib.vramtrace_v1_block(pool, segment, 4 * MiB)
    lib.vramtrace_v1_block(pool, segment, 0)
    held.append(segment)
    assert vramtrace.live(0)["cached_bytes"] == 32 * MiB
