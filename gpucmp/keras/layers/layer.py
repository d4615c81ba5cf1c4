"""Layer: the base class of every gpucmp.keras layer.

A layer knows its arguments, builds its weights (``Variable``s in device buffers) from
an input shape, computes its output shape, and describes itself to the execution plan
(``plan_layers``: a list of the dicts ``gpucmp._core.Plan`` takes). It has no Python
forward pass: calling a layer on a NumPy array runs a one-layer inference plan in the
core; calling it on a ``KerasTensor`` -- or, for merge layers, on a list of them --
(functional API) records the call as a ``Node`` in ``layer._inbound_nodes``.

Shapes include the batch axis (``None``); a layer with several inputs is given a list of
shapes (``build([(None, 4), (None, 4)])``), as in Keras.

Names are auto-numbered per class across the session (dense, dense_1, ...), as in Keras.

``weight_budget(n)`` bounds the weight elements layers may create meanwhile: loading a file
builds its model under the number of values the file really holds, so a config declaring
absurd sizes fails with a ValueError before anything that size is allocated.
"""
import contextlib
import math

import numpy as np

from .. import backend, initializers, mixed_precision
from ..keras_tensor import KerasTensor, Node, is_symbolic
from ..variables import Variable, assign_all


def format_shape(shape):
    """``(None, 8, 8, 3)``; a list of shapes -> ``[(None, 4), (None, 4)]``."""
    if is_shape_list(shape):
        return "[" + ", ".join(format_shape(s) for s in shape) + "]"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def is_shape_list(shape):
    """True for a list of shapes (the input shape of a layer with several inputs)."""
    return isinstance(shape, list) and len(shape) > 0 and isinstance(shape[0], (tuple, list))


def per_sample(shape):
    """The shape(s) without the batch axis."""
    if is_shape_list(shape):
        return [tuple(s[1:]) for s in shape]
    return tuple(shape[1:])


def normalize_shape(shape):
    """A shape as a tuple, a list of shapes as a list of tuples."""
    if is_shape_list(shape):
        return [tuple(s) for s in shape]
    return tuple(shape)


_budget = []      # the remaining element counts of the active weight_budget()s


@contextlib.contextmanager
def weight_budget(elements, source):
    """Within the block, layers may create at most ``elements`` weight values in all;
    more is a ValueError naming ``source`` (the file being loaded) and the layer."""
    _budget.append([int(elements), source])
    try:
        yield
    finally:
        _budget.pop()


def _charge(shape, layer_name, weight_name):
    n = math.prod(int(d) for d in shape)
    for entry in _budget:
        if n > entry[0]:
            raise ValueError(
                f"{entry[1]}: layer '{layer_name}' declares a weight '{weight_name}' of shape "
                f"{tuple(shape)} ({n} values), more than the {entry[0]} values the file still "
                "holds; refusing to allocate it (corrupt or crafted file?)")
        entry[0] -= n


class Layer:
    """Base layer. Subclasses override ``build``, ``compute_output_shape``,
    ``plan_layers`` and ``get_config``."""

    _training_matters = False   # True where training/inference differ (Dropout, BatchNormalization)
    # Keras masks (models/lowering.py): a layer that supports masking passes the mask of its
    # input on; one that does not drops it (with Keras' warning); takes_mask: the mask is an
    # input of the layer's plan node (plan_layers(shape, mask=True))
    supports_masking = False
    takes_mask = False

    def __init__(self, trainable=True, name=None, dtype=None, input_shape=None,
                 batch_input_shape=None, batch_size=None, input_dim=None, **kwargs):
        cls_name = type(self).__name__
        if kwargs:
            raise ValueError(f"Unrecognized keyword arguments passed to {cls_name}: {kwargs}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"{cls_name}: `name` must be a non-empty string, received {name!r}")
        self.name = name or backend.unique_name(backend.to_snake_case(cls_name))
        self._trainable = bool(trainable)
        if dtype is not None and dtype not in ("float32", "mixed_float16", "mixed_bfloat16",
                                               "float16", "bfloat16") \
                and not isinstance(dtype, mixed_precision.Policy):
            raise ValueError(f"{cls_name}: unsupported dtype {dtype!r}")
        self.dtype_policy = mixed_precision.Policy(dtype) if dtype is not None \
            else mixed_precision.global_policy()
        self._weights = []
        self._inbound_nodes = []     # functional API: one Node per symbolic call
        self.built = False
        self._build_input_shape = None
        self._inference_plans = {}
        # Keras' ways of declaring the input of the first layer of a Sequential model.
        self._declared_input_shape = None
        if batch_input_shape is not None:
            self._declared_input_shape = tuple(batch_input_shape)
        elif input_shape is not None:
            self._declared_input_shape = (batch_size,) + tuple(_shape_tuple(input_shape, cls_name))
        elif input_dim is not None:
            from .argument_checks import positive_int
            self._declared_input_shape = (batch_size, positive_int(input_dim, "input_dim", cls_name))

    # ------------------------------------------------------------ dtype policy
    @property
    def compute_dtype(self):
        return self.dtype_policy.compute_dtype

    @property
    def variable_dtype(self):
        return self.dtype_policy.variable_dtype

    @property
    def dtype(self):
        return self.dtype_policy.variable_dtype

    # ------------------------------------------------------------ trainable
    @property
    def trainable(self):
        return self._trainable

    @trainable.setter
    def trainable(self, value):
        self._trainable = bool(value)
        for w in self._weights:   # a weight created non-trainable (BN statistics) stays so
            w.trainable = bool(value) and not w.always_non_trainable

    # ------------------------------------------------------------ building
    def build(self, input_shape):
        """Creates the weights for ``input_shape`` (batch axis included, may be None; a list
        of shapes for a layer with several inputs)."""
        self._build_input_shape = normalize_shape(input_shape)
        self.built = True

    def compute_output_shape(self, input_shape):
        return normalize_shape(input_shape)

    def build_for(self, input_shape):
        """Builds on first use; later uses must bring a compatible shape. Returns the output shape."""
        input_shape = normalize_shape(input_shape)
        if not self.built:
            self.build(input_shape)
            self._build_input_shape = input_shape
        elif self._build_input_shape is not None and \
                per_sample(self._build_input_shape) != per_sample(input_shape):
            raise ValueError(
                f"Layer '{self.name}' was built for inputs of shape "
                f"{format_shape(self._build_input_shape)} and is now called on inputs of shape "
                f"{format_shape(input_shape)}")
        return normalize_shape(self.compute_output_shape(input_shape))

    @property
    def input_shape(self):
        if self._build_input_shape is None:
            raise AttributeError(f"Layer '{self.name}' is not built: it has no input shape yet")
        return self._build_input_shape

    @property
    def output_shape(self):
        if self._inbound_nodes:          # as Keras: the shape of the last call's output(s)
            outs = self._inbound_nodes[-1].outputs
            return [tuple(t.shape) for t in outs] if len(outs) > 1 else tuple(outs[0].shape)
        return normalize_shape(self.compute_output_shape(self.input_shape))

    @property
    def input(self):
        """The input tensor(s) of the layer's first call (functional API)."""
        if not self._inbound_nodes:
            raise AttributeError(f"Layer '{self.name}' has never been called and thus has no "
                                 "defined input.")
        return self._inbound_nodes[0].arguments

    @property
    def output(self):
        if not self._inbound_nodes:
            raise AttributeError(f"Layer '{self.name}' has no inbound nodes: it has never been "
                                 "called on a symbolic input")
        return self._inbound_nodes[0].outputs[0]

    def add_weight(self, shape, initializer, name, trainable=True):
        """Creates a Variable initialised by ``initializer`` (a name or an Initializer)."""
        init = initializers.get(initializer)
        if _budget:
            _charge(shape, self.name, name)
        value = np.asarray(init(tuple(shape)), dtype=np.float32)
        if value.shape != tuple(shape):
            raise ValueError(f"Layer '{self.name}': the initializer of '{name}' returned shape "
                             f"{value.shape}, expected {tuple(shape)}")
        var = Variable(value, name=name, trainable=trainable and self._trainable, layer=self)
        var.always_non_trainable = not trainable   # e.g. BatchNormalization's moving statistics
        self._weights.append(var)
        return var

    # ------------------------------------------------------------ weights
    @property
    def weights(self):
        return list(self._weights)

    @property
    def variables(self):
        return self.weights

    @property
    def trainable_weights(self):
        return [w for w in self._weights if w.trainable] if self._trainable else []

    @property
    def non_trainable_weights(self):
        if not self._trainable:
            return list(self._weights)
        return [w for w in self._weights if not w.trainable]

    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights

    def get_weights(self):
        """The weights as float32 NumPy arrays, in Keras order and layout."""
        return [w.numpy() for w in self._weights]

    def set_weights(self, weights):
        """Writes all weights at once; nothing is written unless every shape matches."""
        assign_all(self._weights, weights, f"Layer '{self.name}'")

    def count_params(self):
        if not self.built:
            raise ValueError(
                f"You tried to call `count_params` on layer '{self.name}', but the layer isn't "
                f"built. You can build it manually via: `{self.name}.build(batch_input_shape)`.")
        return int(sum(math.prod(w.shape) for w in self._weights))

    # ------------------------------------------------------------ the plan
    def plan_layers(self, input_shape):
        """The node dicts of ``gpucmp._core.Plan`` for this layer called on ``input_shape``
        (batch shapes; a list for several inputs), in order, with their per-kind keys and
        ``in_shape`` / ``out_shape`` (per-sample). ``inputs``, ``trainable`` (the
        compile-time snapshot) and ``dtype`` are filled in by the lowering
        (models/lowering.py): the first dict takes the layer's inputs, each later one the
        dict before it. An empty list is the identity."""
        raise NotImplementedError(f"{type(self).__name__} cannot be lowered to a plan")

    # ------------------------------------------------------------ calling
    def __call__(self, inputs, training=None, mask=None, **kwargs):
        if kwargs:
            raise TypeError(f"{type(self).__name__}.__call__ got unexpected arguments {sorted(kwargs)}")
        if is_symbolic(inputs):
            if training is not None and self._training_matters:
                raise NotImplementedError(
                    f"Layer '{self.name}': `training={training!r}` in a functional call is not "
                    "supported; the plan runs training mode in fit / train_on_batch and "
                    "inference mode otherwise (set `layer.trainable = False` before compile() "
                    "for a frozen layer in inference mode)")
            return self._call_symbolic(inputs)
        if isinstance(inputs, (list, tuple)) and any(isinstance(t, KerasTensor) for t in inputs):
            raise ValueError(f"Layer '{self.name}' was called on a list mixing KerasTensors and "
                             f"other values: {inputs!r}. In the functional API every input must "
                             "be a KerasTensor")
        return self._call_numpy(inputs)

    def _call_symbolic(self, inputs):
        if isinstance(inputs, KerasTensor):
            shape = inputs.shape
        else:
            inputs = list(inputs)
            shape = [t.shape for t in inputs]
        out_shape = self.build_for(shape)
        if is_shape_list(out_shape):      # several outputs (a recurrent layer's return_state)
            outs = [KerasTensor(s, name=f"{self.name}_{k}" if k else self.name) for k, s in enumerate(out_shape)]
            Node(self, inputs, outs)
            return tuple(outs)        # as Keras 3 returns them
        out = KerasTensor(out_shape, name=self.name)
        Node(self, inputs, [out])
        return out

    def _call_numpy(self, inputs):
        if isinstance(inputs, (list, tuple)) and inputs and all(hasattr(a, "shape") for a in inputs):
            xs = [np.ascontiguousarray(np.asarray(a, dtype=np.float32)) for a in inputs]
        else:
            xs = [np.ascontiguousarray(np.asarray(inputs, dtype=np.float32))]
        for x in xs:
            if x.ndim < 1 or x.shape[0] == 0:
                raise ValueError(f"Layer '{self.name}': expected a batch of inputs, got shape {x.shape}")
        if len({len(x) for x in xs}) > 1:
            raise ValueError(f"Layer '{self.name}': the inputs have different batch sizes "
                             f"{[x.shape for x in xs]}")
        shapes = [(None,) + x.shape[1:] for x in xs]
        out_shape = self.build_for(shapes if len(xs) > 1 else shapes[0])
        return self._forward_numpy(xs if len(xs) > 1 else xs[0], out_shape)

    def _forward_numpy(self, x, out_shape):
        """Inference on a float32 batch (a list for several inputs): a one-layer plan in the
        core (cached per batch size)."""
        from ..models import lowering
        xs = x if isinstance(x, list) else [x]
        nodes = lowering.layer_nodes(self, [(None,) + a.shape[1:] for a in xs])
        return lowering.run_inference(self._inference_plans, nodes, x)

    # ------------------------------------------------------------ config
    def get_config(self):
        config = {"name": self.name, "trainable": self._trainable,
                  "dtype": self.dtype_policy.name}
        if self._declared_input_shape is not None:
            config["batch_input_shape"] = list(self._declared_input_shape)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


def _shape_tuple(shape, cls_name):
    """input_shape=(28, 28, 1) or input_shape=784 -> tuple of positive ints (None allowed)."""
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise ValueError(f"{cls_name}: `input_shape` must be a tuple of ints, received {shape!r}") from None
    for d in shape:
        if d is not None and (isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0):
            raise ValueError(f"{cls_name}: `input_shape` must contain positive ints, received {shape!r}")
    return tuple(None if d is None else int(d) for d in shape)
