"""Parity with Keras 3 itself: the same models built in keras and in gpucmp.keras, with
weights copied through get_weights/set_weights, must predict, evaluate and train alike
(float32 on both sides: ~1e-5 relative) and print the same summary.

Runs when `keras` (Keras 3) is importable; CI installs it with the JAX backend
(KERAS_BACKEND=jax, set here when unset).
"""
import contextlib
import io
import re
import warnings

import numpy as np
import pytest

from keras_reference import fresh_sessions  # noqa: F401 (an autouse fixture)
from keras_reference import keras3, rel_err

keras = keras3()

import gpucmp.keras as gk  # noqa: E402
from gpucmp.harness.workloads.seeds import build_seed_cnn  # noqa: E402

# Keras' own variables trip a NumPy 2 deprecation in get_weights(); not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def seeds_cnn(K):
    """The seeds' CNN as the package defines it (harness/workloads/seeds.py), built by K.
    Real Keras 3 warns about input_shape= on a layer (the seed program's own style)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return build_seed_cnn(K, compile=False)


def digits(n, seed=0):
    from gpucmp.datasets import load_digits_mnist
    try:
        (x, y), _ = load_digits_mnist()
        x = (x[:n] / 255.0).reshape(-1, 28, 28, 1).astype(np.float32)
        y = y[:n]
    except ImportError:
        rng = np.random.default_rng(seed)
        x, y = rng.uniform(size=(n, 28, 28, 1)).astype(np.float32), rng.integers(0, 10, n)
    return x, y


def pair(build):
    """(keras model, gpucmp model) with the keras weights copied into gpucmp."""
    km, gm = build(keras), build(gk)
    gm.set_weights(km.get_weights())
    return km, gm


def test_summary_text_and_param_counts_match(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    texts = []
    for K in (keras, gk):
        model = seeds_cnn(K)
        captured = []
        model.summary(print_fn=captured.append)
        texts.append("".join(captured))
        assert model.count_params() == 93322
    assert texts[0] == texts[1]


def test_seeds_cnn_predict_evaluate_and_one_adam_step():
    km, gm = pair(seeds_cnn)
    x, labels = digits(48)
    y = keras.utils.to_categorical(labels, 10)
    assert rel_err(gm.predict(x, verbose=0), km.predict(x, verbose=0)) < 1e-5
    for m in (km, gm):
        m.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    k_loss, k_acc = km.evaluate(x, y, verbose=0)
    g_loss, g_acc = gm.evaluate(x, y, verbose=0)
    assert g_loss == pytest.approx(k_loss, rel=1e-5)
    assert g_acc == pytest.approx(k_acc)
    w0 = km.get_weights()
    k_step = km.train_on_batch(x[:16], y[:16])
    g_step = gm.train_on_batch(x[:16], y[:16])
    assert g_step[0] == pytest.approx(k_step[0], rel=1e-5)
    # Adam's first step is lr * g / (|g| + ~3e-6): a conv bias gradient that is a nearly
    # cancelling sum of 16 x 26 x 26 float32 terms (|g| ~ 1e-5) carries its summation
    # noise into that element's update at ~1e-4 relative, so a bias vector as a whole
    # agrees to ~1e-5, not better (the optimizer's own constants are Keras' exactly:
    # tests/test_ops.py)
    for w, kw, gw in zip(w0, km.get_weights(), gm.get_weights()):
        assert rel_err(gw, kw) < 3e-5
        assert rel_err(gw - w, kw - w) < 1e-3         # the update itself (~lr) agrees too


def test_gan_discriminator_binary_crossentropy_adam_steps():
    def build(K):
        model = K.models.Sequential([K.layers.Input(shape=(28, 28, 1)), K.layers.Flatten(),
                                     K.layers.Dense(128, activation="relu"),
                                     K.layers.Dense(1, activation="sigmoid")])
        model.compile(loss="binary_crossentropy",
                      optimizer=K.optimizers.Adam(learning_rate=0.0002, beta_1=0.5),
                      metrics=["accuracy"])
        return model
    km, gm = pair(build)
    x, _ = digits(32)
    x = x * 2 - 1
    y = np.r_[np.ones(16), np.zeros(16)].astype(np.float32)
    for _ in range(3):
        kl = km.train_on_batch(x, y)
        gl = gm.train_on_batch(x, y)
        assert gl[0] == pytest.approx(kl[0], rel=1e-5)
    for kw, gw in zip(km.get_weights(), gm.get_weights()):
        assert rel_err(gw, kw) < 1e-5


@pytest.mark.parametrize("opt", [
    lambda K: K.optimizers.SGD(learning_rate=0.05, momentum=0.9, nesterov=True),
    lambda K: K.optimizers.SGD(learning_rate=0.1),
    lambda K: K.optimizers.RMSprop(learning_rate=0.001),
])
def test_fit_history_and_weights_match_with_other_optimizers(opt):
    def build(K):
        model = K.models.Sequential([K.layers.Input(shape=(12,)), K.layers.Dense(16, activation="tanh"),
                                     K.layers.Dense(4, activation="softmax")])
        model.compile(optimizer=opt(K), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        return model
    km, gm = pair(build)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 12)).astype(np.float32)
    y = rng.integers(0, 4, 50)
    kh = km.fit(x, y, batch_size=8, epochs=3, shuffle=False, validation_split=0.2, verbose=0)
    gh = gm.fit(x, y, batch_size=8, epochs=3, shuffle=False, validation_split=0.2, verbose=0)
    assert list(gh.history) == list(kh.history)
    for key in kh.history:
        np.testing.assert_allclose(gh.history[key], kh.history[key], rtol=2e-5, atol=1e-6)
    for kw, gw in zip(km.get_weights(), gm.get_weights()):
        assert rel_err(gw, kw) < 2e-5
    assert gh.params == kh.params


def test_other_layer_settings_predict_alike():
    def build(K):
        return K.models.Sequential([
            K.layers.Input(shape=(15, 13, 3)),
            K.layers.Conv2D(6, (3, 4), strides=(2, 2), padding="same", activation="tanh"),
            K.layers.AveragePooling2D((2, 2), padding="same"),
            K.layers.Conv2D(5, 2, dilation_rate=(2, 1), activation="sigmoid", use_bias=False),
            K.layers.MaxPooling2D((2, 2), strides=(1, 1), padding="same"),
            K.layers.Dropout(0.3),
            K.layers.Reshape((-1,)),
            K.layers.Dense(7),
            K.layers.Activation("softmax"),
        ])
    km, gm = pair(build)
    assert gm.count_params() == km.count_params()
    assert gm.output_shape == km.output_shape
    x = np.random.default_rng(2).normal(size=(9, 15, 13, 3)).astype(np.float32)
    assert rel_err(gm.predict(x, verbose=0), km.predict(x, verbose=0)) < 1e-5


def test_fit_progress_output_has_the_same_shape_of_text():
    km, gm = pair(lambda K: K.models.Sequential([K.layers.Input(shape=(4,)), K.layers.Dense(2)]))
    x = np.random.default_rng(3).normal(size=(20, 4)).astype(np.float32)
    outs = []
    for m in (km, gm):
        m.compile("sgd", "mse")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            m.fit(x, x[:, :2], epochs=2, batch_size=10, verbose=2, shuffle=False)
        outs.append(buf.getvalue())
    timings = re.compile(r"\b\d+(us|ms|s)\b")
    assert timings.sub("T", outs[1]) == timings.sub("T", outs[0])   # timings aside, the same text


def test_mixed_float16_matches_keras():
    """The seeds' CNN under 'mixed_float16' in Keras 3 and in gpucmp (CPU: float16 storage,
    float32 arithmetic; Keras on XLA-CPU: float16 tensors): the optimizer is wrapped in a
    LossScaleOptimizer on both sides, predictions come back float16 and agree to float16
    rounding of the activations (~1e-2 relative), and three Adam steps (loss scaled by
    2^15 on both sides) give the same losses (2e-2), scale and iterations and move the
    float32 weights alike."""
    km_policy, gk_policy = keras.mixed_precision.global_policy(), gk.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    gk.mixed_precision.set_global_policy("mixed_float16")
    try:
        km, gm = pair(seeds_cnn)
        x, labels = digits(64)
        y = keras.utils.to_categorical(labels, 10)
        pk, pg = km.predict(x, verbose=0), gm.predict(x, verbose=0)
        assert pk.dtype == pg.dtype == np.float16
        assert rel_err(pg, pk) < 2e-2
        for m in (km, gm):
            m.compile(optimizer="adam", loss="categorical_crossentropy")
        assert type(km.optimizer).__name__ == type(gm.optimizer).__name__ == "LossScaleOptimizer"
        w0 = km.get_weights()
        for s in range(3):
            k_loss = km.train_on_batch(x[16 * s:16 * (s + 1)], y[16 * s:16 * (s + 1)])
            g_loss = gm.train_on_batch(x[16 * s:16 * (s + 1)], y[16 * s:16 * (s + 1)])
            assert g_loss == pytest.approx(float(k_loss), rel=2e-2)
        assert float(km.optimizer.dynamic_scale) == gm.optimizer.dynamic_scale
        assert int(km.optimizer.iterations) == gm.optimizer.iterations == 3
        errs = [(rel_err(gw, kw), rel_err(gw - w, kw - w)) for w, kw, gw in zip(w0, km.get_weights(), gm.get_weights())]
        print("mixed_float16 weights / updates rel err:", [f"{a:.1e}/{b:.1e}" for a, b in errs])
        # Adam's first steps move each weight by about lr * sign(g): a gradient element
        # that float16 rounding flips moves the other way, so the updates agree to a few
        # percent (measured <= 5%); kernels to ~1e-3 of their norm, biases (which start at
        # 0, so their norm is their update's) to a few percent
        for a, b in errs:
            assert a < 5e-2 and b < 0.1, errs
    finally:
        keras.mixed_precision.set_global_policy(km_policy)
        gk.mixed_precision.set_global_policy(gk_policy)
