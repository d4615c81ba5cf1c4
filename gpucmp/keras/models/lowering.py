"""Lowering: a model's layer chain -> the layer dicts of ``gpucmp._core.Plan``, and plan caches.

Nested models (a GAN's ``Sequential([generator, discriminator])``) are flattened into
their leaf layers. Each leaf layer's ``trainable`` flag in the plan is the snapshot
taken at ``compile()`` (see Model.compile), ANDed over its enclosing models.

Plans are cached per (training configuration, max_batch): a plan built for 128 rows
serves every call of <= 128 rows; a larger batch builds a larger plan.
"""
import numpy as np

from .. import backend


def leaf_layers(layers, trainable=True):
    """[(leaf_layer, effective_trainable)] for a list of layers, nested models expanded."""
    from .model import Model
    out = []
    for layer in layers:
        eff = trainable and layer.trainable
        if isinstance(layer, Model):
            out.extend(leaf_layers(layer._chain(), eff))
        else:
            out.append((layer, eff))
    return out


def describe(leaves, input_shape, trainable_of):
    """Plan layer dicts for ``leaves`` fed with ``input_shape`` (batch axis None).

    ``trainable_of(layer)`` gives the flag to record (the compile-time snapshot)."""
    seen = set()
    descs = []
    shape = tuple(input_shape)
    for layer in leaves:
        if id(layer) in seen and layer.weights:
            raise NotImplementedError(
                f"Layer '{layer.name}' appears twice in the model: a layer with weights shared "
                "within one model is not supported by the plan yet")
        seen.add(id(layer))
        for d in layer.plan_layers(shape):
            d["trainable"] = bool(trainable_of(layer))
            d.setdefault("dtype", layer.compute_dtype)   # the layer's dtype policy
            descs.append(d)
        shape = layer.compute_output_shape(shape)
    if not descs:
        # A model with no computing layer (only InputLayer): a 1-element reshape keeps the plan valid.
        descs.append({"kind": "reshape", "in_shape": tuple(input_shape[1:]),
                      "out_shape": tuple(input_shape[1:]), "trainable": False})
    return descs


def trainable_variables_in_plan_order(leaves, trainable_of):
    """The Variables the plan updates, in its order: layer by layer, each layer's weights
    in Keras order (Dense/Conv2D: kernel, bias; later layers such as LSTM: kernel,
    recurrent_kernel, bias)."""
    return [w for layer in leaves if trainable_of(layer) for w in layer.weights]


class PlanCache:
    """Plans keyed by a configuration key and max_batch."""

    def __init__(self):
        self._plans = {}

    def clear(self):
        self._plans.clear()

    def get(self, key, rows, make):
        """A plan for ``key`` with max_batch >= rows; ``make(max_batch)`` builds a missing one."""
        by_size = self._plans.setdefault(key, {})
        fits = [mb for mb in by_size if mb >= rows]
        if fits:
            return by_size[min(fits)]
        plan = make(rows)
        by_size[rows] = plan
        return plan


def make_plan(descs, max_batch, train=None):
    core = backend.core()
    return core.Plan(backend.device(), descs, int(max_batch), train)


def run_inference(cache_dict, descs, x):
    """Forward pass of ``descs`` on the float32 batch ``x`` with a cached inference plan."""
    rows = x.shape[0]
    fits = [mb for mb in cache_dict if mb >= rows]
    if fits:
        plan = cache_dict[min(fits)]
    else:
        plan = make_plan(descs, rows)
        cache_dict[rows] = plan
    return np.asarray(plan.predict(x))
