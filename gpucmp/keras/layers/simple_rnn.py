"""SimpleRNN: h_t = activation(x_t W + b + h_{t-1} U), one gate (recurrent.py lowers it)."""
from .recurrent import RecurrentLayer


class SimpleRNN(RecurrentLayer):
    cell = "simple"
    gates = 1

    def __init__(self, units, activation="tanh", **kwargs):
        if "recurrent_activation" in kwargs:
            raise TypeError("SimpleRNN has no recurrent_activation argument")
        super().__init__(units, activation=activation, **kwargs)

    def _applies(self, rate):
        return rate > 0.0          # SimpleRNN zeros its input at rate 1 (RECURRENT_SPEC 1.7)
