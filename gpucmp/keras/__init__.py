"""gpucmp.keras: the Keras-compatible front end of gpucmp.

Code written for ``tensorflow.keras`` runs with only its imports changed::

    import gpucmp as tf
    from gpucmp.keras.models import Sequential
    from gpucmp.keras.layers import Conv2D, MaxPooling2D, Flatten, Dense

Layers keep their weights in ``gpucmp._core.Buffer``s on the current device;
``model.compile()`` prepares a C execution plan and each training step is one call
into it (see KERAS_SEMANTICS.md for the exact Keras behaviour reproduced).
"""
from . import (activations, applications, backend, callbacks, datasets, initializers, layers,
               losses, metrics, mixed_precision, models, optimizers, saving, utils)
from .layers import Input, InputLayer, Layer
from .models import Model, Sequential, load_model
from .variables import Variable

__all__ = ["activations", "applications", "backend", "callbacks", "datasets", "initializers", "layers", "losses", "metrics",
           "mixed_precision", "models", "optimizers", "utils", "Input", "InputLayer", "Layer",
           "Model", "Sequential", "Variable", "load_model"]
