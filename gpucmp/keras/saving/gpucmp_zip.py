"""gpucmp's own file format (the one earlier gpucmp versions wrote), kept readable and
writable with ``save_format="gpucmp"``.

A zip archive with
- ``metadata.json``: {"format": "gpucmp.keras", "version": 1, "kind": "model"|"weights"}
- ``config.json``: the model config (class_name + get_config()), the compile config
  and the name and shape of every weight (models only)
- ``weights.npz``: the weights in get_weights() order (``w0``, ``w1``, ...)
- ``optimizer.npz``: iterations and the optimizer slots (models saved after compile)
``saving/__init__.py`` recognises it by its metadata (format "gpucmp.keras") whatever the
file's name.

Writes are atomic: the archive is written to a temporary file in the same directory,
flushed to disk, then moved over the target with ``os.replace``; a failed save leaves
the previous file intact. Reads go through archive.read_members (members in memory,
names and sizes checked) and validate everything (zip integrity and CRCs, members, JSON,
weight count and shapes, ``allow_pickle=False``), raising ValueError naming what is wrong.
"""
import io
import json
import os
import zipfile
import zlib

import numpy as np

from ..._files import atomic_write
from ..._npy import read_plain_npy
from . import archive as zip_archive

FORMAT = "gpucmp.keras"
VERSION = 1


def _atomic_write(filepath, members, overwrite):
    filepath = os.fspath(filepath)
    if os.path.isdir(filepath):
        raise IsADirectoryError(f"Cannot save to {filepath!r}: it is a directory")
    if not overwrite and os.path.exists(filepath):
        raise FileExistsError(f"{filepath!r} exists and overwrite=False")

    atomic_write(filepath, lambda fh: zip_archive.write_zip(fh, members), binary=True)


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

    def __init__(self, filepath, kind, members=None):
        filepath = os.fspath(filepath)
        self.path = filepath
        if members is None:
            members, _ = zip_archive.read_members(
                filepath, ("metadata.json", "config.json", "weights.npz", "optimizer.npz"),
                required=("metadata.json", "config.json", "weights.npz"),
                what=f"gpucmp {kind} file")
        for required in ("metadata.json", "config.json", "weights.npz"):
            if required not in members:
                raise ValueError(f"{filepath} is not a gpucmp {kind} file: it has no {required!r}")
        self.metadata = self._json(members, "metadata.json")
        self.config = self._json(members, "config.json")
        self.weights = self._npz(members, "weights.npz")
        self.optimizer = self._npz(members, "optimizer.npz") if "optimizer.npz" in members else None
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

    def _json(self, members, name):
        try:
            return json.loads(members[name].decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{self.path}: {name} is not valid JSON ({exc})") from None

    def _npz(self, members, name):
        """The arrays of an .npz member, each .npy header checked against the bytes that
        follow it before the array is allocated (no pickles: allow_pickle=False)."""
        out = {}
        try:
            with zipfile.ZipFile(io.BytesIO(members[name])) as inner:
                for info in inner.infolist():
                    if zip_archive.unsafe_name(info.filename) or not info.filename.endswith(".npy"):
                        raise ValueError(f"unexpected member {info.filename!r}")
                    out[info.filename[:-4]] = read_plain_npy(inner.read(info), info.filename)
        except (ValueError, OSError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ValueError(f"{self.path}: {name} is corrupt ({exc})") from None
        return out


def _assign_all(model, arrays, source):
    try:
        model.set_weights(arrays)
    except ValueError as exc:
        raise ValueError(f"{source} does not fit model '{model.name}': {exc}") from None


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True, members=None):
    """Rebuilds a model saved by ``model.save``: architecture, weights and, when
    ``compile=True`` and it was compiled, its compile state and optimizer state."""
    from .. import losses, metrics, optimizers
    from ..layers.layer import weight_budget
    from . import build_model, keras_config
    archive = _Archive(filepath, "model", members)
    cfg = archive.config
    if not isinstance(cfg, dict) or "class_name" not in cfg or "config" not in cfg:
        raise ValueError(f"{archive.path}: config.json does not describe a model")
    keras_config.check_safe(cfg, archive.path, safe_mode, custom_objects)
    keras_config.register_custom_objects(custom_objects)
    try:
        with weight_budget(sum(a.size for a in archive.arrays), archive.path):
            model = build_model({"class_name": cfg["class_name"], "config": cfg["config"]})
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


def load_weights(model, filepath, members=None):
    """Weights from a gpucmp archive, in get_weights() order."""
    archive = _Archive(filepath, "weights", members)
    _assign_all(model, archive.arrays, archive.path)


