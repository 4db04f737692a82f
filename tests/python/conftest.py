"""Shared fixtures of the Python tests; tests marked `gpu` are skipped without CUDA; the fuzz count."""
import sys

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



def pytest_terminal_summary(terminalreporter):
    """How many generated cases test_fuzz.py ran, by test and outcome."""
    fuzz = sys.modules.get("test_fuzz")
    if fuzz is None or not fuzz.CASES:
        return
    counts = fuzz.CASES
    terminalreporter.write_sep("-", f"hypothesis: {sum(counts.values())} generated cases ran")
    for outcome, count in sorted(counts.items()):
        terminalreporter.write_line(f"{count:6d}  {outcome}")
