"""Legacy HDF5 files: tf.keras 2's ``model.save('x.h5')`` / ``save_weights('x.h5')`` (which
Keras 3 still writes for a ``.h5`` path).

A whole-model file has root attributes ``model_config`` (the model's JSON config),
``training_config`` (compile arguments), ``keras_version``, ``backend``, and a group
``model_weights``; a weights-only file has that group's content at its root. Either way
the group has a ``layer_names`` attribute (the model's top-level layers in order) and, per
layer, a group whose ``weight_names`` attribute lists its datasets in Keras' legacy weight
order -- ``layer.trainable_weights + layer.non_trainable_weights``, which for a nested
model differs from its leaf order -- at paths like ``dense/dense/kernel:0`` (tf.keras 2) or
``dense/dense/kernel`` (Keras 3).

Loading matches the file's layers to the model's by name when every weighted layer of the
model is in the file (always so for a whole-model file), else by order, as Keras' own
``load_weights`` does; counts and shapes are checked for all layers before anything is
assigned.

A compiled model's file may also hold ``optimizer_weights``: a group whose ``weight_names``
attribute lists the optimizer's variables -- iterations, (the learning rate,) then the
slots of each trainable weight in turn, the order of a ``.keras`` file's ``optimizer/vars``
-- named ``Adam/m/dense/kernel:0`` (tf.keras 2.11+) or ``adam/dense_kernel_momentum``
(Keras 3). tf.keras' pre-2.11 optimizers (``tf.keras.optimizers.legacy``, the default
before TF 2.11) store all first slots, then all second ones (``Adam/dense/kernel/m:0``,
``Adam/dense/bias/m:0``, ..., ``Adam/dense/kernel/v:0``, ...). Both layouts are recognized
by the names and restored; any other (or a loss-scale optimizer's) is not, and a warning
says that the optimizer starts fresh.
"""
import json
import warnings

import numpy as np

from .. import backend
from ..variables import assign_all
from . import h5, keras_config

# gpucmp writes tf.keras 2.15's layout (model config, ':0' weight names), which tf.keras 2
# and Keras 3 both read -- Keras 3's own .h5 configs are unreadable by tf.keras 2
KERAS_VERSION = "2.15.0"      # the tf.keras release whose file layout is written
BACKEND = "tensorflow"        # kernels in TensorFlow's layout (only "theano" is converted)


def _listed_datasets(group, names, what):
    """The datasets of `group` a weight_names attribute lists, in its order; a name without
    one is a ValueError (`what` says who listed it)."""
    h5py = h5.h5py_module()
    out = []
    for n in names:
        ds = group.get(n)
        if not isinstance(ds, h5py.Dataset):
            raise ValueError(f"{what} '{n}', which is missing")
        out.append(ds)
    return out

def _legacy_order(layer):
    return list(layer.trainable_weights) + list(layer.non_trainable_weights)


def _weight_names(layer):
    from ..models import lowering
    from ..models.model import Model
    if isinstance(layer, Model):
        owners = {id(w): leaf for leaf, _ in lowering.leaf_layers(layer._chain()) for w in leaf.weights}
        return [f"{owners[id(w)].name}/{w.name}:0" for w in _legacy_order(layer)]
    cls = type(layer).__name__
    if cls == "Bidirectional":       # bidirectional/forward_lstm/lstm_cell/kernel:0, ...
        return [f"{layer.name}/{name}" for sub in (layer.forward_layer, layer.backward_layer)
                for name in _weight_names(sub)]
    prefix = f"{layer.name}/{backend.to_snake_case(cls)}_cell/" \
        if cls in ("SimpleRNN", "LSTM", "GRU") else f"{layer.name}/"
    return [prefix + w.name + ":0" for w in _legacy_order(layer)]     # tf.keras 2's names


# --------------------------------------------------------------------- writing
def write_weights_group(group, model):
    group.attrs["backend"] = BACKEND
    group.attrs["keras_version"] = KERAS_VERSION
    layers = model.layers
    group.attrs["layer_names"] = np.array([l.name.encode("utf-8") for l in layers])
    for layer in layers:
        g = group.create_group(layer.name)
        names = _weight_names(layer)
        g.attrs["weight_names"] = np.array([n.encode("utf-8") for n in names])
        for name, var in zip(names, _legacy_order(layer)):
            h5.write_array(g, name, var.numpy())


def write_model(f, model, include_optimizer=True):
    config = keras_config.model_to_tf2(model)
    f.attrs["keras_version"] = KERAS_VERSION
    f.attrs["backend"] = BACKEND
    f.attrs["model_config"] = json.dumps(config).encode("utf-8")
    cc = keras_config.compile_to_keras(model) if include_optimizer else None
    if cc:
        f.attrs["training_config"] = json.dumps({
            "loss": cc["loss"], "metrics": cc["metrics"], "weighted_metrics": None,
            "loss_weights": None, "optimizer_config": {
                "class_name": cc["optimizer"]["class_name"],
                "config": cc["optimizer"]["config"]}}).encode("utf-8")
    write_weights_group(f.create_group("model_weights"), model)


# --------------------------------------------------------------------- reading
def is_legacy(f):
    root = f["model_weights"] if "model_weights" in f else f
    return "layer_names" in root.attrs


def _json_attr(f, key, label):
    raw = f.attrs.get(key)
    if raw is None:
        return None
    try:
        return json.loads(h5.text(raw))
    except ValueError as exc:
        raise ValueError(f"{label}: the '{key}' attribute is not valid JSON ({exc})") from None


def read_weights_group(group, model, label):
    """Assigns the legacy weights in ``group`` to ``model`` (all or nothing)."""
    h5py = h5.h5py_module()
    try:
        names = [h5.text(n) for n in group.attrs["layer_names"]]
    except KeyError:
        raise ValueError(f"{label}: no 'layer_names' attribute: not a Keras HDF5 weights "
                         "file") from None
    stored = {}
    for name in names:
        g = group.get(name)
        if not isinstance(g, h5py.Group):
            raise ValueError(f"{label}: layer '{name}' is listed but has no group")
        wnames = [h5.text(w) for w in g.attrs.get("weight_names", [])]
        if wnames:
            stored[name] = _listed_datasets(g, wnames, f"{label}: layer '{name}' lists weight")
    targets = [layer for layer in model.layers if layer.weights]
    by_name = all(layer.name in stored for layer in targets)
    if by_name:
        pairs = [(layer, stored[layer.name]) for layer in targets]
    else:
        missing = [layer.name for layer in targets if layer.name not in stored]
        in_file = list(stored.values())
        if len(in_file) != len(targets):
            raise ValueError(f"{label} has no weights for the layer(s) {missing} of model "
                             f"'{model.name}', and loading by order is impossible: the file has "
                             f"{len(in_file)} layers with weights, the model {len(targets)} "
                             f"(file layers: {list(stored)[:20]})")
        pairs = list(zip(targets, in_file))
    variables, arrays = [], []
    for layer, datasets in pairs:
        weights = _legacy_order(layer)
        how = "" if by_name else " (matched by order: the file's names differ)"
        arrays += h5.read_layer_weights(datasets, weights, layer, label, count_note=how, read_note=how)
        variables += weights
    assign_all(variables, arrays, f"{label} -> model '{model.name}'")


def read_model(f, label, custom_objects=None, compile=True, safe_mode=True):
    from ..layers.layer import weight_budget
    from . import build_model
    config = _json_attr(f, "model_config", label)
    if not isinstance(config, dict):
        raise ValueError(f"{label}: no model_config attribute: this HDF5 file holds weights "
                         "only; build the model and call model.load_weights()")
    budget = h5.inspect(f, label)
    keras_config.check_safe(config, label, safe_mode, custom_objects)
    keras_config.register_custom_objects(custom_objects)
    gconfig = keras_config.from_keras(config, label)
    with weight_budget(budget, label):
        model = build_model(gconfig)
    if "model_weights" not in f:
        raise ValueError(f"{label}: no 'model_weights' group")
    read_weights_group(f["model_weights"], model, label)
    training = _json_attr(f, "training_config", label)
    if compile and isinstance(training, dict) and training.get("optimizer_config"):
        keras_config.check_safe(training, label, safe_mode, custom_objects)
        cc = _compile_config(training)
        keras_config.compile_from_keras(model, cc, label)
        if "optimizer_weights" in f:
            read_optimizer_weights(f["optimizer_weights"], model, label)
    return model


_SLOT_WORDS = {"m", "v", "vhat", "momentum", "momentums", "velocity", "velocities",
               "velocity_hat", "velocity_hats"}


# the slot order of gpucmp's optimizers with several slots (Adam: m, then v)
_SLOT_KINDS = {2: (("m", "v"), ("momentum", "velocity"), ("momentums", "velocities"))}


def _slot_of(name):
    """(the weight a slot variable belongs to, the slot's kind) from its name: the forms
    ``Adam/m/dense/kernel:0`` (tf.keras 2.11+), ``adam/dense_kernel_momentum`` (Keras 3)
    and ``Adam/dense/kernel/m:0`` (tf.keras' legacy optimizers); (name, None) otherwise."""
    parts = name.split(":")[0].split("/")[1:]
    if len(parts) > 1 and parts[0] in _SLOT_WORDS:
        return "/".join(parts[1:]), parts[0]
    if len(parts) > 1 and parts[-1] in _SLOT_WORDS:
        return "/".join(parts[:-1]), parts[-1]
    if len(parts) == 1 and "_" in parts[0]:
        for word in sorted(_SLOT_WORDS, key=len, reverse=True):
            if parts[0].endswith("_" + word):
                return parts[0][: -len(word) - 1], word
    return name, None


def read_optimizer_weights(group, model, label):
    """Restores the optimizer state of ``optimizer_weights`` (see the module docstring),
    or warns that the optimizer starts fresh when its layout is not one of Keras'."""
    from . import keras_weights
    opt = model.optimizer
    names = [h5.text(n) for n in group.attrs.get("weight_names", [])]
    datasets = _listed_datasets(group, names, f"{label}: optimizer_weights lists")
    inner = getattr(opt, "inner_optimizer", opt)
    k = inner.slots_per_variable()
    head = 0
    while head < len(names) and head < 2 and _slot_of(names[head])[1] is None:
        head += 1                                 # iterations (and the learning rate)
    slots = [_slot_of(n) for n in names[head:]]
    order = _per_weight_order(slots, k) if opt is inner and names else None
    if order is None:
        why = "a loss-scale optimizer's" if opt is not inner else \
            f"this layout of ({', '.join(names[:4])}, ...)"
        warnings.warn(f"{label}: the optimizer state is not restored ({why} optimizer_weights "
                      "is not supported); the optimizer starts fresh", stacklevel=4)
        return
    try:
        keras_weights.assign_optimizer_state(
            datasets[:head] + [datasets[head + i] for i in order], model, label)
    except ValueError as exc:                    # nothing was assigned: the model is fine
        warnings.warn(f"{label}: the optimizer state is not restored ({exc}); the optimizer "
                      "starts fresh", stacklevel=4)


def _per_weight_order(slots, k):
    """Indices putting ``slots`` ([(weight, kind)]) weight by weight, k kinds each, in the
    kind order of the first weight: the identity for the per-weight layout, a transpose for
    the kind-major one of the legacy optimizers; None when the names fit neither."""
    if k == 0 or not slots:
        return [] if not slots else None
    if len(slots) % k:
        return None
    n = len(slots) // k

    def fits(index):
        runs = [[slots[index(w, j)] for j in range(k)] for w in range(n)]
        kinds = [s for _, s in runs[0]]
        return None not in kinds and len(set(kinds)) == k and \
            tuple(kinds) in _SLOT_KINDS.get(k, (tuple(kinds),)) and all(
            len({w for w, _ in run}) == 1 and [s for _, s in run] == kinds for run in runs) \
            and len({run[0][0] for run in runs}) == n
    for index in (lambda w, j: w * k + j, lambda w, j: j * n + w):
        if fits(index):
            return [index(w, j) for w in range(n) for j in range(k)]
    return None


def _metric_name(m):
    """tf.keras 2 writes a metric as its name or a MeanMetricWrapper around a function."""
    if isinstance(m, dict) and m.get("class_name") == "MeanMetricWrapper":
        cfg = m.get("config") or {}
        return cfg.get("name") if cfg.get("name") in ("accuracy", "acc") else cfg.get("fn", cfg.get("name"))
    return m


def _compile_config(training):
    """tf.keras 2's training_config as a compile config: ``Custom>Adam`` (TF 2.11+) is Adam
    (its ``jit_compile`` / ``is_legacy_optimizer`` keys are dropped by
    keras_config.compile_from_keras), single-output metric lists unnested."""
    opt = dict(training["optimizer_config"])
    if isinstance(opt.get("class_name"), str) and opt["class_name"].startswith("Custom>"):
        opt["class_name"] = opt["class_name"][len("Custom>"):]
    metrics = training.get("metrics") or []
    if len(metrics) == 1 and isinstance(metrics[0], list):
        metrics = metrics[0]
    return {"optimizer": opt, "loss": training.get("loss"),
            "metrics": [_metric_name(m) for m in metrics],
            "loss_weights": training.get("loss_weights"),
            "weighted_metrics": training.get("weighted_metrics")}
