"""gpucmp.keras.layers: the Keras layers gpucmp lowers to its execution plan.

One file per layer; ``layer.py`` is the base class. SimpleRNN / LSTM / Embedding come
with the recurrent issue and slot in the same way (a Layer subclass with ``build``,
``compute_output_shape``, ``plan_layers`` and ``get_config``, registered below).
"""
from .activation import Activation
from .average_pooling2d import AveragePooling2D, AvgPool2D
from .conv2d import Conv2D, Convolution2D
from .dense import Dense
from .dropout import Dropout
from .flatten import Flatten
from .input_layer import Input, InputLayer
from .layer import Layer
from .max_pooling2d import MaxPool2D, MaxPooling2D
from .reshape import Reshape

_REGISTRY = {cls.__name__: cls for cls in (
    Activation, AveragePooling2D, Conv2D, Dense, Dropout, Flatten, InputLayer, MaxPooling2D,
    Reshape)}


def register(cls):
    """Makes a Layer subclass known to ``deserialize`` (and so to ``load_model``)."""
    _REGISTRY[cls.__name__] = cls
    return cls


def serialize(layer):
    return {"class_name": type(layer).__name__, "config": layer.get_config()}


def deserialize(config):
    """A layer (or a model) from ``{"class_name": ..., "config": ...}``."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"Not a layer config: {config!r}")
    name = config["class_name"]
    if name in ("Sequential", "Functional", "Model"):
        from .. import models
        return models.model_from_config(config)
    cls = _REGISTRY.get(name)
    if cls is None:
        raise ValueError(f"Unknown layer class {name!r} in config")
    return cls.from_config(dict(config.get("config", {})))


__all__ = ["Activation", "AveragePooling2D", "AvgPool2D", "Conv2D", "Convolution2D", "Dense",
           "Dropout", "Flatten", "Input", "InputLayer", "Layer", "MaxPool2D", "MaxPooling2D",
           "Reshape", "serialize", "deserialize", "register"]
