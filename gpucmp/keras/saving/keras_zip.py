"""The Keras 3 ``.keras`` format: a zip of ``metadata.json``, ``config.json`` and
``model.weights.h5`` (Keras 3's ``saving_lib``; TensorFlow 2.16+ writes the same).

``save(model, path)`` writes what Keras 3 writes -- the config through keras_config, the
weights (and optimizer state) through keras_weights -- into a temporary file that replaces
``path`` only once complete (``_files.atomic_write``). ``load(path, ...)`` reads the three
members in memory (archive.read_members: nothing extracted, names and sizes checked),
checks the config for code and unknown objects (keras_config.check_safe) and the HDF5 file
for sizes it cannot back (h5.inspect) before building anything, builds the model under that
budget, then assigns weights and optimizer state, all checked first.
"""
import datetime
import io
import json
import warnings

from ..._files import atomic_write
from . import archive, h5, keras_config, keras_weights

KERAS_VERSION = "3.15.1"      # the Keras release whose format is written
MEMBERS = ("metadata.json", "config.json", "model.weights.h5")


def is_keras_zip(names):
    return "config.json" in names and "model.weights.h5" in names


def save(model, filepath, include_optimizer=True):
    from ... import __version__ as gpucmp_version
    config = keras_config.model_to_keras(model)
    cc = keras_config.compile_to_keras(model)
    if cc is not None:
        config["compile_config"] = cc
    metadata = {"keras_version": KERAS_VERSION,
                "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
                "saved_by": f"gpucmp {gpucmp_version}"}
    h5py = h5.h5py_module()
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        keras_weights.write(f, model, include_optimizer=include_optimizer)
    members = {"metadata.json": json.dumps(metadata).encode("utf-8"),
               "config.json": json.dumps(config).encode("utf-8"),
               "model.weights.h5": buf.getvalue()}
    atomic_write(filepath, lambda fh: archive.write_zip(fh, members), binary=True)


def _json(members, name, label):
    try:
        return json.loads(members[name].decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{label}: {name} is not valid JSON ({exc})") from None


def load(filepath, members, custom_objects=None, compile=True, safe_mode=True):
    """A gpucmp model from the members of a ``.keras`` archive (already read in memory)."""
    from ..layers.layer import weight_budget
    from . import build_model
    label = str(filepath)
    for name in MEMBERS[1:]:
        if name not in members:
            raise ValueError(f"{label} is not a valid .keras file: it has no {name!r}")
    config = _json(members, "config.json", label)
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"{label}: config.json does not describe a model")
    keras_config.check_safe(config, label, safe_mode, custom_objects)
    keras_config.register_custom_objects(custom_objects)
    gconfig = keras_config.from_keras(config, label)
    if gconfig["class_name"] not in ("Sequential", "Functional"):
        raise NotImplementedError(f"{label}: the model is a {config['class_name']!r} (a "
                                  "subclassed model); gpucmp loads Sequential and functional models")
    with h5.open_h5(members["model.weights.h5"], f"{label} (model.weights.h5)") as f:
        budget = h5.inspect(f, label)
        with weight_budget(budget, label):
            model = build_model(gconfig)
        keras_weights.read(f, model, label)
        cc = config.get("compile_config")
        if compile and isinstance(cc, dict) and cc.get("loss") is not None \
                and cc.get("optimizer") is None:
            # Keras 3 itself writes this when a model was saved to .h5 before .keras (its
            # .h5 writer pops the optimizer out of the model's compile config)
            warnings.warn(f"{label}: the compile config has a loss but no optimizer; the "
                          "model is not compiled: compile it yourself", stacklevel=3)
        if compile and keras_config.compile_from_keras(model, config.get("compile_config"), label):
            keras_weights.read_optimizer(f, model, label)
    return model
