"""Model: layers with Keras' container API (and, through Trainer, training).

Two ways to build one:
- ``Sequential`` (sequential.py): layers added in order, a chain;
- the functional API: ``x = Input((32, 32, 3)); h = Conv2D(8, 3)(x); ...;
  Model(inputs=x, outputs=y)`` -- any graph of layer calls (merge layers take several
  tensors, a model may have several inputs). ``Model(inputs, outputs)`` returns a
  ``Functional`` (as in Keras 3); its graph (models/functional.py) fixes ``model.layers``
  -- InputLayers included, in Keras' topological order -- and so ``get_weights()``.
  Subclassed models with a Python ``call()`` cannot be lowered to the plan:
  NotImplementedError.

A model is itself a layer: it can be added to another model or called on a KerasTensor
(a GAN's ``Sequential([generator, discriminator])`` or ``discriminator(generator(z))``);
the lowering (lowering.py) inlines nested models, and the layers -- hence the weight
buffers -- are shared.
"""
import math

from .. import backend
from ..keras_tensor import KerasTensor
from ..layers.input_layer import InputLayer
from ..layers.layer import Layer, format_shape, is_shape_list, normalize_shape
from ..variables import assign_all
from . import lowering
from .functional import Graph, flatten_tensors
from .trainer import Trainer


class Model(Trainer, Layer):
    def __new__(cls, *args, **kwargs):
        if cls is Model and (len(args) >= 2 or "inputs" in kwargs or "outputs" in kwargs):
            return super().__new__(Functional)      # keras.Model(inputs, outputs), as Keras 3
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        inputs = kwargs.pop("inputs", args[0] if len(args) > 0 else None)
        outputs = kwargs.pop("outputs", args[1] if len(args) > 1 else None)
        name = kwargs.pop("name", None)
        trainable = kwargs.pop("trainable", True)
        if len(args) > 2 or kwargs:
            raise ValueError(f"Unrecognized arguments passed to {type(self).__name__}: "
                             f"{sorted(kwargs) or args[2:]}")
        functional = inputs is not None or outputs is not None
        if functional and not isinstance(self, Functional):
            raise NotImplementedError(f"{type(self).__name__}: subclassed models built from "
                                      "inputs and outputs are not supported")
        if name is None and functional:
            name = backend.unique_name("functional")
        Layer.__init__(self, trainable=trainable if trainable is not None else True, name=name)
        self._layers = []
        self._input_batch_shape = None
        self._output_batch_shape = None
        self._graph = None
        self._init_trainer()
        if functional:
            self._init_functional(inputs, outputs)

    # ------------------------------------------------------------ structure
    def _init_functional(self, inputs, outputs):
        if inputs is None or outputs is None:
            raise ValueError("A functional model needs both `inputs` and `outputs`")
        flat_in = flatten_tensors(inputs, "inputs")
        flat_out = flatten_tensors(outputs, "outputs")
        if len(flat_out) > 1:
            raise NotImplementedError(
                f"Model '{self.name}': models with several outputs "
                f"({[t.name for t in flat_out]}) are not supported yet; the plan computes one "
                "output and one loss")
        self._graph = Graph(flat_in, flat_out)
        self._layers = list(self._graph.layers)
        self._check_shared_layers()
        shapes = [t.shape for t in flat_in]
        self._input_batch_shape = shapes[0] if len(shapes) == 1 else shapes
        self._output_batch_shape = tuple(flat_out[0].shape)
        self._build_input_shape = self._input_batch_shape
        self.built = True

    def _check_shared_layers(self):
        for layer in self._layers:
            if len(self._graph.nodes_of(layer)) > 1 and lowering.has_weights(layer):
                raise NotImplementedError(
                    f"Layer '{layer.name}' is called {len(self._graph.nodes_of(layer))} times in "
                    f"model '{self.name}': a layer with weights shared within one model is not "
                    "supported by the plan yet")

    def _chain(self):
        """The computing layers, in order (InputLayers excluded)."""
        return [l for l in self._layers if not isinstance(l, InputLayer)]

    def _check_lowerable(self):
        if not self._chain():
            raise NotImplementedError(
                f"Model '{self.name}' has no layers gpucmp can lower: subclassed models with a "
                "Python call() are not supported; use Sequential or the functional API")

    @property
    def layers(self):
        return list(self._layers)

    def get_layer(self, name=None, index=None):
        """The layer called ``name`` (or at position ``index`` of ``model.layers``)."""
        if index is not None:
            if name is not None:
                raise ValueError("Provide only a layer name or a layer index. Received: "
                                 f"index={index}, name={name}.")
            if not -len(self.layers) <= index < len(self.layers):
                raise ValueError(f"Was asked to retrieve layer at index {index} but model only "
                                 f"has {len(self.layers)} layers.")
            return self.layers[index]
        if name is None:
            raise ValueError("Provide either a layer name or layer index at `get_layer`.")
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise ValueError(f"No such layer: {name}. Existing layers are: "
                         f"{[l.name for l in self.layers]}.")

    # ------------------------------------------------------------ building
    def build(self, input_shape=None):
        """Builds every layer for ``input_shape`` (batch axis included, e.g. (None, 28, 28, 1))."""
        if input_shape is None:
            input_shape = self._input_batch_shape
        if input_shape is None:
            raise ValueError(f"Model '{self.name}': build() needs an input shape")
        input_shape = tuple(input_shape)      # a declared batch size is kept (stateful layers need it)
        if len(input_shape) < 2:
            raise ValueError(f"Model '{self.name}': the input shape must have a batch axis and "
                             f"at least one more, received {format_shape(input_shape)}")
        shape = input_shape
        for layer in self._chain():
            shape = layer.build_for(shape)
        self._input_batch_shape = input_shape
        self._output_batch_shape = tuple(shape)
        self._build_input_shape = input_shape
        self.built = True

    def _ensure_built(self, input_shape):
        if not self.built:
            self._check_lowerable()
            self.build(input_shape)

    def build_for(self, input_shape):
        input_shape = normalize_shape(input_shape)
        if not self.built:
            self.build(input_shape)
        elif not _compatible(self._input_batch_shape, input_shape):
            raise ValueError(f"Model '{self.name}' expects inputs of shape "
                             f"{format_shape(self._input_batch_shape)}, received "
                             f"{format_shape(input_shape)}")
        return self.compute_output_shape(input_shape)

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        for layer in self._chain():
            shape = normalize_shape(layer.compute_output_shape(shape))
        return shape

    def _require_built(self):
        if not self.built:
            raise ValueError(f"Model '{self.name}' has not yet been built. Build it first by "
                             "calling `build(input_shape)`, by giving its first layer an "
                             "`input_shape` (or starting with keras.Input), or by calling it on "
                             "data (fit/predict).")

    @property
    def input_shape(self):
        """The batch input shape; a list of them for a model with several inputs."""
        self._require_built()
        return self._input_batch_shape

    @property
    def output_shape(self):
        self._require_built()
        return self._output_batch_shape

    @property
    def _input_shapes(self):
        """The batch input shapes as a list (one per model input)."""
        shape = self.input_shape
        return list(shape) if is_shape_list(shape) else [tuple(shape)]

    @property
    def inputs(self):
        return [KerasTensor(self.input_shape, name=f"{self.name}_input")]

    @property
    def outputs(self):
        return [KerasTensor(self.output_shape, name=f"{self.name}_output")]

    @property
    def input(self):
        return self.inputs[0]

    @property
    def output(self):
        return self.outputs[0]

    # ------------------------------------------------------------ trainable and weights
    @property
    def trainable(self):
        return self._trainable

    @trainable.setter
    def trainable(self, value):
        """Sets the flag of the model and of all its layers (Keras). Takes effect in
        training at the next compile() -- see compile()."""
        self._trainable = bool(value)
        for layer in self._chain():
            layer.trainable = value
        if hasattr(self, "_calls"):   # nothing cached per call survives a trainable change
            self._calls.clear()

    def _leaf_weights(self, which):
        seen, out = set(), []
        for layer, eff in lowering.leaf_layers(self._chain(), self._trainable):
            for w in layer._weights:
                if id(w) in seen:
                    continue
                if which == "all" or (which == "trainable") == (eff and w.trainable):
                    seen.add(id(w))
                    out.append(w)
        return out

    @property
    def weights(self):
        return self._leaf_weights("all")

    @property
    def trainable_weights(self):
        return self._leaf_weights("trainable")

    @property
    def non_trainable_weights(self):
        return self._leaf_weights("non_trainable")

    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights

    def get_weights(self):
        return [w.numpy() for w in self.weights]

    def set_weights(self, weights):
        """All weights at once, in get_weights() order; nothing is written unless every
        array matches (count and shapes), with the layer and shapes named otherwise."""
        assign_all(self.weights, weights, f"Model '{self.name}'")

    def count_params(self):
        self._require_built()
        return int(sum(math.prod(w.shape) for w in self.weights))

    # ------------------------------------------------------------ calling
    def _forward_numpy(self, x, out_shape):
        return self.predict_on_batch(x)

    # ------------------------------------------------------------ summary / saving
    def summary(self, line_length=None, positions=None, print_fn=None, expand_nested=False,
                show_trainable=False, layer_range=None):
        """Prints Keras 3's summary table (see utils/summary.py)."""
        from ..utils.summary import print_summary
        if layer_range is not None:
            raise NotImplementedError("summary(layer_range=...) is not supported")
        print_summary(self, line_length, positions, print_fn, expand_nested, show_trainable)

    def save(self, filepath, overwrite=True, **kwargs):
        """Saves config, weights and compile state to one file, atomically: Keras 3's
        ``.keras`` zip, a legacy ``.h5`` file, or gpucmp's format (see keras/saving/)."""
        from .. import saving
        saving.save_model(self, filepath, overwrite=overwrite, **kwargs)

    def save_weights(self, filepath, overwrite=True, save_format=None):
        from .. import saving
        saving.save_weights(self, filepath, overwrite=overwrite, save_format=save_format)

    def load_weights(self, filepath, skip_mismatch=False):
        from .. import saving
        saving.load_weights(self, filepath, skip_mismatch=skip_mismatch)

    def get_config(self):
        from .. import layers as layers_mod
        config = {"name": self.name, "trainable": self._trainable,
                  "layers": [layers_mod.serialize(l) for l in self._layers]}
        if self._input_batch_shape is not None:
            config["build_input_shape"] = list(self._input_batch_shape)
        return config

    @classmethod
    def from_config(cls, config):
        if cls is Model:
            return Functional.from_config(config)
        raise NotImplementedError(f"{cls.__name__}.from_config: subclassed models cannot be "
                                  "rebuilt from a config")

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


def _compatible(expected, received):
    """Per-sample shapes equal, a None in ``expected`` matching any size."""
    exp, got = normalize_shape(expected), normalize_shape(received)
    if is_shape_list(exp) != is_shape_list(got):
        return False
    if not is_shape_list(exp):
        exp, got = [exp], [got]
    if len(exp) != len(got):
        return False
    for e, g in zip(exp, got):
        e, g = tuple(e[1:]), tuple(g[1:])
        if len(e) != len(g) or any(a is not None and a != b for a, b in zip(e, g)):
            return False
    return True


class Functional(Model):
    """A model defined by a graph of layer calls: ``keras.Model(inputs, outputs)``."""

    def _init_functional(self, inputs, outputs):
        super()._init_functional(inputs, outputs)
        self._inputs_is_list = isinstance(inputs, (list, tuple))

    def build(self, input_shape=None):
        """Functional models are built at construction; a shape, when given, must match."""
        if input_shape is not None and not _compatible(self._input_batch_shape, input_shape):
            raise ValueError(f"Model '{self.name}' was built for inputs of shape "
                             f"{format_shape(self._input_batch_shape)}; build() received "
                             f"{format_shape(normalize_shape(input_shape))}")

    def compute_output_shape(self, input_shape):
        """The output shape for inputs of ``input_shape``, propagated through the graph."""
        shapes = normalize_shape(input_shape)
        shapes = shapes if is_shape_list(shapes) else [shapes]
        if len(shapes) != len(self._graph.inputs):
            raise ValueError(f"Model '{self.name}' has {len(self._graph.inputs)} inputs, "
                             f"received {len(shapes)} input shapes")
        known = {id(t): tuple(s) for t, s in zip(self._graph.inputs, shapes)}
        for node in self._graph.nodes:
            if node.is_input:
                continue
            args = [known[id(t)] for t in node.input_tensors]
            arg = args[0] if not isinstance(node.arguments, (list, tuple)) else args
            out = normalize_shape(node.operation.compute_output_shape(arg))
            for t, shape in zip(node.outputs, out if len(node.outputs) > 1 else [out]):
                known[id(t)] = shape
        return known[id(self._graph.outputs[0])]

    @property
    def inputs(self):
        return list(self._graph.inputs)

    @property
    def outputs(self):
        return list(self._graph.outputs)

    @property
    def input(self):
        return self._graph.inputs[0] if len(self._graph.inputs) == 1 else list(self._graph.inputs)

    @property
    def output(self):
        return self._graph.outputs[0]

    # ------------------------------------------------------------ config
    def get_config(self):
        """Keras 3's functional config: every layer with its ``inbound_nodes`` (the calls
        within this model, each input named ``[layer, node_index, tensor_index]``), then
        ``input_layers`` and ``output_layers``."""
        from .. import layers as layers_mod
        graph = self._graph

        def tensor_ref(t):
            h = t._keras_history
            return [h.operation.name, graph.own_node_index(t._node), h.tensor_index]

        def tensor_config(t):
            return {"class_name": "__keras_tensor__",
                    "config": {"shape": list(t.shape), "dtype": t.dtype,
                               "keras_history": tensor_ref(t)}}

        layer_configs = []
        for layer in self._layers:
            entry = layers_mod.serialize(layer)
            entry["name"] = layer.name
            entry["inbound_nodes"] = []
            for node in graph.nodes_of(layer):
                if node.is_input:
                    continue
                if isinstance(node.arguments, KerasTensor):
                    args = [tensor_config(node.arguments)]
                else:
                    args = [[tensor_config(t) for t in node.arguments]]
                entry["inbound_nodes"].append({"args": args, "kwargs": {}})
            layer_configs.append(entry)
        inputs = [tensor_ref(t) for t in graph.inputs]
        return {"name": self.name, "trainable": self._trainable, "layers": layer_configs,
                "input_layers": inputs if self._inputs_is_list else inputs[0],
                "output_layers": tensor_ref(graph.outputs[0])}

    @classmethod
    def from_config(cls, config):
        """A functional model from get_config() output (or from the linear configs of
        earlier gpucmp versions: a list of layers, InputLayer first)."""
        from .. import layers as layers_mod
        if "input_layers" not in config:
            return cls._from_chain_config(config)
        created, pending = {}, {}
        for entry in config["layers"]:
            layer = layers_mod.deserialize(entry)
            name = entry.get("name", layer.name)
            if name in created:
                raise ValueError(f"Invalid functional config: layer name {name!r} appears twice")
            created[name] = layer
            pending[name] = list(entry.get("inbound_nodes", []))

        def tensor(ref):
            if not (isinstance(ref, (list, tuple)) and len(ref) == 3 and isinstance(ref[0], str)):
                raise ValueError(f"Invalid functional config: {ref!r} does not name a tensor")
            name, node_index, tensor_index = ref
            if name not in created:
                raise ValueError(f"Invalid functional config: unknown layer {name!r}")
            nodes = created[name]._inbound_nodes
            if node_index >= len(nodes):
                raise IndexError(node_index)          # not created yet: try again later
            return nodes[node_index].outputs[tensor_index]

        def argument(value):
            if isinstance(value, dict) and value.get("class_name") == "__keras_tensor__":
                return tensor(value["config"]["keras_history"])
            if isinstance(value, (list, tuple)) and len(value) == 3 and isinstance(value[0], str):
                return tensor(value)                  # Keras' legacy [name, node, tensor]
            if isinstance(value, (list, tuple)):
                return [argument(v) for v in value]
            raise ValueError(f"Invalid functional config: node argument {value!r}")

        while any(pending.values()):
            progressed = False
            for name, nodes in pending.items():
                while nodes:
                    try:
                        args = [argument(a) for a in nodes[0].get("args", [])]
                    except IndexError:
                        break
                    if len(args) != 1:
                        raise ValueError(f"Invalid functional config: layer {name!r} is called "
                                         f"with {len(args)} positional arguments")
                    created[name](args[0])
                    nodes.pop(0)
                    progressed = True
            if not progressed:
                raise ValueError("Invalid functional model configuration: the graph has loops or "
                                 "disconnected nodes; unresolved: "
                                 f"{[n for n, v in pending.items() if v]}")
        ins = config["input_layers"]
        many = isinstance(ins, list) and ins and isinstance(ins[0], (list, tuple))
        inputs = [tensor(r) for r in ins] if many else tensor(ins)
        outs = config["output_layers"]
        if isinstance(outs, list) and outs and isinstance(outs[0], (list, tuple)):
            outputs = [tensor(r) for r in outs]
        else:
            outputs = tensor(outs)
        model = cls(inputs=inputs, outputs=outputs, name=config.get("name"))
        model._trainable = bool(config.get("trainable", True))   # layers keep their own flags
        return model

    @classmethod
    def _from_chain_config(cls, config):
        from .. import layers as layers_mod
        built = [layers_mod.deserialize(c) for c in config["layers"]]
        if not built or not isinstance(built[0], InputLayer):
            raise ValueError("A functional model config must start with an InputLayer")
        t = built[0].output
        for layer in built[1:]:
            t = layer(t)
        model = cls(inputs=built[0].output, outputs=t, name=config.get("name"))
        model._trainable = bool(config.get("trainable", True))
        return model
