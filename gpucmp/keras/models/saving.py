"""Saving and loading: ``model.save(path)``, ``load_model(path)``, ``save_weights`` /
``load_weights``.

File format (gpucmp's own; Keras writes HDF5 inside its .keras zip): a zip archive with
- ``metadata.json``: {"format": "gpucmp.keras", "version": 1, "kind": "model"|"weights"}
- ``config.json``: the model config (class_name + get_config()), the compile config
  and the name and shape of every weight (models only)
- ``weights.npz``: the weights in get_weights() order (``w0``, ``w1``, ...)
- ``optimizer.npz``: iterations and the optimizer slots (models saved after compile)
Any file name works ('.keras' is conventional; '.h5' and '.weights.h5' are accepted).
``load_weights`` also reads Keras' own HDF5 weight files, by layer name
(``load_h5_weights_by_name``).

Writes are atomic: the archive is written to a temporary file in the same directory,
flushed to disk, then moved over the target with ``os.replace``; a failed save leaves
the previous file intact. Reads validate everything (zip integrity and CRCs, members,
JSON, weight count and shapes) and raise ValueError naming what is wrong.
"""
import io
import json
import os
import zipfile
import zlib

import numpy as np

from ..._files import atomic_write

FORMAT = "gpucmp.keras"
VERSION = 1


def _atomic_write(filepath, members, overwrite):
    filepath = os.fspath(filepath)
    if os.path.isdir(filepath):
        raise IsADirectoryError(f"Cannot save to {filepath!r}: it is a directory")
    if not overwrite and os.path.exists(filepath):
        raise FileExistsError(f"{filepath!r} exists and overwrite=False")

    def write(fh):
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name, payload in members.items():
                zf.writestr(name, payload)
    atomic_write(filepath, write, binary=True)


def _npz_bytes(arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _json_bytes(obj):
    return json.dumps(obj, indent=1, default=_json_default).encode("utf-8")


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot serialize {obj!r}")


def _weights_manifest(model):
    return [{"path": w.path, "shape": list(w.shape)} for w in model.weights]


def _compile_config(model):
    from .. import losses, metrics, optimizers
    if not model.compiled:
        return None
    return {
        "optimizer": optimizers.serialize(model.optimizer),
        "loss": losses.serialize(model._loss_obj) if model._loss_obj is not None else None,
        "metrics": [metrics.serialize(m) for m in model._compiled_metrics],
    }


def _slot_owner(opt):
    """The optimizer holding the slots: a LossScaleOptimizer's inner one."""
    return getattr(opt, "inner_optimizer", opt)


def _optimizer_arrays(model):
    opt = model.optimizer
    arrays = {"iterations": np.array(opt.iterations, np.int64)}
    if opt.loss_scaling:   # Keras saves the loss scale state with the optimizer too
        arrays["dynamic_scale"] = np.array(opt.dynamic_scale, np.float64)
        arrays["step_counter"] = np.array(opt.step_counter, np.int64)
    for i, var in enumerate(model.weights):
        entry = _slot_owner(opt)._slots.get(id(var))
        if entry is not None and entry[0] is var:
            for j, buf in enumerate(entry[1]):
                arrays[f"w{i}_slot{j}"] = buf.read()
    return arrays


def save_model(model, filepath, overwrite=True, include_optimizer=True, **kwargs):
    if kwargs.get("save_format") not in (None, "keras", "h5", "tf"):
        raise ValueError(f"Unknown save_format {kwargs['save_format']!r}")
    model._require_built()
    config = {"class_name": type(model).__name__ if type(model).__name__ in ("Sequential",)
              else "Functional", "config": model.get_config(),
              "compile_config": _compile_config(model), "weights": _weights_manifest(model)}
    members = {
        "metadata.json": _json_bytes({"format": FORMAT, "version": VERSION, "kind": "model"}),
        "config.json": _json_bytes(config),
        "weights.npz": _npz_bytes({f"w{i}": w for i, w in enumerate(model.get_weights())}),
    }
    if include_optimizer and model.compiled:
        members["optimizer.npz"] = _npz_bytes(_optimizer_arrays(model))
    _atomic_write(filepath, members, overwrite)


def save_weights(model, filepath, overwrite=True):
    model._require_built()
    members = {
        "metadata.json": _json_bytes({"format": FORMAT, "version": VERSION, "kind": "weights"}),
        "config.json": _json_bytes({"weights": _weights_manifest(model)}),
        "weights.npz": _npz_bytes({f"w{i}": w for i, w in enumerate(model.get_weights())}),
    }
    _atomic_write(filepath, members, overwrite)


# ---------------------------------------------------------------- reading
class _Archive:
    """A validated gpucmp archive: metadata, config, weights (and optimizer state)."""

    def __init__(self, filepath, kind):
        filepath = os.fspath(filepath)
        self.path = filepath
        if not os.path.isfile(filepath):
            raise ValueError(f"File not found: filepath={filepath}. Please ensure the file is an "
                             "accessible gpucmp model/weights file.")
        try:
            with zipfile.ZipFile(filepath, "r") as zf:
                bad = zf.testzip()
                if bad is not None:
                    raise ValueError(f"{filepath}: member {bad!r} is corrupt (CRC mismatch)")
                names = set(zf.namelist())
                for required in ("metadata.json", "config.json", "weights.npz"):
                    if required not in names:
                        raise ValueError(f"{filepath} is not a gpucmp {kind} file: it has no "
                                         f"{required!r}")
                self.metadata = self._json(zf, "metadata.json")
                self.config = self._json(zf, "config.json")
                self.weights = self._npz(zf, "weights.npz")
                self.optimizer = self._npz(zf, "optimizer.npz") if "optimizer.npz" in names else None
        except (zipfile.BadZipFile, zlib.error) as exc:
            raise ValueError(f"{filepath} is not a valid gpucmp {kind} file (corrupt or "
                             f"truncated zip archive: {exc})") from None
        except (EOFError, OSError) as exc:
            raise ValueError(f"{filepath} could not be read as a gpucmp {kind} file "
                             f"(truncated?): {exc}") from None
        if not isinstance(self.metadata, dict) or self.metadata.get("format") != FORMAT:
            raise ValueError(f"{filepath} is not a gpucmp {kind} file (metadata format "
                             f"{self.metadata.get('format') if isinstance(self.metadata, dict) else None!r})")
        if self.metadata.get("version") != VERSION:
            raise ValueError(f"{filepath}: unsupported format version {self.metadata.get('version')!r}")
        manifest = self.config.get("weights") if isinstance(self.config, dict) else None
        if not isinstance(manifest, list):
            raise ValueError(f"{filepath}: config.json has no weight manifest")
        self.manifest = manifest
        arrays = []
        for i, entry in enumerate(manifest):
            key = f"w{i}"
            if key not in self.weights:
                raise ValueError(f"{filepath}: weight {i} ({entry.get('path')}) is missing")
            arr = self.weights[key]
            if list(arr.shape) != list(entry.get("shape", [])):
                raise ValueError(f"{filepath}: weight {i} ({entry.get('path')}) has shape "
                                 f"{tuple(arr.shape)} but the manifest says {tuple(entry.get('shape', []))}")
            arrays.append(arr)
        if len(self.weights) != len(manifest):
            raise ValueError(f"{filepath}: {len(self.weights)} weight arrays for "
                             f"{len(manifest)} manifest entries")
        self.arrays = arrays

    def _json(self, zf, name):
        try:
            return json.loads(zf.read(name).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{self.path}: {name} is not valid JSON ({exc})") from None

    def _npz(self, zf, name):
        try:
            with np.load(io.BytesIO(zf.read(name)), allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        except (ValueError, OSError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ValueError(f"{self.path}: {name} is corrupt ({exc})") from None


def _assign_all(model, arrays, source):
    try:
        model.set_weights(arrays)
    except ValueError as exc:
        raise ValueError(f"{source} does not fit model '{model.name}': {exc}") from None


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """Rebuilds a model saved by ``model.save``: architecture, weights and, when
    ``compile=True`` and it was compiled, its compile state and optimizer state."""
    from .. import losses, metrics, optimizers
    archive = _Archive(filepath, "model")
    cfg = archive.config
    if not isinstance(cfg, dict) or "class_name" not in cfg or "config" not in cfg:
        raise ValueError(f"{archive.path}: config.json does not describe a model")
    try:
        model = model_from_config({"class_name": cfg["class_name"], "config": cfg["config"]})
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{archive.path}: the model config is invalid ({exc!r})") from None
    _assign_all(model, archive.arrays, archive.path)
    cc = cfg.get("compile_config")
    if compile and cc:
        model.compile(optimizer=optimizers.deserialize(cc["optimizer"]),
                      loss=losses.deserialize(cc["loss"]) if cc.get("loss") else None,
                      metrics=[metrics.get(m) for m in cc.get("metrics", [])])
        if archive.optimizer is not None:
            _restore_optimizer(model, archive.optimizer, archive.path)
    return model


def _restore_optimizer(model, arrays, source):
    opt = model.optimizer
    opt.iterations = int(arrays.get("iterations", 0))
    if opt.loss_scaling and "dynamic_scale" in arrays:
        opt.dynamic_scale = float(arrays["dynamic_scale"])
        opt.step_counter = int(arrays["step_counter"])
    opt.state_for(model._plan_trainable_variables())
    for i, var in enumerate(model.weights):
        entry = _slot_owner(opt)._slots.get(id(var))
        if entry is None:
            continue
        for j, buf in enumerate(entry[1]):
            key = f"w{i}_slot{j}"
            if key in arrays:
                if arrays[key].size != buf.size:
                    raise ValueError(f"{source}: optimizer slot {key} has {arrays[key].size} "
                                     f"values, expected {buf.size}")
                buf.write(arrays[key])
    if opt.iterations:
        opt.built = True


def load_weights(model, filepath):
    """Weights from a gpucmp archive (in get_weights() order) or, by layer name, from a
    Keras HDF5 file (see load_h5_weights_by_name)."""
    path = os.fspath(filepath)
    if os.path.isfile(path) and not zipfile.is_zipfile(path) and _is_hdf5(path):
        load_h5_weights_by_name(model, path)
        return
    archive = _Archive(filepath, "weights")
    _assign_all(model, archive.arrays, archive.path)


# ---------------------------------------------------------------- Keras' HDF5 weights
def _is_hdf5(path):
    with open(path, "rb") as fh:
        return fh.read(8) == b"\x89HDF\r\n\x1a\n"


def _h5py():
    try:
        import h5py
    except ImportError:
        raise ImportError("Reading a Keras HDF5 weights file needs the h5py package "
                          "(pip install h5py)") from None
    return h5py


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _keras3_weights(f):
    """{layer name: [arrays in the layer's weight order]} of a Keras 3 ``.weights.h5``:
    groups ``.../vars`` named by their ``name`` attribute, holding ``0``, ``1``, ..."""
    found = {}

    def visit(name, obj):
        if name.split("/")[-1] == "vars" and "name" in obj.attrs and len(obj):
            keys = sorted(obj.keys(), key=int)
            found.setdefault(_text(obj.attrs["name"]), []).append([obj[k][()] for k in keys])
    f.visititems(visit)
    return found


def _legacy_weights(f):
    """{layer name: [arrays]} of a legacy (tf.keras 2 / ``.h5`` model or weights) file:
    ``layer_names`` and each layer group's ``weight_names``, in weight order."""
    root = f["model_weights"] if "model_weights" in f else f
    found = {}
    for name in root.attrs["layer_names"]:
        name = _text(name)
        group = root[name]
        arrays = [group[_text(w)][()] for w in group.attrs.get("weight_names", [])]
        if arrays:
            found.setdefault(name, []).append(arrays)
    return found


def load_h5_weights_by_name(model, path):
    """Loads a Keras HDF5 weights file into ``model`` by layer name: Keras 3's
    ``.weights.h5`` (each leaf layer's ``vars`` group) or a legacy ``.h5`` (tf.keras 2
    ``save_weights``, ``model.save('x.h5')``, the keras-applications ImageNet files:
    ``layer_names`` / ``weight_names``, a nested model's weights under its own name).
    Every layer of the model that has weights must be found, once, with the right
    shapes -- else ValueError naming it, and nothing is written; layers of the file that
    the model lacks are ignored."""
    from . import lowering
    h5py = _h5py()
    try:
        with h5py.File(path, "r") as f:
            legacy = "layer_names" in (f["model_weights"] if "model_weights" in f else f).attrs
            found = _legacy_weights(f) if legacy else _keras3_weights(f)
    except (OSError, KeyError) as exc:
        raise ValueError(f"{path} could not be read as a Keras HDF5 weights file: {exc}") from None
    if legacy:       # top-level layers, a nested model as a whole
        targets = [layer for layer in model.layers if layer.weights]
    else:
        targets = [layer for layer, _ in lowering.leaf_layers(model._chain()) if layer.weights]
    variables, arrays, missing = [], [], []
    for layer in targets:
        entries = found.get(layer.name)
        if not entries:
            missing.append(layer.name)
            continue
        if len(entries) > 1:
            raise ValueError(f"{path}: layer name '{layer.name}' appears {len(entries)} times in "
                             "the file; cannot load it by name")
        weights = layer.weights
        if len(entries[0]) != len(weights):
            raise ValueError(f"{path}: layer '{layer.name}' has {len(entries[0])} weights in the "
                             f"file but {len(weights)} in the model "
                             f"({', '.join(w.name for w in weights)})")
        variables.extend(weights)
        arrays.extend(entries[0])
    if missing:
        raise ValueError(f"{path} has no weights for the layer(s) {missing} of model "
                         f"'{model.name}' (it holds {sorted(found)[:20]}...)")
    from ..variables import assign_all
    assign_all(variables, arrays, f"{path} -> model '{model.name}'")


def model_from_config(config, custom_objects=None):
    from .model import Model
    from .sequential import Sequential
    cls = {"Sequential": Sequential, "Functional": Model, "Model": Model}.get(config.get("class_name"))
    if cls is None:
        raise ValueError(f"Unknown model class {config.get('class_name')!r}")
    return cls.from_config(config["config"])
