"""Embedding: rows of an (input_dim, output_dim) table picked by integer ids.

Keras defaults: ``embeddings_initializer="uniform"`` (U(-0.05, 0.05)), no mask. The ids
arrive in the plan as float32 (exact below 2**24) and are truncated to int32 as Keras
casts them; an id outside ``[0, input_dim)`` -- negatives included, never wrapped -- is an
IndexError naming it, on every backend. ``input_length`` is used as tf.keras 2 uses it:
the layer's input shape ``(input_length,)``, so a Sequential starting with it is built at
construction. ``mask_zero=True`` attaches Keras' mask ``ids != 0`` (computed from the
uncast ids) to the output: a "seq_mask" plan node that the next recurrent layer reads
(models/lowering.py propagates it as Keras does).
"""
from .. import initializers
from . import argument_checks as check
from .layer import Layer, format_shape


class Embedding(Layer):
    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", embeddings_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, weights=None, lora_rank=None,
                 input_length=None, activity_regularizer=None, **kwargs):
        self.input_dim = check.positive_int(input_dim, "input_dim", "Embedding")
        self.output_dim = check.positive_int(output_dim, "output_dim", "Embedding")
        self.embeddings_initializer = initializers.get(embeddings_initializer, "embeddings_initializer")
        self.mask_zero = bool(mask_zero)
        check.unsupported("Embedding", embeddings_regularizer=embeddings_regularizer,
                          embeddings_constraint=embeddings_constraint, lora_rank=lora_rank,
                          activity_regularizer=activity_regularizer)
        self.input_length = None
        if input_length is not None:
            self.input_length = check.positive_int(input_length, "input_length", "Embedding")
            if "input_shape" not in kwargs and "batch_input_shape" not in kwargs:
                kwargs["input_shape"] = (self.input_length,)
        super().__init__(**kwargs)
        self.embeddings = None
        self._initial_weights = weights

    def _check_input(self, input_shape):
        if len(input_shape) < 2:
            raise ValueError(f"Input 0 of layer '{self.name}' is incompatible with the layer: expected "
                             f"min_ndim=2 (batch, ids...), found shape {format_shape(input_shape)}")
        if any(d is None for d in input_shape[1:]):
            raise ValueError(f"Layer '{self.name}': the sequence length must be known, received "
                             f"{format_shape(input_shape)} (give input_length or an input shape)")
        if self.input_length is not None and input_shape[1] != self.input_length:
            raise ValueError(f"Layer '{self.name}': input_length is {self.input_length} but received an input "
                             f"of shape {format_shape(input_shape)}")

    def build(self, input_shape):
        self._check_input(input_shape)
        self.embeddings = self.add_weight((self.input_dim, self.output_dim), self.embeddings_initializer,
                                          "embeddings")
        super().build(input_shape)
        if self._initial_weights is not None:
            self.set_weights(self._initial_weights)
            self._initial_weights = None

    def compute_output_shape(self, input_shape):
        self._check_input(input_shape)
        return tuple(input_shape) + (self.output_dim,)

    def makes_mask(self, input_shape):
        """(mask_value, over_features) of the mask this layer attaches: ids != 0."""
        return (0.0, False) if self.mask_zero else None

    def plan_layers(self, input_shape):
        return [{"kind": "embedding", "in_shape": tuple(input_shape[1:]),
                 "out_shape": tuple(input_shape[1:]) + (self.output_dim,), "input_dim": self.input_dim,
                 "embeddings": self.embeddings.buffer}]

    def get_config(self):
        config = super().get_config()
        config.update({"input_dim": self.input_dim, "output_dim": self.output_dim,
                       "embeddings_initializer": initializers.serialize(self.embeddings_initializer),
                       "mask_zero": self.mask_zero})
        if self.input_length is not None:
            config["input_length"] = self.input_length
        return config
