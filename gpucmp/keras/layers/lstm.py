"""LSTM: four gates i, f, c, o (Keras' column order); unit_forget_bias puts ones in the
forget gate's bias block as Keras does (its bias_initializer fills the other three).
use_cudnn=True runs it through cuDNN on a CUDA device (cudnn_checks.py says when)."""
import numpy as np

from . import cudnn_checks
from .recurrent import RecurrentLayer


class LSTM(RecurrentLayer):
    cell = "lstm"
    gates = 4

    def __init__(self, units, unit_forget_bias=True, implementation=2, use_cudnn="auto", **kwargs):
        self.unit_forget_bias = bool(unit_forget_bias)
        self.use_cudnn = cudnn_checks.check_value(use_cudnn, "LSTM")
        super().__init__(units, **kwargs)
        cudnn_checks.check_layer(self)

    def _bias_value(self, shape):
        u = self.units
        if not self.unit_forget_bias:
            return self.bias_initializer(shape)
        return np.concatenate([self.bias_initializer((u,)), np.ones((u,)), self.bias_initializer((2 * u,))])

    def get_config(self):
        config = super().get_config()
        config.update({"recurrent_activation": self.recurrent_activation,
                       "unit_forget_bias": self.unit_forget_bias, "use_cudnn": self.use_cudnn})
        return config
