"""The single-batch calls (train_on_batch, test_on_batch, predict, predict_on_batch) call
after call: what their per-signature cache (gpucmp/keras/models/call_cache.py) and the
plan's staging buffer (csrc/plan/stage.c) could get wrong.

Each test makes several calls in a row with fresh random data, so a stale cached entry or
a stale staged batch would show: every result is checked against values computed
independently -- a NumPy forward pass of the model's current weights, or fit / evaluate
on an identical model. Also: the cache is dropped by compile, add / pop and trainable
changes (the GAN recipe: a frozen discriminator stays bit-identical through
gan.train_on_batch while its own train_on_batch still moves it); bad input after a good
call still raises the full path's errors and leaves the weights alone; a returned
prediction is the caller's own array, never overwritten by the next call. The `cuda`
tests repeat the sequences on cuda:0 against the CPU (graph replays, staged uploads,
embedding ids checked after replays); they skip cleanly without a CUDA backend.
"""
import numpy as np
import pytest

import gpucmp
from gpucmp import keras

L = keras.layers
EPS = 1e-7


def _mlp(seed=0, units=8, inputs=5, out_act="sigmoid", outputs=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((inputs,)), L.Dense(units, activation="relu"),
                             L.Dense(outputs, activation=out_act)])


def _forward(model, x):
    """NumPy forward pass of the Dense(relu) -> Dense(sigmoid|softmax|linear) MLP."""
    (w1, b1), (w2, b2) = [layer.get_weights() for layer in model.layers]
    h = np.maximum(x.astype(np.float64) @ w1 + b1, 0.0)
    z = h @ w2 + b2
    act = model.layers[-1].get_config()["activation"]
    if act == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if act == "softmax":
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return z


def _bce(p, y):
    p = np.clip(p, EPS, 1 - EPS)
    return float(np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))))


def _data(rng, n=16, inputs=5):
    x = rng.standard_normal((n, inputs)).astype(np.float32)
    y = (rng.random((n, 1)) < 0.5).astype(np.float32)
    return x, y


def _weights(model):
    return [w.copy() for w in model.get_weights()]


def _same(a, b):
    return all(np.array_equal(u, v) for u, v in zip(a, b))


# ------------------------------------------------------------------ agreement, call after call

def test_train_on_batch_losses_and_weights_follow_fit_call_after_call():
    rng = np.random.default_rng()
    a, b = _mlp(1), _mlp(1)
    b.set_weights(a.get_weights())
    for m in (a, b):
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy")
    for step in range(5):
        x, y = _data(rng)
        want = _bce(_forward(a, x), y)                         # before the update
        got = a.train_on_batch(x, y)
        hist = b.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
        assert got == pytest.approx(want, rel=1e-4, abs=1e-6), step
        assert got == pytest.approx(hist.history["loss"][0], rel=1e-5, abs=1e-7), step
        for u, v in zip(a.get_weights(), b.get_weights()):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-7)


def test_test_on_batch_matches_evaluate_and_numpy_with_metrics():
    rng = np.random.default_rng()
    m = _mlp(2)
    m.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    for step in range(4):
        x, y = _data(rng, n=12)
        p = _forward(m, x)
        loss, acc = m.test_on_batch(x, y)
        assert loss == pytest.approx(_bce(p, y), rel=1e-4, abs=1e-6), step
        assert acc == pytest.approx(float(np.mean((p > 0.5) == (y > 0.5))), abs=1e-6), step
        ev = m.evaluate(x, y, batch_size=len(x), verbose=0)
        assert [loss, acc] == pytest.approx(ev, rel=1e-5, abs=1e-7)
        m.train_on_batch(x, y)                                   # the weights move between calls


def test_sparse_labels_are_range_checked_every_call():
    rng = np.random.default_rng()
    m = _mlp(3, out_act="softmax", outputs=4)
    m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x = rng.standard_normal((8, 5)).astype(np.float32)
    y = rng.integers(0, 4, 8).astype(np.int64)
    p = _forward(m, x)
    want = float(np.mean(-np.log(np.clip(p[np.arange(8), y], EPS, 1))))
    assert m.test_on_batch(x, y) == pytest.approx(want, rel=1e-4)
    w0 = _weights(m)
    bad = y.copy()
    bad[5] = 4
    with pytest.raises(ValueError, match=r"y\[5\] = 4 is not a valid class id"):
        m.train_on_batch(x, bad)
    assert _same(w0, m.get_weights())


def test_predict_and_predict_on_batch_follow_new_inputs_and_return_owned_arrays():
    rng = np.random.default_rng()
    m = _mlp(4, outputs=3, out_act="linear")
    kept = []
    for step in range(4):
        x = rng.standard_normal((10, 5)).astype(np.float32)
        want = _forward(m, x)
        p1 = m.predict(x, batch_size=32, verbose=0)
        p2 = m.predict_on_batch(x)
        for p in (p1, p2):
            assert p.dtype == np.float32 and p.shape == (10, 3) and p.flags.owndata
            np.testing.assert_allclose(p, want, rtol=1e-5, atol=1e-5)
        assert p1 is not p2
        kept.append((p1, p1.copy(), p2, p2.copy()))
    for p1, c1, p2, c2 in kept:                     # later calls did not write into them
        assert np.array_equal(p1, c1) and np.array_equal(p2, c2)
    kept[-1][0][:] = 0.0                            # the caller's own: writing is harmless
    np.testing.assert_allclose(m.predict_on_batch(x), want, rtol=1e-5, atol=1e-5)


def test_predict_with_several_batches_callbacks_and_float64_input():
    rng = np.random.default_rng()
    m = _mlp(5, outputs=2, out_act="linear")
    x = rng.standard_normal((23, 5))
    want = _forward(m, x.astype(np.float32))
    seen = []

    class Batches(keras.callbacks.Callback):
        def on_predict_batch_end(self, batch, logs=None):
            seen.append(np.array(logs["outputs"]))

    for _ in range(2):
        np.testing.assert_allclose(m.predict(x, batch_size=8, verbose=0), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(m.predict(x.astype(np.float32), batch_size=32, verbose=0,
                                             callbacks=[Batches()]), want, rtol=1e-5, atol=1e-5)
    assert len(seen) == 2 and seen[0].shape == (23, 2)


# ------------------------------------------------------------------ invalidation

def test_gan_pattern_frozen_discriminator_stays_bit_identical():
    rng = np.random.default_rng()
    keras.utils.set_random_seed(6)
    gen = keras.Sequential([keras.Input((4,)), L.Dense(8, activation="relu"), L.Dense(6, activation="tanh")])
    disc = keras.Sequential([keras.Input((6,)), L.Dense(8, activation="relu"), L.Dense(1, activation="sigmoid")])
    disc.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    real = rng.uniform(-1, 1, (16, 6)).astype(np.float32)
    ones, zeros = np.ones((16, 1), np.float32), np.zeros((16, 1), np.float32)
    disc.train_on_batch(real, ones)              # cached with the discriminator trainable
    disc.trainable = False
    gan = keras.Sequential([gen, disc])
    gan.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    for step in range(4):
        noise = rng.standard_normal((16, 4)).astype(np.float32)
        fake = gen.predict(noise, batch_size=16, verbose=0)
        np.testing.assert_allclose(fake, np.tanh(_forward_gen(gen, noise)), rtol=1e-5, atol=1e-5)
        d0, g0 = _weights(disc), _weights(gen)
        disc.train_on_batch(real, ones)
        disc.train_on_batch(fake, zeros)
        d1 = _weights(disc)
        assert not _same(d0, d1), f"step {step}: the discriminator's own step did not train it"
        want = _bce(_forward(disc, np.tanh(_forward_gen(gen, noise))), ones)
        assert gan.train_on_batch(noise, ones) == pytest.approx(want, rel=1e-4, abs=1e-6)
        assert _same(d1, disc.get_weights()), f"step {step}: gan.train_on_batch moved the frozen discriminator"
        assert not _same(g0, gen.get_weights()), f"step {step}: gan.train_on_batch left the generator"


def _forward_gen(gen, x):
    (w1, b1), (w2, b2) = [layer.get_weights() for layer in gen.layers]
    return np.maximum(x.astype(np.float64) @ w1 + b1, 0.0) @ w2 + b2


def test_compile_and_trainable_drop_the_cached_calls():
    rng = np.random.default_rng()
    m = _mlp(7)
    m.compile(optimizer="sgd", loss="mse")
    x, y = _data(rng)
    p = _forward(m, x)
    assert m.test_on_batch(x, y) == pytest.approx(float(np.mean((p - y) ** 2)), rel=1e-4)
    assert len(m._calls) == 1
    m.compile(optimizer="sgd", loss="binary_crossentropy")           # same signature, new loss
    assert len(m._calls) == 0
    assert m.test_on_batch(x, y) == pytest.approx(_bce(p, y), rel=1e-4)
    m.trainable = False
    assert len(m._calls) == 0
    m.compile(optimizer="sgd", loss="binary_crossentropy")
    w0 = _weights(m)
    m.train_on_batch(x, y)
    assert _same(w0, m.get_weights()), "a model compiled frozen trained"
    m.trainable = True
    m.compile(optimizer="sgd", loss="binary_crossentropy")
    m.train_on_batch(x, y)
    assert not _same(w0, m.get_weights()), "a model compiled trainable did not train"


def test_add_and_pop_drop_the_cached_calls():
    rng = np.random.default_rng()
    m = _mlp(8, outputs=3, out_act="linear")
    x = rng.standard_normal((6, 5)).astype(np.float32)
    assert m.predict_on_batch(x).shape == (6, 3)
    m.add(L.Dense(2))
    assert m.predict_on_batch(x).shape == (6, 2)
    assert m.predict(x, verbose=0).shape == (6, 2)
    m.pop()
    np.testing.assert_allclose(m.predict_on_batch(x), _forward(m, x), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ bad input after a good call

def test_bad_inputs_after_a_good_call_raise_and_leave_the_weights():
    rng = np.random.default_rng()
    m = _mlp(9)
    m.compile(optimizer="adam", loss="binary_crossentropy")
    x, y = _data(rng)
    m.train_on_batch(x, y)
    m.predict(x, verbose=0)
    w0 = _weights(m)
    with pytest.raises(ValueError, match=r"shape \(16, 6\).*expects"):
        m.train_on_batch(rng.standard_normal((16, 6)).astype(np.float32), y)
    with pytest.raises(ValueError, match=r"shape \(16, 6\).*expects"):
        m.predict(rng.standard_normal((16, 6)).astype(np.float32), verbose=0)
    with pytest.raises(TypeError, match="must hold numbers"):
        m.train_on_batch(np.full((16, 5), "a"), y)
    with pytest.raises(ValueError, match="cardinality"):
        m.train_on_batch(x, y[:15])
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"x contains NaN or Inf.*x\[3, 2\] = nan"):
        m.train_on_batch(bad, y)
    with pytest.raises(ValueError, match=r"x contains NaN or Inf.*x\[3, 2\] = nan"):
        m.predict_on_batch(bad)
    m.predict(x, batch_size=4, verbose=0)              # a cached signature of several batches
    with pytest.raises(ValueError, match=r"x contains NaN or Inf.*x\[3, 2\] = nan"):
        m.predict(bad, batch_size=4, verbose=0)
    bad_y = y.copy()
    bad_y[7, 0] = np.nan
    with pytest.raises(ValueError, match=r"y contains NaN or Inf.*y\[7, 0\] = nan"):
        m.train_on_batch(x, bad_y)
    with pytest.raises(ValueError, match=r"y contains NaN or Inf"):
        m.test_on_batch(x, bad_y)
    big = x.astype(np.float64)
    big[0, 0] = 1e300                                 # finite in float64, Inf in float32
    with pytest.raises(ValueError, match="beyond float32 range"):
        m.train_on_batch(big, y)
    assert _same(w0, m.get_weights())
    m.train_on_batch(x, y)                            # and good calls still work
    assert not _same(w0, m.get_weights())


def test_the_plan_refuses_nan_and_inf_in_a_batch_itself():
    """Repeated calls leave the NaN / Inf check to the plan (stage.c checks while copying the
    batch in): the plan must refuse a bad value anywhere -- first, last, either side of the
    check's 4096-value chunks -- in an input or the labels, before any of the step runs."""
    from gpucmp import _core
    rng = np.random.default_rng()
    n, width = 2053, 7                       # 14,371 values: 3 whole chunks and a tail
    keras.utils.set_random_seed(5)
    m = keras.Sequential([keras.Input((width,)), L.Dense(3, activation="relu"), L.Dense(1, activation="sigmoid")])
    m.compile(optimizer="adam", loss="binary_crossentropy")
    x = rng.standard_normal((n, width)).astype(np.float32)
    y = (rng.random((n, 1)) < 0.5).astype(np.float32)
    m.train_on_batch(x, y)
    plan = m._train_plan(n, m._train_config(y.shape), [x])
    hp = m.optimizer.hparams()
    w0 = _weights(m)
    for where in (0, 4095, 4096, 8191, 8192, int(rng.integers(0, x.size)), x.size - 1):
        for value in (np.nan, np.inf, -np.inf):
            bad = x.copy()
            bad.reshape(-1)[where] = value
            with pytest.raises(_core.NonFiniteError, match="input 0 contains NaN or Inf"):
                plan.train_step(bad, y, hp, 0)
            with pytest.raises(_core.NonFiniteError, match="input 0"):
                plan.predict(bad)
    bad_y = y.copy()
    bad_y[int(rng.integers(0, n)), 0] = np.nan
    with pytest.raises(_core.NonFiniteError, match="label array contains NaN or Inf"):
        plan.train_step(x, bad_y, hp, 0)
    with pytest.raises(_core.NonFiniteError, match="label array"):
        plan.eval_step(x, bad_y)
    assert issubclass(_core.NonFiniteError, ValueError)
    assert _same(w0, m.get_weights())
    big = np.full_like(x, np.finfo(np.float32).max)
    plan.predict(big)                        # the largest finite float32 is not refused
    m.train_on_batch(x, y)
    assert not _same(w0, m.get_weights())


def test_large_finite_float32_values_pass_and_inf_does_not():
    m = _mlp(10, out_act="linear")
    x = np.full((4, 5), 3e30, np.float32)
    assert m.predict_on_batch(x).shape == (4, 1)      # finite: no error
    for v in (np.inf, -np.inf):
        bad = x.copy()
        bad[1, 3] = v
        with pytest.raises(ValueError, match=r"x\[1, 3\] = -?inf"):
            m.predict_on_batch(bad)


def test_embedding_ids_outside_the_table_raise_after_good_calls():
    rng = np.random.default_rng()
    keras.utils.set_random_seed(11)
    m = keras.Sequential([keras.Input((3,)), L.Embedding(10, 4), L.Flatten(), L.Dense(1, activation="sigmoid")])
    m.compile(optimizer="adam", loss="binary_crossentropy")
    y = np.ones((8, 1), np.float32)
    for _ in range(4):
        m.train_on_batch(rng.integers(0, 10, (8, 3)).astype(np.float32), y)
    bad = rng.integers(0, 10, (8, 3)).astype(np.float32)
    bad[2, 1] = 12
    with pytest.raises((ValueError, IndexError), match="outside"):
        m.train_on_batch(bad, y)


# ------------------------------------------------------------------ on the GPU, against the CPU

def _gan_calls(device, seed=12, steps=6, batch=32):
    """Loss per call and the final weights of a small GAN loop on `device`."""
    gpucmp.set_device(device)
    keras.utils.set_random_seed(seed)
    gen = keras.Sequential([keras.Input((10,)), L.Dense(16, activation="relu"), L.Dense(12, activation="tanh")])
    disc = keras.Sequential([keras.Input((12,)), L.Dense(16, activation="relu"), L.Dense(1, activation="sigmoid")])
    disc.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    disc.trainable = False
    gan = keras.Sequential([gen, disc])
    gan.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    rng = np.random.default_rng(seed)
    ones, zeros = np.ones((batch, 1), np.float32), np.zeros((batch, 1), np.float32)
    out, fakes = [], []
    for _ in range(steps):
        noise = rng.standard_normal((batch, 10)).astype(np.float32)
        real = rng.uniform(-1, 1, (batch, 12)).astype(np.float32)
        fake = gen.predict(noise, batch_size=batch, verbose=0)
        fakes.append((fake, fake.copy()))
        out.append(disc.train_on_batch(real, ones))
        out.append(disc.train_on_batch(fake, zeros))
        d1 = _weights(disc)
        out.append(gan.train_on_batch(rng.standard_normal((batch, 10)).astype(np.float32), ones))
        assert _same(d1, disc.get_weights())
    for f, c in fakes:
        assert np.array_equal(f, c)
    return np.array(out), gen.get_weights() + disc.get_weights()


@pytest.fixture
def restore_device():
    dev = gpucmp.get_device()
    yield
    gpucmp.set_device(dev)


@pytest.mark.cuda
def test_gan_loop_on_cuda_matches_the_cpu(restore_device):
    losses_cpu, w_cpu = _gan_calls("cpu")
    losses_gpu, w_gpu = _gan_calls("cuda:0")
    np.testing.assert_allclose(losses_gpu, losses_cpu, rtol=5e-3, atol=1e-4)
    for a, b in zip(w_gpu, w_cpu):
        np.testing.assert_allclose(a, b, rtol=5e-3, atol=5e-4)


@pytest.mark.cuda
def test_batch_calls_on_cuda_follow_new_inputs(restore_device):
    gpucmp.set_device("cuda:0")
    test_train_on_batch_losses_and_weights_follow_fit_call_after_call()
    test_predict_and_predict_on_batch_follow_new_inputs_and_return_owned_arrays()
    test_bad_inputs_after_a_good_call_raise_and_leave_the_weights()
    test_gan_pattern_frozen_discriminator_stays_bit_identical()


@pytest.mark.cuda
def test_embedding_errors_still_raise_after_graph_replays_on_cuda(restore_device):
    gpucmp.set_device("cuda:0")
    test_embedding_ids_outside_the_table_raise_after_good_calls()


def test_the_staged_upload_path_on_the_cpu():
    """GPUCMP_PLAN_STAGE=1 makes CPU plans go through their staging buffer (csrc/plan/stage.c)
    as CUDA plans do: the call-after-call tests above must pass that way too."""
    import os
    import subprocess
    import sys
    names = ["test_train_on_batch_losses_and_weights_follow_fit_call_after_call",
             "test_test_on_batch_matches_evaluate_and_numpy_with_metrics",
             "test_predict_and_predict_on_batch_follow_new_inputs_and_return_owned_arrays",
             "test_gan_pattern_frozen_discriminator_stays_bit_identical",
             "test_bad_inputs_after_a_good_call_raise_and_leave_the_weights",
             "test_the_plan_refuses_nan_and_inf_in_a_batch_itself",
             "test_embedding_ids_outside_the_table_raise_after_good_calls"]
    env = dict(os.environ, GPUCMP_PLAN_STAGE="1")
    here = os.path.abspath(__file__)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", " or ".join(names), here], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(here), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert f"{len(names)} passed" in r.stdout, r.stdout[-2000:]


def test_cuda_stream_syncs_is_none_or_a_count():
    from gpucmp import _core
    n = _core.cuda_stream_syncs()
    assert n is None or (isinstance(n, int) and n >= 0)


@pytest.mark.cuda
def test_replayed_calls_wait_for_the_device_once_on_cuda(restore_device):
    """A train_on_batch replaying its step graph waits once (the totals read: its inputs,
    labels, {lr, t} and seed go up through the plan's page-locked stage without a wait);
    predict once (its output). Was ~5 and 2 before stage.c."""
    from gpucmp import _core
    gpucmp.set_device("cuda:0")
    keras.utils.set_random_seed(13)
    gen = keras.Sequential([keras.Input((10,)), L.Dense(16, activation="relu"), L.Dense(12, activation="tanh")])
    disc = keras.Sequential([keras.Input((12,)), L.Dense(16, activation="relu"), L.Dense(1, activation="sigmoid")])
    disc.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    disc.trainable = False
    gan = keras.Sequential([gen, disc])
    gan.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    rng = np.random.default_rng(13)
    b = 32
    ones = np.ones((b, 1), np.float32)
    calls = {
        "predict": lambda: gen.predict(rng.standard_normal((b, 10)).astype(np.float32), batch_size=b, verbose=0),
        "disc.train_on_batch": lambda: disc.train_on_batch(rng.uniform(-1, 1, (b, 12)).astype(np.float32), ones),
        "gan.train_on_batch": lambda: gan.train_on_batch(rng.standard_normal((b, 10)).astype(np.float32), ones),
    }
    for fn in calls.values():          # eager step, capture, first replays
        for _ in range(3):
            fn()
    n = 5
    waits = {}
    for name, fn in calls.items():
        s0 = _core.cuda_stream_syncs()
        for _ in range(n):
            fn()
        waits[name] = (_core.cuda_stream_syncs() - s0) / n
    assert waits == {name: 1.0 for name in calls}, waits
