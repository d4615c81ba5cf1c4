"""gpucmp.keras.saving: ``save_model`` / ``load_model`` / ``save_weights`` / ``load_weights``
in Keras' own formats, chosen as Keras 3 chooses them.

Writing, by the path's name (or ``save_format``):
- ``x.keras``: Keras 3's zip (keras_zip.py) -- what ``keras.models.load_model`` reads;
- ``x.h5`` / ``x.hdf5``: the legacy HDF5 whole-model file (legacy_h5.py);
- ``save_weights``: ``x.weights.h5`` in Keras 3's layout (keras_weights.py), another
  ``x.h5`` in tf.keras 2's layout;
- ``save_format="gpucmp"``: gpucmp's own earlier zip format (gpucmp_zip.py), any name.
Any other name is a ValueError, as in Keras 3. Every write goes through a temporary file
renamed over the target (``gpucmp._files.atomic_write``), so a failed save leaves what was
there.

Reading, by the file's content whatever its name: a zip is a ``.keras`` file or a gpucmp
file (its metadata says which); an HDF5 file is a legacy model or weights file (it has
``layer_names``) or a Keras 3 weights file. ``safe_mode=True`` (the default, as in Keras)
refuses files carrying Python code; see keras_config.check_safe.
"""
import io
import os

from ..._files import atomic_write
from . import archive, gpucmp_zip, h5, keras_config, keras_weights, keras_zip, legacy_h5

_ALL_MEMBERS = ("metadata.json", "config.json", "model.weights.h5", "weights.npz", "optimizer.npz")


def _check_target(filepath, overwrite):
    filepath = os.fspath(filepath)
    if os.path.isdir(filepath):
        raise IsADirectoryError(f"Cannot save to {filepath!r}: it is a directory")
    if not overwrite and os.path.exists(filepath):
        raise FileExistsError(f"{filepath!r} exists and overwrite=False")
    return filepath


def _write_h5(filepath, fill):
    h5py = h5.h5py_module()
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        fill(f)
    data = buf.getvalue()
    atomic_write(filepath, lambda fh: fh.write(data), binary=True)


def _format_of(filepath, save_format, weights):
    if save_format is not None:
        if save_format not in ("keras", "h5", "gpucmp", "tf"):
            raise ValueError(f"Unknown save_format {save_format!r}: expected 'keras', 'h5' or "
                             "'gpucmp'")
        if save_format == "tf":
            raise NotImplementedError("save_format='tf' (TensorFlow SavedModel) is not supported "
                                      "by gpucmp; save to a '.keras' or '.h5' path")
        return save_format
    name = filepath.lower()
    if weights:
        if name.endswith(".weights.h5"):
            return "keras"
        if name.endswith((".h5", ".hdf5")):
            return "h5"
        raise ValueError("The filename must end in `.weights.h5` (Keras 3's weights file) or "
                         f"`.h5` (tf.keras 2's). Received: filepath={filepath}; pass "
                         "save_format='gpucmp' for gpucmp's own format")
    if name.endswith(".keras"):
        return "keras"
    if name.endswith((".h5", ".hdf5")):
        return "h5"
    raise ValueError("Invalid filepath extension for saving. Please add either a `.keras` "
                     "extension for the native Keras format (recommended) or a `.h5` extension "
                     f"(legacy HDF5). Received: filepath={filepath}; or pass "
                     "save_format='gpucmp' for gpucmp's own format")


def save_model(model, filepath, overwrite=True, include_optimizer=True, save_format=None,
               **kwargs):
    if kwargs:
        raise ValueError(f"save_model: unsupported arguments {sorted(kwargs)}")
    filepath = _check_target(filepath, overwrite)
    model._require_built()
    fmt = _format_of(filepath, save_format, weights=False)
    if fmt == "gpucmp":
        gpucmp_zip.save_model(model, filepath, overwrite=True, include_optimizer=include_optimizer)
    elif fmt == "keras":
        keras_zip.save(model, filepath, include_optimizer=include_optimizer)
    else:
        _write_h5(filepath, lambda f: legacy_h5.write_model(f, model, include_optimizer))


def save_weights(model, filepath, overwrite=True, save_format=None):
    filepath = _check_target(filepath, overwrite)
    model._require_built()
    fmt = _format_of(filepath, save_format, weights=True)
    if fmt == "gpucmp":
        gpucmp_zip.save_weights(model, filepath, overwrite=True)
    elif fmt == "keras":
        _write_h5(filepath, lambda f: keras_weights.write(f, model))
    else:
        _write_h5(filepath, lambda f: legacy_h5.write_weights_group(f, model))


def _read_zip(filepath):
    members, names = archive.read_members(filepath, _ALL_MEMBERS, what="Keras or gpucmp model file")
    return members, names


def _is_gpucmp(members, label):
    meta = members.get("metadata.json")
    if meta is None:
        return False
    try:
        import json
        return json.loads(meta.decode("utf-8")).get("format") == gpucmp_zip.FORMAT
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False


def _kind(filepath):
    path = os.fspath(filepath)
    if not os.path.isfile(path):
        raise ValueError(f"File not found: filepath={path}. Please ensure the file is an "
                         "accessible `.keras`, `.h5` or gpucmp file.")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"PK"):
        return path, "zip"
    if head == b"\x89HDF\r\n\x1a\n":
        return path, "hdf5"
    raise ValueError(f"{path} is neither a `.keras` zip archive nor an HDF5 file (it starts "
                     f"with {head!r}); it may be corrupt, truncated or of another format")


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """A model from a ``.keras`` file (Keras 3 / TensorFlow 2.16+ or gpucmp), a legacy
    ``.h5`` file (tf.keras 2 / Keras 3) or a file in gpucmp's own format."""
    path, kind = _kind(filepath)
    if kind == "zip":
        members, names = _read_zip(path)
        if _is_gpucmp(members, path):
            return gpucmp_zip.load_model(path, custom_objects, compile, safe_mode, members=members)
        if not keras_zip.is_keras_zip(names):
            raise ValueError(f"{path} is not a valid .keras file: it has no config.json and "
                             f"model.weights.h5 (members: {sorted(names)[:10]})")
        return keras_zip.load(path, members, custom_objects, compile, safe_mode)
    with h5.open_h5(path, path) as f:
        if "model_config" not in f.attrs:
            raise ValueError(f"{path} holds weights only (no model_config): build the model "
                             "and call model.load_weights() instead")
        return legacy_h5.read_model(f, path, custom_objects, compile, safe_mode)


def load_weights(model, filepath, skip_mismatch=False):
    """Weights from any file load_model reads, or a weights file (Keras 3 ``.weights.h5``,
    tf.keras 2 ``.h5``, gpucmp). Nothing is assigned unless every weight fits."""
    if skip_mismatch:
        raise NotImplementedError("load_weights(skip_mismatch=True) is not supported by gpucmp")
    model._require_built()
    path, kind = _kind(filepath)
    if kind == "zip":
        members, names = _read_zip(path)
        if _is_gpucmp(members, path):
            return gpucmp_zip.load_weights(model, path, members=members)
        if "model.weights.h5" not in names:
            raise ValueError(f"{path} is a zip without model.weights.h5: not a .keras file")
        source = members["model.weights.h5"]
    else:
        source = path
    with h5.open_h5(source, path) as f:
        h5.inspect(f, path)
        if legacy_h5.is_legacy(f):
            legacy_h5.read_weights_group(f["model_weights"] if "model_weights" in f else f,
                                         model, path)
        else:
            keras_weights.read(f, model, path, by_name_fallback=True)


def build_model(config):
    """A model from gpucmp's {"class_name", "config"} (what from_keras produces)."""
    from ..models.model import Model
    from ..models.sequential import Sequential
    cls = {"Sequential": Sequential, "Functional": Model, "Model": Model}.get(config.get("class_name"))
    if cls is None:
        raise ValueError(f"Unknown model class {config.get('class_name')!r}")
    try:
        return cls.from_config(config["config"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"the model config is invalid ({exc!r})") from None


def model_from_config(config, custom_objects=None, safe_mode=True):
    """``keras.models.model_from_config``: a gpucmp or Keras (3 or 2) model config."""
    keras_config.check_safe(config, "model_from_config", safe_mode, custom_objects)
    keras_config.register_custom_objects(custom_objects)
    return build_model(keras_config.from_keras(config, "model_from_config"))


def _compile_config(model):
    """gpucmp's own compile config (used by the harness to clone models)."""
    return gpucmp_zip._compile_config(model)


__all__ = ["save_model", "load_model", "save_weights", "load_weights", "model_from_config"]
