# Test cases for the pytest plugin with PyTorch (tests/python/package_test.py runs this file with
# `pytest --vramtrace` and a stand-in PyTorch, tests/python/fake_torch, on the CPU stand-in for
# CUDA): PyTorch's own figures decide, so a segment its allocator keeps cached is not a leak.
import pytest
import torch

MiB = 1 << 20
held = []


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_cached_segment_is_not_a_leak():
    torch.cuda.free(torch.cuda.empty(16 * MiB))  # the 16 MiB segment stays reserved
    assert torch.cuda.memory_reserved() == 16 * MiB


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leak_inside_a_cached_segment():
    held.append(torch.cuda.empty(4 * MiB))  # served from the cached segment: no new cudaMalloc


@pytest.mark.limit_gpu_memory("20 MiB")
def test_over_budget():
    a = torch.cuda.empty(12 * MiB)  # the cached segment has 12 MiB free
    b = torch.cuda.empty(24 * MiB)  # a new segment
    torch.cuda.free(a)
    torch.cuda.free(b)


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leaked_parameter():
    model = torch.nn.Module()
    model.add(2 * MiB)  # a parameter's storage: 2 MiB, from the cached segments
    model()  # the start-up hook learns the model and its parameters at its first call
    held.append(model)
