"""Shared pytest configuration for the gpucmp tests.

What it provides:
- the `cuda` marker: tests that need a CUDA backend; they are skipped cleanly when
  no backend of `gpucmp._core.backends()` is a CUDA one (or the core is not built);
- the `slow` marker and the `--run-slow` option: slow tests run only when asked;
- tests/ on sys.path, so test files can `import reference` (the NumPy oracle).

Kept generic on purpose: other test files add their own fixtures locally.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run tests marked slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA backend of gpucmp._core")
    config.addinivalue_line("markers", "slow: slow test, run only with --run-slow")


def _cuda_available():
    try:
        from gpucmp import _core
    except ImportError:
        return False
    return any(name.startswith("cuda") for name in _core.backends())


def pytest_collection_modifyitems(config, items):
    skip_slow = None if config.getoption("--run-slow") else \
        pytest.mark.skip(reason="slow: pass --run-slow to run it")
    has_cuda = None
    for item in items:
        if skip_slow is not None and item.get_closest_marker("slow") is not None:
            item.add_marker(skip_slow)
        if item.get_closest_marker("cuda") is not None:
            if has_cuda is None:
                has_cuda = _cuda_available()
            if not has_cuda:
                item.add_marker(pytest.mark.skip(reason="no CUDA backend in gpucmp._core.backends()"))
