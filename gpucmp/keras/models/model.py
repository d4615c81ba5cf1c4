"""Model: a chain of layers with Keras' container API (and, through Trainer, training).

Two ways to build one:
- ``Sequential`` (sequential.py): layers added in order;
- the functional API over a linear chain: ``x = Input((784,)); h = Dense(64)(x);
  Model(inputs=x, outputs=Dense(10)(h))``. Branching graphs and subclassed models
  with a Python ``call()`` cannot be lowered to the plan: NotImplementedError.

A model is itself a layer: it can be added to another model (a GAN's
``Sequential([generator, discriminator])``); the plan flattens nested models, and the
layers -- hence the weight buffers -- are shared.
"""
import math

from .. import backend
from ..keras_tensor import KerasTensor
from ..layers.input_layer import InputLayer
from ..layers.layer import Layer, format_shape
from ..variables import assign_all
from . import lowering
from .trainer import Trainer


class Model(Trainer, Layer):
    def __init__(self, *args, **kwargs):
        inputs = kwargs.pop("inputs", args[0] if len(args) > 0 else None)
        outputs = kwargs.pop("outputs", args[1] if len(args) > 1 else None)
        name = kwargs.pop("name", None)
        trainable = kwargs.pop("trainable", True)
        if len(args) > 2 or kwargs:
            raise ValueError(f"Unrecognized arguments passed to {type(self).__name__}: "
                             f"{sorted(kwargs) or args[2:]}")
        functional = inputs is not None or outputs is not None
        if name is None and functional and type(self) is Model:
            name = backend.unique_name("functional")
        Layer.__init__(self, trainable=trainable, name=name)
        self._layers = []
        self._input_batch_shape = None
        self._output_batch_shape = None
        self._functional = functional
        self._init_trainer()
        if functional:
            self._init_functional(inputs, outputs)

    # ------------------------------------------------------------ structure
    def _init_functional(self, inputs, outputs):
        def single(t, what):
            if isinstance(t, (list, tuple)):
                if len(t) != 1:
                    raise NotImplementedError(f"models with several {what} are not supported yet")
                t = t[0]
            if isinstance(t, dict):
                raise NotImplementedError(f"{what} given as a dict are not supported")
            if not isinstance(t, KerasTensor):
                raise ValueError(f"`{what}` must be KerasTensors (from keras.Input and layer calls), "
                                 f"received {t!r}")
            return t
        inputs, outputs = single(inputs, "inputs"), single(outputs, "outputs")
        chain = []
        t = outputs
        while t._parent is not None:
            chain.append(t._layer)
            t = t._parent
        if t is not inputs:
            raise ValueError("The `outputs` of this model are not computed from its `inputs`: "
                             "the output tensor does not trace back to the given Input")
        if not isinstance(inputs._layer, InputLayer):
            raise ValueError("`inputs` must come from keras.Input()")
        self._layers = [inputs._layer] + chain[::-1]
        self.build(inputs.shape)

    def _chain(self):
        """The computing layers, in order (InputLayer excluded)."""
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
        if index is not None:
            return self.layers[index]
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
        input_shape = (None,) + tuple(input_shape)[1:]
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
        input_shape = tuple(input_shape)
        if not self.built:
            self.build(input_shape)
        elif tuple(self._input_batch_shape[1:]) != input_shape[1:]:
            raise ValueError(f"Model '{self.name}' expects inputs of shape "
                             f"{format_shape(self._input_batch_shape)}, received "
                             f"{format_shape(input_shape)}")
        return self._output_batch_shape

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        for layer in self._chain():
            shape = tuple(layer.compute_output_shape(shape))
        return shape

    def _require_built(self):
        if not self.built:
            raise ValueError(f"Model '{self.name}' has not yet been built. Build it first by "
                             "calling `build(input_shape)`, by giving its first layer an "
                             "`input_shape` (or starting with keras.Input), or by calling it on "
                             "data (fit/predict).")

    @property
    def input_shape(self):
        self._require_built()
        return self._input_batch_shape

    @property
    def output_shape(self):
        self._require_built()
        return self._output_batch_shape

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
        """Saves config, weights and compile state to one file, atomically (see saving.py)."""
        from . import saving
        saving.save_model(self, filepath, overwrite=overwrite, **kwargs)

    def save_weights(self, filepath, overwrite=True):
        from . import saving
        saving.save_weights(self, filepath, overwrite=overwrite)

    def load_weights(self, filepath, skip_mismatch=False):
        from . import saving
        saving.load_weights(self, filepath)

    def get_config(self):
        from .. import layers as layers_mod
        config = {"name": self.name, "trainable": self._trainable,
                  "layers": [layers_mod.serialize(l) for l in self._layers]}
        if self._input_batch_shape is not None:
            config["build_input_shape"] = list(self._input_batch_shape)
        return config

    @classmethod
    def from_config(cls, config):
        """A linear functional model from get_config() output (InputLayer first)."""
        from .. import layers as layers_mod
        built = [layers_mod.deserialize(c) for c in config["layers"]]
        if not built or not isinstance(built[0], InputLayer):
            raise ValueError("A functional model config must start with an InputLayer")
        t = built[0].output
        for layer in built[1:]:
            t = layer(t)
        model = cls(inputs=built[0].output, outputs=t, name=config.get("name"))
        model._trainable = bool(config.get("trainable", True))   # layers keep their own flags
        return model

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"
