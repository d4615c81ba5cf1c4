"""The recurrent layers' shared part: SimpleRNN, LSTM and GRU differ in their cell (its
gate count and weights) and defaults, not in how they lower to the plan.

Each lowers to one "rnn" plan node (csrc/plan/layer_rnn.c): the input projection of all
steps as one GEMM, the recurrence as one core op, forward and backward. Weights and
their order are Keras' (``get_weights() == [kernel, recurrent_kernel, bias]``): kernel
(in, G*u), recurrent_kernel (u, G*u), bias (G*u,) -- GRU with reset_after (2, 3u) -- with
gate column blocks in Keras' order (LSTM i, f, c, o; GRU z, r, h), so weights copied from
Keras give Keras' outputs (RECURRENT_SPEC.md section 1).

Arguments the plan does not carry yet -- dropout and recurrent_dropout above 0,
return_state, stateful, initial_state, masks -- raise NotImplementedError naming them,
never run as something else. ``unroll`` is accepted and has no effect (one kernel either
way), as RECURRENT_SPEC 1.6 suggests.
"""
import numpy as np

from .. import initializers
from . import argument_checks as check
from .layer import Layer, format_shape

RNN_ACTIVATIONS = ("tanh", "sigmoid", "relu", "linear", "hard_sigmoid")


def rnn_activation(value, arg, cls_name):
    """The name of an activation the recurrence computes in its own op."""
    if value is None:
        return "linear"
    if callable(value) and not isinstance(value, str):
        value = getattr(value, "__name__", value)
    if isinstance(value, str) and value.strip().lower() in RNN_ACTIVATIONS:
        return value.strip().lower()
    raise ValueError(f"{cls_name}: {arg}={value!r} is not supported; use one of {', '.join(RNN_ACTIVATIONS)}")


class RecurrentLayer(Layer):
    """Base of SimpleRNN / LSTM / GRU. Subclasses set ``cell`` (the plan's cell name),
    ``gates`` and may override ``_bias_shape`` / ``_bias_value``."""

    cell = None
    gates = 1

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0, recurrent_dropout=0.0,
                 seed=None, return_sequences=False, return_state=False, go_backwards=False, stateful=False,
                 unroll=False, zero_output_for_mask=False, **kwargs):
        name = type(self).__name__
        self.units = check.positive_int(units, "units", name)
        self.activation = rnn_activation(activation, "activation", name)
        self.recurrent_activation = rnn_activation(recurrent_activation, "recurrent_activation", name)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer, "kernel_initializer")
        self.recurrent_initializer = initializers.get(recurrent_initializer, "recurrent_initializer")
        self.bias_initializer = initializers.get(bias_initializer, "bias_initializer")
        check.unsupported(name, kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
                          bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                          kernel_constraint=kernel_constraint, recurrent_constraint=recurrent_constraint,
                          bias_constraint=bias_constraint)
        self.dropout = min(1.0, max(0.0, float(dropout)))
        self.recurrent_dropout = min(1.0, max(0.0, float(recurrent_dropout)))
        self.seed = seed
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        self.go_backwards = bool(go_backwards)
        self.stateful = bool(stateful)
        self.unroll = bool(unroll)
        self.zero_output_for_mask = bool(zero_output_for_mask)
        for arg, on in (("dropout", self._applies(self.dropout)),
                        ("recurrent_dropout", self._applies(self.recurrent_dropout)),
                        ("return_state", self.return_state), ("stateful", self.stateful)):
            if on:
                raise NotImplementedError(f"{name}: `{arg}` is not supported by gpucmp's plan yet "
                                          f"(received {arg}={getattr(self, arg)!r})")
        super().__init__(**kwargs)
        self.kernel = self.recurrent_kernel = self.bias = None

    def _applies(self, rate):
        """Whether a dropout rate does anything (LSTM / GRU ignore rate 1, SimpleRNN does not)."""
        return 0.0 < rate < 1.0

    def _check_input(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(f"Input 0 of layer '{self.name}' is incompatible with the layer: expected ndim=3 "
                             f"(batch, timesteps, features), found shape {format_shape(input_shape)}")
        if input_shape[1] is None or input_shape[2] is None:
            raise ValueError(f"Layer '{self.name}': timesteps and features must be known, received "
                             f"{format_shape(input_shape)}")
        if input_shape[1] == 0:
            raise ValueError(f"Layer '{self.name}': the input has no timesteps {format_shape(input_shape)}")

    def _bias_shape(self):
        return (self.gates * self.units,)

    def _bias_value(self, shape):
        return self.bias_initializer(shape)

    def build(self, input_shape):
        self._check_input(input_shape)
        gu = self.gates * self.units
        self.kernel = self.add_weight((int(input_shape[2]), gu), self.kernel_initializer, "kernel")
        self.recurrent_kernel = self.add_weight((self.units, gu), self.recurrent_initializer, "recurrent_kernel")
        if self.use_bias:
            shape = self._bias_shape()
            self.bias = self.add_weight(shape, "zeros", "bias")
            self.bias.assign(np.asarray(self._bias_value(shape), dtype=np.float32).reshape(shape))
        super().build(input_shape)

    def compute_output_shape(self, input_shape):
        self._check_input(input_shape)
        if self.return_sequences:
            return (input_shape[0], input_shape[1], self.units)
        return (input_shape[0], self.units)

    def plan_layers(self, input_shape):
        return [{"kind": "rnn", "in_shape": tuple(input_shape[1:]),
                 "out_shape": (input_shape[1], self.units) if self.return_sequences else (self.units,),
                 "cell": self.cell, "rnn_activation": self.activation,
                 "recurrent_activation": self.recurrent_activation, "go_backwards": self.go_backwards,
                 "return_sequences": self.return_sequences, "kernel": self.kernel.buffer,
                 "recurrent_kernel": self.recurrent_kernel.buffer,
                 "bias": self.bias.buffer if self.bias is not None else None}]

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units, "activation": self.activation, "use_bias": self.use_bias,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": initializers.serialize(self.recurrent_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "dropout": self.dropout, "recurrent_dropout": self.recurrent_dropout, "seed": self.seed,
            "return_sequences": self.return_sequences, "return_state": self.return_state,
            "go_backwards": self.go_backwards, "stateful": self.stateful, "unroll": self.unroll,
            "zero_output_for_mask": self.zero_output_for_mask,
        })
        return config
