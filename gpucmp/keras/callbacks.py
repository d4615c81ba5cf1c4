"""Callbacks with Keras' hooks and semantics: History, ProgbarLogger, EarlyStopping,
ModelCheckpoint, LambdaCallback, TerminateOnNaN, LearningRateScheduler, ReduceLROnPlateau.

fit() calls the hooks through ``CallbackList``, which skips the per-batch hooks when no
callback overrides them, so a plain fit pays nothing per step for callbacks.
``model.stop_training = True`` (set by a callback) ends training after the current batch.
"""
import math
import os
import warnings

from .utils.progbar import Progbar

_BATCH_HOOKS = ("on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end",
                "on_test_batch_begin", "on_test_batch_end", "on_predict_batch_begin",
                "on_predict_batch_end")


class Callback:
    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None): pass
    def on_train_end(self, logs=None): pass
    def on_epoch_begin(self, epoch, logs=None): pass
    def on_epoch_end(self, epoch, logs=None): pass
    def on_test_begin(self, logs=None): pass
    def on_test_end(self, logs=None): pass
    def on_predict_begin(self, logs=None): pass
    def on_predict_end(self, logs=None): pass

    # batch hooks; on_batch_* are the tf.keras 1 names of on_train_batch_*
    def on_batch_begin(self, batch, logs=None): pass
    def on_batch_end(self, batch, logs=None): pass

    def on_train_batch_begin(self, batch, logs=None):
        self.on_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs=logs)

    def on_test_batch_begin(self, batch, logs=None): pass
    def on_test_batch_end(self, batch, logs=None): pass
    def on_predict_batch_begin(self, batch, logs=None): pass
    def on_predict_batch_end(self, batch, logs=None): pass


def _overrides_batch_hooks(cb):
    """True when ``cb`` implements a batch hook (a method override or, for
    LambdaCallback, a plain function set on the instance)."""
    return any(getattr(getattr(cb, h), "__func__", None) is not getattr(Callback, h)
               for h in _BATCH_HOOKS)


class CallbackList:
    """Dispatches each hook to every callback, in order."""

    def __init__(self, callbacks, model, params):
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            cb.set_model(model)
            cb.set_params(params)
        self.wants_batches = any(_overrides_batch_hooks(cb) for cb in self.callbacks)
        # the progress bar and History are content with an update every few steps
        self.wants_every_batch = any(_overrides_batch_hooks(cb) for cb in self.callbacks
                                     if not isinstance(cb, (ProgbarLogger, History)))

    def __getattr__(self, hook):
        if not hook.startswith("on_"):
            raise AttributeError(hook)
        callbacks = self.callbacks

        def call(*args, **kwargs):
            for cb in callbacks:
                getattr(cb, hook)(*args, **kwargs)
        return call


def configure(callbacks, model, verbose, params, history=True):
    """The CallbackList of a fit/evaluate/predict call: the user's callbacks plus a
    ProgbarLogger (when verbose) and History (fit), as Keras adds them."""
    if callbacks is None:
        callbacks = []
    elif isinstance(callbacks, Callback):
        callbacks = [callbacks]
    else:
        callbacks = list(callbacks)
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks must be Callback instances, got {cb!r}")
    if verbose and not any(isinstance(cb, ProgbarLogger) for cb in callbacks):
        callbacks.insert(0, ProgbarLogger())
    hist = None
    if history:
        hist = next((cb for cb in callbacks if isinstance(cb, History)), None)
        if hist is None:
            hist = History()
            callbacks.append(hist)
    return CallbackList(callbacks, model, params), hist


class History(Callback):
    """Records the epoch logs: ``history`` (key -> list per epoch), ``epoch``, ``params``."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_train_begin(self, logs=None):
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)
        self.model.history = self


class ProgbarLogger(Callback):
    """Prints Keras 3's progress bar (see utils/progbar.py); 'Epoch i/n' when epochs > 1."""

    def __init__(self):
        super().__init__()
        self.progbar = None
        self.verbose = 1
        self.epochs = 1
        self.target = None
        self._in_fit = False

    def set_params(self, params):
        verbose = params.get("verbose", 1)
        self.verbose = 1 if verbose == "auto" else verbose
        self.epochs = params.get("epochs", 1)
        self.target = params.get("steps")

    def _new_bar(self):
        self.progbar = Progbar(self.target, verbose=self.verbose, all_stateful=True)

    def on_train_begin(self, logs=None):
        self._in_fit = True

    def on_train_end(self, logs=None):
        self._in_fit = False

    def on_epoch_begin(self, epoch, logs=None):
        self._new_bar()
        if self.verbose and self.epochs > 1:
            print(f"Epoch {epoch + 1}/{self.epochs}", flush=True)

    def on_train_batch_end(self, batch, logs=None):
        if self.verbose == 1:
            self.progbar.update(batch + 1, list((logs or {}).items()), finalize=False)

    def on_epoch_end(self, epoch, logs=None):
        self.progbar.update(self.target, list((logs or {}).items()), finalize=True)

    def on_test_begin(self, logs=None):
        if not self._in_fit:
            self._new_bar()

    def on_test_batch_end(self, batch, logs=None):
        if not self._in_fit and self.verbose == 1:
            self.progbar.update(batch + 1, list((logs or {}).items()), finalize=False)

    def on_test_end(self, logs=None):
        if not self._in_fit:
            self.progbar.update(self.target, list((logs or {}).items()), finalize=True)

    def on_predict_begin(self, logs=None):
        self._new_bar()

    def on_predict_batch_end(self, batch, logs=None):
        if self.verbose == 1:
            self.progbar.update(batch + 1, None, finalize=False)

    def on_predict_end(self, logs=None):
        self.progbar.update(self.target, None, finalize=True)


class MonitorCallback(Callback):
    """Shared 'is this an improvement of `monitor`' logic (Keras' MonitorCallback)."""

    def __init__(self, monitor="val_loss", mode="auto", baseline=None, min_delta=0):
        super().__init__()
        if mode not in ("auto", "min", "max"):
            warnings.warn(f"{type(self).__name__} mode '{mode}' is unknown, fallback to auto mode.",
                          stacklevel=3)
            mode = "auto"
        self.monitor = monitor
        self.mode = mode
        self.best = baseline
        self.min_delta = abs(min_delta)
        self.monitor_op = None

    def _set_monitor_op(self):
        if self.mode == "min":
            self.monitor_op = _less
        elif self.mode == "max":
            self.monitor_op = _greater
        else:
            name = self.monitor[4:] if self.monitor.startswith("val_") else self.monitor
            if name == "loss":
                self.monitor_op = _less
            for metric in getattr(self.model, "_compiled_metrics", None) or ():
                if metric.name == name:
                    self.monitor_op = _greater if "acc" in type(metric).__name__.lower() \
                        or type(metric).__name__ == "Accuracy" else _less
            if self.monitor_op is None:
                raise ValueError(
                    f"{type(self).__name__} callback received monitor={self.monitor}, but it "
                    "isn't able to automatically determine whether that metric should be "
                    "maximized or minimized. Pass `mode='max'` in order to monitor based on the "
                    "highest metric value, or pass `mode='min'` in order to use the lowest value.")
        if self.monitor_op is _less:
            self.min_delta *= -1

    def _is_improvement(self, value, reference):
        if reference is None:
            return True
        return self.monitor_op(value - self.min_delta, reference)


def _less(a, b):
    return a < b


def _greater(a, b):
    return a > b


class EarlyStopping(MonitorCallback):
    """Stops training when ``monitor`` stops improving (Keras 3 semantics, incl.
    restore_best_weights, baseline and start_from_epoch)."""

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto",
                 baseline=None, restore_best_weights=False, start_from_epoch=0):
        super().__init__(monitor, mode, min_delta=min_delta)
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.start_from_epoch = start_from_epoch
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights = None
        self.best_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = None
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()
        current = (logs or {}).get(self.monitor)
        if current is None:
            warnings.warn(f"Early stopping conditioned on metric `{self.monitor}` which is not "
                          f"available. Available metrics are: {','.join(logs or {})}", stacklevel=2)
            return
        if epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
            self.best_epoch = epoch
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                print("Restoring model weights from the end of the best epoch: "
                      f"{self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)


class ModelCheckpoint(MonitorCallback):
    """Saves the model (or its weights) after each epoch, or every ``save_freq`` batches.

    ``filepath`` may hold ``{epoch:02d}`` and any log key (``{val_loss:.2f}``). Files are
    written atomically (temporary file + os.replace), so an interrupted save never
    leaves a truncated checkpoint. Formats: ``save_weights_only=True`` writes gpucmp's
    weights file (a zip holding an .npz; Keras writes HDF5 ``.weights.h5`` -- the
    ``.weights.h5`` suffix is accepted and recommended for familiarity, the content is
    gpucmp's format); otherwise the whole model (``model.save``: config + weights).
    """

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False,
                 save_weights_only=False, mode="auto", save_freq="epoch",
                 initial_value_threshold=None):
        super().__init__(monitor, mode, initial_value_threshold)
        self.filepath = os.fspath(filepath)
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int)
                                     or save_freq <= 0):
            raise ValueError(f"Unrecognized save_freq: {save_freq}. Expected save_freq are "
                             "'epoch' or positive integer values")
        self.save_freq = save_freq
        self._batches_since_save = 0
        self._current_epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        self._batches_since_save += 1
        if self._batches_since_save >= self.save_freq:
            self._batches_since_save = 0
            self._save(self._current_epoch, batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()
        if self.save_freq == "epoch":
            self._save(epoch, None, logs)

    def _file_path(self, epoch, batch, logs):
        fields = dict(logs or {})
        fields["epoch"] = epoch + 1
        if batch is not None:
            fields.setdefault("batch", batch + 1)
        try:
            return self.filepath.format(**fields)
        except KeyError as exc:
            raise KeyError(f'Failed to format this callback filepath: "{self.filepath}". '
                           f"Reason: {exc}") from None

    def _save(self, epoch, batch, logs):
        if self.monitor_op is None:
            self._set_monitor_op()
        path = self._file_path(epoch, batch, logs)
        if self.save_best_only:
            current = (logs or {}).get(self.monitor)
            if current is None:
                warnings.warn(f"Can save best model only with {self.monitor} available.",
                              stacklevel=2)
            else:
                best = "None" if self.best is None else f"{self.best:.5f}"
                if not self._is_improvement(current, self.best):
                    if self.verbose > 0:
                        print(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {best}")
                    return
                if self.verbose > 0:
                    print(f"\nEpoch {epoch + 1}: {self.monitor} improved from {best} to "
                          f"{current:.5f}, saving model to {path}")
                self.best = current
        elif self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: saving model to {path}")
        if os.path.isdir(path):
            raise IOError("Please specify a non-directory filepath for ModelCheckpoint. "
                          f"Filepath used is an existing directory: {path}")
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if self.save_weights_only:
            self.model.save_weights(path, overwrite=True)
        else:
            self.model.save(path, overwrite=True)


class LambdaCallback(Callback):
    """A callback from plain functions: on_epoch_begin(epoch, logs), on_batch_end(batch, logs) ..."""

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, on_train_batch_begin=None, on_train_batch_end=None,
                 on_batch_begin=None, on_batch_end=None, **kwargs):
        super().__init__()
        self.__dict__.update(kwargs)
        for name, fn in (("on_epoch_begin", on_epoch_begin), ("on_epoch_end", on_epoch_end),
                         ("on_train_begin", on_train_begin), ("on_train_end", on_train_end),
                         ("on_train_batch_begin", on_train_batch_begin or on_batch_begin),
                         ("on_train_batch_end", on_train_batch_end or on_batch_end)):
            if fn is not None:
                setattr(self, name, fn)


class TerminateOnNaN(Callback):
    """Stops training when the loss becomes NaN or Inf."""

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            print(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True


class LearningRateScheduler(Callback):
    """Sets the optimizer's learning rate at each epoch from ``schedule(epoch, lr)``."""

    def __init__(self, schedule, verbose=0):
        super().__init__()
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch, logs=None):
        lr = float(self.model.optimizer.learning_rate)
        try:
            lr = self.schedule(epoch, lr)
        except TypeError:
            lr = self.schedule(epoch)
        self.model.optimizer.learning_rate = float(lr)
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {lr}.")

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(self.model.optimizer.learning_rate)


class ReduceLROnPlateau(MonitorCallback):
    """Multiplies the learning rate by ``factor`` after ``patience`` epochs without improvement."""

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto",
                 min_delta=1e-4, cooldown=0, min_lr=0.0, **kwargs):
        super().__init__(monitor, mode, min_delta=min_delta)
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau does not support a factor >= 1.0. "
                             f"Received factor={factor}")
        self.factor, self.patience, self.verbose = factor, patience, verbose
        self.cooldown, self.min_lr = cooldown, min_lr
        self.wait = 0
        self.cooldown_counter = 0

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.cooldown_counter = 0
        self.best = None

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()
        logs = logs if logs is not None else {}
        logs["learning_rate"] = float(self.model.optimizer.learning_rate)
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Learning rate reduction is conditioned on metric `{self.monitor}` "
                          f"which is not available. Available metrics are: {','.join(logs)}.",
                          stacklevel=2)
            return
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        if self._is_improvement(current, self.best):
            self.best = current
            self.wait = 0
        elif self.cooldown_counter <= 0:
            self.wait += 1
            if self.wait >= self.patience:
                old = float(self.model.optimizer.learning_rate)
                if old > self.min_lr:
                    new = max(old * self.factor, self.min_lr)
                    self.model.optimizer.learning_rate = new
                    if self.verbose > 0:
                        print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate to {new}.")
                    self.cooldown_counter = self.cooldown
                    self.wait = 0
