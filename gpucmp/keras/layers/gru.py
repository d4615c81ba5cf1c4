"""GRU: three gates z, r, h (Keras' column order). reset_after=True (Keras' default) has a
recurrent bias: the bias is (2, 3u), row 0 for the inputs, row 1 for the recurrent part;
reset_after=False a (3u,) input bias only (RECURRENT_SPEC 1.3). use_cudnn=True runs it
through cuDNN on a CUDA device (cudnn_checks.py says when; reset_after=True only)."""
from . import cudnn_checks
from .recurrent import RecurrentLayer


class GRU(RecurrentLayer):
    gates = 3

    def __init__(self, units, reset_after=True, implementation=2, use_cudnn="auto", **kwargs):
        self.reset_after = bool(reset_after)
        self.use_cudnn = cudnn_checks.check_value(use_cudnn, "GRU")
        super().__init__(units, **kwargs)
        cudnn_checks.check_layer(self)

    @property
    def cell(self):
        return "gru" if self.reset_after else "gru_reset_before"

    def _bias_shape(self):
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)

    def get_config(self):
        config = super().get_config()
        config.update({"recurrent_activation": self.recurrent_activation, "reset_after": self.reset_after,
                       "use_cudnn": self.use_cudnn})
        return config
