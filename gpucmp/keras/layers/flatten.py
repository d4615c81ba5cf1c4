"""Flatten: (batch, d1, d2, ...) -> (batch, d1*d2*...), row-major (a view in the plan)."""
import math

from . import argument_checks as check
from .layer import Layer, format_shape


class Flatten(Layer):
    def __init__(self, data_format=None, **kwargs):
        self.data_format = check.data_format(data_format, "Flatten")
        super().__init__(**kwargs)

    def compute_output_shape(self, input_shape):
        rest = input_shape[1:]
        if any(d is None for d in rest):
            raise ValueError(f"Layer '{self.name}': Flatten needs fully known input dimensions, "
                             f"received {format_shape(input_shape)}")
        return (input_shape[0], math.prod(rest))

    def plan_layers(self, input_shape):
        return [{"kind": "reshape", "in_shape": tuple(input_shape[1:]),
                 "out_shape": tuple(self.compute_output_shape(input_shape)[1:])}]

    def _forward_numpy(self, x, out_shape):
        return x.reshape((x.shape[0],) + tuple(out_shape[1:])).copy()

    def get_config(self):
        config = super().get_config()
        config["data_format"] = self.data_format
        return config
