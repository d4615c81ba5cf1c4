"""Dropout: in training, zeroes each element with probability ``rate`` and scales the
rest by 1/(1-rate); identity in evaluate/predict.

The mask is drawn in the core from a per-step seed (counter-based, the same on every
backend). The seed comes from the layer's ``seed`` when given (mixed with the step
number), else from the session stream that ``keras.utils.set_random_seed`` seeds.
"""
import numbers

import numpy as np

from .. import backend
from ..keras_tensor import KerasTensor
from . import argument_checks as check
from .layer import Layer


class Dropout(Layer):
    supports_masking = True     # passes a Keras mask on (Keras 3 does)
    _training_matters = True

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
            raise ValueError("Invalid value received for argument `rate`. Expected a float value "
                             f"in [0, 1). Received: rate={rate!r}")
        check.unsupported("Dropout", noise_shape=noise_shape)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                                 or seed < 0):
            raise ValueError(f"Dropout: `seed` must be a non-negative int or None, received {seed!r}")
        self.rate = float(rate)
        self.seed = None if seed is None else int(seed)
        super().__init__(**kwargs)

    def plan_layers(self, input_shape):
        return [{"kind": "dropout", "in_shape": tuple(input_shape[1:]),
                 "out_shape": tuple(input_shape[1:]), "rate": self.rate}]

    def __call__(self, inputs, training=None, **kwargs):
        """``layer(x, training=True)`` on an array applies a fresh mask (in NumPy);
        otherwise (inference, or a symbolic call) the usual Layer call."""
        if training and not isinstance(inputs, KerasTensor):
            x = np.asarray(inputs, dtype=np.float32)
            keep = backend.rng().random(x.shape) >= self.rate
            return x * keep / np.float32(1.0 - self.rate)
        return super().__call__(inputs, training=training, **kwargs)

    def _forward_numpy(self, x, out_shape):
        return x.copy()   # inference: identity

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config
