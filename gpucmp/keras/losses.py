"""Losses: Keras names and classes mapped onto the execution plan's loss kinds.

The plan computes the loss (and its gradient) in C; a Loss object here only says which
kind (``plan_kind``), whether the model output is a logit (``from_logits``), what labels
it expects (``label_kind``: 'categorical' one-hot floats, 'sparse' integer class ids,
'binary' 0/1 floats, 'regression' floats) and its Keras name. Calling a loss on NumPy
arrays computes the Keras per-sample values in float64 (epsilon 1e-7 clipping), the
same formulas the core implements, e.g. ``losses.categorical_crossentropy(y, p)``.

A softmax (sigmoid) output layer feeding categorical (binary) cross-entropy is computed
by the plan from the logits, as TensorFlow does.
"""
import numpy as np

EPSILON = 1e-7


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def categorical_crossentropy(y_true, y_pred, from_logits=False):
    y_true = np.asarray(y_true, np.float64)
    y_pred = np.asarray(y_pred, np.float64)
    if from_logits:
        return -(y_true * _log_softmax(y_pred)).sum(axis=-1)
    p = y_pred / y_pred.sum(axis=-1, keepdims=True)
    return -(y_true * np.log(np.clip(p, EPSILON, 1 - EPSILON))).sum(axis=-1)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False):
    y_pred = np.asarray(y_pred, np.float64)
    y_true = np.asarray(y_true).reshape(y_pred.shape[:-1]).astype(np.int64)
    return categorical_crossentropy(np.eye(y_pred.shape[-1])[y_true], y_pred, from_logits)


def binary_crossentropy(y_true, y_pred, from_logits=False):
    y_pred = np.asarray(y_pred, np.float64)
    y_true = np.asarray(y_true, np.float64).reshape(y_pred.shape)
    if from_logits:
        z = y_pred
        per = np.maximum(z, 0) - z * y_true + np.log1p(np.exp(-np.abs(z)))
    else:
        p = np.clip(y_pred, EPSILON, 1 - EPSILON)
        per = -(y_true * np.log(p) + (1 - y_true) * np.log(1 - p))
    return per.mean(axis=-1)


def mean_squared_error(y_true, y_pred):
    y_pred = np.asarray(y_pred, np.float64)
    y_true = np.asarray(y_true, np.float64).reshape(y_pred.shape)
    return ((y_true - y_pred) ** 2).mean(axis=-1)


def mean_absolute_error(y_true, y_pred):
    y_pred = np.asarray(y_pred, np.float64)
    y_true = np.asarray(y_true, np.float64).reshape(y_pred.shape)
    return np.abs(y_true - y_pred).mean(axis=-1)


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error


class Loss:
    """A loss the plan computes. Calling it returns the batch mean (float)."""

    plan_kind = None
    label_kind = None
    default_name = None
    _fn = None

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        if reduction not in ("sum_over_batch_size", "auto", None):
            raise NotImplementedError(f"{type(self).__name__}: reduction={reduction!r} is not "
                                      "supported (the plan averages over the batch)")
        self.name = name or self.default_name
        self.reduction = "sum_over_batch_size"
        self.from_logits = False

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise NotImplementedError("sample_weight is not supported yet")
        return float(np.mean(self.call(y_true, y_pred)))

    def call(self, y_true, y_pred):
        """Per-sample losses, float64."""
        return type(self)._fn(y_true, y_pred)

    def get_config(self):
        return {"name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _CrossentropyBase(Loss):
    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, name=None,
                 reduction="sum_over_batch_size", dtype=None, ignore_class=None):
        super().__init__(name=name, reduction=reduction)
        if label_smoothing:
            raise NotImplementedError(f"{type(self).__name__}: label_smoothing is not supported yet")
        if axis != -1:
            raise NotImplementedError(f"{type(self).__name__}: only axis=-1 is supported")
        if ignore_class is not None:
            raise NotImplementedError(f"{type(self).__name__}: ignore_class is not supported yet")
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        return type(self)._fn(y_true, y_pred, from_logits=self.from_logits)

    def get_config(self):
        return {"name": self.name, "from_logits": self.from_logits}


class CategoricalCrossentropy(_CrossentropyBase):
    plan_kind = "categorical_crossentropy"
    label_kind = "categorical"
    default_name = "categorical_crossentropy"
    _fn = staticmethod(categorical_crossentropy)


class SparseCategoricalCrossentropy(_CrossentropyBase):
    plan_kind = "sparse_categorical_crossentropy"
    label_kind = "sparse"
    default_name = "sparse_categorical_crossentropy"
    _fn = staticmethod(sparse_categorical_crossentropy)

    def __init__(self, from_logits=False, ignore_class=None, name=None,
                 reduction="sum_over_batch_size", dtype=None):
        super().__init__(from_logits=from_logits, name=name, reduction=reduction,
                         ignore_class=ignore_class)


class BinaryCrossentropy(_CrossentropyBase):
    plan_kind = "binary_crossentropy"
    label_kind = "binary"
    default_name = "binary_crossentropy"
    _fn = staticmethod(binary_crossentropy)


class MeanSquaredError(Loss):
    plan_kind = "mse"
    label_kind = "regression"
    default_name = "mean_squared_error"
    _fn = staticmethod(mean_squared_error)


class MeanAbsoluteError(Loss):
    plan_kind = "mae"
    label_kind = "regression"
    default_name = "mean_absolute_error"
    _fn = staticmethod(mean_absolute_error)


_BY_NAME = {
    "categorical_crossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "mean_squared_error": MeanSquaredError, "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError, "mae": MeanAbsoluteError,
}
_BY_FUNCTION = {
    categorical_crossentropy: CategoricalCrossentropy,
    sparse_categorical_crossentropy: SparseCategoricalCrossentropy,
    binary_crossentropy: BinaryCrossentropy,
    mean_squared_error: MeanSquaredError, mean_absolute_error: MeanAbsoluteError,
}
_CLASSES = {cls.__name__: cls for cls in set(_BY_NAME.values())}


def get(identifier):
    """A Loss from a Keras name ('mse', 'categorical_crossentropy', 'MSE' ...), a Loss
    instance or class, or one of this module's functions. Custom Python loss functions
    cannot run inside the core: NotImplementedError."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, Loss):
        return identifier()
    if isinstance(identifier, str):
        key = identifier.strip()
        cls = _BY_NAME.get(key) or _BY_NAME.get(key.lower())
        if cls is None and key in _CLASSES:
            cls = _CLASSES[key]
        if cls is None:
            if key.lower() in ("crossentropy", "ce"):
                raise NotImplementedError(f"loss={identifier!r}: name the cross-entropy "
                                          "explicitly (categorical_, sparse_categorical_ or binary_)")
            raise ValueError(f"Unknown loss: {identifier!r}. Supported: "
                             f"{', '.join(sorted(_BY_NAME))}")
        loss = cls()
        if key in ("mse", "mae", "MSE", "MAE"):
            loss.name = key.lower()
        return loss
    if isinstance(identifier, dict) and "class_name" in identifier:
        return deserialize(identifier)
    if callable(identifier) and identifier in _BY_FUNCTION:
        return _BY_FUNCTION[identifier]()
    if callable(identifier):
        raise NotImplementedError(
            f"loss={identifier!r}: custom Python loss functions are not supported, the loss "
            f"runs inside the core; use one of {', '.join(sorted(_BY_NAME))}")
    raise ValueError(f"Could not interpret loss: {identifier!r}")


def serialize(loss):
    return {"class_name": type(loss).__name__, "config": loss.get_config()}


def deserialize(config):
    cls = _CLASSES.get(config.get("class_name"))
    if cls is None:
        raise ValueError(f"Unknown loss in config: {config!r}")
    return cls.from_config(dict(config.get("config", {})))
