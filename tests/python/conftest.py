"""Shared fixtures of the Python tests; tests marked `gpu` are skipped without CUDA."""
import pytest
import torch

import spattn

HAVE_CUDA = torch.cuda.is_available() and spattn.built_with_cuda()


def pytest_collection_modifyitems(config, items):
    if HAVE_CUDA:
        return
    reason = ("no CUDA device" if not torch.cuda.is_available()
              else "spattn was built without CUDA")
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    """A fresh, seeded generator per test: inputs are random, never zeros."""
    return torch.Generator().manual_seed(1234)

