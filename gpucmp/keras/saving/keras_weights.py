"""Keras 3's weights layout (``model.weights.h5`` in a ``.keras`` zip, ``*.weights.h5``).

Keras 3 (saving_lib) stores each object's variables in a group ``<path>/vars`` as datasets
``0``, ``1``, ... in the layer's weight order, the group's ``name`` attribute holding the
object's name. Paths follow the model's structure, not the layers' names: the layers of a
Sequential / functional model (``model.layers``, so a functional model's InputLayers too)
live under ``layers/<class in snake case>`` with ``_1``, ``_2`` ... for repeats of a class
(``layers/dense``, ``layers/dense_1``); a recurrent layer's weights belong to its cell
(``layers/lstm/cell/vars``), a Bidirectional's to its two layers' cells
(``layers/bidirectional/forward_layer/cell/vars``, then ``backward_layer``); a nested model repeats the pattern below its own path. The
optimizer's variables are ``optimizer/vars``: iterations, learning_rate, then the slots of
every trainable variable in turn (Adam: m then v of the first variable, ...); a
LossScaleOptimizer adds step_counter and dynamic_scale, its inner optimizer under
``optimizer/inner_optimizer/vars``.

``write(f, model)`` writes that layout; ``read(f, model, label)`` reads it by the same walk
(shapes checked against the model before any dataset is read), falling back for
``load_weights`` to matching the ``name`` attributes; every array is checked before the
first is assigned, so a failed load changes nothing.
"""
import numpy as np

from .. import backend
from ..variables import assign_all
from . import h5

_RNN = ("SimpleRNN", "LSTM", "GRU")


def _is_model(layer):
    from ..models.model import Model
    return isinstance(layer, Model)


def walk(model, prefix="layers"):
    """[(path, layer)] of every layer object below ``model`` that Keras gives a group."""
    out, used = [], {}
    for layer in model.layers:
        base = backend.to_snake_case(type(layer).__name__)
        if base in used:
            used[base] += 1
            name = f"{base}_{used[base]}"
        else:
            used[base] = 0
            name = base
        path = f"{prefix}/{name}"
        out.append((path, layer))
        if _is_model(layer):
            out.extend(walk(layer, f"{path}/layers"))
    return out


def _weight_groups(path, layer):
    """[(group path, weights)] where Keras keeps a layer's weights: a recurrent layer's in
    its cell; a Bidirectional's in its forward_layer's cell, then its backward_layer's."""
    if type(layer).__name__ == "Bidirectional":
        return [(f"{path}/{attr}/cell/vars", getattr(layer, attr).weights)
                for attr in ("forward_layer", "backward_layer")]
    return [(f"{path}/cell/vars" if type(layer).__name__ in _RNN else f"{path}/vars", layer.weights)]


def _write_rnn(f, path, layer):
    _make_vars(f, f"{path}/vars", layer.name, [])
    _make_vars(f, f"{path}/cell/vars", f"{backend.to_snake_case(type(layer).__name__)}_cell",
               layer.get_weights())


# --------------------------------------------------------------------- writing
def _make_vars(f, path, name, arrays):
    group = f.require_group(path)
    group.attrs["name"] = name
    for i, value in enumerate(arrays):
        h5.write_array(group, str(i), value)


def write(f, model, include_optimizer=True):
    _make_vars(f, "vars", model.name, [])
    f.require_group("layers")
    for path, layer in walk(model):
        if _is_model(layer):
            _make_vars(f, f"{path}/vars", layer.name, [])
            continue
        if type(layer).__name__ in _RNN:
            _write_rnn(f, path, layer)
        elif type(layer).__name__ == "Bidirectional":
            _make_vars(f, f"{path}/vars", layer.name, [])
            _write_rnn(f, f"{path}/forward_layer", layer.forward_layer)
            _write_rnn(f, f"{path}/backward_layer", layer.backward_layer)
        else:
            _make_vars(f, f"{path}/vars", layer.name, layer.get_weights())
    if include_optimizer and getattr(model, "compiled", False) and model.optimizer is not None:
        _write_optimizer(f, model)


def _slots_of(opt, model):
    owner = getattr(opt, "inner_optimizer", opt)
    out = []
    for var in model.trainable_weights:
        entry = owner._slots.get(id(var))
        if entry is not None and entry[0] is var:
            out.extend(buf.read()[: var.size].reshape(var.shape) for buf in entry[1])
        else:
            return []                  # not built yet: Keras writes no slots either
    return out


def _write_optimizer(f, model):
    opt = model.optimizer
    inner = getattr(opt, "inner_optimizer", opt)
    slots = _slots_of(opt, model)
    base = [np.array(inner.iterations, np.int64),
            np.array(inner.current_learning_rate(), np.float32)]
    if opt is inner:
        _make_vars(f, "optimizer/vars", opt.name, base + slots)
        return
    own = [np.array(inner.iterations, np.int64), np.array(inner.current_learning_rate(), np.float32),
           np.array(opt.step_counter, np.int64), np.array(opt.dynamic_scale, np.float32)]
    _make_vars(f, "optimizer/vars", opt.name, own + base + slots)
    _make_vars(f, "optimizer/inner_optimizer/vars", inner.name, base + slots)


# --------------------------------------------------------------------- reading
def _datasets(group, label, where):
    h5py = h5.h5py_module()
    keys = list(group.keys())
    if any(not k.isdigit() for k in keys) or sorted(int(k) for k in keys) != list(range(len(keys))):
        raise ValueError(f"{label}: '{where}' should hold datasets 0..n-1, found {sorted(keys)[:10]}")
    out = [group[str(i)] for i in range(len(keys))]
    for ds in out:
        if not isinstance(ds, h5py.Dataset):
            raise ValueError(f"{label}: '{ds.name}' is not a dataset")
    return out


def _by_structure(f, model, label):
    variables, arrays = [], []
    for path, layer in walk(model):
        if _is_model(layer) or not layer.weights:
            continue
        for where, weights in _weight_groups(path, layer):
            if where not in f:
                raise ValueError(f"{label} has no weights for layer '{layer.name}' "
                                 f"({type(layer).__name__}; expected at '{where}')")
            arrays += h5.read_layer_weights(_datasets(f[where], label, where), weights, layer, label,
                                            count_note=f" at '{where}'")
            variables += weights
    return variables, arrays


def _by_name(f, model, label):
    """The ``name`` attributes of the file's vars groups matched to the leaf layers."""
    from ..models import lowering
    h5py = h5.h5py_module()
    found = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Group) and name.split("/")[-1] == "vars" and "name" in obj.attrs \
                and len(obj) and not name.startswith("optimizer"):
            owner = h5.text(obj.attrs["name"])
            if name.endswith("/cell/vars"):       # a cell: named after its layer's group
                parent = f[name[: -len("/cell/vars")]]
                owner = h5.text(parent["vars"].attrs.get("name", owner)) if "vars" in parent else owner
            found.setdefault(owner, []).append(obj)
    f.visititems(visit)
    variables, arrays, missing = [], [], []
    leaves = []
    for layer, _ in lowering.leaf_layers(model._chain()):   # a Bidirectional: its two layers
        leaves += getattr(layer, "layers", [layer]) if type(layer).__name__ == "Bidirectional" else [layer]
    for layer in leaves:
        if not layer.weights:
            continue
        groups = found.get(layer.name)
        if not groups:
            missing.append(layer.name)
            continue
        if len(groups) > 1:
            raise ValueError(f"{label}: layer name '{layer.name}' appears {len(groups)} times")
        stored = _datasets(groups[0], label, groups[0].name)
        if len(stored) != len(layer.weights):
            raise ValueError(f"{label}: layer '{layer.name}' has {len(stored)} weights in the "
                             f"file but {len(layer.weights)} in the model "
                             f"({', '.join(w.name for w in layer.weights)})")
        for ds, var in zip(stored, layer.weights):
            arrays.append(h5.read_array(ds, var.shape, f"{label}: layer '{layer.name}' weight "
                                                       f"'{var.name}'"))
            variables.append(var)
    if missing:
        raise ValueError(f"{label} has no weights for the layer(s) {missing} of model "
                         f"'{model.name}' (it holds {sorted(found)[:20]})")
    return variables, arrays


def read(f, model, label, by_name_fallback=False):
    """Assigns the file's weights to ``model`` (all or nothing)."""
    try:
        variables, arrays = _by_structure(f, model, label)
    except ValueError as structural:
        if not by_name_fallback:
            raise
        try:
            variables, arrays = _by_name(f, model, label)
        except ValueError as by_name:
            raise ValueError(f"{structural}; matching by layer name failed too: {by_name}") from None
    assign_all(variables, arrays, f"{label} -> model '{model.name}'")


def read_optimizer(f, model, label):
    """Restores iterations, slots (and the loss-scale state) written by Keras 3 or gpucmp."""
    if "optimizer/vars" not in f:
        return
    opt = model.optimizer
    inner = getattr(opt, "inner_optimizer", opt)
    outer = _datasets(f["optimizer/vars"], label, "optimizer/vars")
    if opt is not inner and "optimizer/inner_optimizer/vars" in f:
        if len(outer) >= 4:
            opt.step_counter = int(h5.read_array(outer[2], (), label, integer=True))
            opt.dynamic_scale = float(h5.read_array(outer[3], (), label))
        stored = _datasets(f["optimizer/inner_optimizer/vars"], label, "optimizer/inner_optimizer/vars")
    elif opt is not inner:
        stored = outer
    elif "optimizer/inner_optimizer/vars" in f:
        stored = _datasets(f["optimizer/inner_optimizer/vars"], label, "optimizer/inner_optimizer/vars")
    else:
        stored = outer
    assign_optimizer_state(stored, model, label)


def assign_optimizer_state(stored, model, label):
    """Sets the optimizer's iterations and slots from ``stored``, the datasets of Keras'
    optimizer variable list: iterations, (the learning rate,) then the slots of every
    trainable weight in turn -- the order of a ``.keras`` file's ``optimizer/vars`` and of a
    legacy ``.h5`` file's ``optimizer_weights``. Everything is read and checked first."""
    opt = model.optimizer
    inner = getattr(opt, "inner_optimizer", opt)
    trainable = model._plan_trainable_variables()
    keras_order = model.trainable_weights
    k = inner.slots_per_variable()
    n_slots = k * len(keras_order)
    if not stored:
        return
    head = len(stored) - n_slots
    if len(stored) in (1, 2):
        head, n_slots = len(stored), 0            # saved before the first step: no slots
    elif head not in (1, 2):
        raise ValueError(f"{label}: the optimizer state holds {len(stored)} variables; a "
                         f"{type(inner).__name__} over {len(keras_order)} trainable weights needs "
                         f"{n_slots} slots plus iterations (and the learning rate)")
    iterations = int(h5.read_array(stored[0], (), f"{label}: optimizer iterations", integer=True))
    slots = []
    for i, var in enumerate(keras_order if n_slots else []):
        for j in range(k):
            ds = stored[head + i * k + j]
            slots.append((var, j, h5.read_array(ds, var.shape, f"{label}: optimizer slot {j} of "
                                                               f"'{var.path}'")))
    inner.iterations = iterations
    inner.state_for(trainable)
    for var, j, value in slots:
        entry = inner._slots.get(id(var))
        if entry is not None:
            entry[1][j].write(np.ascontiguousarray(value, np.float32).reshape(-1))
    if iterations:
        inner.built = True
