"""Shared body of MaxPooling2D and AveragePooling2D (NHWC windows, no weights).

Keras defaults: pool_size (2, 2), strides = pool_size, padding 'valid'.
Output extent: valid ``floor((in - pool)/s) + 1``; same ``ceil(in/s)``. With 'same'
padding, padded cells never win a max and are not counted in an average.
"""
from . import argument_checks as check
from .conv2d import conv_output_length
from .layer import Layer, format_shape


class Pooling2D(Layer):
    _kind = None  # 'maxpool2d' | 'avgpool2d'

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, **kwargs):
        cls_name = type(self).__name__
        self.pool_size = check.int_tuple(pool_size, 2, "pool_size", cls_name)
        self.strides = check.int_tuple(strides, 2, "strides", cls_name, allow_none=True) \
            or self.pool_size
        self.padding = check.padding(padding, cls_name)
        self.data_format = check.data_format(data_format, cls_name)
        super().__init__(**kwargs)

    def compute_output_shape(self, input_shape):
        check.image_batch(input_shape, self.name)
        h = conv_output_length(input_shape[1], self.pool_size[0], self.strides[0], 1, self.padding)
        w = conv_output_length(input_shape[2], self.pool_size[1], self.strides[1], 1, self.padding)
        if (h is not None and h < 1) or (w is not None and w < 1):
            raise ValueError(
                f"Layer '{self.name}': the pool {self.pool_size} is larger than the input "
                f"{format_shape(input_shape)} with padding='valid': the output would be empty")
        return (input_shape[0], h, w, input_shape[3])

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        super().build(input_shape)

    def plan_layers(self, input_shape):
        return [{
            "kind": self._kind, "in_shape": tuple(input_shape[1:]),
            "out_shape": tuple(self.compute_output_shape(input_shape)[1:]),
            "pool_size": self.pool_size, "strides": self.strides, "padding": self.padding,
        }]

    def get_config(self):
        config = super().get_config()
        config.update({"pool_size": list(self.pool_size), "strides": list(self.strides),
                       "padding": self.padding, "data_format": self.data_format})
        return config
