"""Dense: ``activation(x @ kernel + bias)``, kernel (in, units), bias (units,).

Keras defaults: no activation, use_bias True, glorot_uniform kernel, zero bias. The
plan's GEMM applies to rank-2 inputs (batch, features); Dense on higher-rank inputs
(Keras applies it to the last axis) is not supported yet and says so.
"""
from .. import activations, initializers
from . import argument_checks as check
from .layer import Layer, format_shape


class Dense(Layer):
    supports_masking = True     # passes a Keras mask on (Keras 3 does)
    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 lora_rank=None, **kwargs):
        self.units = check.positive_int(units, "units", "Dense")
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer, "kernel_initializer")
        self.bias_initializer = initializers.get(bias_initializer, "bias_initializer")
        check.unsupported("Dense", kernel_regularizer=kernel_regularizer,
                          bias_regularizer=bias_regularizer,
                          activity_regularizer=activity_regularizer,
                          kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                          lora_rank=lora_rank)
        super().__init__(**kwargs)
        self.kernel = None
        self.bias = None

    def _check_input(self, input_shape):
        if len(input_shape) < 2:
            raise ValueError(f"Input 0 of layer '{self.name}' is incompatible with the layer: "
                             f"expected min_ndim=2, found ndim={len(input_shape)}. Full shape "
                             f"received: {format_shape(input_shape)}")
        if len(input_shape) > 2:
            raise NotImplementedError(
                f"Layer '{self.name}': Dense on inputs of rank {len(input_shape)} "
                f"{format_shape(input_shape)} is not supported yet (the plan's GEMM takes "
                "(batch, features)); add a Flatten() layer before it")
        if input_shape[-1] is None:
            raise ValueError(f"Layer '{self.name}': the last dimension of the inputs to Dense "
                             f"must be known, received {format_shape(input_shape)}")

    def build(self, input_shape):
        self._check_input(input_shape)
        self.kernel = self.add_weight((int(input_shape[-1]), self.units),
                                      self.kernel_initializer, "kernel")
        if self.use_bias:
            self.bias = self.add_weight((self.units,), self.bias_initializer, "bias")
        super().build(input_shape)

    def compute_output_shape(self, input_shape):
        self._check_input(input_shape)
        return tuple(input_shape[:-1]) + (self.units,)

    def plan_layers(self, input_shape):
        return [{
            "kind": "dense", "in_shape": tuple(input_shape[1:]), "out_shape": (self.units,),
            "activation": self.activation, "kernel": self.kernel.buffer,
            "bias": self.bias.buffer if self.bias is not None else None,
        }]

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units, "activation": self.activation, "use_bias": self.use_bias,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
        })
        return config
