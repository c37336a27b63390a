# Test cases for the pytest plugin's own test (tests/python/package_test.py): markers that are
# not sizes fail their test in one line, before it runs; a test that used no device memory has
# no row in the summary.
import pytest

ran = []


@pytest.mark.limit_gpu_leaks("-5 MiB")
def test_negative_limit():
    ran.append("negative")


@pytest.mark.limit_gpu_memory("lots")
def test_malformed_limit():
    ran.append("malformed")


@pytest.mark.limit_gpu_leaks("0 B")
def test_no_cuda_at_all():
    assert ran == []  # neither test above ran
