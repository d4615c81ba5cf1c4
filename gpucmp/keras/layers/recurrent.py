"""The recurrent layers' shared part: SimpleRNN, LSTM and GRU differ in their cell (its
gate count and weights) and defaults, not in how they lower to the plan.

Each lowers to one "rnn" plan node (csrc/plan/layer_rnn.c): the input projection of all
steps as one GEMM, the recurrence as one core op, forward and backward. Weights and
their order are Keras' (``get_weights() == [kernel, recurrent_kernel, bias]``): kernel
(in, G*u), recurrent_kernel (u, G*u), bias (G*u,) -- GRU with reset_after (2, 3u) -- with
gate column blocks in Keras' order (LSTM i, f, c, o; GRU z, r, h), so weights copied from
Keras give Keras' outputs (RECURRENT_SPEC.md section 1).

Keras' arguments, as RECURRENT_SPEC 1.6-1.8 give them:
- masks: a mask attached to the input (Embedding(mask_zero=True), Masking) is a plan
  input of the node (models/lowering.py propagates it); it is passed on only with
  return_sequences; ``zero_output_for_mask`` as Keras; any padding pattern, go_backwards
  reverses it with the input;
- ``initial_state=[h0]`` / ``[h0, c0]`` (symbolic tensors, functional API; gradients flow
  into them) and ``return_state=True``: outputs ``[output, h]`` / ``[output, h, c]``;
- on arrays (eager calls, recurrent_eager.py) ``mask=`` (batch, timesteps) and
  ``initial_state=`` arrays as Keras 3 takes them, and return_state's tuple of arrays;
- ``Bidirectional`` (bidirectional.py) wraps a forward and a backward copy;
- ``stateful=True``: a static batch size (ValueError otherwise); the states are carried
  from batch to batch and call to call in two non-trainable buffers (not in
  ``get_weights()``), zeroed by ``reset_states()``;
- ``dropout`` in training: one inverted-dropout mask per batch, reused at every step;
  LSTM / GRU ignore rate 1 as Keras does, SimpleRNN drops everything;
- ``recurrent_dropout`` in training (Keras' implementation 1, RECURRENT_SPEC 1.7): masks
  on h_{t-1} drawn once per batch and reused at every step, one per gate (SimpleRNN 1,
  LSTM 4, GRU 3) in that gate's recurrent product only (c_{t-1} and GRU's z * h_{t-1}
  unmasked); with recurrent_dropout != 0 an LSTM / GRU also draws its input dropout as one
  mask per gate. The same rate-1 rules as ``dropout``. The masks are drawn and applied in
  the plan (layer_rnn.c) and the core op (rnn_fwd / rnn_bwd's rmask), on every backend
  (the masks are the same on the CPU and the GPU).
Not training, both dropouts are exactly the identity. ``unroll`` is accepted and has no
effect (one kernel either way).
"""
import numpy as np

from .. import initializers
from . import cudnn_checks
from ..variables import Variable
from . import argument_checks as check
from . import recurrent_eager
from .layer import Layer, format_shape, is_shape_list

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
        super().__init__(**kwargs)
        self.kernel = self.recurrent_kernel = self.bias = None
        self._states = None          # stateful: the carried (batch, units) states
        self._stateful_batch = None

    # a mask on the input is taken (a plan input) and passed on with return_sequences
    supports_masking = True
    takes_mask = True

    @property
    def _training_matters(self):
        return self._applies(self.dropout) or self._applies(self.recurrent_dropout)

    @property
    def draws_dropout_mask(self):     # the trainer seeds the masks of each step
        return self._training_matters

    @property
    def _gate_dropout(self):
        """Keras' implementation 1 (forced by any recurrent_dropout != 0): one input
        dropout mask per gate."""
        return self.gates > 1 and self.recurrent_dropout != 0.0

    @property
    def n_states(self):
        return 2 if self.cell == "lstm" else 1

    def output_mask(self, mask):
        return mask if self.return_sequences else None

    def _applies(self, rate):
        """Whether a dropout rate does anything (LSTM / GRU ignore rate 1, SimpleRNN does not)."""
        return 0.0 < rate < 1.0

    # ------------------------------------------------------------ calling
    def __call__(self, inputs, initial_state=None, training=None, mask=None, **kwargs):
        """Keras' call: symbolic tensors are recorded; arrays run at once, with ``mask=`` and
        ``initial_state=`` arrays too (recurrent_eager.py)."""
        return recurrent_eager.call(self, inputs, initial_state, training, mask, kwargs, super().__call__)

    def _check_states(self, state_shapes):
        want = "[h, c]" if self.n_states == 2 else "[h]"
        if len(state_shapes) != self.n_states:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects {self.n_states} initial "
                             f"state(s) {want}, but received {len(state_shapes)}: initial_state shapes "
                             f"{[format_shape(s) for s in state_shapes]}")
        for k, s in enumerate(state_shapes):
            if len(s) != 2 or s[1] != self.units:
                raise ValueError(f"Layer '{self.name}': initial_state[{k}] must have shape (batch, "
                                 f"{self.units}) (rank 2, units={self.units}), received shape "
                                 f"{format_shape(s)}")

    def _split(self, input_shape):
        """(x shape, [state shapes]) of a call's input shape (a list with initial states)."""
        if is_shape_list(input_shape):
            x, states = tuple(input_shape[0]), [tuple(s) for s in input_shape[1:]]
            self._check_states(states)
            return x, states
        return tuple(input_shape), []

    def build_for(self, input_shape):
        x, states = self._split(input_shape)
        out = super().build_for(x)
        if self.stateful and states and x[0] is not None and states[0][0] not in (None, x[0]):
            raise ValueError(f"Layer '{self.name}': initial_state batch {states[0][0]} differs from the "
                             f"input's {x[0]}")
        return out

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
        input_shape, _ = self._split(input_shape)
        self._check_input(input_shape)
        if self.stateful:
            if input_shape[0] is None:
                raise ValueError(
                    f"Layer '{self.name}': when using `stateful=True` in a RNN, the batch size must be "
                    f"static. Found dynamic batch size: sequence.shape={format_shape(input_shape)}; give "
                    "it with keras.Input(shape, batch_size=...) or batch_input_shape=(batch, T, F)")
            self._stateful_batch = int(input_shape[0])
            self._states = [Variable(np.zeros((self._stateful_batch, self.units), np.float32), name,
                                     trainable=False, layer=self)
                            for name in ("state_h", "state_c")[:self.n_states]]
        gu = self.gates * self.units
        self.kernel = self.add_weight((int(input_shape[2]), gu), self.kernel_initializer, "kernel")
        self.recurrent_kernel = self.add_weight((self.units, gu), self.recurrent_initializer, "recurrent_kernel")
        if self.use_bias:
            shape = self._bias_shape()
            self.bias = self.add_weight(shape, "zeros", "bias")
            self.bias.assign(np.asarray(self._bias_value(shape), dtype=np.float32).reshape(shape))
        super().build(input_shape)

    def compute_output_shape(self, input_shape):
        input_shape, _ = self._split(input_shape)
        self._check_input(input_shape)
        if self.return_sequences:
            out = (input_shape[0], input_shape[1], self.units)
        else:
            out = (input_shape[0], self.units)
        if self.return_state:       # Keras: [output, *states], h before c
            return [out] + [(input_shape[0], self.units)] * self.n_states
        return out

    def plan_layers(self, input_shape, mask=False):
        x, states = self._split(input_shape)
        T, u = x[1], self.units
        y_len = (T * u) if self.return_sequences else u
        if self.return_state:        # [y | h | c] per sample; select nodes pick each output
            out_shape = (y_len + self.n_states * u,)
        else:
            out_shape = (T, u) if self.return_sequences else (u,)
        d = {"kind": "rnn", "in_shape": tuple(x[1:]), "out_shape": out_shape,
             "cell": self.cell, "rnn_activation": self.activation,
             "recurrent_activation": self.recurrent_activation, "go_backwards": self.go_backwards,
             "return_sequences": self.return_sequences, "return_state": self.return_state,
             "zero_output_for_mask": self.zero_output_for_mask, "state_inputs": len(states),
             "mask_input": bool(mask), "rate": self.dropout if self._applies(self.dropout) else 0.0,
             "recurrent_rate": self.recurrent_dropout if self._applies(self.recurrent_dropout) else 0.0,
             "gate_dropout": self._gate_dropout,
             "kernel": self.kernel.buffer, "recurrent_kernel": self.recurrent_kernel.buffer,
             "bias": self.bias.buffer if self.bias is not None else None}
        if getattr(self, "use_cudnn", "auto") is True:      # LSTM / GRU: cuDNN's RNN API
            cudnn_checks.check_layer(self)                  # attributes may have changed since
            if mask:
                cudnn_checks.check_masked(self)
            d["impl"] = "cudnn"
        if self.stateful:
            d["stateful_batch"] = self._stateful_batch
            d["state_h"] = self._states[0].buffer
            if self.n_states == 2:
                d["state_c"] = self._states[1].buffer
        return [d]

    # ------------------------------------------------------------ stateful
    @property
    def states(self):
        """The carried states of a stateful layer (Variables, (batch, units)), else None."""
        return list(self._states) if self._states is not None else None

    def reset_states(self, states=None):
        """Zeroes the carried states (or sets them to ``states``, a list of (batch, units)
        arrays), as Keras' ``reset_state(s)``."""
        if not self.stateful:
            raise AttributeError(f"Layer '{self.name}' is not stateful: it has no states to reset")
        if self._states is None:
            return                  # not built yet: the states start at zero anyway
        if states is None:
            states = [np.zeros(v.shape, np.float32) for v in self._states]
        states = list(states) if isinstance(states, (list, tuple)) else [states]
        if len(states) != len(self._states):
            raise ValueError(f"Layer '{self.name}' has {len(self._states)} states, received {len(states)}")
        for v, value in zip(self._states, states):
            v.assign(value)

    reset_state = reset_states

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
