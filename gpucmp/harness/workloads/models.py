"""Model workloads: one training step of a gpucmp.keras model -- the seeds' CNN or the user's own.

What it provides: `ModelWorkload`, built from a function that returns a compiled model
(the seeds) or from a compiled model object (`benchmark(workloads=[model])`). Its op
list comes from the model's execution plan (describe.py); its memory from the plan's
buffers (memory.py); a measured run trains a copy of the model with `fit` on random
data of the model's shapes, one sample being one `fit` call timed from
on_train_begin to on_train_end (the data upload stays outside), so the step time is the
one users get from fit, as in benchmarks/bench_cnn.py.

Why a copy: benchmarking must not change the user's weights or optimizer state, and the
copy can be built on another device or under another precision policy (the layers'
dtype policies are rewritten in the config, as mixed_precision.set_global_policy would
have set them).
"""
import copy as _copy
import time

import numpy as np

from .. import describe, memory
from .base import Config, Run, Workload, POLICY_OF

COMPUTE_DTYPE = {"float32": "float32", "tf32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
MAX_DATA_BYTES = 64 << 20      # random training rows per fit call (more steps: more epochs)


def _policy_name(model):
    p = getattr(model, "dtype_policy", None)
    return getattr(p, "name", "float32")


def _precision_of_policy(name):
    return {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}.get(name, "float32")


def _on_device(device, fn):
    """fn() with gpucmp's current device set to `device` (restored afterwards)."""
    import gpucmp
    before = gpucmp.get_device()
    gpucmp.set_device(device)
    try:
        return fn()
    finally:
        gpucmp.set_device(before)


def clone_model(model, device, precision=None):
    """A compiled copy of `model` on `device` with the same weights and compile state;
    precision (canonical) rewrites every layer's dtype policy."""
    from ...keras import losses, metrics, optimizers
    from ...keras.models import saving
    if not model.compiled:
        raise ValueError(f"model '{model.name}' must be compiled (its loss and optimizer are part of the "
                         "training step that is measured)")
    cfg = {"class_name": type(model).__name__, "config": _copy.deepcopy(model.get_config())}
    if precision is not None:
        _set_policy(cfg, POLICY_OF[precision])
    cc = saving._compile_config(model)
    weights = model.get_weights()

    def build():
        m = saving.model_from_config(cfg)
        m.set_weights(weights)
        m.compile(optimizer=optimizers.deserialize(cc["optimizer"]),
                  loss=losses.deserialize(cc["loss"]) if cc.get("loss") else None,
                  metrics=[metrics.get(x) for x in cc.get("metrics", [])])
        return m
    return _on_device(device, build)


def _set_policy(cfg, policy):
    if isinstance(cfg, dict):
        if "dtype" in cfg and isinstance(cfg["dtype"], (str, dict)) and "class_name" not in cfg:
            cfg["dtype"] = policy
        for v in cfg.values():
            _set_policy(v, policy)
    elif isinstance(cfg, list):
        for v in cfg:
            _set_policy(v, policy)


def _first_embedding(model):
    """The Embedding a model's input feeds, or None."""
    from ...keras.layers import Embedding
    from ...keras.models import lowering
    leaves = lowering.leaf_layers(model._chain()) if hasattr(model, "_chain") else []
    first = leaves[0][0] if leaves else None
    return first if isinstance(first, Embedding) else None


def random_data(model, rows, rng):
    """x in [0, 1) of the model's input shape (ids in [0, input_dim) for a model that starts
    with an Embedding) and labels its loss takes."""
    emb = _first_embedding(model)
    if emb is not None:
        x = rng.integers(0, emb.input_dim, (rows,) + tuple(model.input_shape[1:])).astype(np.float32)
    else:
        x = rng.random((rows,) + tuple(model.input_shape[1:]), dtype=np.float32)
    out = tuple(model.output_shape[1:])
    kind = getattr(model._loss_obj, "label_kind", None)
    classes = int(np.prod(out)) if out else 1
    name = getattr(model._loss_obj, "plan_kind", "")
    if kind == "sparse":
        y = rng.integers(0, classes, rows).astype(np.int32)
    elif "binary" in name:
        y = (rng.random((rows,) + out) > 0.5).astype(np.float32)
    elif "categorical" in name:
        y = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, rows)].reshape((rows,) + out)
    else:
        y = rng.random((rows,) + out, dtype=np.float32)
    return x, y


class _Bracket:
    """A fit callback stamping on_train_begin / on_train_end (and the energy meter there)."""

    def __init__(self):
        from ...keras.callbacks import Callback

        class Stamp(Callback):
            def on_train_begin(cb, logs=None):
                self.t0 = time.perf_counter()

            def on_train_end(cb, logs=None):
                self.t1 = time.perf_counter()
        self.callback = Stamp()
        self.t0 = self.t1 = None


class ModelRun(Run):
    """Training steps of a model copy on one device."""

    def __init__(self, model, batch, seed=0):
        self.model = model
        self.batch = batch
        rows_cap = max(batch, MAX_DATA_BYTES // max(1, 4 * int(np.prod(model.input_shape[1:]))))
        self.rows = max(batch, (rows_cap // batch) * batch)
        self.x, self.y = random_data(model, self.rows, np.random.default_rng(seed))
        self.steps_per_epoch = self.rows // batch
        self.work_per_step = float(batch)
        self.stamp = _Bracket()
        self.last_steps = 0
        self.last_rows = 0

    def _fit(self, n_steps):
        epochs = max(1, -(-int(n_steps) // self.steps_per_epoch))
        rows = self.rows if epochs > 1 else max(self.batch, min(self.rows, int(n_steps) * self.batch))
        self.last_steps = epochs * (rows // self.batch)
        self.last_rows = rows
        self.model.fit(self.x[:rows], self.y[:rows], batch_size=self.batch, epochs=epochs, verbose=0,
                       shuffle=True, callbacks=[self.stamp.callback])
        return self.stamp.t0, self.stamp.t1

    def run(self, n_steps):
        self._fit(n_steps)

    def timed(self, n_steps):
        t0, t1 = self._fit(n_steps)
        return t1 - t0

    def close(self):
        self.model = self.x = self.y = None

    def steps_done(self):
        return self.last_steps

    def window(self):
        """(t0, t1) host times of the last sample's training (for energy)."""
        return self.stamp.t0, self.stamp.t1


class ModelWorkload(Workload):
    """A gpucmp.keras model's training step (forward, loss, backward, optimizer update)."""
    kind = "model"
    unit = "samples/s"
    precisions = ("float32", "float16", "bfloat16")

    def __init__(self, name, description, build=None, model=None):
        if (build is None) == (model is None):
            raise ValueError("ModelWorkload takes a build function or a model, not both")
        self.name = name
        self.description = description
        self._build = build
        self._model = model
        self._template = None
        self.own_precision = _precision_of_policy(_policy_name(model)) if model is not None else None

    def template(self):
        """A compiled model of the workload, used for its shapes and op list."""
        if self._template is None:
            self._template = self._model if self._model is not None else _on_device("cpu", self._build)
        return self._template

    def configs(self, device_kind, batch_sizes=None):
        sizes = batch_sizes or ([32, 128] if device_kind == "cuda" else [32])
        return [Config(int(b), f"batch {b}") for b in sizes]

    def descs(self, precision):
        dt = COMPUTE_DTYPE[precision]
        m = self.template()
        out = describe.model_descs(m)
        if self._model is not None and precision == self.own_precision:
            return out
        return [dict(d, dtype=dt) for d in out]

    def _opt_kind(self):
        return describe.optimizer_kind(self.template())

    def ops(self, config, precision, tf32=True):
        m = self.template()
        loss = getattr(m._loss_obj, "plan_kind", None) or "categorical_crossentropy"
        return describe.plan_ops(self.descs(precision), config.batch_size, loss, self._opt_kind(), tf32)

    def work_per_step(self, config, precision):
        return float(config.batch_size)

    def memory(self, config, precision, dataset_rows=0, backend="cuda"):
        return memory.plan_memory(self.descs(precision), config.batch_size, self._opt_kind(), dataset_rows,
                                  backend=backend)

    def max_batch(self, capacity_bytes, precision):
        return memory.max_batch(self.descs(precision), capacity_bytes, self._opt_kind())

    def prepare(self, device, config, precision):
        if self._model is not None:
            model = clone_model(self._model, device, None if precision == self.own_precision else precision)
        else:
            from ... import keras

            def build():
                before = keras.mixed_precision.global_policy().name
                keras.mixed_precision.set_global_policy(POLICY_OF[precision])
                try:
                    return self._build()
                finally:
                    keras.mixed_precision.set_global_policy(before)
            model = _on_device(device, build)
        return ModelRun(model, config.batch_size)


def seed_cnn_workload():
    from ... import keras
    from .seeds import build_seed_cnn
    return ModelWorkload("cnn", "the seeds' CNN (Conv 32-64-64, Dense 64-10, 93,322 parameters) on 28x28x1 "
                         "digits: one training step (Adam, categorical cross-entropy)",
                         build=lambda: build_seed_cnn(keras))


def seed_rnn_workload():
    from ... import keras
    from .seeds import build_seed_rnn
    return ModelWorkload("rnn", "the seeds' text-generation model (Embedding 10000x256, SimpleRNN 128, Dense "
                         "10000 softmax; 3,899,280 parameters) on sequences of 100 ids: one training step (Adam; "
                         "sparse labels, the same step as the seed's one-hot ones without a 10000-wide label "
                         "array per row)",
                         build=lambda: build_seed_rnn(keras, loss="sparse_categorical_crossentropy"))


def seed_lstm_workload():
    from ... import keras
    from .seeds import build_seed_lstm
    return ModelWorkload("lstm", "the seeds' sequence classifier (Embedding 10000x256, LSTM 128, Dense 10 "
                         "softmax; 2,758,410 parameters) on sequences of 100 ids: one training step (Adam, "
                         "categorical cross-entropy)", build=lambda: build_seed_lstm(keras))


def user_model_workload(model):
    """The workload of a user's compiled gpucmp.keras model."""
    from ...keras.models.model import Model
    if not isinstance(model, Model):
        raise TypeError(f"a model workload must be a gpucmp.keras Model, got {type(model).__name__}")
    if not model.built:
        raise ValueError(f"model '{model.name}' is not built: give its first layer an input_shape "
                         "or call it on data first")
    if not model.compiled:
        raise ValueError(f"model '{model.name}' must be compiled before it is benchmarked")
    return ModelWorkload(model.name, f"the user's model '{model.name}' ({model.count_params():,} parameters): "
                         "one training step", model=model)
