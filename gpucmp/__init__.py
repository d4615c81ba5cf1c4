"""gpucmp: how do my models run on this GPU, and how would they run on that one?

A C/CUDA core (gpucmp._core) with functional ops (gpucmp.ops) and a Keras-compatible
front end (gpucmp.keras), so that code written for tensorflow.keras runs with only its
imports changed -- `import gpucmp as tf; tf.keras.layers.Dense(...)` works too.
"""
try:
    # ml_dtypes (optional: bfloat16 arrays for gpucmp.ops) is imported before the core.
    # A CUDA build of _core that exported its statically linked C++ runtime crashed a
    # later ml_dtypes import (H200 image, 2026-11-29); setup.py now hides those symbols,
    # and this order stays as a second guard for builds made with GPUCMP_STATIC_CXX=0.
    import ml_dtypes  # noqa: F401
except ImportError:
    pass
from . import _core
from ._device import available_devices, get_device, set_device
from . import config
from . import ops
from . import keras
from . import distribute

__version__ = "0.1.0"


def specs(names=None):
    """The GPU spec database as a DataFrame (all rows, or the named GPUs in that order)."""
    from .harness import specs as _specs
    return _specs.specs(names)


def devices():
    """The CPU and every CUDA device present, each matched to its spec row (a DataFrame)."""
    from .harness import devices as _devices
    return _devices.devices()


def benchmark(workloads=None, devices=None, precisions=None, batch_sizes=None, repeats=None, **kwargs):
    """Measure workloads on devices: a tidy DataFrame (see gpucmp.harness.runner.benchmark)."""
    from .harness import runner
    return runner.benchmark(workloads, devices, precisions, batch_sizes, repeats, **kwargs)


def compare(gpus, workloads=None, precisions=None, batch_sizes=None, results=None, **kwargs):
    """GPUs side by side, measured where present, projected elsewhere (gpucmp.harness.compare)."""
    from .harness import compare as _compare
    return _compare.compare(gpus, workloads, precisions, batch_sizes, results, **kwargs)


__all__ = ["keras", "ops", "config", "get_device", "set_device", "available_devices", "specs", "devices",
           "benchmark", "compare", "__version__"]
