# PyTorch test cases for the pytest plugin on a GPU (scripts/gpu/pytest.sh runs them with
# `pytest --vramtrace` and checks the outcome): sizes are multiples of PyTorch's 2 MiB rounding,
# so each test's figures are exact.
import pytest
import torch

MiB = 1 << 20
held = []


def tensor(n):
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def allocate_big_buffer():
    return tensor(256 * MiB)


@pytest.mark.limit_gpu_memory("128 MiB")
def test_within_budget():
    x = tensor(64 * MiB)
    del x


@pytest.mark.limit_gpu_memory("128 MiB")
def test_over_budget():
    x = allocate_big_buffer()
    del x


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leaks():
    held.append(tensor(32 * MiB))


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_cached_block_is_not_a_leak():
    x = tensor(96 * MiB)
    del x  # PyTorch keeps the segment reserved: cached, not leaked
    assert torch.cuda.memory_reserved() >= 96 * MiB


def test_training_step():
    model = torch.nn.Linear(1024, 1024).cuda()
    loss = model(torch.randn(64, 1024, device="cuda")).sum()
    loss.backward()
    del model, loss
