"""recurrent_dropout of SimpleRNN, LSTM and GRU through the plan (RECURRENT_SPEC 1.7,
Keras' implementation 1): in training, masks on h_{t-1} drawn once per batch and reused
at every step, one per gate (SimpleRNN 1, LSTM 4, GRU 3) in that gate's recurrent
product; with recurrent_dropout != 0 an LSTM / GRU also draws its input dropout as one
mask per gate; not training, the identity.

How the masks are seen without a hook into the plan (Keras' RNG cannot be matched either):
with one batch row, a masked unit i of gate g contributes exact zeros to row i of that
gate's column block of dU (h_{t-1}[i] * m_g[i] = 0 at every step) and of dW
(x_t[i] * m_g[i] = 0), so one SGD step's weight change shows every mask's support. The
tests check (a) the keep rate per gate, gates independent of each other, and one mask for
all steps (fresh masks per step would zero a row only where every step's mask does:
keep rate 1 - rate^T instead of 1 - rate); (b) that the float64 oracle (tests/reference.py,
rnn_forward / rnn_backward with rmask, the per-gate input masks applied to x) with the
recovered masks scaled by 1/(1 - rate) reproduces every weight gradient and the training
loss; (c) with several rows, the gradient of one training step against central
differences of the training loss, the masks held fixed (a seeded layer and the
optimizer's iteration counter reset: the same masks every call); (d) training=False is
exactly the model without dropout, and matches Keras' predictions with weights copied;
(e) the rate-1 quirks (SimpleRNN drops h entirely, LSTM / GRU ignore rate 1).
"""
import numpy as np
import pytest

import reference as R
from keras_reference import fresh_sessions, keras3  # noqa: F401 (autouse fixture)
from gpucmp import keras as gk

keras = keras3()

CELLS = [("SimpleRNN", {}, "simple"), ("LSTM", {}, "lstm"), ("GRU", {}, "gru"),
         ("GRU", {"reset_after": False}, "gru_reset_before")]
IDS = [c[2] for c in CELLS]


@pytest.fixture
def rng():
    return np.random.default_rng()


def _model(K, name, kw, u, T, F, **layer_kw):
    layer = getattr(K.layers, name)(u, return_sequences=True, **kw, **layer_kw)
    return layer, K.Sequential([K.Input((T, F)), layer])


def _rand_weights(layer, rng, scale=0.5):
    return [rng.uniform(-scale, scale, w.shape).astype(np.float32) for w in layer.get_weights()]


def _sgd_grads(model, layer, w, x, t, lr):
    """(training loss, [gradient of each weight]) of one SGD step from weights w."""
    layer.set_weights(w)
    model.optimizer.iterations = 0  # a seeded layer: the same masks at every call
    loss = float(model.train_on_batch(x, t))
    return loss, [(np.asarray(a, np.float64) - np.asarray(b, np.float64)) / lr
                  for a, b in zip(w, layer.get_weights())]


def _away_from_zero(rng, shape):
    """Inputs with |x| in [0.5, 1.5]: no product with them vanishes by accident."""
    return (rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.5, shape)).astype(np.float32)


# A large learning rate: w - lr * g never rounds back to w, so a zero in (w - w') / lr is a
# zero gradient (and the gradient keeps float32's relative precision)
LR = 1000.0


def _support(block, u):
    """(in or u, G*u) gradient -> (G, rows) bool: rows of each gate block that are not all zero."""
    return np.stack([np.any(block[:, g * u:(g + 1) * u] != 0.0, axis=1) for g in range(block.shape[1] // u)])


# ------------------------------------------------------------------ (a) the masks' structure

@pytest.mark.parametrize("name,kw,cell", CELLS, ids=IDS)
def test_recurrent_masks_are_per_gate_and_reused_at_every_step(rng, name, kw, cell):
    u, T, F, rate = 300, 3, 2, 0.4
    layer, model = _model(gk, name, kw, u, T, F, recurrent_dropout=rate)
    model.compile(optimizer=gk.optimizers.SGD(LR), loss="mse")
    w = _rand_weights(layer, rng, 0.1)
    x = _away_from_zero(rng, (1, T, F))
    _, g = _sgd_grads(model, layer, w, x, rng.standard_normal((1, T, u)).astype(np.float32), LR)
    kept = _support(g[1], u)                                # (G, u) from dU
    sd = np.sqrt(rate * (1 - rate) / u)
    for k, row in enumerate(kept):
        # one mask for every step: keep 1 - rate (fresh masks per step would keep 1 - rate**2)
        assert abs(row.mean() - (1 - rate)) < 4.5 * sd, f"{cell} gate {k}: kept {row.mean():.3f}"
    for a in range(len(kept)):
        for b in range(a):
            assert (kept[a] == kept[b]).mean() < 0.8, f"{cell}: gates {a} and {b} share a mask"
    assert np.all(np.any(g[0] != 0.0, axis=1)), f"{cell}: no input dropout asked for, yet a kernel row is zero"


def test_simple_rnn_recurrent_mask_values_are_inverted_dropout(rng):
    """Linear SimpleRNN, kernel I, recurrent I, x_0 = 1 and x_1 = 0, one row: h_0 = 1,
    h_1 = m (training), so the recurrent kernel's mse gradient is (2 / N) m m^T with
    m_i in {0, 1 / (1 - rate)}."""
    u, rate = 400, 0.3
    layer, model = _model(gk, "SimpleRNN", {}, u, 2, u, activation=None, recurrent_dropout=rate)
    model.compile(optimizer=gk.optimizers.SGD(1.0), loss="mse")
    w = [np.eye(u, dtype=np.float32), np.eye(u, dtype=np.float32), np.zeros(u, np.float32)]
    x = np.zeros((1, 2, u), np.float32)
    x[0, 0] = 1.0
    _, g = _sgd_grads(model, layer, w, x, np.zeros((1, 2, u), np.float32), 1.0)
    scale = 2.0 / (2 * u)
    m = np.sqrt(np.maximum(np.diag(g[1]), 0.0) / scale)
    kept = m > 0
    np.testing.assert_allclose(m[kept], 1.0 / (1.0 - rate), rtol=1e-4)
    np.testing.assert_allclose(g[1], scale * np.outer(m, m), rtol=1e-4, atol=1e-9)
    assert abs(kept.mean() - (1 - rate)) < 4.5 * np.sqrt(rate * (1 - rate) / u)


def test_lstm_gru_input_dropout_becomes_one_mask_per_gate(rng):
    """With recurrent_dropout != 0 (implementation 1) the input masks differ by gate;
    without it one mask is shared by every gate (implementation 2)."""
    u, T, F, rate = 3, 2, 400, 0.5
    for name in ("LSTM", "GRU"):
        for rdrop, shared in ((0.0, True), (0.2, False), (1.0, False)):
            layer, model = _model(gk, name, {}, u, T, F, dropout=rate, recurrent_dropout=rdrop)
            model.compile(optimizer=gk.optimizers.SGD(LR), loss="mse")
            w = _rand_weights(layer, rng, 0.3)
            x = _away_from_zero(rng, (1, T, F))
            _, g = _sgd_grads(model, layer, w, x, rng.standard_normal((1, T, u)).astype(np.float32), LR)
            kept = _support(g[0], u)
            for row in kept:
                assert abs(row.mean() - (1 - rate)) < 4.5 * np.sqrt(rate * (1 - rate) / F), name
            same = all(np.array_equal(kept[0], k) for k in kept[1:])
            assert same == shared, (f"{name} recurrent_dropout={rdrop}: shared input mask {same}, expected "
                                    f"{shared}; rows kept per gate {kept.sum(1).tolist()}, differing from gate 0 "
                                    f"{[int((kept[0] != k).sum()) for k in kept]}")


# ------------------------------------------------------------------ (b) against the oracle

def _oracle_loss_grads(cell, w, x, t, in_masks, rmask, u):
    """The mse loss and its weight gradients by the oracle, with per-gate input masks
    in_masks (G, B, F) and the recurrent mask rmask (B, G*u)."""
    W, U = (np.asarray(a, np.float64) for a in w[:2])
    b = np.asarray(w[2], np.float64)
    bx, bh = (b[0], b[1]) if b.ndim == 2 else (b, None)
    G = W.shape[1] // u
    x = x.astype(np.float64)
    xg = [x * in_masks[k][:, None, :] for k in range(G)]
    xw = np.concatenate([xg[k] @ W[:, k * u:(k + 1) * u] for k in range(G)], axis=2) + bx
    kw = dict(cell=cell, activation="tanh", recurrent_activation="sigmoid", sequences=True)
    y = R.rnn_forward(xw, U, bh=bh, rmask=rmask, **kw)["y"]
    n = y.size
    dy = 2.0 * (y - t) / n
    o = R.rnn_backward(xw, U, bh=bh, rmask=rmask, dy=dy, **kw)
    B, T, _ = x.shape
    dxw = o["dxw"].reshape(B * T, G * u)
    dW = np.concatenate([xg[k].reshape(B * T, -1).T @ dxw[:, k * u:(k + 1) * u] for k in range(G)], axis=1)
    db = dxw.sum(0)
    if bh is not None:
        db = np.stack([db, o["dbh"]])
    return float(np.mean((y - t) ** 2)), [dW, o["dU"], db]


@pytest.mark.parametrize("name,kw,cell", CELLS, ids=IDS)
@pytest.mark.parametrize("dropout,rdrop", [(0.0, 0.4), (0.3, 0.5), (0.4, 1.0)])
def test_training_step_matches_the_oracle_with_the_recovered_masks(rng, name, kw, cell, dropout, rdrop):
    u, T, F = 24, 4, 20
    layer, model = _model(gk, name, kw, u, T, F, dropout=dropout, recurrent_dropout=rdrop, seed=11)
    model.compile(optimizer=gk.optimizers.SGD(LR), loss="mse")
    w = _rand_weights(layer, rng, 0.4)
    x = _away_from_zero(rng, (1, T, F))
    t = rng.standard_normal((1, T, u)).astype(np.float32)
    loss, g = _sgd_grads(model, layer, w, x, t, LR)
    G = g[1].shape[1] // u
    simple = cell == "simple"
    rd_on = 0 < rdrop < 1 or (simple and rdrop > 0)
    in_on = 0 < dropout < 1 or (simple and dropout > 0)
    per_gate = not simple and rdrop != 0.0
    in_kept = _support(g[0], u) if in_on else np.ones((G, F), bool)
    if in_on and not per_gate:
        assert all(np.array_equal(in_kept[0], k) for k in in_kept[1:])
    inv = lambda r: 1.0 / (1.0 - r) if r < 1.0 else 0.0  # noqa: E731 (SimpleRNN's rate 1: zeros)
    rm = _support(g[1], u) * inv(rdrop) if rd_on else None
    if not rd_on:
        assert np.all(_support(g[1], u)), f"{cell}: recurrent_dropout={rdrop} must not drop anything"
    in_masks = in_kept[:, None, :] * (inv(dropout) if in_on else 1.0)
    want_loss, want = _oracle_loss_grads(cell, w, x, t, in_masks, None if rm is None else rm.reshape(1, -1), u)
    what = f"{cell} dropout={dropout} recurrent_dropout={rdrop}"
    assert abs(loss - want_loss) <= 1e-5 * abs(want_loss) + 1e-7, f"{what}: loss {loss} vs oracle {want_loss}"
    for k, (a, b) in enumerate(zip(g, want)):
        err = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)
        assert err < 1e-4, f"{what}: weight {k}: rel. error {err:.2e} against the oracle"


# ------------------------------------------------------------------ (c) several rows: central differences

@pytest.mark.parametrize("name,kw,cell", CELLS, ids=IDS)
def test_gradients_with_fixed_masks_match_central_differences(rng, name, kw, cell):
    u, T, F, B = 5, 4, 3, 6
    layer, model = _model(gk, name, kw, u, T, F, dropout=0.3, recurrent_dropout=0.4, seed=5)
    model.compile(optimizer=gk.optimizers.SGD(1.0), loss="mse")
    w = _rand_weights(layer, rng, 0.6)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    t = rng.standard_normal((B, T, u)).astype(np.float32)
    loss0, g = _sgd_grads(model, layer, w, x, t, 1.0)
    loss1, _ = _sgd_grads(model, layer, w, x, t, 1.0)
    assert loss0 == loss1, "the same seed and iteration must draw the same masks"
    eps = 1e-2
    for k in range(3):
        for _ in range(4):
            idx = tuple(int(rng.integers(0, s)) for s in w[k].shape)
            wp, wm = [a.copy() for a in w], [a.copy() for a in w]
            wp[k][idx] += eps
            wm[k][idx] -= eps
            fd = (_sgd_grads(model, layer, wp, x, t, 1.0)[0] - _sgd_grads(model, layer, wm, x, t, 1.0)[0]) / (2 * eps)
            assert abs(g[k][idx] - fd) <= 3e-4 + 2e-2 * abs(fd), \
                f"{cell}: weight {k}{list(idx)}: step gradient {g[k][idx]:.6g}, central difference {fd:.6g}"
    # and the masks do something: the training loss differs from the dropout-free one
    plain_layer, plain = _model(gk, name, kw, u, T, F)
    plain.compile(optimizer=gk.optimizers.SGD(1.0), loss="mse")
    assert _sgd_grads(plain, plain_layer, w, x, t, 1.0)[0] != loss0


# ------------------------------------------------------------------ (d) not training; Keras

@pytest.mark.parametrize("name,kw,cell", CELLS, ids=IDS)
def test_not_training_is_exactly_no_dropout_and_matches_keras(rng, name, kw, cell):
    u, T, F, B = 6, 5, 4, 7
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    t = rng.standard_normal((B, T, u)).astype(np.float32)
    ld, md = _model(gk, name, kw, u, T, F, dropout=0.3, recurrent_dropout=0.4)
    lp, mp = _model(gk, name, kw, u, T, F)
    lk, mk = _model(keras, name, kw, u, T, F, dropout=0.3, recurrent_dropout=0.4)
    assert [a.shape for a in lk.get_weights()] == [a.shape for a in ld.get_weights()]
    w = _rand_weights(ld, rng)
    for lyr in (ld, lp, lk):
        lyr.set_weights(w)
    for m in (md, mp):
        m.compile(optimizer=gk.optimizers.SGD(0.1), loss="mse")
    np.testing.assert_array_equal(md.predict(x, verbose=0), mp.predict(x, verbose=0))
    assert md.evaluate(x, t, verbose=0) == mp.evaluate(x, t, verbose=0)
    np.testing.assert_allclose(md.predict(x, verbose=0), mk.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    cfg = ld.get_config()
    assert cfg["recurrent_dropout"] == 0.4 and lk.get_config()["recurrent_dropout"] == 0.4
    assert type(ld).from_config(cfg).get_config() == cfg


# ------------------------------------------------------------------ (e) rate 1

def test_rate_one_drops_simple_rnn_state_and_is_ignored_by_lstm_gru(rng):
    u, T, F, B = 4, 3, 2, 3
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    t = rng.standard_normal((B, T, u)).astype(np.float32)
    layer, model = _model(gk, "SimpleRNN", {}, u, T, F, recurrent_dropout=1.0)
    model.compile(optimizer=gk.optimizers.SGD(1.0), loss="mse")
    w = _rand_weights(layer, rng)
    loss, g = _sgd_grads(model, layer, w, x, t, 1.0)
    assert np.all(g[1] == 0.0)                       # h_{t-1} * 0: no recurrent-kernel gradient
    zl, zm = _model(gk, "SimpleRNN", {}, u, T, F)
    zm.compile(optimizer=gk.optimizers.SGD(1.0), loss="mse")
    w0 = [w[0], np.zeros_like(w[1]), w[2]]
    loss0, g0 = _sgd_grads(zm, zl, w0, x, t, 1.0)   # the same as a zero recurrent kernel
    # to rounding: with a mask the CPU runs the stepwise recurrence, without one the fused
    # kernels (cpu.rnn.simd), whose vector tanh and fused multiply-adds round differently
    assert loss == pytest.approx(loss0, rel=1e-6)
    np.testing.assert_allclose(g[0], g0[0], rtol=1e-6, atol=1e-7)
    for name, kw, _ in CELLS[1:]:
        results = []
        for rd in (0.0, 1.0):
            lyr, m = _model(gk, name, kw, u, T, F, recurrent_dropout=rd)
            m.compile(optimizer=gk.optimizers.SGD(0.5), loss="mse")
            results.append(_sgd_grads(m, lyr, _rand_weights(lyr, np.random.default_rng(3)), x, t, 0.5))
        assert results[0][0] == results[1][0], name
        for a, b in zip(results[0][1], results[1][1]):
            np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ CUDA

@pytest.mark.cuda
@pytest.mark.parametrize("name,kw,cell", CELLS, ids=IDS)
def test_cuda_recurrent_dropout_matches_the_cpu(rng, name, kw, cell):
    """Both dropouts on CUDA: the masks are the same pure function of (seed, index) on
    both backends, so a training step's loss and every weight gradient match the CPU's
    (float32, different summation orders: a tolerance, not bit equality), and the dropout
    is exactly the identity in predict."""
    import gpucmp
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        pytest.skip("no CUDA device")
    u, T, F, B = 33, 7, 5, 9
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    t = rng.standard_normal((B, T, u)).astype(np.float32)
    w = None
    out = {}
    for dev in ("cpu", "cuda:0"):
        gpucmp.set_device(dev)
        try:
            layer, model = _model(gk, name, kw, u, T, F, dropout=0.25, recurrent_dropout=0.4, seed=9)
            model.compile(optimizer=gk.optimizers.SGD(1.0), loss="mse")
            if w is None:
                w = _rand_weights(layer, rng)
            out[dev] = _sgd_grads(model, layer, w, x, t, 1.0)
            layer.set_weights(w)
            plain_l, plain_m = _model(gk, name, kw, u, T, F)
            plain_l.set_weights(w)
            np.testing.assert_array_equal(model.predict(x, verbose=0), plain_m.predict(x, verbose=0))
        finally:
            gpucmp.set_device("cpu")
    (lc, gc_), (lg, gg) = out["cpu"], out["cuda:0"]
    assert abs(lc - lg) <= 1e-5 * max(1.0, abs(lc)), (lc, lg)
    for a, b in zip(gc_, gg):
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-5)
    assert any(np.any(g != 0) for g in gg)
