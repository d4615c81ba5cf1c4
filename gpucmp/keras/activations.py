"""Activations: the names the core computes, as NumPy functions and a resolver.

Layers store an activation by name ('linear', 'relu', 'tanh', 'sigmoid', 'softmax'),
because that name is what the execution plan fuses into its GEMM / conv epilogue.
``get`` accepts a name (any case), None (linear) or one of the functions below (or any
callable whose ``__name__`` is a supported name). Other Keras activations ('elu',
'gelu', ...) are known but not implemented by the core yet: NotImplementedError; an
unknown name is a ValueError.
"""
import numpy as np

SUPPORTED = ("linear", "relu", "tanh", "sigmoid", "softmax")
_KERAS_ONLY = ("elu", "selu", "gelu", "swish", "silu", "softplus", "softsign", "exponential",
               "hard_sigmoid", "hard_silu", "hard_swish", "leaky_relu", "relu6", "mish",
               "log_softmax", "celu", "glu", "sparse_plus", "squareplus", "tanh_shrink",
               "hard_tanh", "soft_shrink", "hard_shrink", "threshold", "log_sigmoid", "sparsemax")


def linear(x):
    return np.asarray(x)


def relu(x):
    return np.maximum(np.asarray(x), 0)


def tanh(x):
    return np.tanh(x)


def sigmoid(x):
    x = np.asarray(x)
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def softmax(x, axis=-1):
    x = np.asarray(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def get(identifier, argument="activation"):
    """The canonical activation name for ``identifier`` (see module docstring)."""
    if identifier is None:
        return "linear"
    if callable(identifier) and not isinstance(identifier, str):
        name = getattr(identifier, "__name__", None)
        if name in SUPPORTED:
            return name
        raise NotImplementedError(
            f"{argument}={identifier!r}: gpucmp computes activations in its core and only "
            f"knows {', '.join(SUPPORTED)}; pass one of these names")
    if not isinstance(identifier, str):
        raise ValueError(f"{argument} must be a string, a callable or None, got {identifier!r}")
    name = identifier.strip().lower()
    if name in SUPPORTED:
        return name
    if name in _KERAS_ONLY:
        raise NotImplementedError(
            f"{argument}={identifier!r} is a Keras activation the gpucmp core does not "
            f"implement yet; supported: {', '.join(SUPPORTED)}")
    raise ValueError(f"Unknown {argument}: {identifier!r}. Supported: {', '.join(SUPPORTED)}")


def serialize(name):
    return name
