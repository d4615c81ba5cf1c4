"""The graph of a functional model: which calls (Nodes) lead from its inputs to its outputs.

``Graph(inputs, outputs)`` walks the KerasTensors' histories back from the outputs, as
Keras 3's ``ops/function.py`` (map_graph) does, and keeps:
- ``nodes``: the model's own nodes in a topological order (inputs first);
- ``layers``: the layers in Keras' order -- by decreasing depth (distance to the output),
  ties broken by the order a depth-first walk from the outputs first meets them. So
  ``model.layers`` and ``get_weights()`` come out in the same order as Keras'.
Each node's depth is the longest path from it to an output.

It checks what gpucmp needs of a graph, with ValueErrors naming the tensors and layers:
inputs that are not ``keras.Input`` tensors, an input given twice, an output that needs
an Input the model was not given ("Graph disconnected"), a model input the outputs do not
use, two layers with the same name.
"""
from ..keras_tensor import KerasTensor


def _tensor_name(t):
    layer = t._layer
    return f"'{t.name}' (output of layer '{layer.name}')" if layer is not None else f"'{t.name}'"


class Graph:
    def __init__(self, inputs, outputs):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        seen = set()
        for t in self.inputs:
            node = t._node
            if node is None:
                raise ValueError(
                    f"The input tensor {t!r} has no graph history: it was not made by "
                    "keras.Input or a layer call (a gpucmp Sequential model's `.input` does "
                    "not record a graph; build the model with the functional API instead)")
            if not node.is_input:
                raise ValueError(
                    f"Model inputs must come from `keras.Input()`: the input tensor "
                    f"{_tensor_name(t)} is computed by a layer, so it is not a model input. "
                    "Pass the keras.Input tensor the graph starts from instead.")
            if id(t) in seen:
                raise ValueError(f"The same Input tensor {_tensor_name(t)} is given twice in "
                                 "the model's `inputs`; each input must appear once")
            seen.add(id(t))
        self._walk()
        self._check_connected()

    # ------------------------------------------------------------ topology
    def _walk(self):
        """Depth-first from the outputs: nodes from inputs to outputs, and the order in
        which the walk first met each layer (Keras' tie-break)."""
        order, done, layer_index = [], set(), {}

        def node_of(tensor):
            node = tensor._node
            if node is None:
                raise ValueError(f"Tensor {tensor!r} has no history: it was not produced by "
                                 "keras.Input or by calling a layer")
            return node

        for out in self.outputs:     # an explicit stack: deep models exceed Python's recursion
            stack = [(node_of(out), False)]
            while stack:
                node, expanded = stack.pop()
                if id(node) in done:
                    continue
                if expanded:
                    done.add(id(node))
                    order.append(node)
                    continue
                if id(node.operation) not in layer_index:
                    layer_index[id(node.operation)] = len(layer_index)
                stack.append((node, True))
                for t in reversed(node.input_tensors):     # first input visited first
                    stack.append((node_of(t), False))
        depth = {}
        for node in reversed(order):           # from the outputs back to the inputs
            d = depth.setdefault(id(node), 0)
            for parent in node.parent_nodes:
                depth[id(parent)] = max(depth.get(id(parent), 0), d + 1)
        self._depth = depth
        self._layer_index = layer_index
        self.nodes = sorted(order, key=lambda n: (-depth[id(n)], layer_index[id(n.operation)],
                                                  n.index))
        layer_depth = {}
        layers = {}
        for node in self.nodes:
            op = node.operation
            layer_depth[id(op)] = max(layer_depth.get(id(op), 0), depth[id(node)])
            layers[id(op)] = op
        self.layers = sorted(layers.values(),
                             key=lambda l: (-layer_depth[id(l)], layer_index[id(l)]))
        self.node_ids = {id(n) for n in self.nodes}

    def _check_connected(self):
        given = {id(t) for t in self.inputs}
        used = set()
        for node in self.nodes:
            if node.is_input:
                t = node.outputs[0]
                if id(t) not in given:
                    users = [n.operation.name for n in self.nodes
                             if any(x is t for x in n.input_tensors)]
                    raise ValueError(
                        f"Graph disconnected: the outputs depend on the Input "
                        f"'{t.name}' (used by layer(s) {users}), which is not one of the "
                        f"model's inputs {[x.name for x in self.inputs]}. Add it to `inputs`.")
                used.add(id(t))
        for t in self.inputs:
            if id(t) not in used:
                raise ValueError(
                    f"Graph disconnected: the model input '{t.name}' is not used to compute "
                    f"the outputs {[x.name for x in self.outputs]}; remove it from `inputs` or "
                    "connect it")
        names = [layer.name for layer in self.layers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f'The name "{name}" is used {names.count(name)} times in the '
                                 "model. All layer names should be unique.")

    # ------------------------------------------------------------ queries
    def own_node_index(self, node):
        """The index of ``node`` among its layer's nodes that belong to this graph (the index
        a config records; it is the node index itself unless the layer was also called
        outside this model)."""
        own = [n for n in node.operation._inbound_nodes if id(n) in self.node_ids]
        return own.index(node)

    def nodes_of(self, layer):
        return [n for n in layer._inbound_nodes if id(n) in self.node_ids]

    def is_sequential_like(self):
        """Keras' summary test: one node per depth, each with one input, no shared layer."""
        by_depth = {}
        for node in self.nodes:
            by_depth.setdefault(self._depth[id(node)], []).append(node)
        for nodes in by_depth.values():
            if len(nodes) > 1 or len(nodes[0].input_tensors) > 1:
                return False
        return all(len(self.nodes_of(layer)) <= 1 for layer in self.layers)


def flatten_tensors(value, what):
    """A KerasTensor or a list/tuple of them -> list (dicts: NotImplementedError)."""
    if isinstance(value, dict):
        raise NotImplementedError(f"`{what}` given as a dict are not supported yet; pass a "
                                  "tensor or a list of tensors")
    flat = list(value) if isinstance(value, (list, tuple)) else [value]
    if not flat:
        raise ValueError(f"`{what}` argument cannot be empty. Received: {what}={value!r}")
    for t in flat:
        if not isinstance(t, KerasTensor):
            raise ValueError(f"All `{what}` values must be KerasTensors. Received: "
                             f"{what}={value!r} including invalid value {t!r} of type "
                             f"{type(t).__name__}")
    return flat
