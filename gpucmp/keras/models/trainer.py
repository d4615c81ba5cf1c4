"""Trainer: compile / fit / evaluate / predict and the *_on_batch methods of Model.

compile() resolves the optimizer, loss and metrics and snapshots which layers are
trainable; the first fit/evaluate lowers the model to a ``gpucmp._core.Plan`` (cached
per batch size). fit() uploads the training set to the plan's device once and runs
several steps per call (``plan.train_steps``: batches gathered on the device by a
permutation, about 0.1 s of steps between progress-bar updates, one step per call when a
callback wants every batch); the returned sums (loss and metrics over the rows, computed
before each update) become Keras' running means. When the data set does not fit on the
device, or with shuffle='batch', each step is one ``plan.train_step`` call on batches
sliced into preallocated C-contiguous float32 buffers.

A model made or compiled in a gpucmp.distribute.MirroredStrategy scope fits data
parallel: one plan per replica (distribute/replicas.py), batches split over them and
their gradients averaged in the core every step; evaluate, predict and the *_on_batch
methods run on the model's own device.

x is carried as a list of float32 arrays, one per model input (data_adapter.split_inputs:
an array for a one-input model, a list/tuple of arrays in ``model.inputs`` order, or a
dict keyed by the Input names); the plan takes one array, or that list.

The single-batch calls (train_on_batch, test_on_batch, predict, predict_on_batch) keep
what their structural checks resolved per argument signature (call_cache.py): a repeated
call checks only the values (NaN/Inf, class ids) before the plan call.
"""
import time

import numpy as np

from .. import backend, losses as losses_mod, metrics as metrics_mod, optimizers
from .. import callbacks as callbacks_mod
from ... import distribute
from ...distribute.replicas import ReplicatedPlan
from ..layers import argument_checks as check
from ..layers.dropout import Dropout
from . import call_cache
from . import data_adapter as data
from . import lowering


def _check_masked_output(model, flat, cfg):
    """A model whose output carries a Keras mask (e.g. return_sequences after
    Embedding(mask_zero=True)) trains with Keras 3's masked loss: per batch, the sum of the
    unmasked steps' losses over their count (losses/loss.py apply_mask). What the plan
    cannot weight that way is refused here, before any step."""
    shape = flat.output_shape
    steps = int(np.prod(flat.shapes[flat.masks[flat.output]][1:]))
    rows = int(np.prod(shape[1:-1])) if len(shape) > 2 else 1
    if steps != rows:
        raise NotImplementedError(
            f"Model '{model.name}': its output {tuple(shape)} carries a mask of {steps} steps per "
            "sample, which does not match the output's steps; gpucmp weights the loss by a "
            "(batch, steps) mask of a (batch, steps, features) output only")
    if cfg.metrics:
        raise NotImplementedError(
            f"Model '{model.name}': metrics {[m.name for m in cfg.metrics]} on a masked output "
            "(Keras weights them by the mask over the whole epoch) are not supported by gpucmp "
            "yet; compile without metrics (the loss is masked as Keras does)")


class _TrainConfig:
    """What a training plan depends on besides max_batch: resolved metrics and label format."""

    def __init__(self, loss, metrics):
        self.loss = loss
        self.metrics = metrics                                    # resolved Metric objects
        self.plan_metrics = tuple(dict.fromkeys(m.plan_kind for m in metrics))
        self.log_names = sorted(["loss"] + [m.name for m in metrics])
        self.key = (loss.plan_kind, loss.from_logits, self.plan_metrics)

    def logs(self, loss_sum, metric_sums, seen):
        values = {"loss": loss_sum / seen}
        for m in self.metrics:
            values[m.name] = metric_sums[m.plan_kind] / seen
        return {k: float(values[k]) for k in self.log_names}


def _verbose(verbose):
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2) or isinstance(verbose, bool):
        raise ValueError(f"`verbose` must be 'auto', 0, 1 or 2, received verbose={verbose!r}")
    return int(verbose)


def _unsupported(**kwargs):
    check.unsupported("Model", **kwargs)


class Trainer:
    """Mixed into Model; relies on its ``_chain()``, ``_ensure_built()``, shapes and flags."""

    def _init_trainer(self):
        self.compiled = False
        self.optimizer = None
        self.loss = None
        self._loss_obj = None
        self._compiled_metrics = []
        self._snapshot = {}
        self._train_plans = lowering.PlanCache()
        self._infer_plans = lowering.PlanCache()
        self._lowered = {}          # per input shapes: (output shape, output dtype), with the plans
        self._calls = call_cache.CallCache()   # single-batch calls: per signature, with the plans
        self._batch_sums = None
        self.stop_training = False
        self.history = None
        # the tf.distribute-style strategy whose scope the model was made (or compiled) in
        self._distribute_strategy = distribute.get_strategy() if distribute.has_strategy() else None

    def _invalidate_plans(self):
        self._train_plans.clear()
        self._infer_plans.clear()
        self._lowered.clear()
        self._calls.clear()

    # ------------------------------------------------------------ compile
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None,
                weighted_metrics=None, run_eagerly=False, steps_per_execution=1,
                jit_compile="auto", auto_scale_loss=True, **kwargs):
        """Configures training.

        The trainable state of every layer is snapshotted HERE, as tf.keras 2 did: a
        layer frozen after this call (``discriminator.trainable = False``) still trains
        when this model trains, until compile() is called again. This is what the
        classic GAN recipe relies on: compile the discriminator, freeze it, compile the
        combined model -- the discriminator then trains through its own
        ``train_on_batch`` and stays frozen inside the combined model. (Keras 3 reads
        the flags at every step instead, which silently stops such a discriminator.)
        """
        if kwargs:
            raise ValueError(f"compile() got unrecognized arguments {sorted(kwargs)}")
        _unsupported(loss_weights=loss_weights, weighted_metrics=weighted_metrics)
        self._check_lowerable()
        opt = optimizers.get(optimizer)
        if auto_scale_loss and self.dtype_policy.name == "mixed_float16" \
                and not isinstance(opt, optimizers.LossScaleOptimizer):
            opt = optimizers.LossScaleOptimizer(opt)   # as Keras 3's compile() does
        if isinstance(loss, (list, dict)):
            raise NotImplementedError("several losses (multi-output models) are not supported")
        loss_obj = losses_mod.get(loss) if loss is not None else None
        if metrics is None:
            metric_list = []
        elif isinstance(metrics, dict):
            raise NotImplementedError("metrics per output (a dict) are not supported")
        elif isinstance(metrics, (list, tuple)):
            metric_list = [metrics_mod.get(m) for m in metrics]
        else:
            metric_list = [metrics_mod.get(metrics)]
        if distribute.has_strategy():
            self._distribute_strategy = distribute.get_strategy()
        self.optimizer = opt
        self.loss = loss
        self._loss_obj = loss_obj
        self._compiled_metrics = metric_list
        self._snapshot = {id(layer): (layer, eff)
                          for layer, eff in lowering.leaf_layers(self._chain(), self.trainable)}
        self._train_plans.clear()
        self._lowered.clear()
        self._calls.clear()
        self.compiled = True
        self.stop_training = False
        if self.built:        # optimizer state lives on the device from compile on
            opt.state_for(self._plan_trainable_variables())

    def _trainable_of(self, layer):
        entry = self._snapshot.get(id(layer))
        if entry is not None and entry[0] is layer:
            return entry[1]
        return dict((id(l), e) for l, e in lowering.leaf_layers(self._chain(), self.trainable)).get(
            id(layer), True)

    def _leaf_list(self):
        return [layer for layer, _ in lowering.leaf_layers(self._chain(), True)]

    def _plan_trainable_variables(self, input_shapes=None):
        return lowering.trainable_variables_in_plan_order(lowering.flatten(self, input_shapes),
                                                          self._trainable_of)

    def _assert_compiled(self, method):
        if not self.compiled:
            raise RuntimeError(f"You must call `compile()` before using the model "
                               f"(`{method}()` was called on '{self.name}').")
        if self._loss_obj is None:
            raise ValueError("No loss to compute. Provide a `loss` argument in `compile()`.")

    @property
    def metrics_names(self):
        return ["loss"] + [m.name for m in self._compiled_metrics]

    # ------------------------------------------------------------ plans
    def _train_config(self, y_shape, out_shape=None):
        out_shape = self.output_shape if out_shape is None else out_shape
        metrics = [metrics_mod.resolve_accuracy(m, y_shape, out_shape)
                   for m in self._compiled_metrics]
        loss = self._loss_obj
        for m in metrics:
            if (m.plan_kind == "acc_sparse") != (loss.label_kind == "sparse"):
                raise NotImplementedError(
                    f"metric '{m.name}' ({type(m).__name__}) cannot be computed with the labels "
                    f"of loss '{loss.name}' (labels of shape {tuple(y_shape)}): the plan takes one "
                    "label array; use 'accuracy' or a metric of the same label format")
        return _TrainConfig(loss, metrics)

    def _data_shapes(self, xs):
        """The batch input shapes of the data ``xs`` (None sizes of the model's inputs,
        e.g. a ResNet without a fixed image size, take the data's)."""
        return [(None,) + tuple(a.shape[1:]) for a in xs]

    def _train_plan(self, rows, cfg, xs):
        shapes = self._data_shapes(xs)

        def make(max_batch):
            nodes, train = self._train_plan_args(cfg, shapes)
            return lowering.make_plan(nodes, max_batch, train)
        return self._train_plans.get((cfg.key, tuple(shapes)), rows, make)

    def _train_plan_args(self, cfg, shapes):
        """(nodes, train) of the training plan for data of these batch shapes: the plan's
        node dicts (holding this model's weight buffers) and its training config (holding
        the optimizer's state buffers)."""
        flat = lowering.flatten(self, shapes)
        nodes, mask_node = lowering.describe(flat, self._trainable_of, loss_mask=True)
        if mask_node is not None:
            _check_masked_output(self, flat, cfg)
        nodes = lowering.as_plan_list(nodes)
        train = {
            "loss_mask": mask_node,
            "loss": cfg.loss.plan_kind, "from_logits": cfg.loss.from_logits,
            "metrics": list(cfg.plan_metrics), "optimizer": self.optimizer.kind,
            "opt_state": self.optimizer.state_for(
                lowering.trainable_variables_in_plan_order(flat, self._trainable_of)),
            "loss_scaling": self.optimizer.loss_scaling,
            "loss_scale_growth": getattr(self.optimizer, "dynamic_growth_steps", 2000),
        }
        return nodes, train

    def _infer_plan(self, rows, xs):
        shapes = self._data_shapes(xs)

        def make(max_batch):
            return lowering.make_plan(lowering.model_nodes(self, lambda layer: False, shapes),
                                      max_batch)
        return self._infer_plans.get(("infer", tuple(shapes)), rows, make)

    def _lowered_facts(self, shapes):
        """(output shape, output compute dtype) of the model lowered for these input shapes,
        kept while its plans are (single-batch calls would otherwise lower it per call)."""
        key = tuple(shapes) if shapes is not None else None
        facts = self._lowered.get(key)
        if facts is None:
            flat = lowering.flatten(self, shapes)
            facts = (flat.output_shape, flat.steps[-1].layer.compute_dtype if flat.steps else "float32")
            self._lowered[key] = facts
        return facts

    def _output_shape_for(self, xs):
        return self._lowered_facts(self._data_shapes(xs))[0]

    def _dropout_seeder(self):
        """A function of the step giving the dropout seed (0 when the model has no dropout)."""
        drops = [l for l in self._leaf_list() if (isinstance(l, Dropout) and l.rate > 0)
                 or getattr(l, "draws_dropout_mask", False)]
        if not drops:
            return lambda: 0
        seeded = next((d.seed for d in drops if d.seed is not None), None)
        if seeded is not None:
            opt = self.optimizer
            return lambda: (seeded * 0x9E3779B1 + opt.iterations) & (2 ** 63 - 1)
        return backend.next_seed

    # ------------------------------------------------------------ data
    def _input_names(self):
        graph = getattr(self, "_graph", None)
        return [t.name for t in graph.inputs] if graph is not None else [None]

    def _prepare_x(self, x, what="x"):
        """x -> a list of checked float32 arrays, one per model input, of one length."""
        if not self.built:
            arr = data.to_array(x, what)
            if arr.ndim < 2 and arr.size:
                arr = arr.reshape(-1, 1)
            if arr.ndim == 0 or arr.shape[0] == 0:
                raise ValueError(f"{what} is empty (shape {arr.shape}): nothing to compute on")
            self._ensure_built((None,) + arr.shape[1:])
            x = arr
        parts = data.split_inputs(x, self._input_names(), what)
        shapes = self._input_shapes
        if len(parts) == 1:
            xs = [data.prepare_x(parts[0], shapes[0], what)]
        else:
            xs = [data.prepare_x(p, s, f"{what}[{i}]") for i, (p, s) in enumerate(zip(parts, shapes))]
            for i in range(1, len(xs)):
                data.check_lengths(xs[0], xs[i], f"{what}[0]", f"{what}[{i}]")
        return xs

    def _prepare_xy(self, x, y, what_x="x", what_y="y"):
        if y is None:
            raise ValueError(f"Targets `{what_y}` are required: fit/evaluate on arrays needs "
                             "both x and y")
        xs = self._prepare_x(x, what_x)
        y_raw = data.to_array(y, what_y)
        data.check_lengths(xs[0], y_raw, what_x, what_y)
        out_shape = self._output_shape_for(xs)
        y_arr = data.prepare_y(y_raw, self._loss_obj, out_shape, what_y)
        cfg = self._train_config(y_raw.shape, out_shape)
        return xs, y_arr, cfg

    # ------------------------------------------------------------ fit
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
            sample_weight=None, initial_epoch=0, steps_per_epoch=None, validation_steps=None,
            validation_batch_size=None, validation_freq=1):
        """Trains for ``epochs`` epochs with Keras' semantics (see KERAS_SEMANTICS.md):
        steps = ceil(n / batch_size) with the last partial batch kept; validation_split
        takes the last fraction before shuffling; logged values are running means over
        the epoch; returns a History. Every argument and the whole data set are checked
        before the first step, so a raising fit leaves the weights untouched."""
        self._assert_compiled("fit")
        _unsupported(class_weight=class_weight, sample_weight=sample_weight,
                     steps_per_epoch=steps_per_epoch, validation_steps=validation_steps)
        batch_size = data.check_positive_int(batch_size, "batch_size", 32)
        epochs = data.check_positive_int(epochs, "epochs", allow_zero=True)
        initial_epoch = data.check_positive_int(initial_epoch, "initial_epoch", allow_zero=True)
        validation_freq = data.check_positive_int(validation_freq, "validation_freq")
        verbose_level = _verbose(verbose)
        if shuffle not in (True, False, "batch"):
            raise ValueError(f"`shuffle` must be True, False or 'batch', received {shuffle!r}")
        xs, y_arr, cfg = self._prepare_xy(x, y)
        val = None
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
                raise ValueError("`validation_data` must be a tuple (x_val, y_val) or "
                                 "(x_val, y_val, val_sample_weight)")
            if len(validation_data) == 3 and validation_data[2] is not None:
                raise NotImplementedError("validation sample weights are not supported yet")
            xv, yv, _ = self._prepare_xy(validation_data[0], validation_data[1],
                                         "validation_data x", "validation_data y")
            val = (xv, yv)
        elif validation_split:
            (xs, y_arr), val = data.split_validation(xs, y_arr, validation_split)
        val_batch = data.check_positive_int(validation_batch_size, "validation_batch_size",
                                            batch_size)

        n = len(y_arr)
        rows = min(batch_size, n)
        steps = -(-n // batch_size)
        replicas = self._fit_replicas(batch_size)
        if replicas:
            plan = ReplicatedPlan(*self._train_plan_args(cfg, self._data_shapes(xs)), replicas, rows,
                                  self._distribute_strategy.devices[0])
        else:
            plan = self._train_plan(rows, cfg, xs)
        if val is not None:
            self._train_plan(min(val_batch, len(val[1])), cfg, val[0])
        # the data set goes to the device once; batches are gathered there and several
        # steps run per call (DESIGN.md, "The execution plan"); a set too large for the
        # device is streamed through it in windows of whole batches; shuffle="batch"
        # (or a device too full for one batch) takes one call per step
        resident = _ResidentData.make(plan, xs, y_arr, batch_size) if shuffle != "batch" and not replicas else None
        try:
            return self._fit_loop(plan, resident, replicas, xs, y_arr, cfg, val, val_batch, batch_size, epochs,
                                  initial_epoch, validation_freq, shuffle, steps, n, rows, callbacks, verbose,
                                  verbose_level)
        finally:
            if replicas:
                plan.finish()

    def _fit_replicas(self, batch_size):
        """Replicas of a distributed fit (0: an ordinary fit). The global batch must split evenly."""
        strategy = getattr(self, "_distribute_strategy", None)
        n = strategy.num_replicas_in_sync if strategy is not None else 1
        if n <= 1:
            return 0
        if batch_size % n:
            raise ValueError(f"fit: batch_size {batch_size} is the global batch of {strategy!r}; it must be a "
                             f"multiple of its {n} replicas")
        return n

    def _fit_loop(self, plan, resident, replicas, xs, y_arr, cfg, val, val_batch, batch_size, epochs,
                  initial_epoch, validation_freq, shuffle, steps, n, rows, callbacks, verbose, verbose_level):
        opt = self.optimizer
        seed = self._dropout_seeder()
        rng = backend.rng()
        hp = opt.hparams()
        xbufs = [np.empty((rows,) + a.shape[1:], np.float32) for a in xs] if shuffle is True else None
        ybuf = np.empty((rows,) + y_arr.shape[1:], y_arr.dtype) if shuffle is True else None

        params = {"verbose": verbose, "epochs": epochs, "steps": steps}
        cbs, history = callbacks_mod.configure(callbacks, self, verbose_level, params)
        wants_batches = cbs.wants_batches
        chunks = _ChunkSizer(steps, every_step=cbs.wants_every_batch)
        self.stop_training = False
        self.history = history
        cbs.on_train_begin()
        epoch_logs = {}
        for epoch in range(initial_epoch, epochs):
            cbs.on_epoch_begin(epoch)
            order = rng.permutation(n) if shuffle is True else None
            batches = rng.permutation(steps) if shuffle == "batch" else range(steps)
            loss_sum, sums, seen = 0.0, dict.fromkeys(cfg.plan_metrics, 0.0), 0
            step = 0
            while step < steps:
                if resident:
                    k = resident.clip(step, chunks.next(step))
                    lo, hi = step * batch_size, min((step + k) * batch_size, n)
                    idx = resident.indices(order, lo, hi)
                    if wants_batches:
                        cbs.on_train_batch_begin(step)
                    t0 = time.perf_counter()
                    stats = _train_steps(plan, idx, rows, k, opt, hp, seed)
                    chunks.record(k, time.perf_counter() - t0)
                else:
                    k = 1
                    if wants_batches:
                        cbs.on_train_batch_begin(step)
                    lo = batches[step] * batch_size
                    hi = min(lo + batch_size, n)
                    if order is not None:
                        idx = order[lo:hi]
                        xb = [np.take(a, idx, axis=0, out=buf[:hi - lo]) for a, buf in zip(xs, xbufs)]
                        yb = np.take(y_arr, idx, axis=0, out=ybuf[:hi - lo])
                    else:
                        xb, yb = [a[lo:hi] for a in xs], y_arr[lo:hi]
                    hp["t"] = opt.iterations + 1
                    hp["lr"] = opt.current_learning_rate()
                    stats = _applied(opt, plan.train_step(lowering.plan_x(xb), yb, _scaled(opt, hp),
                                                          seed()))
                opt.built = True
                seen += hi - lo
                step += k
                loss_sum += stats["loss"]
                for key in sums:
                    sums[key] += stats[key]
                if wants_batches:
                    cbs.on_train_batch_end(step - 1, cfg.logs(loss_sum, sums, seen))
                if self.stop_training:
                    break
            epoch_logs = cfg.logs(loss_sum, sums, seen) if seen else {}
            if val is not None and (epoch + 1) % validation_freq == 0:
                val_logs = self._evaluate_arrays(val[0], val[1], cfg, val_batch)
                epoch_logs.update({"val_" + k: v for k, v in val_logs.items()})
            epoch_logs = dict(sorted(epoch_logs.items()))
            cbs.on_epoch_end(epoch, epoch_logs)
            if self.stop_training:
                break
        if resident:
            resident.release()  # give the device memory back
        if replicas:
            plan.check_in_sync()
        cbs.on_train_end(epoch_logs)
        return history

    # ------------------------------------------------------------ evaluate
    def _evaluate_arrays(self, xs, y_arr, cfg, batch_size, cbs=None):
        n = len(y_arr)
        plan = self._train_plan(min(batch_size, n), cfg, xs)
        loss_sum, sums, seen = 0.0, dict.fromkeys(cfg.plan_metrics, 0.0), 0
        for step, lo in enumerate(range(0, n, batch_size)):
            hi = min(lo + batch_size, n)
            if cbs is not None:
                cbs.on_test_batch_begin(step)
            stats = plan.eval_step(lowering.plan_x([a[lo:hi] for a in xs]), y_arr[lo:hi])
            seen += hi - lo
            loss_sum += stats["loss"]
            for k in sums:
                sums[k] += stats[k]
            if cbs is not None:
                cbs.on_test_batch_end(step, cfg.logs(loss_sum, sums, seen))
        return cfg.logs(loss_sum, sums, seen)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 steps=None, callbacks=None, return_dict=False):
        """Loss (and metrics) over the data: ``loss`` or ``[loss, *metrics]`` in compile order."""
        self._assert_compiled("evaluate")
        _unsupported(sample_weight=sample_weight, steps=steps)
        batch_size = data.check_positive_int(batch_size, "batch_size", 32)
        verbose_level = _verbose(verbose)
        xs, y_arr, cfg = self._prepare_xy(x, y)
        n_steps = -(-len(y_arr) // batch_size)
        cbs, _ = callbacks_mod.configure(callbacks, self, verbose_level,
                                         {"verbose": verbose, "epochs": 1, "steps": n_steps},
                                         history=False)
        cbs.on_test_begin()
        logs = self._evaluate_arrays(xs, y_arr, cfg, batch_size,
                                     cbs if cbs.wants_batches else None)
        cbs.on_test_end(logs)
        return self._format_results(logs, cfg, return_dict)

    def _format_results(self, logs, cfg, return_dict):
        if return_dict:
            return dict(logs)
        if not cfg.metrics:
            return logs["loss"]
        return [logs["loss"]] + [logs[m.name] for m in cfg.metrics]

    # ------------------------------------------------------------ predict
    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Model outputs as a NumPy array (dropout off), batch by batch, in the last layer's
        compute dtype as Keras returns them: float32, or float16 / bfloat16 under a mixed
        policy."""
        if steps is not None:
            _unsupported(steps=steps)
        batch_size = data.check_positive_int(batch_size, "batch_size", 32)
        verbose_level = _verbose(verbose)
        entry, xs, cached = self._predict_args("predict", x, batch_size)
        plan = entry.plan
        n = len(xs[0])
        if n <= batch_size and callbacks is None and not verbose_level:
            # one batch, nothing watching: the plan's output array is the result (Plan.predict
            # allocates it per call, so it is the caller's own)
            def one():
                return plan.predict(lowering.plan_x(xs))
            return self._in_output_dtype(entry.run(one, x) if cached else one())
        if cached and not all(data.all_finite(a) for a in xs):
            entry.inputs(x)               # the full check's message naming the element
        n_steps = -(-n // batch_size)
        out = None if n_steps == 1 else np.empty((n,) + tuple(entry.out_shape[1:]), np.float32)
        cbs, _ = callbacks_mod.configure(callbacks, self, verbose_level,
                                         {"verbose": verbose, "epochs": 1, "steps": n_steps},
                                         history=False)
        cbs.on_predict_begin()
        for step, lo in enumerate(range(0, n, batch_size)):
            hi = min(lo + batch_size, n)
            part = plan.predict(lowering.plan_x([a[lo:hi] for a in xs]))
            if out is None:
                out = part
            else:
                out[lo:hi] = part
            if cbs.wants_batches:
                cbs.on_predict_batch_end(step, {"outputs": out[lo:hi]})
        cbs.on_predict_end()
        return self._in_output_dtype(out)

    def _predict_args(self, kind, x, batch_size=None):
        """(entry, xs, cached) of a predict / predict_on_batch call: its signature's cached
        entry and the inputs (cached: NaN / Inf left to the plan, as _batch_args), or the
        full checks (stored for the next call)."""
        sig = call_cache.signature(x)
        key = (kind, sig, batch_size) if sig is not None else None
        entry = self._calls.get(key)
        if entry is not None:
            return entry, entry.inputs(x, check=False), True
        xs = self._prepare_x(x)
        rows = len(xs[0]) if batch_size is None else min(batch_size, len(xs[0]))
        entry = call_cache.Entry(self._infer_plan(rows, xs), None, out_shape=self._output_shape_for(xs))
        if key is not None:
            entry.parts = call_cache.input_parts(x, xs, len(self._input_names()))
            if entry.parts is not None:
                self._calls.put(key, entry)
        return entry, xs, False

    def _in_output_dtype(self, out):
        """float32 results in the dtype Keras gives the model's output (exact: the plan
        computed them in that dtype)."""
        dt = self._lowered_facts(None)[1]
        if dt == "float16":
            return out.astype(np.float16)
        if dt == "bfloat16":
            try:
                import ml_dtypes
            except ImportError:
                return out
            return out.astype(ml_dtypes.bfloat16)
        return out

    # ------------------------------------------------------------ single batches
    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None,
                       reset_metrics=True, return_dict=False):
        """One training step on the whole batch. Returns that batch's loss (and metrics),
        computed before the update, as tf.keras 2 did with ``reset_metrics=True``;
        ``reset_metrics=False`` accumulates over calls until ``reset_metrics()``."""
        self._assert_compiled("train_on_batch")
        if sample_weight is not None or class_weight is not None:
            _unsupported(sample_weight=sample_weight, class_weight=class_weight)
        entry, xs, y_arr, cached = self._batch_args("train", x, y)
        opt = self.optimizer

        def step():
            return entry.plan.train_step(lowering.plan_x(xs), y_arr, opt.hparams(), entry.seeder())
        stats = _applied(opt, entry.run(step, x, y) if cached else step())
        opt.built = True
        return self._batch_result(stats, len(y_arr), entry.cfg, reset_metrics, return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, reset_metrics=True, return_dict=False):
        """Loss (and metrics) of one batch, no update."""
        self._assert_compiled("test_on_batch")
        if sample_weight is not None:
            _unsupported(sample_weight=sample_weight)
        entry, xs, y_arr, cached = self._batch_args("test", x, y)

        def step():
            return entry.plan.eval_step(lowering.plan_x(xs), y_arr)
        stats = entry.run(step, x, y) if cached else step()
        return self._batch_result(stats, len(y_arr), entry.cfg, reset_metrics, return_dict)

    def _batch_args(self, kind, x, y):
        """(entry, xs, y, cached) of a train_on_batch / test_on_batch call: its signature's
        cached entry and the arrays (cached: their NaN / Inf check left to the plan, so the
        call goes through entry.run), or the full checks (stored for the next call)."""
        key = None
        if type(y) is np.ndarray:
            sig = call_cache.signature(x)
            if sig is not None:
                key = (kind, sig, (y.shape, y.dtype))
        entry = self._calls.get(key)
        if entry is not None:
            return entry, entry.inputs(x, check=False), entry.labels(y, check=False), True
        xs, y_arr, cfg = self._prepare_xy(x, y)
        out_shape = self._output_shape_for(xs)
        entry = call_cache.Entry(self._train_plan(len(y_arr), cfg, xs), None, cfg, out_shape,
                                 sparse=self._loss_obj.label_kind == "sparse", loss=self._loss_obj,
                                 seeder=self._dropout_seeder())
        if key is not None:
            entry.y_shape = call_cache.label_shape(y, y_arr)
            entry.parts = call_cache.input_parts(x, xs, len(self._input_names()))
            if entry.parts is not None:
                self._calls.put(key, entry)
        return entry, xs, y_arr, False

    def _batch_result(self, stats, rows, cfg, reset, return_dict):
        if reset or self._batch_sums is None or self._batch_sums[0] is not cfg.key:
            self._batch_sums = [cfg.key, 0.0, dict.fromkeys(cfg.plan_metrics, 0.0), 0]
        acc = self._batch_sums
        acc[1] += stats["loss"]
        for k in acc[2]:
            acc[2][k] += stats[k]
        acc[3] += rows
        return self._format_results(cfg.logs(acc[1], acc[2], acc[3]), cfg, return_dict)

    def reset_states(self):
        """Zeroes the carried states of every stateful layer (Keras' ``reset_states``)."""
        for layer in self._leaf_list():
            if getattr(layer, "stateful", False):
                layer.reset_states()

    def reset_metrics(self):
        self._batch_sums = None

    def predict_on_batch(self, x):
        """The outputs of one batch: the plan's own output array (allocated per call)."""
        entry, xs, cached = self._predict_args("predict_on_batch", x)

        def one():
            return entry.plan.predict(lowering.plan_x(xs))
        return self._in_output_dtype(entry.run(one, x) if cached else one())


# Rows of the training set resident on the device at once; None: as many as fit. A
# smaller value streams the set through the device in windows (tests and tuning).
MAX_RESIDENT_ROWS = None


class _ResidentData:
    """The training set on the plan's device, whole when it fits, else a window of whole
    batches at a time: the rows [w0, w0 + window) of the epoch's order are gathered on
    the host and uploaded in one transfer (pinned, chunked and overlapped by the CUDA
    backend), and the steps over them run from device memory as for a resident set. The
    batches and their order are the same either way, so the results are too."""

    def __init__(self, plan, xs, y, batch, window):
        self.plan, self.xs, self.y, self.n, self.batch = plan, xs, y, len(y), batch
        self.window = window       # rows on the device at once: n, or a multiple of batch
        # what make() left on the device: rows [0, window) in their natural order (an
        # unshuffled first epoch uses it as its first window instead of uploading it again)
        self.w0 = 0                # epoch row where the loaded window starts
        self.order = None          # the epoch order the loaded window was gathered with

    @classmethod
    def make(cls, plan, xs, y, batch):
        """None when not even one batch fits (fit then feeds one batch per call). ``xs``:
        one array per model input."""
        n = len(y)
        window = n if MAX_RESIDENT_ROWS is None else max(batch, MAX_RESIDENT_ROWS // batch * batch)
        while True:
            window = min(window, n)
            try:
                # the whole set, or a probe of the size
                plan.set_data(lowering.plan_x([a[:window] for a in xs]), y[:window])
                break
            except MemoryError:
                if window <= batch:
                    return None
                window = max(batch, (window // 2) // batch * batch)
        return cls(plan, xs, y, batch, window)

    def clip(self, step, k):
        """At most k steps from `step`, none past the end of the window holding it."""
        if self.window >= self.n:
            return k
        per = self.window // self.batch
        return min(k, per - step % per)

    def indices(self, order, lo, hi):
        """Device-side row indices of epoch rows [lo, hi), loading their window first."""
        if self.window >= self.n:
            return order[lo:hi] if order is not None else np.arange(lo, hi)
        w0 = lo // self.window * self.window
        if w0 != self.w0 or order is not self.order:
            w1 = min(w0 + self.window, self.n)
            rows = order[w0:w1] if order is not None else np.arange(w0, w1)
            self.plan.set_data(lowering.plan_x([np.take(a, rows, axis=0) for a in self.xs]),
                               np.take(self.y, rows, axis=0))
            self.w0, self.order = w0, order
        return np.arange(lo - w0, hi - w0)

    def release(self):
        self.plan.set_data(None, None)


def _train_steps(plan, idx, batch, k, opt, hp, seed):
    """k steps in one call over the resident data; each step's learning rate and dropout
    seed are what the one-step path would have used at that iteration."""
    it0 = opt.iterations
    lrs = np.empty(k, np.float32)
    seeds = np.empty(k, np.uint64)
    try:
        for j in range(k):
            opt.iterations = it0 + j
            lrs[j] = opt.current_learning_rate()
            seeds[j] = seed()
    finally:
        opt.iterations = it0
    hp["t"] = it0 + 1
    hp["lr"] = float(lrs[0])
    return _applied(opt, plan.train_steps(idx, batch, _scaled(opt, hp), lrs, seeds))


def _scaled(opt, hp):
    """hp with the loss scale state of a LossScaleOptimizer (as it is now)."""
    if opt.loss_scaling:
        hp.update(opt.scale_hparams())
    return hp


def _applied(opt, stats):
    """Counts the steps the optimizer applied (a loss-scaled step with a non-finite
    gradient is skipped: Keras does not count it) and keeps the new loss scale."""
    opt.iterations += int(stats["steps_applied"])
    if opt.loss_scaling:
        opt.record_scale(stats)
    return stats


class _ChunkSizer:
    """How many steps one call into the plan runs: about 0.1 s of work (so the progress
    bar still moves) when only the progress bar and History watch the batches; one step
    when a callback wants to see every batch."""

    def __init__(self, steps, every_step):
        self.steps, self.every_step, self.per_step = steps, every_step, None

    def next(self, step):
        if self.every_step or self.per_step is None:
            return 1
        return max(1, min(self.steps - step, int(0.1 / max(self.per_step, 1e-7))))

    def record(self, k, seconds):
        self.per_step = seconds / k
