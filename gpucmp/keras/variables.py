"""Variable: one weight of a layer, stored in a ``gpucmp._core.Buffer`` on the device.

The buffer is the only copy of the value. Plans hold the same buffers, so several
models built from the same layers (a GAN's generator, discriminator and combined
model) train and read one set of weights, as Keras models share layers.
"""
import math

import numpy as np

from . import backend


class Variable:
    """A float32 weight: ``buffer`` (device memory), ``shape``, ``name``, ``trainable``."""

    def __init__(self, value, name, trainable=True, layer=None):
        value = np.asarray(value, dtype=np.float32)
        self.shape = tuple(int(d) for d in value.shape)
        self.name = name
        self.trainable = bool(trainable)
        # created non-trainable (BatchNormalization's moving statistics): layer.trainable
        # = True does not make it trainable, and the optimizer never sees it
        self.always_non_trainable = False
        self.dtype = "float32"
        self._layer = layer
        self.buffer = backend.core().Buffer(backend.device(), max(1, self.size))
        self.buffer.write(value.reshape(-1) if self.size else np.zeros(1, np.float32))

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def path(self):
        return f"{self._layer.name}/{self.name}" if self._layer is not None else self.name

    def numpy(self):
        """A float32 copy of the value, in its Keras shape."""
        return self.buffer.read()[: self.size].reshape(self.shape)

    @property
    def value(self):
        return self.numpy()

    def assign(self, value):
        """Writes ``value`` (same shape; ValueError naming both shapes otherwise)."""
        assign_all([self], [value], f"Variable '{self.path}'")

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        return (f"<Variable path={self.path}, shape={self.shape}, dtype=float32, "
                f"trainable={self.trainable}>")


def assign_all(variables, values, owner):
    """Writes ``values`` into ``variables`` only if every one fits: the count, each shape
    (ValueError naming the layer, the weight, the expected and the received shapes) and
    finiteness are checked before the first write, so a bad list changes nothing."""
    values = list(values)
    if len(values) != len(variables):
        raise ValueError(f"{owner} expects {len(variables)} weight arrays "
                         f"({', '.join(str(v.shape) for v in variables) or 'none'}), but the "
                         f"provided list has {len(values)}")
    arrays = []
    for var, value in zip(variables, values):
        value = np.asarray(value, dtype=np.float32)
        layer = var._layer.name if var._layer is not None else "?"
        if tuple(value.shape) != var.shape:
            raise ValueError(f"Layer '{layer}' weight '{var.name}' has shape {var.shape}, which is "
                             f"not compatible with the provided weight shape {tuple(value.shape)}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"Layer '{layer}' weight '{var.name}': the provided value contains "
                             "NaN or Inf")
        arrays.append(value)
    for var, value in zip(variables, arrays):
        var.buffer.write(np.ascontiguousarray(value).reshape(-1))
