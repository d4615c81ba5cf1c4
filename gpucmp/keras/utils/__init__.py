"""gpucmp.keras.utils: set_random_seed, to_categorical, normalize, Progbar, get_file."""
import numpy as np

from ..backend import set_random_seed
from .file_utils import get_file
from .progbar import Progbar


def to_categorical(x, num_classes=None):
    """Integer class ids -> one-hot float32 rows (Keras' to_categorical)."""
    x = np.asarray(x)
    if x.size and (not np.all(np.isfinite(x)) or np.any(x != np.round(x)) or np.any(x < 0)):
        raise ValueError("to_categorical expects non-negative integer class ids")
    x = x.astype(np.int64)
    if x.ndim > 1 and x.shape[-1] == 1:
        x = x.reshape(x.shape[:-1])
    if num_classes is None:
        num_classes = int(x.max()) + 1 if x.size else 0
    if x.size and x.max() >= num_classes:
        raise ValueError(f"to_categorical: class id {int(x.max())} >= num_classes={num_classes}")
    out = np.zeros(x.shape + (num_classes,), np.float32)
    np.put_along_axis(out, x[..., None], 1.0, axis=-1)
    return out


def normalize(x, axis=-1, order=2):
    """x / ||x|| along ``axis`` (Keras' utils.normalize)."""
    x = np.asarray(x, np.float64)
    norm = np.linalg.norm(x, ord=order, axis=axis, keepdims=True)
    norm[norm == 0] = 1
    return (x / norm).astype(np.float32)


__all__ = ["set_random_seed", "to_categorical", "normalize", "Progbar", "get_file"]
