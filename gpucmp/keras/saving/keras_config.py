"""Model configs between gpucmp and Keras' serialization (Keras 3 and tf.keras 2).

Reading (``from_keras``): a Keras config tree -- ``{"module", "class_name", "config",
"registered_name", "build_config"}`` per object in Keras 3, ``{"class_name", "config"}`` in
tf.keras 2 -- becomes the ``{"class_name", "config"}`` tree gpucmp's ``from_config`` takes:
dtype policies become their names, initializers lose Keras-only keys, tf.keras 2's
``batch_input_shape`` InputLayers and nested-list ``inbound_nodes`` become Keras 3's form.
A key gpucmp does not know is kept, so the layer's constructor names it in its error
(never dropped silently); only keys at the value that means "off" are dropped.

Safety (``check_safe``), run on the whole tree before anything is built, imports nothing
and unpickles nothing: a Lambda layer or a serialized lambda / Python function (which Keras
stores as marshalled bytecode), and any object that is not one of Keras' own (a
``registered_name`` or ``module`` outside Keras), are refused with a ValueError naming them;
``custom_objects`` may map a custom class name to a gpucmp Layer subclass. With
``safe_mode=False`` a Lambda is still refused -- gpucmp cannot run Python code in its
plan -- but the message says so instead.

Writing (``to_keras``): gpucmp's get_config() trees become what Keras 3 writes, so that
``keras.models.load_model`` reads gpucmp's files: module and registered_name fields,
DTypePolicy dicts, Keras 3 initializer dicts, an explicit InputLayer at the head of a
Sequential, ``build_config`` per built layer, and the compile config. ``model_to_tf2``
turns that into tf.keras 2.15's legacy ``.h5`` layout, which tf.keras 2 and Keras 3 both
read (tf.keras 2 cannot read Keras 3's configs).
"""
import copy

# --------------------------------------------------------------------- safety
_CODE_CLASSES = {"Lambda": "a Lambda layer (it stores Python bytecode)",
                 "__lambda__": "a serialized Python lambda (marshalled bytecode)",
                 "TFOpLambda": "a TensorFlow op wrapper (TFOpLambda)",
                 "SlicingOpLambda": "a TensorFlow slicing op (SlicingOpLambda)"}
_KERAS_REGISTERED = {None, "Functional", "Sequential", "Model"}


def _is_keras_module(module):
    return module is None or module == "keras" or module.startswith(("keras.", "tf_keras", "tensorflow"))


def check_safe(tree, label, safe_mode=True, custom_objects=None):
    """Refuses code and unknown custom objects anywhere in ``tree`` (see module docstring)."""
    custom_objects = custom_objects or {}
    stack = [(tree, "config")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        cls = node.get("class_name")
        name = _object_name(node)
        if isinstance(cls, str):
            if cls in _CODE_CLASSES:
                what = _CODE_CLASSES[cls]
                if safe_mode:
                    raise ValueError(
                        f"{label}: refusing to load {what}{name} at {where}: it carries Python "
                        "code, and load_model(safe_mode=True) (the default) does not run code "
                        "from a file. gpucmp cannot run Lambda layers in any case: rebuild "
                        "that part of the model with built-in layers.")
                raise NotImplementedError(
                    f"{label}: {what}{name} at {where} runs arbitrary Python code, which "
                    "gpucmp's compiled plan cannot execute; rebuild it with built-in layers")
            if cls == "function" or node.get("registered_name") == "function":
                fn = node.get("config")
                if not (_is_keras_module(node.get("module")) and isinstance(fn, str)):
                    raise ValueError(f"{label}: refusing the Python function {fn!r} "
                                     f"(module {node.get('module')!r}) at {where}: gpucmp runs "
                                     "only built-in activations, losses and metrics")
            registered = node.get("registered_name")
            custom = (registered not in _KERAS_REGISTERED and registered != "function") or \
                not _is_keras_module(node.get("module"))
            if custom and cls not in custom_objects and (registered or "") not in custom_objects:
                raise ValueError(
                    f"{label}: unknown custom object {registered or cls!r}{name} (module "
                    f"{node.get('module')!r}) at {where}. Files are not allowed to name code "
                    "to import; pass custom_objects={{'" + str(registered or cls) +
                    "': <a gpucmp Layer subclass>}} if you have one.")
        for key, value in node.items():
            if isinstance(value, (dict, list)):
                stack.append((value, f"{where}.{key}" if key != "config" else where))


def _object_name(node):
    cfg = node.get("config")
    if isinstance(cfg, dict) and isinstance(cfg.get("name"), str):
        return f" '{cfg['name']}'"
    return ""


# --------------------------------------------------------------------- Keras -> gpucmp
_MODEL_CLASSES = {"Sequential": "Sequential", "Functional": "Functional", "Model": "Functional"}
# keys Keras writes that gpucmp has no argument for, dropped when at the value meaning "off"
_OFF = {"quantization_config": None, "optional": False, "time_major": False,
        "lora_rank": None, "lora_alpha": None, "autocast": True, "input_axes": None,
        "output_axes": None}


def dtype_name(value, label):
    """A Keras dtype / DTypePolicy config -> the policy name gpucmp takes."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        cls = value.get("class_name")
        if cls in ("DTypePolicy", "FloatDTypePolicy", "Policy") and \
                isinstance(value.get("config"), dict) and isinstance(value["config"].get("name"), str):
            return value["config"]["name"]
        raise NotImplementedError(f"{label}: the dtype policy {cls!r} "
                                  f"({value.get('config')!r}) is not supported by gpucmp")
    raise ValueError(f"{label}: cannot interpret dtype {value!r}")


def _drop_off(config):
    for key, off in _OFF.items():
        if key in config and config[key] == off:
            del config[key]
    return config


def _convert_value(value, label):
    """Nested initializer-like dicts: module/registered_name dropped, Keras-only keys off."""
    if isinstance(value, dict) and "class_name" in value:
        out = {"class_name": value["class_name"]}
        cfg = value.get("config", {})
        if isinstance(cfg, dict):
            cfg = _drop_off({k: _convert_value(v, label) for k, v in cfg.items()})
        out["config"] = cfg
        return out
    return value


def _convert_inbound(nodes, layer_name, label):
    """Keras 3 inbound nodes checked; tf.keras 2's nested lists turned into Keras 3's."""
    out = []
    for node in nodes:
        if isinstance(node, dict):
            kwargs = node.get("kwargs") or {}
            for key, value in kwargs.items():
                if key == "training" or (key == "mask" and value is None):
                    continue
                raise NotImplementedError(f"{label}: layer '{layer_name}' is called with "
                                          f"{key}={value!r}, which gpucmp does not support")
            out.append({"args": node.get("args", []), "kwargs": {}})
            continue
        if not isinstance(node, list):
            raise ValueError(f"{label}: layer '{layer_name}' has an invalid inbound node {node!r}")
        refs = []
        for entry in node:                   # [layer, node_index, tensor_index, kwargs]
            if not (isinstance(entry, list) and len(entry) >= 3):
                raise ValueError(f"{label}: layer '{layer_name}' has an invalid inbound node "
                                 f"entry {entry!r}")
            if len(entry) > 3 and entry[3]:
                extra = {k: v for k, v in entry[3].items() if k != "training" and v is not None}
                if extra:
                    raise NotImplementedError(f"{label}: layer '{layer_name}' is called with "
                                              f"{extra}, which gpucmp does not support")
            refs.append(list(entry[:3]))
        out.append({"args": [refs[0]] if len(refs) == 1 else [refs], "kwargs": {}})
    return out


def from_keras(entry, label):
    """A Keras layer/model config entry -> gpucmp's {"class_name", "config"} (recursively)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
        raise ValueError(f"{label}: not a layer or model config: {str(entry)[:200]}")
    cls = entry["class_name"]
    cfg = entry.get("config")
    if not isinstance(cfg, dict):
        raise ValueError(f"{label}: the config of {cls!r} is not a dict")
    cfg = copy.deepcopy(cfg)
    if cls in _MODEL_CLASSES:
        out = {"class_name": _MODEL_CLASSES[cls], "config": _model_from_keras(cls, cfg, label)}
    else:
        _check_layer_class(cls, cfg, label)
        cfg = _drop_off({k: _convert_value(v, label) for k, v in cfg.items()})
        if "dtype" in cfg:
            cfg["dtype"] = dtype_name(cfg["dtype"], f"{label}: layer '{cfg.get('name')}'")
        if cls == "InputLayer" and "batch_input_shape" in cfg:
            cfg["batch_shape"] = cfg.pop("batch_input_shape")
        if cls == "BatchNormalization" and isinstance(cfg.get("axis"), list) \
                and len(cfg["axis"]) == 1:
            # tf.keras 2 writes a built BatchNormalization's axis as the list of its positive
            # axes ([3] for NHWC); Keras 3 writes the int it was given (-1)
            cfg["axis"] = cfg["axis"][0]
        out = {"class_name": cls, "config": cfg}
    for key in ("name", "inbound_nodes"):
        if key in entry:
            out[key] = entry[key]
    if "inbound_nodes" in out:
        out["inbound_nodes"] = _convert_inbound(out["inbound_nodes"], out.get("name", cls), label)
    return out


def _check_layer_class(cls, cfg, label):
    from .. import layers
    if cls not in layers._REGISTRY:
        raise NotImplementedError(
            f"{label}: layer '{cfg.get('name', '?')}' is a {cls}, which gpucmp does not "
            f"implement; gpucmp has {', '.join(sorted(layers._REGISTRY))}")


def _model_from_keras(cls, cfg, label):
    cfg.pop("dtype", None)      # a model's own policy: its layers carry theirs
    layers = cfg.get("layers")
    if not isinstance(layers, list):
        raise ValueError(f"{label}: the {cls} config has no list of layers")
    cfg["layers"] = [from_keras(layer, label) for layer in layers]
    return cfg


def register_custom_objects(custom_objects):
    """Makes the user's custom Layer classes known to gpucmp's deserializer."""
    if not custom_objects:
        return
    from .. import layers
    for key, value in custom_objects.items():
        if isinstance(value, type) and issubclass(value, layers.Layer):
            layers._REGISTRY[key.split(">")[-1]] = value
            layers._REGISTRY[key] = value
        else:
            raise TypeError(f"custom_objects[{key!r}] must be a gpucmp Layer subclass, "
                            f"received {value!r}")


def strip_keras(obj):
    """Optimizer/loss/metric configs: Keras' module and registered_name removed, recursively."""
    if isinstance(obj, dict):
        return {k: strip_keras(v) for k, v in obj.items() if k not in ("module", "registered_name")}
    if isinstance(obj, list):
        return [strip_keras(v) for v in obj]
    return obj


# --------------------------------------------------------------------- gpucmp -> Keras 3
def _policy(name):
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": name},
            "registered_name": None}


def _keras_object(entry, module):
    return {"module": module, "class_name": entry["class_name"],
            "config": entry.get("config", {}), "registered_name": None}


def _layer_config_to_keras(cls, config):
    cfg = {}
    for key, value in config.items():
        if key == "batch_input_shape":
            continue                        # the Sequential gets an explicit InputLayer
        if key == "dtype" and cls != "InputLayer":
            value = _policy(value)
        elif key.endswith("_initializer") and isinstance(value, dict):
            value = _keras_object(value, "keras.initializers")
        cfg[key] = value
    return cfg


def layer_to_keras(layer):
    """One gpucmp layer (or nested model) as Keras 3 serializes it."""
    from ..models.model import Model
    if isinstance(layer, Model):
        return model_to_keras(layer, nested=True)
    cls = type(layer).__name__
    config = _layer_config_to_keras(cls, layer.get_config())
    if cls == "Bidirectional":          # its layers as Keras 3 serializes them
        config["layer"] = layer_to_keras(layer.forward_layer)
        config["backward_layer"] = layer_to_keras(layer.backward_layer)
    out = {"module": "keras.layers", "class_name": cls, "config": config, "registered_name": None}
    if cls != "InputLayer" and layer.built and layer._build_input_shape is not None:
        out["build_config"] = {"input_shape": _shape_list(layer._build_input_shape)}
    return out


def _shape_list(shape):
    if isinstance(shape, list) and shape and isinstance(shape[0], (list, tuple)):
        return [list(s) for s in shape]
    return list(shape)


def model_to_keras(model, nested=False):
    """A gpucmp Sequential or functional model as Keras 3's config.json writes it."""
    from ..layers.input_layer import InputLayer
    from ..models.sequential import Sequential
    model._require_built()
    policy = _policy(model.dtype_policy.name)
    if isinstance(model, Sequential):
        layers = []
        shape = _shape_list(model.input_shape)
        head = model._layers[0] if model._layers and isinstance(model._layers[0], InputLayer) else None
        layers.append({"module": "keras.layers", "class_name": "InputLayer",
                       "config": {"batch_shape": shape,
                                  "dtype": head.input_dtype if head else "float32",
                                  "sparse": False, "ragged": False, "optional": False,
                                  "name": head.name if head else f"{model.name}_input"},
                       "registered_name": None})
        layers.extend(layer_to_keras(layer) for layer in model._chain())
        config = {"name": model.name, "trainable": model.trainable, "dtype": policy,
                  "layers": layers, "build_input_shape": shape}
        return {"module": "keras", "class_name": "Sequential", "config": config,
                "registered_name": None, "build_config": {"input_shape": shape}}
    config = model.get_config()
    by_name = {layer.name: layer for layer in model._layers}
    entries = []
    for entry in config["layers"]:
        converted = layer_to_keras(by_name[entry["name"]])
        if converted["class_name"] == "InputLayer":
            converted["config"].update(sparse=False, ragged=False, optional=False)
        converted["name"] = entry["name"]
        converted["inbound_nodes"] = entry["inbound_nodes"]
        entries.append(converted)
    config["layers"] = entries
    return {"module": "keras.src.models.functional", "class_name": "Functional",
            "config": config, "registered_name": "Functional",
            "build_config": {"input_shape": None}}


# --------------------------------------------------------------------- Keras 3 -> tf.keras 2
def _tf2_dtype(value):
    """A Keras 3 DTypePolicy dict as tf.keras 2 writes a layer's dtype: the name of a plain
    policy, a ``Policy`` dict for a mixed one."""
    if isinstance(value, dict) and isinstance(value.get("config"), dict):
        name = value["config"].get("name")
        return name if not str(name).startswith("mixed_") else \
            {"class_name": "Policy", "config": {"name": name}}
    return value


def _tf2_tensor_ref(value, where):
    if isinstance(value, dict) and value.get("class_name") == "__keras_tensor__":
        return list(value["config"]["keras_history"]) + [{}]
    raise ValueError(f"{where}: cannot write the call argument {str(value)[:100]} in "
                     "tf.keras 2's layout")


def _tf2_layer(entry, functional):
    cls = entry["class_name"]
    cfg = dict(entry["config"])
    where = f"layer '{cfg.get('name')}'"
    if "dtype" in cfg:
        cfg["dtype"] = _tf2_dtype(cfg["dtype"])
    if cls == "InputLayer":
        # tf.keras 2's InputLayer takes batch_input_shape and has no `optional`
        cfg["batch_input_shape"] = cfg.pop("batch_shape")
        cfg.pop("optional", None)
    out = {"class_name": cls, "config": cfg}
    if functional:
        nodes = []
        for node in entry.get("inbound_nodes", []):
            args = node["args"]
            refs = args[0] if len(args) == 1 and isinstance(args[0], list) else args
            nodes.append([_tf2_tensor_ref(a, where) for a in refs])
        out["name"] = entry["name"]
        out["inbound_nodes"] = nodes
    return out


def model_to_tf2(model):
    """A gpucmp model's config in tf.keras 2.15's legacy ``.h5`` layout -- readable by
    tf.keras 2 (which rejects Keras 3's configs: ``batch_shape``, ``optional``, dict
    inbound nodes, DTypePolicy dicts) and by Keras 3, which reads tf.keras 2's files."""
    config = model_to_keras(model)
    cfg = config["config"]
    functional = config["class_name"] == "Functional"
    out = {"name": cfg["name"], "layers": []}
    for entry in cfg["layers"]:
        if entry["class_name"] in _MODEL_CLASSES:
            raise NotImplementedError(f"a nested model ('{entry['config'].get('name')}') cannot "
                                      "be written in tf.keras 2's .h5 layout by gpucmp; save "
                                      "to a '.keras' path")
        out["layers"].append(_tf2_layer(entry, functional))
    if functional:
        def refs(value):
            return [value] if value and not isinstance(value[0], list) else value
        out["input_layers"] = refs(cfg["input_layers"])
        out["output_layers"] = refs(cfg["output_layers"])
    return {"class_name": "Functional" if functional else "Sequential", "config": out}


def compile_to_keras(model):
    """Keras 3's compile_config of a compiled gpucmp model (None when not compiled)."""
    from .. import losses, metrics, optimizers
    if not model.compiled:
        return None

    def optimizer(opt):
        entry = optimizers.serialize(opt)
        cfg = dict(entry["config"])
        if "inner_optimizer" in cfg:
            cfg["inner_optimizer"] = optimizer(opt.inner_optimizer)
        return {"module": "keras.optimizers", "class_name": entry["class_name"], "config": cfg,
                "registered_name": None}

    def metric(m):
        if type(m).__name__ == "Accuracy" and getattr(m, "name", None) in ("accuracy", "acc"):
            return m.name                   # resolved by shape, as the string is in Keras
        return _keras_object(metrics.serialize(m), "keras.metrics")

    loss = model._loss_obj
    return {"optimizer": optimizer(model.optimizer),
            "loss": _keras_object(losses.serialize(loss), "keras.losses") if loss is not None else None,
            "loss_weights": None,
            "metrics": [metric(m) for m in model._compiled_metrics] or None,
            "weighted_metrics": None, "run_eagerly": False, "steps_per_execution": 1,
            "jit_compile": False}


# tf.keras 2.11+ optimizers write these (in a .keras compile_config and an .h5
# training_config alike); they choose XLA / the pre-2.11 implementation, not the math
_TF2_OPTIMIZER_KEYS = ("jit_compile", "is_legacy_optimizer")


def _tf2_optimizer_config(opt_cfg):
    if isinstance(opt_cfg, dict) and isinstance(opt_cfg.get("config"), dict):
        opt_cfg = dict(opt_cfg, config={k: v for k, v in opt_cfg["config"].items()
                                        if k not in _TF2_OPTIMIZER_KEYS})
    return opt_cfg


def compile_from_keras(model, cc, label):
    """Compiles ``model`` from a Keras (or gpucmp) compile config."""
    from .. import losses, metrics, optimizers
    if not cc or not isinstance(cc, dict) or cc.get("optimizer") is None:
        return False
    cc = strip_keras(cc)
    opt_cfg = _tf2_optimizer_config(cc["optimizer"])
    try:
        opt = optimizers.get(opt_cfg)
    except (ValueError, NotImplementedError, TypeError) as exc:
        name = opt_cfg.get("class_name") if isinstance(opt_cfg, dict) else opt_cfg
        raise NotImplementedError(f"{label}: the model was compiled with the optimizer "
                                  f"{name!r}, which gpucmp cannot rebuild ({exc}); load it with "
                                  "compile=False and compile it yourself") from None
    loss = cc.get("loss")
    if isinstance(loss, (list, dict)) and not (isinstance(loss, dict) and "class_name" in loss):
        raise NotImplementedError(f"{label}: several losses ({loss!r}) are not supported")
    ms = cc.get("metrics") or []
    if isinstance(ms, dict) or any(isinstance(m, list) for m in ms):
        raise NotImplementedError(f"{label}: per-output metrics ({ms!r}) are not supported")
    if cc.get("loss_weights") or cc.get("weighted_metrics"):
        raise NotImplementedError(f"{label}: loss_weights / weighted_metrics are not supported")
    try:
        model.compile(optimizer=opt, loss=losses.get(loss) if loss is not None else None,
                      metrics=[metrics.get(m) for m in ms])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{label}: the compile config cannot be applied: {exc}") from None
    return True
