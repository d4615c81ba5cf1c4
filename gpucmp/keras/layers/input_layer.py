"""InputLayer and Input(): declare the per-sample input shape of a model.

``Input(shape=(28, 28, 1))`` returns a KerasTensor for the functional API or for the
first place of a Sequential model; ``InputLayer(shape=...)`` (tf.keras 2 spelling
``input_shape=``) can be added to a Sequential model. Neither has weights, and, as in
Keras 3, neither appears in ``model.layers`` of a Sequential model.
"""
from ..keras_tensor import KerasTensor, Node
from .layer import Layer, _shape_tuple


class InputLayer(Layer):
    def __init__(self, shape=None, batch_size=None, dtype=None, sparse=None, batch_shape=None,
                 input_tensor=None, name=None, input_shape=None, ragged=None, **kwargs):
        if shape is None and input_shape is not None:
            shape = input_shape
        if batch_shape is not None:
            batch_shape = tuple(batch_shape)
            _shape_tuple(batch_shape[1:], "InputLayer")
        elif shape is not None:
            batch_shape = (batch_size,) + _shape_tuple(shape, "InputLayer")
        elif input_tensor is not None:
            batch_shape = tuple(input_tensor.shape)
        else:
            raise ValueError("InputLayer: you must pass a `shape` argument (or `batch_shape`)")
        if sparse or ragged:
            raise NotImplementedError("InputLayer: sparse and ragged inputs are not supported")
        if dtype not in (None, "float32", "float64", "float16", "int32", "int64", "uint8"):
            raise ValueError(f"InputLayer: unsupported dtype {dtype!r}")
        super().__init__(name=name, **kwargs)
        self.batch_shape = batch_shape
        self.input_dtype = dtype or "float32"
        self.build(batch_shape)
        dtype = self.input_dtype if self.input_dtype in ("float32", "float16", "int32") else "float32"
        Node(self, None, [KerasTensor(batch_shape, dtype=dtype, name=self.name)])

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def plan_layers(self, input_shape):
        return []

    def _forward_numpy(self, x, out_shape):
        return x.copy()   # inference: identity

    def get_config(self):
        return {"name": self.name, "batch_shape": list(self.batch_shape),
                "dtype": self.input_dtype}


def Input(shape=None, batch_size=None, dtype=None, sparse=None, batch_shape=None, name=None,
          tensor=None, **kwargs):
    """A symbolic input: ``Input(shape=(784,))`` (the batch axis is implicit)."""
    layer = InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, sparse=sparse,
                       batch_shape=batch_shape, name=name, input_tensor=tensor, **kwargs)
    return layer.output
