"""gpucmp.keras models: training numerics against a float64 NumPy hand computation,
fit/evaluate/predict semantics, callbacks, saving, the GAN trainable pattern, and the
handling of bad input (clear exceptions, model left intact).
"""
import os
import zipfile

import numpy as np
import pytest

import reference as ref
from keras_reference import rel_err
from gpucmp import keras
from gpucmp.keras import backend, callbacks, layers, optimizers
from gpucmp.keras.models import Model, Sequential, load_model


@pytest.fixture(autouse=True)
def _fresh():
    backend.clear_session()
    keras.utils.set_random_seed(1234)



# ------------------------------------------------------------------ the float64 hand computation
def ref_step(specs, weights, x, y, loss):
    """Forward, loss (mean over the batch) and gradients in float64 with tests/reference.py.

    specs: per layer ('dense', act) | ('conv', act, strides, padding) | ('maxpool', pool) |
    ('flatten',); weights: the model's get_weights(). Returns (loss, grads in weight order)."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    ws = list(weights)
    acts, zs, params = [x], [], []
    for spec in specs:
        h = acts[-1]
        if spec[0] == "dense":
            k, b = ws.pop(0), ws.pop(0)
            z = h @ k + b
            params.append((k, b))
        elif spec[0] == "conv":
            k, b = ws.pop(0), ws.pop(0)
            z = ref.conv2d(h, k, b, strides=spec[2], padding=spec[3])
            params.append((k, b))
        elif spec[0] == "maxpool":
            z = ref.max_pool2d(h, spec[1])
            params.append(None)
        else:
            z = h.reshape(n, -1)
            params.append(None)
        zs.append(z)
        acts.append(ref.activation(z, spec[1]) if spec[0] in ("dense", "conv") else z)
    out, last_act = acts[-1], specs[-1][1]
    if loss == "categorical_crossentropy" and last_act == "softmax":
        per, dz = ref.softmax_cross_entropy(zs[-1], y)
    elif loss == "sparse_categorical_crossentropy":
        per, dz = ref.softmax_cross_entropy(zs[-1], np.asarray(y).astype(np.int64))
    elif loss == "binary_crossentropy" and last_act == "sigmoid":
        per, dz = ref.sigmoid_binary_cross_entropy(zs[-1], np.asarray(y, np.float64).reshape(out.shape))
    elif loss == "categorical_crossentropy":
        per, dout = ref.cross_entropy_from_probs(out, y)
        dz = ref.activation_backward(out, dout, last_act)
    else:
        per, dout = ref.regression_loss(out, np.asarray(y, np.float64).reshape(out.shape), loss)
        dz = ref.activation_backward(out, dout, last_act)
    dz = dz / n
    grads = []
    for i in range(len(specs) - 1, -1, -1):
        spec, h = specs[i], acts[i]
        if i != len(specs) - 1 and spec[0] in ("dense", "conv"):
            dz = ref.activation_backward(acts[i + 1], dz, spec[1])
        if spec[0] == "dense":
            k, _ = params[i]
            grads[:0] = [h.T @ dz, dz.sum(0)]
            dz = dz @ k.T
        elif spec[0] == "conv":
            k, _ = params[i]
            dk, db = ref.conv2d_backward_filter(h, dz, k.shape[:2], spec[2], spec[3])
            grads[:0] = [dk, db]
            dz = ref.conv2d_backward_data(dz, k, h.shape, spec[2], spec[3])
        elif spec[0] == "maxpool":
            dz = ref.max_pool2d_backward(h, dz, spec[1])
        else:
            dz = dz.reshape(h.shape)
    return float(per.mean()), grads


def ref_update(opt_name, config, weights, grads, state, t):
    """Keras update of every weight; ``state`` is a list (per weight) of slot arrays."""
    config = {("lr" if k == "learning_rate" else k): v for k, v in config.items()}
    out_w, out_s = [], []
    for w, g, s in zip(weights, grads, state):
        if opt_name == "adam":
            w, m, v = ref.adam_update(w, g, s[0], s[1], t=t, **config)
            out_w.append(w), out_s.append([m, v])
        elif opt_name == "sgd":
            w, m = ref.sgd_update(w, g, s[0] if s else None, **config)
            out_w.append(w), out_s.append([m] if m is not None else [])
        else:
            w, v = ref.rmsprop_update(w, g, s[0], **config)
            out_w.append(w), out_s.append([v])
    return out_w, out_s


def initial_state(opt_name, config, weights):
    k = {"adam": 2, "rmsprop": 1, "sgd": 1 if config.get("momentum") else 0}[opt_name]
    return [[np.zeros_like(w, dtype=np.float64) for _ in range(k)] for w in weights]


OPTIMIZERS = [
    ("adam", optimizers.Adam, {"learning_rate": 0.01}),
    ("adam", optimizers.Adam, {"learning_rate": 0.003, "beta_1": 0.5, "beta_2": 0.99, "epsilon": 1e-6}),
    ("sgd", optimizers.SGD, {"learning_rate": 0.1}),
    ("sgd", optimizers.SGD, {"learning_rate": 0.05, "momentum": 0.9}),
    ("sgd", optimizers.SGD, {"learning_rate": 0.05, "momentum": 0.8, "nesterov": True}),
    ("rmsprop", optimizers.RMSprop, {"learning_rate": 0.01}),
    ("rmsprop", optimizers.RMSprop, {"learning_rate": 0.002, "rho": 0.8}),
]


def check_steps(model, specs, loss, opt_name, opt_cls, config, x, y, steps=3):
    model.compile(optimizer=opt_cls(**config), loss=loss)
    weights = [w.astype(np.float64) for w in model.get_weights()]
    state = initial_state(opt_name, config, weights)
    for t in range(1, steps + 1):
        ref_loss, grads = ref_step(specs, weights, x, y, loss)
        got_loss = model.train_on_batch(x, y)
        assert abs(got_loss - ref_loss) <= 1e-5 * max(1.0, abs(ref_loss)), (t, got_loss, ref_loss)
        weights, state = ref_update(opt_name, config, weights, grads, state, t)
        for got, want in zip(model.get_weights(), weights):
            assert rel_err(got, want) < 1e-5, (t, rel_err(got, want))
    assert model.optimizer.iterations == steps


@pytest.mark.parametrize("opt_name,opt_cls,config", OPTIMIZERS)
def test_dense_training_steps_match_float64_hand_computation(opt_name, opt_cls, config):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 6)).astype(np.float32)
    y = keras.utils.to_categorical(rng.integers(0, 4, 7), 4)
    model = Sequential([layers.Input((6,)), layers.Dense(5, activation="tanh"),
                        layers.Dense(4, activation="softmax")])
    specs = [("dense", "tanh"), ("dense", "softmax")]
    check_steps(model, specs, "categorical_crossentropy", opt_name, opt_cls, config, x, y)


@pytest.mark.parametrize("loss,last,make_y", [
    ("binary_crossentropy", "sigmoid", lambda r, n: r.integers(0, 2, n).astype(np.float32)),
    ("mse", "linear", lambda r, n: r.normal(size=(n, 1)).astype(np.float32)),
    ("mae", "linear", lambda r, n: r.normal(size=(n,)).astype(np.float32)),
    ("sparse_categorical_crossentropy", "softmax", lambda r, n: r.integers(0, 3, n)),
    ("categorical_crossentropy", "sigmoid",       # not softmax: Keras' clipped probability path
     lambda r, n: keras.utils.to_categorical(r.integers(0, 3, n), 3)),
])
def test_losses_match_float64_hand_computation(loss, last, make_y):
    rng = np.random.default_rng(1)
    units = 1 if loss in ("binary_crossentropy", "mse", "mae") else 3
    x = rng.normal(size=(9, 5)).astype(np.float32)
    y = make_y(rng, 9)
    model = Sequential([layers.Input((5,)), layers.Dense(8, activation="relu"),
                        layers.Dense(units, activation=last)])
    specs = [("dense", "relu"), ("dense", last)]
    check_steps(model, specs, loss, "adam", optimizers.Adam, {"learning_rate": 0.01}, x, y)


# Adam's (and RMSprop's) first steps are ~lr * sign(g): where a gradient component nearly
# cancels (here a bias gradient of 4e-6 summed from terms of 0.3), float32 rounding of g
# moves the update by more than 1e-5. A larger epsilon keeps the comparison well
# conditioned; the gradients themselves are checked to 1e-5 by the SGD case.
@pytest.mark.parametrize("opt_name,opt_cls,config", [
    ("adam", optimizers.Adam, {"learning_rate": 0.01, "epsilon": 1e-3}), OPTIMIZERS[3],
    ("sgd", optimizers.SGD, {"learning_rate": 1.0}),
    ("rmsprop", optimizers.RMSprop, {"learning_rate": 0.01, "epsilon": 1e-4})])
def test_conv_training_steps_match_float64_hand_computation(opt_name, opt_cls, config):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 7, 6, 2)).astype(np.float32)
    y = keras.utils.to_categorical(rng.integers(0, 3, 5), 3)
    model = Sequential([layers.Input((7, 6, 2)),
                        layers.Conv2D(4, (3, 3), activation="relu", padding="same",
                                      bias_initializer="random_normal"),
                        layers.MaxPooling2D((2, 2)),
                        layers.Conv2D(3, (2, 2), strides=(1, 2), activation="tanh"),
                        layers.Flatten(),
                        layers.Dense(3, activation="softmax")])
    specs = [("conv", "relu", (1, 1), "same"), ("maxpool", (2, 2)),
             ("conv", "tanh", (1, 2), "valid"), ("flatten",), ("dense", "softmax")]
    check_steps(model, specs, "categorical_crossentropy", opt_name, opt_cls, config, x, y)


def test_learning_rate_can_change_between_steps():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32)
    model = Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile(optimizers.SGD(learning_rate=0.1), "mse")
    w0 = [w.astype(np.float64) for w in model.get_weights()]
    model.optimizer.learning_rate = 0.0
    model.train_on_batch(x, y)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), w0))
    model.optimizer.learning_rate = 0.5
    _, grads = ref_step([("dense", "linear")], w0, x, y, "mse")
    model.train_on_batch(x, y)
    for got, w, g in zip(model.get_weights(), w0, grads):
        assert rel_err(got, w - 0.5 * g) < 1e-5


# ------------------------------------------------------------------ fit semantics
def small_model(units=3, optimizer=None, loss="categorical_crossentropy", metrics=("accuracy",)):
    model = Sequential([layers.Input((4,)), layers.Dense(6, activation="relu"),
                        layers.Dense(units, activation="softmax")])
    model.compile(optimizer or optimizers.SGD(learning_rate=0.1), loss, metrics=list(metrics))
    return model


def data(n=10, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = keras.utils.to_categorical(rng.integers(0, classes, n), classes)
    return x, y


def test_fit_batches_are_ceil_with_the_partial_last_batch_kept_and_running_mean_logs():
    x, y = data(10)
    a = small_model()
    b = small_model()
    b.set_weights(a.get_weights())
    seen = []
    cb = callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: seen.append(dict(logs)))
    hist = a.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
    assert len(seen) == 3                               # ceil(10 / 4)
    losses, accs = [], []
    for lo, hi in ((0, 4), (4, 8), (8, 10)):
        loss, acc = b.train_on_batch(x[lo:hi], y[lo:hi])
        losses.append(loss), accs.append(acc)
    for got, want in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    sizes = np.array([4, 4, 2])
    assert hist.history["loss"][0] == pytest.approx(float(np.dot(losses, sizes) / 10), rel=1e-6)
    assert hist.history["accuracy"][0] == pytest.approx(float(np.dot(accs, sizes) / 10), rel=1e-6)
    # running means after each batch
    assert seen[0]["loss"] == pytest.approx(losses[0], rel=1e-6)
    assert seen[1]["loss"] == pytest.approx((losses[0] + losses[1]) / 2, rel=1e-6)
    assert list(seen[0]) == ["accuracy", "loss"]


def test_validation_split_takes_the_last_fraction_before_shuffling():
    x, y = data(10)
    model = small_model(optimizer=optimizers.SGD(learning_rate=0.0))   # weights stay put
    hist = model.fit(x, y, validation_split=0.3, epochs=2, batch_size=3, shuffle=True, verbose=0)
    train_loss, train_acc = model.evaluate(x[:7], y[:7], verbose=0)
    val_loss, val_acc = model.evaluate(x[7:], y[7:], verbose=0)
    assert list(hist.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    for e in range(2):
        assert hist.history["val_loss"][e] == pytest.approx(val_loss, rel=1e-5)
        assert hist.history["val_accuracy"][e] == pytest.approx(val_acc)
        assert hist.history["loss"][e] == pytest.approx(train_loss, rel=1e-5)
    assert hist.epoch == [0, 1]
    assert hist.params == {"verbose": 0, "epochs": 2, "steps": 3}
    assert model.history is hist


def test_validation_data_initial_epoch_and_validation_freq():
    x, y = data(12)
    model = small_model()
    hist = model.fit(x, y, validation_data=(x[:5], y[:5]), epochs=4, initial_epoch=1,
                     validation_freq=2, verbose=0)
    assert hist.epoch == [1, 2, 3]
    assert len(hist.history["loss"]) == 3 and len(hist.history["val_loss"]) == 2  # epochs 2 and 4


def test_evaluate_predict_and_batch_methods():
    x, y = data(37)
    model = small_model(metrics=["accuracy", "mse"])
    loss, acc, mse = model.evaluate(x, y, batch_size=8, verbose=0)
    probs = model.predict(x, batch_size=5, verbose=0)
    assert probs.shape == (37, 3) and probs.dtype == np.float32
    p64 = probs.astype(np.float64)
    assert loss == pytest.approx(float(-np.mean(np.sum(y * np.log(p64), -1))), rel=1e-5)
    assert acc == pytest.approx(float(np.mean(p64.argmax(-1) == y.argmax(-1))))
    assert mse == pytest.approx(float(np.mean((p64 - y) ** 2)), rel=1e-5)
    assert model.evaluate(x, y, verbose=0, return_dict=True) == pytest.approx(
        {"loss": loss, "accuracy": acc, "mse": mse}, rel=1e-6)
    np.testing.assert_allclose(model.predict_on_batch(x), probs, rtol=1e-6)
    np.testing.assert_allclose(model(x), probs, rtol=1e-6)
    assert model.test_on_batch(x, y) == pytest.approx([loss, acc, mse], rel=1e-6)
    before = model.train_on_batch(x, y)
    assert before == pytest.approx([loss, acc, mse], rel=1e-6)      # computed before the update
    assert model.evaluate(x, y, verbose=0)[0] != pytest.approx(loss, rel=1e-9)
    plain = small_model(metrics=())
    assert isinstance(plain.evaluate(x, y, verbose=0), float)


def test_accuracy_resolves_by_shape_like_keras():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(20, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 20)
    sparse = small_model(loss="sparse_categorical_crossentropy")
    hist = sparse.fit(x, labels, epochs=1, verbose=0)
    probs = sparse.predict(x, verbose=0)
    assert sparse.evaluate(x, labels, verbose=0)[1] == pytest.approx(np.mean(probs.argmax(-1) == labels))
    assert "accuracy" in hist.history
    binary = Sequential([layers.Input((4,)), layers.Dense(1, activation="sigmoid")])
    binary.compile("adam", "binary_crossentropy", metrics=["acc"])
    yb = (x[:, 0] > 0).astype(np.float32)
    hist = binary.fit(x, yb, epochs=1, verbose=0)
    assert list(hist.history) == ["acc", "loss"]
    p = binary.predict(x, verbose=0)[:, 0]
    assert binary.evaluate(x, yb, verbose=0)[1] == pytest.approx(np.mean((p > 0.5) == (yb > 0.5)))


def test_verbose_output_has_keras_progress_lines(capsys):
    x, y = data(40)
    model = small_model()
    model.fit(x, y, epochs=2, batch_size=16, verbose=1)
    out = capsys.readouterr().out
    plain = out.replace("\x1b[1m", "").replace("\x1b[0m", "").replace("\x1b[32m", "").replace("\x1b[37m", "")
    assert "Epoch 1/2\n" in plain and "Epoch 2/2\n" in plain
    assert "3/3 ━━━━━━━━━━━━━━━━━━━━ " in plain and " - accuracy: " in plain and " - loss: " in plain
    model.fit(x, y, epochs=1, batch_size=16, verbose=2)
    line = capsys.readouterr().out
    assert line.startswith("3/3 - ") and line.endswith("\n") and "Epoch" not in line
    model.fit(x, y, epochs=1, verbose=0)
    assert capsys.readouterr().out == ""


def test_dropout_trains_stochastically_and_predicts_deterministically():
    x, y = data(64)

    def run():
        keras.utils.set_random_seed(7)
        model = Sequential([layers.Input((4,)), layers.Dense(16, activation="relu"),
                            layers.Dropout(0.5), layers.Dense(3, activation="softmax")])
        model.compile("adam", "categorical_crossentropy")
        hist = model.fit(x, y, epochs=2, batch_size=16, verbose=0)
        return model, hist.history["loss"]
    m1, l1 = run()
    m2, l2 = run()
    assert l1 == l2                                        # set_random_seed: reproducible
    np.testing.assert_array_equal(m1.predict(x, verbose=0), m1.predict(x, verbose=0))
    loss_eval = m1.evaluate(x, y, verbose=0)
    loss_train = m1.test_on_batch(x, y)
    assert loss_eval == pytest.approx(loss_train, rel=1e-5)     # no dropout outside training


# ------------------------------------------------------------------ callbacks
def test_early_stopping_with_patience_and_stop_training():
    x, y = data(20)
    model = small_model(optimizer=optimizers.SGD(learning_rate=0.0))  # the loss never improves
    stopper = callbacks.EarlyStopping(monitor="loss", patience=2)
    hist = model.fit(x, y, epochs=10, verbose=0, callbacks=[stopper])
    assert hist.epoch == [0, 1, 2] and stopper.stopped_epoch == 2

    model = small_model()
    batches = []

    def on_batch_end(batch, logs):
        batches.append(batch)
        model.stop_training = batch == 1
    hist = model.fit(x, y, epochs=5, batch_size=4, verbose=0,
                     callbacks=[callbacks.LambdaCallback(on_train_batch_end=on_batch_end)])
    assert batches == [0, 1] and hist.epoch == [0]


def test_early_stopping_restores_best_weights_and_baseline():
    model = small_model()
    stopper = callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True,
                                      min_delta=0.01)
    stopper.set_model(model)
    stopper.on_train_begin()
    best = model.get_weights()
    stopper.on_epoch_end(0, {"val_loss": 1.0})
    model.set_weights([w + 1 for w in best])
    stopper.on_epoch_end(1, {"val_loss": 0.995})      # better by less than min_delta
    assert model.stop_training and stopper.stopped_epoch == 1
    stopper.on_train_end()
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), best))

    acc = callbacks.EarlyStopping(monitor="val_accuracy", patience=0, baseline=0.9)
    acc.set_model(model)
    model.stop_training = False
    acc.on_train_begin()
    acc.on_epoch_end(0, {"val_accuracy": 0.5})
    acc.on_epoch_end(1, {"val_accuracy": 0.6})      # improves (not past the baseline): go on
    assert not model.stop_training
    acc.on_epoch_end(2, {"val_accuracy": 0.55})     # no improvement, wait counts from below baseline
    assert model.stop_training and acc.wait == 3


def test_model_checkpoint_formats_names_and_saves_best_only(tmp_path):
    x, y = data(20)
    model = small_model()
    pattern = str(tmp_path / "ck-{epoch:02d}-{loss:.2f}.keras")
    model.fit(x, y, epochs=3, verbose=0, callbacks=[callbacks.ModelCheckpoint(pattern, monitor="loss")])
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 3 and names[0].startswith("ck-01-") and names[2].startswith("ck-03-")
    restored = load_model(tmp_path / names[2])
    np.testing.assert_allclose(restored.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)

    frozen = small_model(optimizer=optimizers.SGD(learning_rate=0.0))
    best_dir = tmp_path / "best"
    cp = callbacks.ModelCheckpoint(str(best_dir / "w-{epoch}.weights.h5"), monitor="loss",
                                   save_best_only=True, save_weights_only=True)
    frozen.fit(x, y, epochs=3, verbose=0, callbacks=[cp])
    assert os.listdir(best_dir) == ["w-1.weights.h5"]
    other = small_model()
    other.load_weights(best_dir / "w-1.weights.h5")
    assert all(np.array_equal(a, b) for a, b in zip(other.get_weights(), frozen.get_weights()))


# ------------------------------------------------------------------ saving
def test_save_load_round_trip_with_optimizer_state(tmp_path):
    x, y = data(30)
    model = small_model(optimizer=optimizers.Adam(learning_rate=0.01))
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = load_model(path)
    assert [l.name for l in loaded.layers] == [l.name for l in model.layers]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert loaded.optimizer.iterations == model.optimizer.iterations == 8
    assert isinstance(loaded.optimizer, optimizers.Adam)
    model.train_on_batch(x, y)
    loaded.train_on_batch(x, y)          # same Adam moments -> the same step
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_save_load_gan_and_functional_models(tmp_path):
    generator = Sequential([layers.Dense(8, input_dim=4, activation="relu"), layers.Dense(6),
                            layers.Reshape((3, 2))])
    discriminator = Sequential([layers.Flatten(input_shape=(3, 2)), layers.Dense(1, activation="sigmoid")])
    gan = Sequential([generator, discriminator])
    z = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    gan.save(tmp_path / "gan.keras")
    np.testing.assert_array_equal(load_model(tmp_path / "gan.keras").predict(z, verbose=0),
                                  gan.predict(z, verbose=0))
    inp = keras.Input(shape=(4,))
    out = layers.Dense(2, activation="softmax")(layers.Dense(5, activation="tanh")(inp))
    functional = Model(inputs=inp, outputs=out)
    functional.save(tmp_path / "f.keras")
    again = load_model(tmp_path / "f.keras")
    assert [type(l).__name__ for l in again.layers] == ["InputLayer", "Dense", "Dense"]
    np.testing.assert_array_equal(again.predict(z, verbose=0), functional.predict(z, verbose=0))


def test_failed_save_leaves_the_old_file(tmp_path, monkeypatch):
    x, y = data(10)
    model = small_model()
    path = tmp_path / "m.keras"
    model.save(path)
    old = path.read_bytes()
    model.fit(x, y, epochs=1, verbose=0)
    real_writestr = zipfile.ZipFile.writestr
    calls = []

    def failing_writestr(self, name, data, *args, **kwargs):
        calls.append(name)
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        return real_writestr(self, name, data, *args, **kwargs)
    monkeypatch.setattr(zipfile.ZipFile, "writestr", failing_writestr)
    with pytest.raises(OSError, match="disk full"):
        model.save(path)
    monkeypatch.setattr(zipfile.ZipFile, "writestr", real_writestr)
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == ["m.keras"]           # no temporary file left behind
    with pytest.raises(FileExistsError):
        model.save(path, overwrite=False)


def test_corrupt_truncated_or_mismatched_files_raise_value_error(tmp_path):
    """gpucmp's own format (save_format="gpucmp"; Keras' formats: test_keras_files.py)."""
    model = small_model()
    path = tmp_path / "m.keras"
    model.save(path, save_format="gpucmp")
    blob = path.read_bytes()
    cases = {
        "truncated.keras": blob[: len(blob) // 2],
        "garbage.keras": b"not a zip file at all" * 10,
        "empty.keras": b"",
    }
    for name, payload in cases.items():
        (tmp_path / name).write_bytes(payload)
        with pytest.raises(ValueError):
            load_model(tmp_path / name)
    # a zip without the config
    with zipfile.ZipFile(tmp_path / "noconfig.keras", "w") as zf:
        zf.writestr("metadata.json", '{"format": "gpucmp.keras", "version": 1}')
    with pytest.raises(ValueError, match="config.json"):
        load_model(tmp_path / "noconfig.keras")
    # a flipped byte inside a member: CRC mismatch
    corrupt = bytearray(blob)
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("weights.npz")
    corrupt[info.header_offset + 30 + len(info.filename) + 20] ^= 0xFF
    (tmp_path / "crc.keras").write_bytes(bytes(corrupt))
    with pytest.raises(ValueError):
        load_model(tmp_path / "crc.keras")
    with pytest.raises(ValueError, match="not found"):
        load_model(tmp_path / "missing.keras")
    # weights of another architecture
    other = Sequential([layers.Input((4,)), layers.Dense(3, activation="softmax")])
    other.save_weights(tmp_path / "other.weights.h5", save_format="gpucmp")
    before = model.get_weights()
    with pytest.raises(ValueError, match="weight"):
        model.load_weights(tmp_path / "other.weights.h5")
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))


# ------------------------------------------------------------------ GAN and trainable snapshot
def test_gan_pattern_discriminator_trains_alone_and_is_frozen_in_gan():
    generator = Sequential([layers.Dense(16, input_dim=8, activation="relu"),
                            layers.Dense(12, activation="tanh"), layers.Reshape((3, 4, 1))])
    discriminator = Sequential([layers.Flatten(input_shape=(3, 4, 1)),
                                layers.Dense(8, activation="relu"), layers.Dense(1, activation="sigmoid")])
    opt = optimizers.Adam(learning_rate=0.01)
    discriminator.compile(loss="binary_crossentropy", optimizer=opt, metrics=["accuracy"])
    gan = Sequential([generator, discriminator])
    discriminator.trainable = False
    gan.compile(loss="binary_crossentropy", optimizer=opt)     # one optimizer shared: tf.keras 2 style
    rng = np.random.default_rng(0)
    for _ in range(3):
        z = rng.normal(size=(6, 8)).astype(np.float32)
        fake = generator.predict(z, verbose=0)
        real = rng.uniform(-1, 1, size=(6, 3, 4, 1)).astype(np.float32)
        d_before, g_before = discriminator.get_weights(), generator.get_weights()
        d_loss, d_acc = discriminator.train_on_batch(np.concatenate([real, fake]),
                                                     np.r_[np.ones(6), np.zeros(6)])
        d_after = discriminator.get_weights()
        assert all(not np.array_equal(a, b) for a, b in zip(d_before, d_after))
        assert all(np.array_equal(a, b) for a, b in zip(g_before, generator.get_weights()))
        g_loss = gan.train_on_batch(z, np.ones((6, 1)))
        assert all(np.array_equal(a, b) for a, b in zip(d_after, discriminator.get_weights()))
        assert all(not np.array_equal(a, b) for a, b in zip(g_before, generator.get_weights()))
        assert np.isfinite(d_loss) and np.isfinite(g_loss) and 0 <= d_acc <= 1


def test_functional_gan_pattern_with_nested_models():
    generator = Sequential([layers.Dense(16, input_dim=8, activation="relu"),
                            layers.Dense(12, activation="tanh"), layers.Reshape((3, 4, 1))])
    discriminator = Sequential([layers.Flatten(input_shape=(3, 4, 1)),
                                layers.Dense(8, activation="relu"), layers.Dense(1, activation="sigmoid")])
    discriminator.compile(optimizers.Adam(0.01), "binary_crossentropy", metrics=["accuracy"])
    z = keras.Input(shape=(8,))
    discriminator.trainable = False
    combined = Model(z, discriminator(generator(z)))
    combined.compile(optimizers.Adam(0.01), "binary_crossentropy")
    assert [type(l).__name__ for l in combined.layers] == ["InputLayer", "Sequential", "Sequential"]
    noise = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    d0, g0 = discriminator.get_weights(), generator.get_weights()
    combined.train_on_batch(noise, np.ones(5))
    assert all(np.array_equal(a, b) for a, b in zip(d0, discriminator.get_weights()))
    assert all(not np.array_equal(a, b) for a, b in zip(g0, generator.get_weights()))
    discriminator.train_on_batch(generator.predict(noise, verbose=0), np.zeros(5))
    assert all(not np.array_equal(a, b) for a, b in zip(d0, discriminator.get_weights()))


def test_trainable_is_snapshotted_at_compile():
    x, y = data(16)
    model = small_model()
    model.trainable = False                    # after compile: still trains (tf.keras 2)
    w0 = model.get_weights()
    model.fit(x, y, epochs=1, verbose=0)
    assert not np.array_equal(w0[0], model.get_weights()[0])
    model.compile(optimizers.SGD(learning_rate=0.1), "categorical_crossentropy")
    w1 = model.get_weights()
    model.fit(x, y, epochs=1, verbose=0)       # recompiled while frozen: nothing moves
    assert all(np.array_equal(a, b) for a, b in zip(w1, model.get_weights()))
    model.trainable = True
    model.layers[1].trainable = False          # freeze only the head
    model.compile(optimizers.SGD(learning_rate=0.1), "categorical_crossentropy")
    model.fit(x, y, epochs=1, verbose=0)
    w2 = model.get_weights()
    assert not np.array_equal(w1[0], w2[0]) and np.array_equal(w1[2], w2[2])


def test_nested_sequential_equals_flat_model():
    inner = Sequential([layers.Dense(5, input_dim=4, activation="relu"), layers.Dense(3)])
    outer = Sequential([inner, layers.Activation("softmax")])
    flat = Sequential([layers.Input((4,)), layers.Dense(5, activation="relu"),
                       layers.Dense(3, activation="softmax")])
    flat.set_weights(inner.get_weights())
    x, _ = data(6)
    np.testing.assert_allclose(outer.predict(x, verbose=0), flat.predict(x, verbose=0), rtol=1e-6)


def test_model_built_from_first_data_and_functional_chain():
    x, y = data(12)
    model = Sequential([layers.Dense(6, activation="relu"), layers.Dense(3, activation="softmax")])
    model.compile("adam", "categorical_crossentropy")
    model.fit(x, y, epochs=1, verbose=0)
    assert model.input_shape == (None, 4) and model.output_shape == (None, 3)
    inp = keras.Input(shape=(4,))
    out = layers.Dense(3, activation="softmax")(layers.Dense(6, activation="relu")(inp))
    functional = Model(inp, out)
    functional.set_weights(model.get_weights())
    np.testing.assert_allclose(functional.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)
    with pytest.raises(ValueError, match="input_layer_1' is not used"):
        Model(inputs=[inp, keras.Input(shape=(4,))], outputs=out)
    with pytest.raises(ValueError, match="Graph disconnected: the outputs depend on the Input"):
        Model(inputs=keras.Input(shape=(4,)), outputs=out)


def test_pandas_and_list_inputs():
    pd = pytest.importorskip("pandas")
    x, y = data(12)
    model = Sequential([layers.Input((4,)), layers.Dense(1, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy", metrics=["accuracy"])
    frame = pd.DataFrame(x, columns=list("abcd"))
    series = pd.Series((x[:, 0] > 0).astype(int))
    hist = model.fit(frame, series, epochs=1, verbose=0)
    assert np.isfinite(hist.history["loss"][0])
    np.testing.assert_allclose(model.predict(frame, verbose=0), model.predict(x.tolist(), verbose=0))


def test_optimizer_strings_defaults_and_legacy_arguments():
    model = Sequential([layers.Input((4,)), layers.Dense(2)])
    model.compile(loss="mse")
    assert isinstance(model.optimizer, optimizers.RMSprop)
    assert model.optimizer.learning_rate == 0.001 and model.optimizer.rho == 0.9
    adam = optimizers.get("Adam")
    assert (adam.learning_rate, adam.beta_1, adam.beta_2, adam.epsilon) == (0.001, 0.9, 0.999, 1e-7)
    assert optimizers.get("sgd").learning_rate == 0.01
    legacy = optimizers.Adam(lr=0.0002, beta_1=0.5)       # tf.keras 2 GAN code
    assert legacy.learning_rate == 0.0002 and legacy.get_config()["beta_1"] == 0.5
    with pytest.raises(ValueError, match="learning_rate"):
        optimizers.SGD(learning_rate=-1)
    with pytest.raises(ValueError, match="Unknown optimizer"):
        model.compile(optimizer="sgdd", loss="mse")
    with pytest.raises(ValueError, match="Unknown loss"):
        model.compile(optimizer="sgd", loss="mean_squared_errorr")
    with pytest.raises(ValueError, match="Unknown metric"):
        model.compile(optimizer="sgd", loss="mse", metrics=["accurracy"])


# ------------------------------------------------------------------ bad input
def test_fit_before_compile_is_a_runtime_error():
    model = Sequential([layers.Input((4,)), layers.Dense(2)])
    with pytest.raises(RuntimeError, match=r"compile\(\)"):
        model.fit(np.zeros((2, 4)), np.zeros((2, 2)))
    with pytest.raises(RuntimeError, match=r"compile\(\)"):
        model.evaluate(np.zeros((2, 4)), np.zeros((2, 2)))
    assert model.predict(np.zeros((2, 4)), verbose=0).shape == (2, 2)   # predict needs no compile


BAD_CALLS = [
    (lambda x, y: (x[:, :3], y), ValueError, r"\(10, 3\).*\(None, 4\)"),
    (lambda x, y: (x.reshape(10, 2, 2), y), ValueError, r"\(None, 4\)"),
    (lambda x, y: (x.astype(str), y), TypeError, "dtype"),
    (lambda x, y: (np.array([["a"] * 4] * 10, dtype=object), y), TypeError, "object"),
    (lambda x, y: (np.where(np.arange(40).reshape(10, 4) == 17, np.nan, x), y), ValueError, r"NaN.*x\[4, 1\]"),
    (lambda x, y: (np.where(np.arange(40).reshape(10, 4) == 3, np.inf, x), y), ValueError, "Inf"),
    (lambda x, y: (x, np.where(np.arange(30).reshape(10, 3) == 5, np.nan, y)), ValueError, "NaN"),
    (lambda x, y: (x.astype(np.float64) * 1e300, y), ValueError, "float32"),
    (lambda x, y: (x[:0], y[:0]), ValueError, "empty"),
    (lambda x, y: (x, y[:7]), ValueError, r"10 samples.*7 samples"),
    (lambda x, y: (x, y.argmax(-1)), ValueError, "to_categorical"),
    (lambda x, y: (x, y[:, :2]), ValueError, r"\(10, 2\).*\(None, 3\)"),
]


@pytest.mark.parametrize("make,exc,match", BAD_CALLS)
def test_bad_data_raises_clearly_and_leaves_the_model_usable(make, exc, match):
    x, y = data(10)
    model = small_model()
    before = model.get_weights()
    bx, by = make(x, y)
    with pytest.raises(exc, match=match):
        model.fit(bx, by, epochs=2, verbose=0, batch_size=4)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))
    assert model.optimizer.iterations == 0
    hist = model.fit(x, y, epochs=1, verbose=0)             # still trains afterwards
    assert np.isfinite(hist.history["loss"][0])


@pytest.mark.parametrize("kwargs,match", [
    ({"batch_size": 0}, "batch_size"), ({"batch_size": -3}, "batch_size"),
    ({"batch_size": 2.5}, "batch_size"), ({"epochs": -1}, "epochs"), ({"epochs": "3"}, "epochs"),
    ({"validation_split": 1.0}, "validation_split"), ({"validation_split": -0.2}, "validation_split"),
    ({"verbose": 3}, "verbose"), ({"shuffle": "yes"}, "shuffle"),
    ({"validation_data": ([1, 2],)}, "validation_data"),
])
def test_bad_fit_arguments_raise_value_error(kwargs, match):
    x, y = data(10)
    model = small_model()
    before = model.get_weights()
    with pytest.raises(ValueError, match=match):
        model.fit(x, y, **kwargs)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))


@pytest.mark.parametrize("labels,match", [
    (np.array([0, 1, 2, 3, 0, 1]), r"y\[3\] = 3.*\[0, 3\)"),
    (np.array([0, 1, -1, 0, 0, 1]), r"y\[2\] = -1"),
    (np.array([0, 1, 1.5, 0, 0, 1]), r"y\[2\] = 1.5"),
    (np.eye(3)[[0, 1, 2, 0, 1, 2]], "one-hot"),
])
def test_sparse_labels_are_range_checked(labels, match):
    x, _ = data(6)
    model = small_model(loss="sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match=match):
        model.fit(x, labels, verbose=0)
    model.fit(x, np.array([0, 1, 2, 0, 1, 2]), verbose=0)
