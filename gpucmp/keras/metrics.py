"""Metrics: Keras names and classes mapped onto the metrics the plan counts in C.

The plan returns per-call sums for 'acc_categorical', 'acc_sparse', 'acc_binary',
'mse' and 'mae'; fit/evaluate divide by the samples seen. 'accuracy' / 'acc' resolve
by shape at fit time, as Keras does (``resolve_accuracy``): a last output dimension of 1
is binary accuracy (p > 0.5); labels of lower rank than the output (or with last
dimension 1) are sparse categorical; otherwise categorical (argmax match).

Metric objects also work standalone on NumPy arrays (update_state / result / reset_state).
"""
import numpy as np


class Metric:
    plan_kind = None
    default_name = None

    def __init__(self, name=None, dtype=None):
        self.name = name or self.default_name
        self.reset_state()

    # --- standalone use
    def reset_state(self):
        self._total, self._count = 0.0, 0

    def update_state(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise NotImplementedError("sample_weight is not supported yet")
        values = self._values(np.asarray(y_true), np.asarray(y_pred, np.float64))
        self._total += float(np.sum(values))
        self._count += int(np.size(values))

    def result(self):
        return self._total / self._count if self._count else 0.0

    def __call__(self, y_true, y_pred, sample_weight=None):
        self.update_state(y_true, y_pred, sample_weight)
        return self.result()

    def get_config(self):
        return {"name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class CategoricalAccuracy(Metric):
    plan_kind = "acc_categorical"
    default_name = "categorical_accuracy"

    def _values(self, y_true, y_pred):
        return (y_pred.argmax(-1) == np.asarray(y_true).argmax(-1)).astype(np.float64)


class SparseCategoricalAccuracy(Metric):
    plan_kind = "acc_sparse"
    default_name = "sparse_categorical_accuracy"

    def _values(self, y_true, y_pred):
        y_true = np.asarray(y_true).reshape(y_pred.shape[:-1])
        return (y_pred.argmax(-1) == y_true).astype(np.float64)


class BinaryAccuracy(Metric):
    plan_kind = "acc_binary"
    default_name = "binary_accuracy"

    def __init__(self, name=None, dtype=None, threshold=0.5):
        if threshold != 0.5:
            raise NotImplementedError("BinaryAccuracy: only threshold=0.5 is supported by the plan")
        self.threshold = 0.5
        super().__init__(name=name)

    def _values(self, y_true, y_pred):
        y_true = np.asarray(y_true, np.float64).reshape(y_pred.shape)
        return ((y_pred > self.threshold) == (y_true > 0.5)).mean(axis=-1)


class MeanSquaredError(Metric):
    plan_kind = "mse"
    default_name = "mean_squared_error"

    def _values(self, y_true, y_pred):
        return ((np.asarray(y_true, np.float64).reshape(y_pred.shape) - y_pred) ** 2).mean(-1)


class MeanAbsoluteError(Metric):
    plan_kind = "mae"
    default_name = "mean_absolute_error"

    def _values(self, y_true, y_pred):
        return np.abs(np.asarray(y_true, np.float64).reshape(y_pred.shape) - y_pred).mean(-1)


class Accuracy(Metric):
    """'accuracy' before the shapes are known; ``resolve_accuracy`` picks the real one."""
    default_name = "accuracy"


_BY_NAME = {
    "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "binary_accuracy": BinaryAccuracy,
    "mean_squared_error": MeanSquaredError, "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError, "mae": MeanAbsoluteError,
}
_CLASSES = {cls.__name__: cls for cls in
            (CategoricalAccuracy, SparseCategoricalAccuracy, BinaryAccuracy, MeanSquaredError,
             MeanAbsoluteError, Accuracy)}


def get(identifier):
    """A Metric from a name ('accuracy', 'acc', 'mse', 'categorical_accuracy' ...) or an instance.
    'accuracy'/'acc' give an unresolved Accuracy named as written."""
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, Metric):
        return identifier()
    if isinstance(identifier, str):
        key = identifier.strip()
        if key.lower() in ("accuracy", "acc"):
            return Accuracy(name=key)
        cls = _BY_NAME.get(key) or _BY_NAME.get(key.lower()) or _CLASSES.get(key)
        if cls is None:
            raise ValueError(f"Unknown metric: {identifier!r}. Supported: accuracy, acc, "
                             f"{', '.join(sorted(_BY_NAME))}")
        return cls(name=key if key in _BY_NAME else None)
    if isinstance(identifier, dict) and "class_name" in identifier:
        cls = _CLASSES.get(identifier["class_name"])
        if cls is None:
            raise ValueError(f"Unknown metric in config: {identifier!r}")
        return cls.from_config(dict(identifier.get("config", {})))
    if callable(identifier):
        from . import losses
        name = getattr(identifier, "__name__", "")
        if identifier in (losses.mean_squared_error, losses.mean_absolute_error):
            return _BY_NAME[name]()
        raise NotImplementedError(f"metric {identifier!r}: custom Python metrics are not supported, "
                                  "metrics are counted inside the core")
    raise ValueError(f"Could not interpret metric: {identifier!r}")


def serialize(metric):
    return {"class_name": type(metric).__name__, "config": metric.get_config()}


def is_binary_or_sparse(y_true_shape, y_pred_shape):
    """Keras' rule (trainers/compile_utils.py) for 'accuracy' and 'crossentropy'."""
    t_rank, p_rank = len(y_true_shape), len(y_pred_shape)
    t_last, p_last = y_true_shape[-1] if t_rank else 1, y_pred_shape[-1]
    is_binary = p_last == 1
    is_sparse = t_rank < p_rank or (t_last == 1 and p_last > 1)
    return is_binary, is_sparse


def resolve_accuracy(metric, y_true_shape, y_pred_shape):
    """The concrete accuracy metric for 'accuracy'/'acc' given the label and output shapes."""
    if not isinstance(metric, Accuracy):
        return metric
    is_binary, is_sparse = is_binary_or_sparse(y_true_shape, y_pred_shape)
    cls = BinaryAccuracy if is_binary else SparseCategoricalAccuracy if is_sparse \
        else CategoricalAccuracy
    return cls(name=metric.name)
