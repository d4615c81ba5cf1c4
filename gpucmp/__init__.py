"""gpucmp: how do my models run on this GPU, and how would they run on that one?

A C/CUDA core (gpucmp._core) with functional ops (gpucmp.ops) and a Keras-compatible
front end (gpucmp.keras), so that code written for tensorflow.keras runs with only its
imports changed -- `import gpucmp as tf; tf.keras.layers.Dense(...)` works too.
"""
try:
    # ml_dtypes (optional: bfloat16 arrays for gpucmp.ops) is imported before the core:
    # on the H200 image, importing it after a CUDA build of _core crashed the process
    # (seen 2026-11-29; the other order works). Cause not yet established.
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
