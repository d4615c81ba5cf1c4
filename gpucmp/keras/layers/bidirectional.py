"""Bidirectional: Keras 3's wrapper running a recurrent layer forwards and a copy of it
backwards over the same sequence, and merging the two (``layers/rnn/bidirectional.py``).

As Keras: the wrapped SimpleRNN / LSTM / GRU is rebuilt from its config as
``forward_<name>``, and -- unless ``backward_layer`` is given -- again with
``go_backwards=True`` as ``backward_<name>``; both get ``zero_output_for_mask =
return_sequences``. A given ``backward_layer`` must have the other ``go_backwards`` and the
same ``stateful`` / ``return_sequences`` / ``return_state``. The backward sequence is
flipped back to input order before the merge; ``merge_mode`` "concat" (features side by
side), "sum", "mul", "ave" or None (a list of the two outputs). With ``return_state``:
``[output(s), *forward states, *backward states]``; ``initial_state``: its first half goes
to the forward layer, the rest to the backward one. A mask reaches both layers; the output
mask is the input's with return_sequences (both outputs' for merge_mode None), else none.
Weights: the forward layer's then the backward layer's (``get_weights`` / ``set_weights``,
``weights=`` at construction).

In the plan: the two "rnn" nodes on the same input (and mask), a "reverse" node on the
backward sequence, then concat / add / multiply / add + scale(0.5); several outputs are
packed side by side (select nodes for the states) as for a recurrent layer's return_state.
"""
from . import recurrent_eager
from .layer import Layer, format_shape, is_shape_list, normalize_shape
from .recurrent import RecurrentLayer

MERGE_MODES = ("sum", "mul", "ave", "concat", None)


def _strip(name, prefix):
    return name[len(prefix):] if name.startswith(prefix) else name


def _copy(layer, name, **changes):
    config = layer.get_config()
    config.pop("batch_input_shape", None)
    config.update(name=name, **changes)
    return type(layer).from_config(config)


class Bidirectional(Layer):
    supports_masking = True
    takes_mask = True

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs):
        if not isinstance(layer, RecurrentLayer):
            raise ValueError("Bidirectional: `layer` must be a recurrent layer instance (SimpleRNN, LSTM "
                             f"or GRU). Received: layer={layer!r}")
        if backward_layer is not None and not isinstance(backward_layer, RecurrentLayer):
            raise ValueError("Bidirectional: `backward_layer` must be a recurrent layer instance "
                             f"(SimpleRNN, LSTM or GRU). Received: backward_layer={backward_layer!r}")
        if not (merge_mode is None or (isinstance(merge_mode, str) and merge_mode in MERGE_MODES)):
            raise ValueError(f"Bidirectional: invalid `merge_mode`. Received: merge_mode={merge_mode!r}. "
                             'Merge mode should be one of {"sum", "mul", "ave", "concat", None}')
        super().__init__(**kwargs)
        self.forward_layer = _copy(layer, f"forward_{_strip(layer.name, 'forward_')}")
        if backward_layer is None:
            backward_layer = _copy(layer, f"backward_{_strip(layer.name, 'backward_')}", go_backwards=True)
        self.backward_layer = backward_layer
        self._verify()
        for sub in (self.forward_layer, self.backward_layer):
            sub.zero_output_for_mask = sub.return_sequences    # as Keras forces it
        self.merge_mode = merge_mode
        self.stateful = layer.stateful
        self.return_sequences = layer.return_sequences
        self.return_state = layer.return_state
        self._initial_weights = list(weights) if weights else None

    def _verify(self):
        f, b = self.forward_layer, self.backward_layer
        if f.go_backwards == b.go_backwards:
            raise ValueError("Bidirectional: the forward layer and `backward_layer` should have different "
                             f"`go_backwards` values. Received: forward_layer.go_backwards={f.go_backwards}, "
                             f"backward_layer.go_backwards={b.go_backwards}")
        for attr in ("stateful", "return_sequences", "return_state"):
            if getattr(f, attr) != getattr(b, attr):
                raise ValueError(f"Bidirectional: the forward layer and `backward_layer` are expected to have "
                                 f'the same value for attribute "{attr}", got "{getattr(f, attr)}" for the '
                                 f'forward layer and "{getattr(b, attr)}" for backward_layer')

    # ------------------------------------------------------------ sub-layers' flags
    @property
    def _training_matters(self):
        return self.forward_layer._training_matters or self.backward_layer._training_matters

    @property
    def draws_dropout_mask(self):
        return self.forward_layer.draws_dropout_mask or self.backward_layer.draws_dropout_mask

    @property
    def masked_outputs(self):
        """Keras' compute_mask: both sequences carry the mask with merge_mode None."""
        return 2 if self.merge_mode is None and self.return_sequences else 1

    def output_mask(self, mask):
        return mask if self.return_sequences else None

    @property
    def layers(self):
        return [self.forward_layer, self.backward_layer]

    # ------------------------------------------------------------ weights
    @property
    def _weights(self):
        """The forward layer's weights, then the backward layer's (Keras' order)."""
        if "forward_layer" not in self.__dict__:
            return []
        return self.forward_layer._weights + self.backward_layer._weights

    @_weights.setter
    def _weights(self, value):
        if value:
            raise AttributeError("Bidirectional's weights are its two layers' weights")

    @Layer.trainable.setter
    def trainable(self, value):
        self._trainable = bool(value)
        if "forward_layer" in self.__dict__:
            self.forward_layer.trainable = value
            self.backward_layer.trainable = value

    # ------------------------------------------------------------ shapes
    def _split(self, input_shape):
        """(x shape, forward state shapes, backward state shapes)."""
        if is_shape_list(input_shape):
            x, states = tuple(input_shape[0]), [tuple(s) for s in input_shape[1:]]
            half = len(states) // 2
            return x, states[:half], states[half:]
        return tuple(input_shape), [], []

    @staticmethod
    def _sub_shape(x, states):
        return [x] + states if states else x

    def _check_states(self, fs, bs):
        want = self.forward_layer.n_states + self.backward_layer.n_states
        if len(fs) + len(bs) != want or len(fs) != self.forward_layer.n_states:
            raise ValueError(f"Layer '{self.name}' (Bidirectional) expects {want} initial states (the "
                             "forward layer's, then the backward layer's), received "
                             f"{len(fs) + len(bs)}: initial_state shapes {format_shape(fs + bs)}")
        self.forward_layer._check_states(fs)
        self.backward_layer._check_states(bs)

    def build_for(self, input_shape):
        """Built for the sequence; initial states (a list of shapes after it) are checked."""
        x, fs, bs = self._split(normalize_shape(input_shape))
        if fs or bs:
            self._check_states(fs, bs)
        return super().build_for(x)

    def build(self, input_shape):
        x, _, _ = self._split(input_shape)
        self.forward_layer.build_for(x)
        self.backward_layer.build_for(x)
        super().build(x)
        if self._initial_weights is not None:
            weights, self._initial_weights = self._initial_weights, None
            self.set_weights(weights)

    def _outputs(self, x):
        """(forward output shape, backward output shape, forward states, backward states)."""
        f = self.forward_layer.compute_output_shape(x)
        b = self.backward_layer.compute_output_shape(x)
        if self.return_state:
            return tuple(f[0]), tuple(b[0]), [tuple(s) for s in f[1:]], [tuple(s) for s in b[1:]]
        return tuple(f), tuple(b), [], []

    def compute_output_shape(self, input_shape):
        x, _, _ = self._split(input_shape)
        f, b, fs, bs = self._outputs(x)
        if self.merge_mode in ("sum", "mul", "ave") and f != b:
            raise ValueError(f"Layer '{self.name}': merge_mode={self.merge_mode!r} needs the forward and "
                             f"backward outputs of one shape, got {format_shape(f)} and {format_shape(b)} "
                             "(units of `layer` and `backward_layer` differ)")
        if self.merge_mode is None:
            outs = [f, b]
        elif self.merge_mode == "concat":
            outs = [f[:-1] + (f[-1] + b[-1],)]
        else:
            outs = [f]
        outs += fs + bs
        return outs if len(outs) > 1 else outs[0]

    # ------------------------------------------------------------ the plan
    def plan_layers(self, input_shape, mask=False):
        x, fs, bs = self._split(input_shape)
        f_out, b_out, f_states, b_states = self._outputs(x)
        n_args = 1 + len(fs) + len(bs)
        mask_arg = [("arg", n_args)] if mask else []
        descs = []

        def add(d, inputs):
            d["_inputs"] = inputs
            descs.append(d)
            return len(descs) - 1

        f_rnn = add(self.forward_layer.plan_layers(self._sub_shape(x, fs), mask=mask)[0],
                    [("arg", 0)] + [("arg", 1 + i) for i in range(len(fs))] + mask_arg)
        b_rnn = add(self.backward_layer.plan_layers(self._sub_shape(x, bs), mask=mask)[0],
                    [("arg", 0)] + [("arg", 1 + len(fs) + i) for i in range(len(bs))] + mask_arg)
        f_y, b_y = f_rnn, b_rnn
        if self.return_state:           # the sequences / last outputs out of the packed samples
            f_y = add(_select(descs[f_rnn]["out_shape"], f_out, 0), [("desc", f_rnn)])
            b_y = add(_select(descs[b_rnn]["out_shape"], b_out, 0), [("desc", b_rnn)])
        if self.return_sequences:       # the backward sequence back in input order
            shape = tuple(b_out[1:])
            b_y = add({"kind": "reverse", "in_shape": shape, "out_shape": shape}, [("desc", b_y)])
        shape = tuple(f_out[1:])
        if self.merge_mode == "concat":
            out_shape = shape[:-1] + (f_out[-1] + b_out[-1],)
            outs = [add({"kind": "concat", "in_shape": shape, "out_shape": out_shape, "axis": len(shape) - 1},
                        [("desc", f_y), ("desc", b_y)])]
        elif self.merge_mode in ("sum", "ave"):
            outs = [add({"kind": "add", "in_shape": shape, "out_shape": shape}, [("desc", f_y), ("desc", b_y)])]
            if self.merge_mode == "ave":
                outs = [add({"kind": "scale", "in_shape": shape, "out_shape": shape, "scale": 0.5},
                            [("desc", outs[0])])]
        elif self.merge_mode == "mul":
            outs = [add({"kind": "multiply", "in_shape": shape, "out_shape": shape}, [("desc", f_y), ("desc", b_y)])]
        else:
            outs = [f_y, b_y]
        if len(outs) == 1 and not self.return_state:
            return descs
        # several outputs: packed side by side, [output(s) | forward states | backward states]
        parts = []
        for k in outs:
            d = descs[k]
            n = _numel(d["out_shape"])
            parts.append(add({"kind": "reshape", "in_shape": tuple(d["out_shape"]), "out_shape": (n,)},
                             [("desc", k)]))
        for rnn, y, states in ((f_rnn, f_out, f_states), (b_rnn, b_out, b_states)):
            if states:
                parts.append(add(_select(descs[rnn]["out_shape"], (None, sum(s[1] for s in states)),
                                         _numel(y[1:])), [("desc", rnn)]))
        total = sum(_numel(descs[k]["out_shape"]) for k in parts)
        add({"kind": "concat", "in_shape": tuple(descs[parts[0]]["out_shape"]), "out_shape": (total,), "axis": 0},
            [("desc", k) for k in parts])
        return descs

    # ------------------------------------------------------------ calling
    def __call__(self, inputs, initial_state=None, training=None, mask=None, **kwargs):
        return recurrent_eager.call(self, inputs, initial_state, training, mask, kwargs,
                                    super().__call__)

    # ------------------------------------------------------------ stateful
    def reset_states(self, states=None):
        if not self.stateful:
            raise AttributeError(f"Layer '{self.name}' is not stateful: it has no states to reset")
        if states is not None:
            states = list(states)
            half = self.forward_layer.n_states
            self.forward_layer.reset_states(states[:half])
            self.backward_layer.reset_states(states[half:])
            return
        self.forward_layer.reset_states()
        self.backward_layer.reset_states()

    reset_state = reset_states

    @property
    def states(self):
        f, b = self.forward_layer.states, self.backward_layer.states
        return tuple(f + b) if f and b else None

    # ------------------------------------------------------------ config
    def get_config(self):
        from . import serialize
        config = super().get_config()
        config.update({"merge_mode": self.merge_mode, "layer": serialize(self.forward_layer),
                       "backward_layer": serialize(self.backward_layer)})
        return config

    @classmethod
    def from_config(cls, config):
        from . import deserialize
        from ..saving import keras_config
        config = dict(config)
        label = f"Bidirectional '{config.get('name', '?')}'"
        for key in ("layer", "backward_layer"):
            entry = config.get(key)
            if isinstance(entry, dict):
                sub = keras_config.from_keras(entry, label)
                sub["config"].pop("build_config", None)
                config[key] = deserialize(sub)
        return cls(**config)


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _select(packed_shape, out_shape, offset):
    """A select node taking a (batch, ...) output out of a packed rnn sample."""
    return {"kind": "select", "in_shape": tuple(packed_shape), "out_shape": tuple(out_shape[1:]),
            "offset": int(offset)}
