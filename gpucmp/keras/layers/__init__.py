"""gpucmp.keras.layers: the Keras layers gpucmp lowers to its execution plan.

One file per layer (merge layers share base_merge.py, the pools pooling2d.py and
global_pooling2d.py, the recurrent layers recurrent.py, with Bidirectional in
bidirectional.py and eager calls in recurrent_eager.py); ``layer.py`` is the base class.
A layer is a Layer subclass with ``build``, ``compute_output_shape``, ``plan_layers`` and
``get_config``, registered below.
"""
from .activation import Activation
from .add import Add
from .average_pooling2d import AveragePooling2D, AvgPool2D
from .batch_normalization import BatchNormalization
from .bidirectional import Bidirectional
from .concatenate import Concatenate
from .conv2d import Conv2D, Convolution2D
from .dense import Dense
from .dropout import Dropout
from .embedding import Embedding
from .flatten import Flatten
from .global_pooling2d import (GlobalAveragePooling2D, GlobalAvgPool2D, GlobalMaxPool2D,
                               GlobalMaxPooling2D)
from .gru import GRU
from .input_layer import Input, InputLayer
from .layer import Layer
from .lstm import LSTM
from .masking import Masking
from .max_pooling2d import MaxPool2D, MaxPooling2D
from .multiply import Multiply
from .reshape import Reshape
from .simple_rnn import SimpleRNN
from .zero_padding2d import ZeroPadding2D

_REGISTRY = {cls.__name__: cls for cls in (
    Activation, Add, AveragePooling2D, BatchNormalization, Bidirectional, Concatenate, Conv2D, Dense, Dropout,
    Embedding, Flatten, GlobalAveragePooling2D, GlobalMaxPooling2D, GRU, InputLayer, LSTM, Masking, MaxPooling2D,
    Multiply, Reshape, SimpleRNN, ZeroPadding2D)}


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
        from .. import saving
        return saving.build_model(config)
    cls = _REGISTRY.get(name)
    if cls is None:
        raise NotImplementedError(f"Layer class {name!r} is not implemented by gpucmp; it has "
                                  f"{', '.join(sorted(_REGISTRY))}")
    return cls.from_config(dict(config.get("config", {})))




def add(inputs, **kwargs):
    """Functional interface to ``Add``."""
    return Add(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    """Functional interface to ``Multiply``."""
    return Multiply(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    """Functional interface to ``Concatenate``."""
    return Concatenate(axis=axis, **kwargs)(inputs)


__all__ = ["Activation", "Add", "AveragePooling2D", "AvgPool2D", "BatchNormalization", "Bidirectional",
           "Concatenate", "Conv2D", "Convolution2D", "Dense", "Dropout", "Flatten",
           "GlobalAveragePooling2D", "GlobalAvgPool2D", "GlobalMaxPool2D", "GlobalMaxPooling2D",
           "Input", "InputLayer", "Layer", "Masking", "MaxPool2D", "MaxPooling2D", "Multiply", "Reshape",
           "ZeroPadding2D", "add", "concatenate", "multiply", "serialize", "deserialize",
           "register"]
