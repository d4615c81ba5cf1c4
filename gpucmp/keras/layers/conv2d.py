"""Conv2D: 2-D cross-correlation over NHWC inputs, kernel (kh, kw, in, filters).

Keras defaults: strides (1, 1), padding 'valid', dilation (1, 1), no activation,
use_bias True, glorot_uniform kernel (fans kh*kw*in and kh*kw*filters), zero bias.
Output extent: valid ``floor((in - d*(k-1) - 1)/s) + 1``; same ``ceil(in/s)``.
"""
from .. import activations, initializers
from . import argument_checks as check
from .layer import Layer, format_shape


def conv_output_length(length, kernel, stride, dilation, padding):
    """Keras' output extent of a window op along one axis (None stays None)."""
    if length is None:
        return None
    if padding == "same":
        return -(-length // stride)
    return (length - dilation * (kernel - 1) - 1) // stride + 1


class Conv2D(Layer):
    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        self.filters = check.positive_int(filters, "filters", "Conv2D")
        self.kernel_size = check.int_tuple(kernel_size, 2, "kernel_size", "Conv2D")
        self.strides = check.int_tuple(strides, 2, "strides", "Conv2D")
        self.padding = check.padding(padding, "Conv2D")
        self.data_format = check.data_format(data_format, "Conv2D")
        self.dilation_rate = check.int_tuple(dilation_rate, 2, "dilation_rate", "Conv2D")
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise ValueError("Conv2D: `strides > 1` is not supported together with "
                             f"`dilation_rate > 1`, received strides={self.strides} and "
                             f"dilation_rate={self.dilation_rate}")
        if groups != 1:
            raise NotImplementedError(f"Conv2D: groups={groups!r} is not supported yet (only 1)")
        check.unsupported("Conv2D", kernel_regularizer=kernel_regularizer,
                          bias_regularizer=bias_regularizer,
                          activity_regularizer=activity_regularizer,
                          kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer, "kernel_initializer")
        self.bias_initializer = initializers.get(bias_initializer, "bias_initializer")
        super().__init__(**kwargs)
        self.kernel = None
        self.bias = None

    def _check_input(self, input_shape):
        check.image_batch(input_shape, self.name)
        if input_shape[-1] is None:
            raise ValueError(f"Layer '{self.name}': the channel dimension of the inputs must be "
                             f"known, received {format_shape(input_shape)}")
        for axis, (n, k, d) in enumerate(zip(input_shape[1:3], self.kernel_size, self.dilation_rate)):
            if n is not None and self.padding == "valid" and n < d * (k - 1) + 1:
                raise ValueError(
                    f"Layer '{self.name}': the kernel {self.kernel_size} (dilation "
                    f"{self.dilation_rate}) is larger than the input "
                    f"{format_shape(input_shape)} with padding='valid': the output would have "
                    "no rows/columns. Use padding='same' or a smaller kernel.")

    def build(self, input_shape):
        self._check_input(input_shape)
        kh, kw = self.kernel_size
        self.kernel = self.add_weight((kh, kw, int(input_shape[-1]), self.filters),
                                      self.kernel_initializer, "kernel")
        if self.use_bias:
            self.bias = self.add_weight((self.filters,), self.bias_initializer, "bias")
        super().build(input_shape)

    def compute_output_shape(self, input_shape):
        self._check_input(input_shape)
        h = conv_output_length(input_shape[1], self.kernel_size[0], self.strides[0],
                               self.dilation_rate[0], self.padding)
        w = conv_output_length(input_shape[2], self.kernel_size[1], self.strides[1],
                               self.dilation_rate[1], self.padding)
        return (input_shape[0], h, w, self.filters)

    def plan_layers(self, input_shape):
        return [{
            "kind": "conv2d", "in_shape": tuple(input_shape[1:]),
            "out_shape": tuple(self.compute_output_shape(input_shape)[1:]),
            "activation": self.activation, "kernel_size": self.kernel_size,
            "strides": self.strides, "dilation": self.dilation_rate, "padding": self.padding,
            "kernel": self.kernel.buffer, "bias": self.bias.buffer if self.bias is not None else None,
        }]

    def get_config(self):
        config = super().get_config()
        config.update({
            "filters": self.filters, "kernel_size": list(self.kernel_size),
            "strides": list(self.strides), "padding": self.padding,
            "data_format": self.data_format, "dilation_rate": list(self.dilation_rate),
            "activation": self.activation, "use_bias": self.use_bias,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
        })
        return config


Convolution2D = Conv2D
