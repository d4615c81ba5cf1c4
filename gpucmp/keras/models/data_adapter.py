"""Data checks and conversions for fit / evaluate / predict.

Everything a training call needs is checked here once, before the first step, so
that a bad argument raises without touching the weights: x and y become C-contiguous
float32 (labels int32 for sparse losses), NumPy arrays, lists and pandas
DataFrame/Series are accepted, and empty data, mismatched lengths, strings/objects,
NaN/Inf, wrong shapes and out-of-range class ids raise with the expected and received
values named. A model with several inputs takes x as a list/tuple of arrays (in
``model.inputs`` order) or a dict keyed by the Input names (``split_inputs``).
"""
import math
import numbers
import warnings

import numpy as np

from ..layers.layer import format_shape


def to_array(data, what):
    """NumPy view of ``data`` (pandas -> to_numpy(), lists -> asarray); TypeError for non-numbers."""
    if data is None:
        raise ValueError(f"{what} is None")
    if hasattr(data, "to_numpy") and not isinstance(data, np.ndarray):   # pandas
        data = data.to_numpy()
    if isinstance(data, (list, tuple)) and data and all(hasattr(d, "shape") for d in data) \
            and len({np.shape(d) for d in data}) > 1:
        raise ValueError(f"{what}: a list of arrays of different shapes is not one input "
                         "(this model has one input; a list of arrays is for a model with "
                         "several inputs)")
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what} could not be converted to an array: {exc}") from None
    if arr.dtype.kind == "O":
        try:
            arr = arr.astype(np.float64)
        except (ValueError, TypeError):
            raise TypeError(f"{what} has dtype object with non-numeric entries; gpucmp trains "
                            "on numbers (convert strings/categories to numbers first)") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{what} must hold numbers (bool, int or float), got dtype {arr.dtype}")
    return arr


def split_inputs(x, names, what="x"):
    """x -> one entry per model input (``names``: the Input names, in model.inputs order).

    One input: x itself (or the only entry of a one-element list/tuple/dict of arrays).
    Several: a list/tuple of as many arrays, or a dict holding every Input name (extra
    keys are ignored with a warning, as Keras does)."""
    n = len(names)
    if isinstance(x, dict):
        missing = [k for k in names if k not in x]
        if n == 1 and len(x) == 1 and missing:
            return list(x.values())
        if missing:
            raise ValueError(f"{what} is a dict without the model input(s) {missing}; the model "
                             f"expects the keys {names}, received {sorted(map(str, x))}")
        extra = [k for k in x if k not in names]
        if extra:
            warnings.warn(f"{what}: the dict keys {extra} are not inputs of the model "
                          f"(inputs: {names}); they are ignored", stacklevel=3)
        return [x[k] for k in names]
    arrays = isinstance(x, (list, tuple)) and all(hasattr(a, "shape") or hasattr(a, "to_numpy")
                                                  for a in x)
    if n == 1:
        if arrays and len(x) == 1:
            return [x[0]]
        return [x]
    if not isinstance(x, (list, tuple)) or not arrays:
        raise ValueError(f"The model has {n} inputs {names}: pass {what} as a list of {n} arrays "
                         f"(in that order) or a dict keyed by the input names; received "
                         f"{type(x).__name__}" + (f" of shape {np.shape(x)}" if hasattr(x, "shape") else ""))
    if len(x) != n:
        raise ValueError(f"The model has {n} inputs {names} but {what} holds {len(x)} arrays")
    return list(x)


def all_finite(out):
    """Whether the float32 array ``out`` holds no NaN/Inf."""
    return bool(np.isfinite(out).all())


def as_float32(arr, what, check=True):
    """C-contiguous float32 copy/view, checked finite (NaN/Inf -> ValueError naming the position).
    check=False leaves the check to the plan, which makes it while copying the batch in
    (Plan calls raise _core.NonFiniteError; the caller then checks here for the message)."""
    if arr.dtype == np.float32 and arr.flags.c_contiguous:
        out = arr                  # no cast: nothing can overflow, no errstate needed
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.ascontiguousarray(arr, dtype=np.float32)
    if check and not all_finite(out):
        finite = np.isfinite(out)
        pos = np.unravel_index(int(np.argmin(finite.reshape(-1))), out.shape)
        value = arr[pos] if arr.shape == out.shape else out[pos]
        raise ValueError(f"{what} contains NaN or Inf (or values beyond float32 range): "
                         f"{what}[{', '.join(map(str, pos))}] = {value}")
    return out


def prepare_x(x, input_shape, what="x"):
    """x checked against the model's per-sample input shape -> float32 (n, *input_shape[1:])."""
    arr = to_array(x, what)
    if arr.ndim == 0 or arr.shape[0] == 0:
        raise ValueError(f"{what} is empty (shape {arr.shape}): nothing to compute on")
    expected = tuple(input_shape[1:])
    got = tuple(arr.shape[1:])
    if got != expected:
        if expected == (1,) and arr.ndim == 1:        # tf.keras 2 expanded (n,) to (n, 1)
            arr = arr.reshape(-1, 1)
        elif len(got) == len(expected) and all(e is None or e == g for e, g in zip(expected, got)):
            pass
        else:
            raise ValueError(
                f"Input {what} has shape {format_shape(arr.shape)} but the model expects "
                f"{format_shape(input_shape)} (rank {len(input_shape)}); got per-sample shape "
                f"{format_shape(got)}, expected {format_shape(expected)}")
    return as_float32(arr, what)


def check_lengths(x, y, what_x="x", what_y="y"):
    if len(x) != len(y):
        raise ValueError(f"Data cardinality is ambiguous: {what_x} has {len(x)} samples but "
                         f"{what_y} has {len(y)} samples; they must be the same")


def prepare_y(y, loss, out_shape, what="y"):
    """Labels in the plan's format for ``loss``: int32 (n,) class ids for sparse losses,
    float32 (n, *out_shape[1:]) otherwise."""
    arr = to_array(y, what)
    if arr.ndim == 0 or arr.shape[0] == 0:
        raise ValueError(f"{what} is empty (shape {arr.shape})")
    n = arr.shape[0]
    per_sample = tuple(out_shape[1:])
    kind = loss.label_kind
    if kind == "sparse":
        if len(per_sample) != 1:
            raise NotImplementedError(f"sparse labels need an output of shape (batch, classes), "
                                      f"the model outputs {format_shape(out_shape)}")
        classes = per_sample[0]
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1:
            raise ValueError(
                f"{loss.name} expects integer class ids of shape ({n},), got labels of shape "
                f"{format_shape(arr.shape)}" + (" (one-hot? use categorical_crossentropy, or "
                                                "y.argmax(-1))" if arr.shape[1:] == (classes,) else ""))
        values = arr.astype(np.float64, copy=False)
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 0) | (values >= classes)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{what}[{i}] = {arr[i]} is not a valid class id for "
                             f"{loss.name} with {classes} classes: labels must be integers in "
                             f"[0, {classes})")
        return np.ascontiguousarray(arr, dtype=np.int32)
    expected = (n,) + per_sample
    if arr.shape != expected:
        if math.prod(arr.shape) == math.prod(expected) and \
                (arr.shape + (1,) == expected or arr.shape == expected + (1,)):
            arr = arr.reshape(expected)          # Keras squeezes/expands a trailing 1
        elif kind == "categorical" and arr.ndim == 1:
            raise ValueError(
                f"{loss.name} expects one-hot labels of shape {format_shape(expected)}, got "
                f"{format_shape(arr.shape)} (integer class ids? use keras.utils.to_categorical "
                "or loss='sparse_categorical_crossentropy')")
        else:
            raise ValueError(f"Labels {what} have shape {format_shape(arr.shape)} but the model "
                             f"output has shape {format_shape(out_shape)}; expected labels of "
                             f"shape {format_shape(expected)} for {loss.name}")
    return as_float32(arr, what)


def check_positive_int(value, arg, allow_none_default=None, allow_zero=False):
    if value is None and allow_none_default is not None:
        return allow_none_default
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"`{arg}` must be an integer >= {low}, received {arg}={value!r}")
    return int(value)


def split_validation(xs, y, validation_split):
    """Keras' rule: the LAST fraction (split_at = floor(n * (1 - split))) before shuffling.
    ``xs``: one array per model input."""
    if isinstance(validation_split, bool) or not isinstance(validation_split, numbers.Real) \
            or not 0 <= validation_split < 1:
        raise ValueError(f"`validation_split` must be a float in [0, 1), received {validation_split!r}")
    n = len(y)
    split_at = int(math.floor(n * (1.0 - validation_split)))
    if split_at == 0 or split_at == n:
        raise ValueError(f"Training data contains {n} samples, which is not sufficient to split "
                         f"it into a validation and training set as specified by "
                         f"`validation_split={validation_split}`. Either provide more data, or a "
                         "different value for the `validation_split` argument.")
    return ([a[:split_at] for a in xs], y[:split_at]), ([a[split_at:] for a in xs], y[split_at:])
