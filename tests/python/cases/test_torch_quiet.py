# Test cases for the pytest plugin's cost and silence with PyTorch (tests/python/package_test.py
# runs this file with `pytest --vramtrace` and the stand-in PyTorch): a test over its budget
# makes the plugin name its blocks and their categories; it must do so from what the start-up
# hook holds, without walking the heap (gc.get_objects() is watched here) and without touching
# objects that warn when looked at (torch 2.11's torch.distributed.reduce_op does: a
# FutureWarning in the user's output on every run).
import gc
import warnings

import pytest
import torch

MiB = 1 << 20
walks = []
_get_objects = gc.get_objects


def _watched_get_objects(*args, **kwargs):
    walks.append(1)
    return _get_objects(*args, **kwargs)


gc.get_objects = _watched_get_objects


class _Deprecated:
    """Warns whenever its class is asked (isinstance() asks it), as reduce_op does."""

    @property
    def __class__(self):
        warnings.warn("vt-deprecated-object was looked at", FutureWarning)
        return _Deprecated


# Kept inside a list: pytest looks at the module's own names when it collects the tests.
deprecated = [_Deprecated()]
optimizers = []


@pytest.mark.limit_gpu_memory("1 MiB")
def test_model_over_budget():
    model = torch.nn.Module()
    model.add(3 * MiB)  # a parameter
    model()
    optimizer = torch.optim.Optimizer(model.parameters())
    optimizer.state[model._params[0]] = {"exp_avg": torch.Tensor(2 * MiB)}  # its state
    optimizer.step()
    optimizers.append((model, optimizer))


def test_heap_never_walked():
    assert walks == []
