"""KerasTensor: the symbolic value of the functional API (``Input`` and ``layer(tensor)``).

It carries a shape (``None`` for the batch axis) and where it came from: the layer that
produced it and that layer's input tensor. ``Model(inputs, outputs)`` walks this history
back from the output to build its layer chain.
"""


class KerasTensor:
    def __init__(self, shape, layer=None, parent=None, name=None):
        self.shape = tuple(shape)
        self.dtype = "float32"
        self._layer = layer      # the layer that produced this tensor (an InputLayer for Input())
        self._parent = parent    # the KerasTensor that layer was called on (None for Input())
        self.name = name

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"<KerasTensor shape={self.shape}, dtype=float32, name={self.name}>"
