"""gpucmp.keras's Embedding, SimpleRNN, LSTM and GRU through the execution plan.

Each test draws fresh random weights and inputs and checks the layer against the float64
oracle (tests/reference.py: rnn_forward / rnn_backward, written from Keras' formulas):
predictions, and the gradients one SGD step applies to every weight (kernel, recurrent
kernel, bias -- GRU's two bias rows -- and the embeddings). Also: Keras' weight shapes
and initial values, the seeds' two recurrent programs (parameter counts, training on a
learnable task), mixed precision and the CUDA backend (skipped without a GPU). Masks,
states, stateful layers and dropout: test_keras_recurrent_features.py; recurrent_dropout:
test_keras_recurrent_dropout.py.
"""
import numpy as np
import pytest

import reference as R
from gpucmp import keras
from gpucmp.harness.workloads.seeds import build_seed_lstm, build_seed_rnn

CELLS = [("SimpleRNN", {}, "simple", 1), ("LSTM", {}, "lstm", 4), ("GRU", {}, "gru", 3),
         ("GRU", {"reset_after": False}, "gru_reset_before", 3)]


@pytest.fixture
def rng():
    return np.random.default_rng()


def _layer(name, kw, units, **more):
    return getattr(keras.layers, name)(units, **kw, **more)


def _oracle_inputs(layer, x):
    """xw = x W + b_x, U and bh (GRU reset_after) as the oracle takes them, in float64."""
    W, U = (np.asarray(w, np.float64) for w in layer.get_weights()[:2])
    b = np.asarray(layer.get_weights()[2], np.float64) if layer.use_bias else None
    bh = None
    if b is not None and b.ndim == 2:
        b, bh = b[0], b[1]
    xw = np.einsum("bti,ij->btj", x.astype(np.float64), W) + (0.0 if b is None else b)
    return xw, U, bh


def _randomize(layer, rng, scale=0.5):
    layer.set_weights([rng.uniform(-scale, scale, w.shape).astype(np.float32) for w in layer.get_weights()])


@pytest.mark.parametrize("name,kw,cell,gates", CELLS)
@pytest.mark.parametrize("return_sequences", [False, True])
@pytest.mark.parametrize("go_backwards", [False, True])
def test_forward_matches_the_oracle(rng, name, kw, cell, gates, return_sequences, go_backwards):
    B, T, F, u = int(rng.integers(1, 5)), int(rng.integers(1, 7)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    layer = _layer(name, kw, u, return_sequences=return_sequences, go_backwards=go_backwards)
    model = keras.models.Sequential([keras.layers.Input((T, F)), layer])
    _randomize(layer, rng)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    y = model.predict(x, verbose=0)
    xw, U, bh = _oracle_inputs(layer, x)
    ref = R.rnn_forward(xw, U, bh=bh, cell=cell, go_backwards=go_backwards, sequences=return_sequences)["y"]
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name,kw,cell,gates", CELLS)
@pytest.mark.parametrize("return_sequences", [False, True])
def test_one_sgd_step_applies_the_oracle_gradients(rng, name, kw, cell, gates, return_sequences):
    """loss = mse(rnn(x), t); one SGD step moves each weight by -lr * its gradient, which is
    rebuilt in float64 from the oracle's BPTT (dxw, dm) the way Keras' autodiff has it."""
    B, T, F, u = int(rng.integers(2, 5)), int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(2, 7))
    go_back = bool(rng.integers(0, 2))
    layer = _layer(name, kw, u, return_sequences=return_sequences, go_backwards=go_back)
    model = keras.models.Sequential([keras.layers.Input((T, F)), layer])
    _randomize(layer, rng)
    lr = 0.1
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    t = rng.standard_normal((B, T, u) if return_sequences else (B, u)).astype(np.float32)
    before = [np.asarray(w, np.float64) for w in layer.get_weights()]
    xw, U, bh = _oracle_inputs(layer, x)
    fwd = R.rnn_forward(xw, U, bh=bh, cell=cell, go_backwards=go_back, sequences=return_sequences)
    dy = 2.0 * (fwd["y"] - t) / (t.size / B) / B       # Keras' mean over the last axis, then the batch
    bwd = R.rnn_backward(xw, U, bh=bh, dy=dy, cell=cell, go_backwards=go_back, sequences=return_sequences)
    model.train_on_batch(x, t)
    after = [np.asarray(w, np.float64) for w in layer.get_weights()]
    x64 = x.astype(np.float64).reshape(B * T, F)
    dxw = bwd["dxw"].reshape(B * T, -1)
    want = [x64.T @ dxw, bwd["dU"]]
    if layer.use_bias:
        db = dxw.sum(0)
        want.append(np.stack([db, bwd["dm"].reshape(B * T, -1).sum(0)]) if cell == "gru" else db)
    for w0, w1, g, what in zip(before, after, want, ("kernel", "recurrent_kernel", "bias")):
        np.testing.assert_allclose((w0 - w1) / lr, g, rtol=2e-4, atol=2e-6, err_msg=f"{name} {kw} {what}")


def test_embedding_gathers_rows_and_rejects_bad_ids(rng):
    V, D, T = int(rng.integers(3, 40)), int(rng.integers(1, 9)), int(rng.integers(1, 8))
    emb = keras.layers.Embedding(V, D, input_length=T)
    model = keras.models.Sequential([emb])
    ids = rng.integers(0, V, (3, T))
    table = emb.get_weights()[0]
    np.testing.assert_array_equal(model.predict(ids, verbose=0), table[ids])
    assert np.all(np.abs(table) <= 0.05) and table.std() > 0      # Keras' "uniform" default
    for bad in (V, -1):
        ids2 = ids.copy()
        ids2[-1, -1] = bad
        with pytest.raises((ValueError, IndexError), match="outside"):
            model.predict(ids2, verbose=0)


def test_embedding_gradient_reaches_only_the_rows_used(rng):
    V, D, T, u = 20, 4, 6, 5
    model = keras.models.Sequential([keras.layers.Embedding(V, D, input_length=T), keras.layers.LSTM(u),
                                     keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    ids = rng.integers(0, V // 2, (8, T))                    # rows V/2.. never used
    before = model.layers[0].get_weights()[0].copy()
    model.train_on_batch(ids, rng.standard_normal((8, 1)).astype(np.float32))
    after = model.layers[0].get_weights()[0]
    used = np.unique(ids)
    assert np.all(np.any(after[used] != before[used], axis=1))
    np.testing.assert_array_equal(after[V // 2:], before[V // 2:])


def test_keras_weight_shapes_and_initial_values():
    u, F = 6, 3
    lstm = keras.layers.LSTM(u)
    lstm.build((None, 4, F))
    k, r, b = lstm.get_weights()
    assert k.shape == (F, 4 * u) and r.shape == (u, 4 * u) and b.shape == (4 * u,)
    np.testing.assert_array_equal(b, np.r_[np.zeros(u), np.ones(u), np.zeros(2 * u)])   # unit_forget_bias
    np.testing.assert_allclose(r @ r.T, np.eye(u), atol=1e-5)                            # orthogonal rows
    gru = keras.layers.GRU(u)
    gru.build((None, 4, F))
    assert [w.shape for w in gru.get_weights()] == [(F, 3 * u), (u, 3 * u), (2, 3 * u)]
    gru0 = keras.layers.GRU(u, reset_after=False)
    gru0.build((None, 4, F))
    assert gru0.get_weights()[2].shape == (3 * u,)
    s = keras.layers.SimpleRNN(u, use_bias=False)
    s.build((None, 4, F))
    assert len(s.get_weights()) == 2
    np.testing.assert_allclose(s.get_weights()[1] @ s.get_weights()[1].T, np.eye(u), atol=1e-5)


def test_seed_programs_parameter_counts():
    assert build_seed_lstm(keras).count_params() == 2_758_410
    assert build_seed_rnn(keras).count_params() == 3_899_280


@pytest.mark.parametrize("which", ["rnn", "lstm"])
def test_seed_programs_learn_a_sequence_task(rng, which):
    """The seeds' recurrent programs at small sizes learn whether id 1 occurs in a sequence."""
    V, T = 12, 8
    build = build_seed_lstm if which == "lstm" else build_seed_rnn
    kw = {"num_classes": 2} if which == "lstm" else {}
    model = build(keras, vocab_size=V, sequence_length=T, loss="sparse_categorical_crossentropy", **kw)
    ids = rng.integers(2, V, (512, T))
    label = rng.integers(0, 2, 512)
    for i in np.flatnonzero(label):
        ids[i, rng.integers(0, T)] = 1
    hist = model.fit(ids, label, batch_size=32, epochs=12, verbose=0)
    assert hist.history["loss"][-1] < 0.5 * hist.history["loss"][0], hist.history["loss"]
    assert hist.history["accuracy"][-1] > 0.9, hist.history["accuracy"]


@pytest.mark.parametrize("policy,tol", [("mixed_float16", 3e-3), ("mixed_bfloat16", 3e-2)])
@pytest.mark.parametrize("name,kw,cell,gates", CELLS[:3])
def test_mixed_precision_stays_near_float32(rng, policy, tol, name, kw, cell, gates):
    T, F, u = 5, 3, 6
    x = rng.standard_normal((4, T, F)).astype(np.float32)
    weights = None
    outs = []
    for pol in ("float32", policy):
        keras.mixed_precision.set_global_policy(pol)
        try:
            layer = _layer(name, kw, u, return_sequences=True)
            model = keras.models.Sequential([keras.layers.Input((T, F)), layer])
        finally:
            keras.mixed_precision.set_global_policy("float32")
        if weights is None:
            _randomize(layer, rng)
            weights = layer.get_weights()
        layer.set_weights(weights)
        outs.append(np.asarray(model.predict(x, verbose=0), np.float32))
    np.testing.assert_allclose(outs[1], outs[0], atol=tol, rtol=tol)


@pytest.mark.cuda
@pytest.mark.parametrize("name,kw,cell,gates", CELLS)
def test_cuda_training_step_matches_the_cpu(rng, name, kw, cell, gates):
    import gpucmp
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        pytest.skip("no CUDA device")
    T, F, u, B = 7, 5, 16, 9
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    t = rng.standard_normal((B, u)).astype(np.float32)
    results, weights = [], None
    for dev in ("cpu", "cuda:0"):
        gpucmp.set_device(dev)
        try:
            layer = _layer(name, kw, u)
            model = keras.models.Sequential([keras.layers.Input((T, F)), layer])
            if weights is None:
                _randomize(layer, rng)
                weights = layer.get_weights()
            layer.set_weights(weights)
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
            y = model.predict(x, verbose=0)
            model.train_on_batch(x, t)
            results.append((y, layer.get_weights()))
        finally:
            gpucmp.set_device("cpu")
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-4, atol=1e-5)
    for a, b in zip(results[1][1], results[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_bad_shapes_and_activations_are_clear_errors():
    with pytest.raises(ValueError, match="ndim=3"):
        keras.models.Sequential([keras.layers.Input((5,)), keras.layers.SimpleRNN(3)])
    with pytest.raises(ValueError, match="activation"):
        keras.layers.GRU(3, activation="softmax")
    with pytest.raises(ValueError, match="units"):
        keras.layers.LSTM(0)


def test_config_round_trip():
    layer = keras.layers.GRU(5, reset_after=False, return_sequences=True, go_backwards=True,
                             recurrent_activation="hard_sigmoid")
    clone = keras.layers.GRU.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    e = keras.layers.Embedding(10, 3, input_length=4)
    assert keras.layers.Embedding.from_config(e.get_config()).get_config() == e.get_config()
