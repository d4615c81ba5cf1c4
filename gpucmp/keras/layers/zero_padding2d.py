"""ZeroPadding2D: adds rows and columns of zeros around (None, H, W, C) images.

``padding``: an int (the same on all four sides), a pair (symmetric height, symmetric
width) or ((top, bottom), (left, right)); Keras default (1, 1). Plan node ``pad2d``
with ``padding`` ((top, bottom), (left, right)).
"""
import numbers

import numpy as np

from . import argument_checks as check
from .layer import Layer


def _pair(value, what):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value, value)
    try:
        value = tuple(value)
    except TypeError:
        raise ValueError(f"The `{what}` argument must be a tuple of 2 integers. Received "
                         f"{what}={value!r}") from None
    if len(value) != 2 or any(isinstance(v, bool) or not isinstance(v, numbers.Integral)
                              for v in value):
        raise ValueError(f"The `{what}` argument must be a tuple of 2 integers. Received "
                         f"{what}={value!r}")
    if any(v < 0 for v in value):
        raise ValueError(f"The `{what}` argument must be a tuple of 2 non-negative integers. "
                         f"Received {what}={value!r}")
    return tuple(int(v) for v in value)


class ZeroPadding2D(Layer):
    def __init__(self, padding=(1, 1), data_format=None, **kwargs):
        self.data_format = check.data_format(data_format, "ZeroPadding2D")
        if isinstance(padding, numbers.Integral) and not isinstance(padding, bool):
            if padding < 0:
                raise ValueError(f"ZeroPadding2D: `padding` must be non-negative, received "
                                 f"padding={padding!r}")
            self.padding = ((int(padding),) * 2, (int(padding),) * 2)
        elif hasattr(padding, "__len__"):
            if len(padding) != 2:
                raise ValueError(f"`padding` should have two elements. Received: padding={padding}.")
            self.padding = (_pair(padding[0], "1st entry of padding"),
                            _pair(padding[1], "2nd entry of padding"))
        else:
            raise ValueError(
                "`padding` should be either an int, a tuple of 2 ints (symmetric_height_pad, "
                "symmetric_width_pad), or a tuple of 2 tuples of 2 ints ((top_pad, bottom_pad), "
                f"(left_pad, right_pad)). Received: padding={padding!r}.")
        super().__init__(**kwargs)

    def compute_output_shape(self, input_shape):
        check.image_batch(input_shape, self.name)
        (t, b), (l, r) = self.padding
        h = None if input_shape[1] is None else input_shape[1] + t + b
        w = None if input_shape[2] is None else input_shape[2] + l + r
        return (input_shape[0], h, w, input_shape[3])

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        super().build(input_shape)

    def plan_layers(self, input_shape):
        return [{"kind": "pad2d", "in_shape": tuple(input_shape[1:]),
                 "out_shape": tuple(self.compute_output_shape(input_shape)[1:]),
                 "padding": self.padding}]

    def _forward_numpy(self, x, out_shape):
        (t, b), (l, r) = self.padding
        return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))

    def get_config(self):
        config = super().get_config()
        config.update({"padding": [list(p) for p in self.padding], "data_format": self.data_format})
        return config
