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

__version__ = "0.1.0"

__all__ = ["keras", "ops", "config", "get_device", "set_device", "available_devices", "__version__"]
