"""KerasTensor and Node: the symbolic graph of the functional API.

``keras.Input(shape)`` returns a KerasTensor; calling a layer on one KerasTensor, or on a
list of them (merge layers), records a ``Node`` -- that call -- on the layer and returns
the output KerasTensor. Each tensor knows where it came from through ``_keras_history``
``(layer, node_index, tensor_index)``, as in Keras 3: ``layer._inbound_nodes[node_index]``
is the call that produced it. ``Model(inputs, outputs)`` walks these histories back from
its outputs (models/functional.py).
"""
from collections import namedtuple

KerasHistory = namedtuple("KerasHistory", ["operation", "node_index", "tensor_index"])


class KerasTensor:
    """A symbolic value: a shape (``None`` for the batch axis), a dtype, a name."""

    def __init__(self, shape, dtype="float32", name=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name
        self._keras_history = None     # set by the Node that produces this tensor

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def _layer(self):
        """The layer that produced this tensor (an InputLayer for ``Input()``)."""
        return self._keras_history.operation if self._keras_history else None

    @property
    def _node(self):
        h = self._keras_history
        return h.operation._inbound_nodes[h.node_index] if h else None

    def __repr__(self):
        return f"<KerasTensor shape={self.shape}, dtype={self.dtype}, name={self.name}>"


class Node:
    """One call of a layer on symbolic inputs: ``arguments`` is what the layer was called
    on (a KerasTensor, or a list of them), ``outputs`` the tensors it produced. An
    InputLayer's node has no inputs (``is_input``)."""

    def __init__(self, operation, arguments, outputs):
        self.operation = operation
        self.arguments = arguments
        if arguments is None:
            self.input_tensors = []
        elif isinstance(arguments, KerasTensor):
            self.input_tensors = [arguments]
        else:
            self.input_tensors = list(arguments)
        self.outputs = list(outputs)
        operation._inbound_nodes.append(self)
        index = len(operation._inbound_nodes) - 1
        for i, t in enumerate(self.outputs):
            t._keras_history = KerasHistory(operation, index, i)

    @property
    def is_input(self):
        return not self.input_tensors

    @property
    def parent_nodes(self):
        return [t._node for t in self.input_tensors]

    @property
    def index(self):
        return self.operation._inbound_nodes.index(self)

    def __repr__(self):
        return f"<Node {self.operation.name}[{self.index}]>"


def is_symbolic(x):
    """True for a KerasTensor or a non-empty list/tuple of KerasTensors."""
    if isinstance(x, KerasTensor):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(t, KerasTensor) for t in x)
