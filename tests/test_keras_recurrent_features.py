"""The recurrent layers' Keras arguments through the plan (RECURRENT_SPEC 1.6-1.9):
masks (Embedding(mask_zero=True), Masking; left / middle / right padding, go_backwards,
zero_output_for_mask), initial_state and return_state (values and the gradients that flow
into the initial states), stateful layers (carry-over, reset_states), dropout in
training (one mask reused at every step, Keras' rate-1 quirk), and the bad inputs each a
clear exception.

References: the float64 oracle (tests/reference.py rnn_forward, which takes masks and
initial states) and real Keras 3 on the JAX backend (weights copied with set_weights,
one SGD step compared weight by weight). Fresh random inputs in every test.
"""
import warnings

import numpy as np
import pytest

import reference as R
from keras_reference import fresh_sessions, keras3, rel_err  # noqa: F401 (autouse fixture)
from gpucmp import keras as gk

keras = keras3()

CELLS = [("SimpleRNN", {}, "simple"), ("LSTM", {}, "lstm"), ("GRU", {}, "gru"),
         ("GRU", {"reset_after": False}, "gru_reset_before")]


@pytest.fixture
def rng():
    return np.random.default_rng()


def _rand_weights(model, rng, scale=0.5):
    return [rng.uniform(-scale, scale, w.shape).astype(np.float32) for w in model.get_weights()]


def _padded_ids(rng, B, T, V):
    """ids in [1, V) with 0 (padding) on the left of row 0, in the middle of row 1, on the
    right of row 2, everywhere in row 3 and random elsewhere."""
    ids = rng.integers(1, V, (B, T))
    k = max(1, T // 3)
    ids[0, :k] = 0
    ids[1, k:2 * k] = 0
    ids[2, T - k:] = 0
    ids[3, :] = 0
    for b in range(4, B):
        ids[b, rng.random(T) < 0.3] = 0
    return ids


def _oracle_xw(layer, x):
    W, U = (np.asarray(w, np.float64) for w in layer.get_weights()[:2])
    b = np.asarray(layer.get_weights()[2], np.float64)
    bh = None
    if b.ndim == 2:
        b, bh = b
    return x.astype(np.float64) @ W + b, U, bh


def _sgd_step_both(build, rng, inputs, target_shape, lr=0.1):
    """The same model in Keras and gpucmp with the same random weights: predictions and
    the weights after one SGD step (mse)."""
    km, gm = build(keras), build(gk)
    for K, m in ((keras, km), (gk, gm)):
        m.compile(optimizer=K.optimizers.SGD(lr), loss="mse")
    w = _rand_weights(km, rng)
    km.set_weights(w)
    gm.set_weights(w)
    yk, yg = km.predict(inputs, verbose=0), gm.predict(inputs, verbose=0)
    t = rng.standard_normal(target_shape).astype(np.float32)
    km.train_on_batch(inputs, t)
    gm.train_on_batch(inputs, t)
    return yk, yg, km.get_weights(), gm.get_weights()


# ------------------------------------------------------------------ masks

@pytest.mark.parametrize("name,kw,cell", CELLS)
@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("zero_output", [False, True])
def test_embedding_mask_matches_the_oracle(rng, name, kw, cell, go_backwards, zero_output):
    V, T, D, u, B = 12, int(rng.integers(3, 8)), 3, int(rng.integers(2, 6)), 6
    emb = gk.layers.Embedding(V, D, mask_zero=True)
    layer = getattr(gk.layers, name)(u, return_sequences=True, go_backwards=go_backwards,
                                     zero_output_for_mask=zero_output, **kw)
    last = getattr(gk.layers, name)(u, go_backwards=go_backwards, zero_output_for_mask=zero_output, **kw)
    x_in = gk.Input((T,))
    e = emb(x_in)
    seq = gk.Model(x_in, layer(e))
    fin = gk.Model(x_in, last(e))
    for lyr in (layer, last):
        lyr.set_weights(_rand_weights(lyr, rng))
    ids = _padded_ids(rng, B, T, V)
    x = emb.get_weights()[0][ids]
    for lyr, model, sequences in ((layer, seq, True), (last, fin, False)):
        xw, U, bh = _oracle_xw(lyr, x)
        ref = R.rnn_forward(xw, U, bh=bh, mask=ids != 0, cell=cell, go_backwards=go_backwards,
                            sequences=sequences, zero_output_for_mask=zero_output)["y"]
        np.testing.assert_allclose(model.predict(ids, verbose=0), ref, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name,kw,cell", CELLS[:3])
def test_masked_training_matches_keras(rng, name, kw, cell):
    """Embedding(mask_zero) -> RNN -> RNN -> Dense: the mask reaches both recurrent layers
    (the first passes it on), forward and backward as Keras' autodiff has them."""
    V, T, D, u, B = 15, 7, 4, 5, 8
    go_back = bool(rng.integers(0, 2))

    def build(K):
        return K.Sequential([K.Input((T,)), K.layers.Embedding(V, D, mask_zero=True),
                             getattr(K.layers, name)(u, return_sequences=True, **kw),
                             getattr(K.layers, name)(u, go_backwards=go_back, **kw), K.layers.Dense(2)])
    ids = _padded_ids(rng, B, T, V)
    yk, yg, wk, wg = _sgd_step_both(build, rng, ids, (B, 2))
    assert rel_err(yg, yk) < 1e-5
    for a, b in zip(wg, wk):
        assert rel_err(a, b) < 1e-5


def test_masking_layer_matches_keras(rng):
    T, F, u, B = 6, 3, 4, 5

    def build(K):
        return K.Sequential([K.Input((T, F)), K.layers.Masking(mask_value=0.0),
                             K.layers.LSTM(u, return_sequences=True), K.layers.LSTM(u), K.layers.Dense(1)])
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    x[0, :2] = 0.0
    x[1, 3] = 0.0
    x[2, -1] = 0.0
    x[3, 2, 0] = 0.0          # one zero feature only: the step is kept
    yk, yg, wk, wg = _sgd_step_both(build, rng, x, (B, 1))
    assert rel_err(yg, yk) < 1e-5
    for a, b in zip(wg, wk):
        assert rel_err(a, b) < 1e-5


def test_layers_without_mask_support_drop_the_mask_with_a_warning(rng):
    T, V = 5, 9
    model = gk.Sequential([gk.Input((T,)), gk.layers.Embedding(V, 3, mask_zero=True), gk.layers.Flatten(),
                           gk.layers.Dense(2)])
    with pytest.warns(UserWarning, match="does not support masking"):
        model.predict(rng.integers(0, V, (2, T)), verbose=0)


def test_a_masked_model_output_trains_with_keras_masked_loss(rng):
    """The output's mask weights the loss per step as Keras 3 does (sum over the unmasked
    steps / their count); more cases in test_keras_bidirectional.py."""
    T, V, u, B = 5, 9, 3, 6

    def build(K):
        return K.Sequential([K.Input((T,)), K.layers.Embedding(V, 3, mask_zero=True),
                             K.layers.LSTM(u, return_sequences=True)])
    ids = _padded_ids(rng, B, T, V)
    yk, yg, wk, wg = _sgd_step_both(build, rng, ids, (B, T, u))
    assert rel_err(yg, yk) < 1e-5
    for a, b in zip(wg, wk):
        assert rel_err(a, b) < 1e-5


# ------------------------------------------------------------------ states

@pytest.mark.parametrize("name", ["SimpleRNN", "LSTM", "GRU"])
@pytest.mark.parametrize("return_sequences", [False, True])
def test_initial_state_and_return_state_match_keras(rng, name, return_sequences):
    """h0 (and c0) are Dense layers of a second input, so the Dense weights' SGD step is
    the gradient that flows into initial_state; the output concatenates [y, h(, c)]."""
    T, F, u, B, S = 5, 3, 4, 6, 2

    def build(K):
        x, s = K.Input((T, F)), K.Input((S,))
        states = [K.layers.Dense(u)(s) for _ in range(2 if name == "LSTM" else 1)]
        outs = getattr(K.layers, name)(u, return_state=True, return_sequences=return_sequences)(
            x, initial_state=states)
        assert len(outs) == 1 + len(states)
        y = K.layers.Flatten()(outs[0]) if return_sequences else outs[0]
        return K.Model([x, s], K.layers.Concatenate()([y] + list(outs[1:])))
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    s = rng.standard_normal((B, S)).astype(np.float32)
    n_out = (T if return_sequences else 1) * u + (2 if name == "LSTM" else 1) * u
    yk, yg, wk, wg = _sgd_step_both(build, rng, [x, s], (B, n_out))
    assert yg.shape == yk.shape == (B, n_out)
    assert rel_err(yg, yk) < 1e-5
    for a, b in zip(wg, wk):
        assert rel_err(a, b) < 1e-5


@pytest.mark.parametrize("name,cell", [("LSTM", "lstm"), ("GRU", "gru")])
def test_return_state_values_are_the_oracle_final_states(rng, name, cell):
    T, F, u, B = 6, 2, 3, 4
    x_in = gk.Input((T, F))
    layer = getattr(gk.layers, name)(u, return_state=True)
    outs = layer(x_in)
    models = [gk.Model(x_in, o) for o in outs]
    layer.set_weights(_rand_weights(layer, rng))
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    xw, U, bh = _oracle_xw(layer, x)
    ref = R.rnn_forward(xw, U, bh=bh, cell=cell)
    got = [m.predict(x, verbose=0) for m in models]
    want = [ref["y"], ref["h"]] + ([ref["c"]] if cell == "lstm" else [])
    assert len(got) == len(want)
    assert layer.output_shape == [(None, u)] * len(want)          # summary's Output Shape: one per output
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    assert not np.allclose(got[-1], got[0]) or cell != "lstm"      # c is not h


@pytest.mark.parametrize("name,cell", [("SimpleRNN", "simple"), ("LSTM", "lstm")])
def test_stateful_carries_states_across_batches_and_resets(rng, name, cell):
    T, F, u, B = 4, 3, 5, 3
    layer = getattr(gk.layers, name)(u, stateful=True, return_sequences=True)
    model = gk.Sequential([gk.Input((T, F), batch_size=B), layer])
    layer.set_weights(_rand_weights(layer, rng))
    assert len(layer.get_weights()) == 3                      # the states are not weights
    x = rng.standard_normal((B, 2 * T, F)).astype(np.float32)
    xw, U, bh = _oracle_xw(layer, x)
    ref = R.rnn_forward(xw, U, cell=cell, sequences=True)["y"]   # one long sequence
    y1 = model.predict(x[:, :T], batch_size=B, verbose=0)
    y2 = model.predict(x[:, T:], batch_size=B, verbose=0)
    np.testing.assert_allclose(np.concatenate([y1, y2], axis=1), ref, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(layer.states[0].numpy(), ref[:, -1], rtol=2e-5, atol=2e-6)
    model.reset_states()
    assert not np.any(layer.states[0].numpy())
    np.testing.assert_allclose(model.predict(x[:, :T], batch_size=B, verbose=0), y1, rtol=1e-6, atol=1e-7)
    layer.reset_states()
    # training also carries the states: a step from fresh states, then one more
    model.compile(optimizer=gk.optimizers.SGD(0.0), loss="mse")
    model.train_on_batch(x[:, :T], np.zeros((B, T, u), np.float32))
    np.testing.assert_allclose(layer.states[0].numpy(), ref[:, T - 1], rtol=2e-5, atol=2e-6)


def test_stateful_needs_a_static_batch_and_that_batch(rng):
    with pytest.raises(ValueError, match="stateful.*batch size must be static"):
        gk.Sequential([gk.Input((4, 2)), gk.layers.LSTM(3, stateful=True)])
    model = gk.Sequential([gk.Input((4, 2), batch_size=3), gk.layers.GRU(3, stateful=True)])
    with pytest.raises(ValueError, match="stateful with a batch size of 3.*2 rows"):
        model.predict(rng.standard_normal((2, 4, 2)).astype(np.float32), verbose=0)


def test_bad_initial_states_are_clear_errors():
    x = gk.Input((5, 3))
    with pytest.raises(ValueError, match=r"initial_state\[0\] must have shape \(batch, 4\).*\(None, 4, 2\)"):
        gk.layers.GRU(4)(x, initial_state=[gk.Input((4, 2))])
    with pytest.raises(ValueError, match=r"expects 2 initial state\(s\) \[h, c\].*received 1"):
        gk.layers.LSTM(4)(x, initial_state=[gk.Input((4,))])
    with pytest.raises(ValueError, match=r"initial_state\[1\].*\(None, 3\)"):
        gk.layers.LSTM(4)(x, initial_state=[gk.Input((4,)), gk.Input((3,))])


# ------------------------------------------------------------------ dropout

def _identity_rnn(units, rate, T):
    """A linear SimpleRNN with kernel I, recurrent 0, bias 0: y_t = x_t * mask."""
    layer = gk.layers.SimpleRNN(units, activation=None, dropout=rate, return_sequences=True)
    model = gk.Sequential([gk.Input((T, units)), layer])
    layer.set_weights([np.eye(units, dtype=np.float32), np.zeros((units, units), np.float32),
                       np.zeros(units, np.float32)])
    return layer, model


def test_dropout_is_one_mask_per_batch_reused_at_every_step(rng):
    """loss = mean(y^2) with y_t = x_t * m, x = 1: the kernel's gradient is
    (2 T / N) m m^T when every step uses the same mask m (per-step masks would give a
    matrix of smaller off-diagonal counts), each m_i in {0, 1/(1-rate)}."""
    u, T, rate = 400, 5, 0.3
    layer, model = _identity_rnn(u, rate, T)
    model.compile(optimizer=gk.optimizers.SGD(1.0), loss="mse")
    before = layer.get_weights()[0].astype(np.float64)
    model.train_on_batch(np.ones((1, T, u), np.float32), np.zeros((1, T, u), np.float32))
    g = before - layer.get_weights()[0].astype(np.float64)
    scale = 2.0 * T / (T * u)
    m = np.sqrt(np.maximum(np.diag(g), 0.0) / scale)
    kept = m > 0
    np.testing.assert_allclose(m[kept], 1.0 / (1.0 - rate), rtol=1e-4)
    np.testing.assert_allclose(g, scale * np.outer(m, m), rtol=1e-4, atol=1e-9)
    assert abs(kept.mean() - (1 - rate)) < 4 * np.sqrt(rate * (1 - rate) / u)
    # not training: exactly the identity
    x = rng.standard_normal((3, T, u)).astype(np.float32)
    layer.set_weights([np.eye(u, dtype=np.float32), np.zeros((u, u), np.float32), np.zeros(u, np.float32)])
    np.testing.assert_array_equal(model.predict(x, verbose=0), x)


def test_dropout_rate_one_zeros_simple_rnn_and_is_ignored_by_lstm_gru(rng):
    u, T = 6, 3
    layer, model = _identity_rnn(u, 1.0, T)
    model.compile(optimizer=gk.optimizers.SGD(1.0), loss="mse")
    w0 = layer.get_weights()[0].copy()
    model.train_on_batch(np.ones((2, T, u), np.float32), np.zeros((2, T, u), np.float32))
    np.testing.assert_array_equal(layer.get_weights()[0], w0)          # x * 0: no kernel gradient
    for name in ("LSTM", "GRU"):
        results = []
        w = None
        for rate in (0.0, 1.0):
            lyr = getattr(gk.layers, name)(u, dropout=rate)
            m = gk.Sequential([gk.Input((T, 2)), lyr])
            if w is None:
                w = _rand_weights(lyr, rng)
            lyr.set_weights(w)
            m.compile(optimizer=gk.optimizers.SGD(0.5), loss="mse")
            m.train_on_batch(np.ones((2, T, 2), np.float32), np.ones((2, u), np.float32))
            results.append(lyr.get_weights())
        for a, b in zip(*results):
            np.testing.assert_array_equal(a, b)


def test_lstm_dropout_applies_in_training_only(rng):
    """evaluate (not training) gives exactly the loss without dropout; a training step
    does not (its mask is applied)."""
    T, F, u, B = 4, 8, 3, 5
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    t = rng.standard_normal((B, u)).astype(np.float32)
    losses, w = [], None
    for rate in (0.0, 0.5):
        lyr = gk.layers.LSTM(u, dropout=rate)
        m = gk.Sequential([gk.Input((T, F)), lyr])
        if w is None:
            w = _rand_weights(lyr, rng)
        lyr.set_weights(w)
        m.compile(optimizer=gk.optimizers.SGD(0.1), loss="mse")
        losses.append((m.evaluate(x, t, verbose=0), m.train_on_batch(x, t)))
    assert losses[0][0] == losses[1][0]                       # evaluate: no dropout
    assert losses[0][1] != losses[1][1]                       # training: a mask applied


# ------------------------------------------------------------------ Embedding ids

def test_out_of_range_ids_fail_inside_fit(rng):
    V, T = 10, 4
    model = gk.Sequential([gk.Input((T,)), gk.layers.Embedding(V, 3, mask_zero=True), gk.layers.LSTM(2)])
    model.compile(optimizer="sgd", loss="mse")
    for bad in (V, -1):
        ids = rng.integers(0, V, (8, T))
        ids[5, 2] = bad
        with pytest.raises((IndexError, ValueError), match="outside"):
            model.fit(ids, np.zeros((8, 2), np.float32), batch_size=4, verbose=0)


# ------------------------------------------------------------------ CUDA

@pytest.mark.cuda
def test_cuda_out_of_range_ids_fail_in_replayed_steps(rng):
    """On a GPU the steps of fit and of train_on_batch replay captured graphs, whose
    embedding ops record a bad id without reading it back: the replayer reads it after
    the replays, so a bad id in a late batch is still an error naming it, and the model
    trains and predicts afterwards."""
    import gpucmp
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        pytest.skip("no CUDA device")
    V, T, B = 10, 4, 4
    gpucmp.set_device("cuda:0")
    try:
        model = gk.Sequential([gk.Input((T,)), gk.layers.Embedding(V, 3), gk.layers.LSTM(2)])
        model.compile(optimizer="sgd", loss="mse")
        y = np.zeros((B, 2), np.float32)
        for k in range(4):                                   # warm, capture, replays
            model.train_on_batch(rng.integers(0, V, (B, T)), y)
        for bad in (V, -1):
            ids = rng.integers(0, V, (B, T))
            ids[2, 1] = bad
            with pytest.raises((IndexError, ValueError), match="outside"):
                model.train_on_batch(ids, y)
            many = rng.integers(0, V, (8 * B, T))
            many[7 * B + 1, 3] = bad                         # in the last full batch
            with pytest.raises((IndexError, ValueError), match="outside"):
                model.fit(many, np.zeros((8 * B, 2), np.float32), batch_size=B, verbose=0, shuffle=False)
        ok = rng.integers(0, V, (B, T))
        assert np.isfinite(model.train_on_batch(ok, y))
        assert np.isfinite(model.predict(ok, verbose=0)).all()
    finally:
        gpucmp.set_device("cpu")


@pytest.mark.cuda
def test_cuda_masks_states_and_dropout_match_the_cpu(rng):
    import gpucmp
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        pytest.skip("no CUDA device")
    V, T, D, u, B = 20, 9, 5, 16, 8
    ids = _padded_ids(rng, B, T, V)
    s = rng.standard_normal((B, 3)).astype(np.float32)
    target = rng.standard_normal((B, 3 * u)).astype(np.float32)
    results, weights = [], None
    for dev in ("cpu", "cuda:0"):
        gpucmp.set_device(dev)
        try:
            x_in, s_in = gk.Input((T,)), gk.Input((3,))
            e = gk.layers.Embedding(V, D, mask_zero=True)(x_in)
            e = gk.layers.Masking()(gk.layers.SimpleRNN(D, return_sequences=True, go_backwards=True)(e))
            st = [gk.layers.Dense(u)(s_in), gk.layers.Dense(u)(s_in)]
            outs = gk.layers.LSTM(u, return_state=True, zero_output_for_mask=True)(e, initial_state=st)
            model = gk.Model([x_in, s_in], gk.layers.Concatenate()(list(outs)))
            if weights is None:
                weights = _rand_weights(model, rng)
            model.set_weights(weights)
            model.compile(optimizer=gk.optimizers.SGD(0.1), loss="mse")
            y = model.predict([ids, s], verbose=0)
            model.train_on_batch([ids, s], target)
            results.append((y, model.get_weights()))
            stateful = gk.layers.GRU(u, stateful=True)
            sm = gk.Sequential([gk.Input((T, D), batch_size=B), stateful])
            stateful.set_weights(_rand_weights(stateful, np.random.default_rng(7)))
            xs = np.random.default_rng(8).standard_normal((B, T, D)).astype(np.float32)
            sm.predict(xs, batch_size=B, verbose=0)
            results[-1] += (sm.predict(xs, batch_size=B, verbose=0),)
        finally:
            gpucmp.set_device("cpu")
    for a, b in zip(results[1][1], results[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(results[1][2], results[0][2], rtol=1e-4, atol=1e-5)
