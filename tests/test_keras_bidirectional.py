"""Bidirectional, masked losses, masks through merge layers and eager mask= / initial_state=
against real Keras 3 (JAX backend): the same random weights copied in, then predictions,
one SGD step's loss and updated weights (1e-5 relative), shapes, names, summaries, files,
and the bad inputs each a clear exception naming the argument. Masks pad on the left, in
the middle and on the right (and a fully padded row). CUDA versions compare the GPU plan
with the CPU one (marker `cuda`, skipped without a GPU).
"""
import itertools
import os

import numpy as np
import pytest

from keras_reference import fresh_sessions, keras3, rel_err  # noqa: F401 (autouse fixture)
from gpucmp import keras as gk

keras = keras3()

CELLS = ["SimpleRNN", "LSTM", "GRU"]
MODES = ["concat", "sum", "mul", "ave", None]


@pytest.fixture
def rng():
    return np.random.default_rng()


def _padded_ids(rng, B, T, V):
    ids = rng.integers(1, V, (B, T))
    k = max(1, T // 3)
    ids[0, :k] = 0              # left
    ids[1, k:2 * k] = 0         # middle
    ids[2, T - k:] = 0          # right
    ids[3, :] = 0               # everything
    return ids


def _copy_weights(km, gm, rng, scale=0.5):
    w = [rng.uniform(-scale, scale, x.shape).astype(np.float32) for x in km.get_weights()]
    km.set_weights(w)
    gm.set_weights(w)


def _step_both(build, rng, x, lr=0.1):
    km, gm = build(keras), build(gk)
    _copy_weights(km, gm, rng)
    pk, pg = km.predict(x, verbose=0), gm.predict(x, verbose=0)
    y = rng.standard_normal(pk.shape).astype(np.float32)
    for K, m in ((keras, km), (gk, gm)):
        m.compile(optimizer=K.optimizers.SGD(lr), loss="mse")
    lk, lg = km.train_on_batch(x, y), gm.train_on_batch(x, y)
    return pk, pg, float(lk), float(lg), km.get_weights(), gm.get_weights()


def _assert_step(res):
    pk, pg, lk, lg, wk, wg = res
    assert pg.shape == pk.shape
    assert rel_err(pg, pk) < 1e-5
    assert abs(lg - lk) <= 1e-5 * max(abs(lk), 1e-6)
    for a, b in zip(wg, wk):
        assert rel_err(a, b) < 1e-5


def _bidi_model(K, cell, T, V, merge_mode, return_sequences, return_state, masked, units=3):
    i = K.Input((T,))
    e = K.layers.Embedding(V, 4, mask_zero=masked)(i)
    o = K.layers.Bidirectional(getattr(K.layers, cell)(units, return_sequences=return_sequences,
                                                        return_state=return_state), merge_mode=merge_mode)(e)
    outs = list(o) if isinstance(o, (list, tuple)) else [o]
    if len(outs) == 1:
        return K.Model(i, outs[0])
    flat = [K.layers.Reshape((-1,))(t) if len(t.shape) == 3 else t for t in outs]
    return K.Model(i, K.layers.Concatenate()(flat))


# ------------------------------------------------------------------ Bidirectional

@pytest.mark.filterwarnings("ignore:Layer .* does not support masking")
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("merge_mode", MODES)
@pytest.mark.parametrize("return_sequences", [True, False])
def test_bidirectional_matches_keras(rng, cell, merge_mode, return_sequences):
    T, V, B = int(rng.integers(3, 8)), 11, 6
    masked = bool(rng.integers(0, 2))
    ids = _padded_ids(rng, B, T, V) if masked else rng.integers(0, V, (B, T))
    _assert_step(_step_both(lambda K: _bidi_model(K, cell, T, V, merge_mode, return_sequences, False, masked),
                            rng, ids))


@pytest.mark.filterwarnings("ignore:Layer .* does not support masking")
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("merge_mode", ["concat", None])
@pytest.mark.parametrize("masked", [False, True])
def test_bidirectional_return_state_matches_keras(rng, cell, merge_mode, masked):
    T, V, B = 6, 9, 5
    ids = _padded_ids(rng, B, T, V) if masked else rng.integers(0, V, (B, T))
    for rs in (True, False):
        _assert_step(_step_both(lambda K: _bidi_model(K, cell, T, V, merge_mode, rs, True, masked), rng, ids))


def test_bidirectional_on_a_gru_reset_before_and_a_custom_backward_layer(rng):
    T, F, B = 5, 3, 4

    def build(K):
        fwd = K.layers.GRU(4, reset_after=False, return_sequences=True)
        bwd = K.layers.LSTM(4, return_sequences=True, go_backwards=True)
        return K.Sequential([K.Input((T, F)), K.layers.Bidirectional(fwd, backward_layer=bwd),
                             K.layers.Bidirectional(K.layers.SimpleRNN(3), merge_mode="ave")])
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    _assert_step(_step_both(build, rng, x))


def test_stacked_bidirectional_with_mask_trains_with_the_masked_loss(rng):
    """Embedding(mask_zero) -> Bidirectional(return_sequences) -> Bidirectional(return_sequences):
    the model's output carries the mask, so the loss is Keras' masked mean."""
    T, V, B = 7, 13, 8

    def build(K):
        return K.Sequential([K.Input((T,)), K.layers.Embedding(V, 4, mask_zero=True),
                             K.layers.Bidirectional(K.layers.LSTM(3, return_sequences=True)),
                             K.layers.Bidirectional(K.layers.GRU(2, return_sequences=True), merge_mode="sum")])
    _assert_step(_step_both(build, rng, _padded_ids(rng, B, T, V)))


def test_bidirectional_names_shapes_summary_and_weight_order():
    layer = gk.layers.LSTM(4, return_sequences=True)
    bi = gk.layers.Bidirectional(layer)
    model = gk.Sequential([gk.Input((5, 3)), bi])
    kbi = keras.layers.Bidirectional(keras.layers.LSTM(4, return_sequences=True))
    kmodel = keras.Sequential([keras.Input((5, 3)), kbi])
    assert bi.forward_layer.name == kbi.forward_layer.name == "forward_lstm"
    assert bi.backward_layer.name == kbi.backward_layer.name == "backward_lstm"
    assert bi.backward_layer.go_backwards and not bi.forward_layer.go_backwards
    assert bi.forward_layer.zero_output_for_mask and bi.backward_layer.zero_output_for_mask
    assert model.output_shape == kmodel.output_shape == (None, 5, 8)
    assert bi.count_params() == kbi.count_params() == 2 * 4 * (3 * 4 + 4 * 4 + 4)
    assert [w.shape for w in bi.get_weights()] == [tuple(w.shape) for w in kbi.get_weights()]
    lines = []
    model.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert "bidirectional (Bidirectional)" in text and "(None, 5, 8)" in text and "256" in text
    # weights=: the forward half, then the backward half
    w = [np.full(s.shape, k, np.float32) for k, s in enumerate(bi.get_weights())]
    bi2 = gk.layers.Bidirectional(gk.layers.SimpleRNN(2), weights=None)
    gk.Sequential([gk.Input((5, 3)), bi2])
    bi3 = gk.layers.Bidirectional(gk.layers.LSTM(4, return_sequences=True), weights=w)
    gk.Sequential([gk.Input((5, 3)), bi3])
    for a, b in zip(bi3.get_weights(), w):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(bi3.forward_layer.get_weights()[0], w[0])
    np.testing.assert_array_equal(bi3.backward_layer.get_weights()[0], w[3])


def test_bidirectional_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="merge_mode"):
        gk.layers.Bidirectional(gk.layers.LSTM(2), merge_mode="max")
    with pytest.raises(ValueError, match="`layer`"):
        gk.layers.Bidirectional(gk.layers.Dense(2))
    with pytest.raises(ValueError, match="backward_layer"):
        gk.layers.Bidirectional(gk.layers.LSTM(2), backward_layer=gk.layers.Dense(2))
    with pytest.raises(ValueError, match="go_backwards"):
        gk.layers.Bidirectional(gk.layers.LSTM(2), backward_layer=gk.layers.LSTM(2))
    with pytest.raises(ValueError, match="return_sequences"):
        gk.layers.Bidirectional(gk.layers.LSTM(2), backward_layer=gk.layers.LSTM(
            2, go_backwards=True, return_sequences=True))
    bi = gk.layers.Bidirectional(gk.layers.LSTM(2), merge_mode="sum",
                                 backward_layer=gk.layers.LSTM(3, go_backwards=True))
    with pytest.raises(ValueError, match="backward_layer"):
        bi(gk.Input((4, 3)))
    with pytest.raises(ValueError, match="expects 4 initial states"):
        gk.layers.Bidirectional(gk.layers.LSTM(2))(gk.Input((4, 3)), initial_state=[gk.Input((2,))] * 2)


@pytest.mark.parametrize("ext", [".keras", ".h5", ".weights.h5"])
def test_bidirectional_files_round_trip_and_load_in_keras(rng, tmp_path, ext):
    T, V = 6, 10

    def build(K):
        return K.Sequential([K.Input((T,)), K.layers.Embedding(V, 3, mask_zero=True),
                             K.layers.Bidirectional(K.layers.GRU(3, return_sequences=True), merge_mode="ave"),
                             K.layers.Bidirectional(K.layers.LSTM(2)), K.layers.Dense(2)])
    gm = build(gk)
    gm.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in gm.get_weights()])
    ids = _padded_ids(rng, 5, T, V)
    want = gm.predict(ids, verbose=0)
    path = str(tmp_path / f"m{ext}")
    if ext == ".weights.h5":
        gm.save_weights(path)
        g2, k2 = build(gk), build(keras)
        g2.load_weights(path)
        k2.load_weights(path)
    else:
        gm.save(path)
        g2 = gk.models.load_model(path)
        k2 = keras.models.load_model(path)
    assert rel_err(g2.predict(ids, verbose=0), want) < 1e-6
    assert rel_err(k2.predict(ids, verbose=0), want) < 1e-5
    if ext == ".keras":                     # and back: a Keras file read by gpucmp
        kpath = str(tmp_path / "k.keras")
        k2.save(kpath)
        g3 = gk.models.load_model(kpath)
        assert g3.layers[1].forward_layer.name == k2.layers[1].forward_layer.name
        assert rel_err(g3.predict(ids, verbose=0), want) < 1e-5


# ------------------------------------------------------------------ masked losses

@pytest.mark.parametrize("cell", CELLS)
def test_masked_sequence_output_trains_and_evaluates_as_keras(rng, cell):
    T, V, u, B = 6, 9, 3, 7

    def build(K):
        return K.Sequential([K.Input((T,)), K.layers.Embedding(V, 3, mask_zero=True),
                             getattr(K.layers, cell)(u, return_sequences=True)])
    ids = _padded_ids(rng, B, T, V)
    res = _step_both(build, rng, ids)
    _assert_step(res)
    km, gm = build(keras), build(gk)
    _copy_weights(km, gm, rng)
    for K, m in ((keras, km), (gk, gm)):
        m.compile(optimizer=K.optimizers.SGD(0.05), loss="mae")
    y = rng.standard_normal((B, T, u)).astype(np.float32)
    for bs in (B, 3):                   # per-batch masked means, weighted by batch size
        assert abs(gm.evaluate(ids, y, batch_size=bs, verbose=0) -
                   km.evaluate(ids, y, batch_size=bs, verbose=0)) < 1e-5
    hk = km.fit(ids, y, batch_size=3, epochs=2, shuffle=False, verbose=0).history["loss"]
    hg = gm.fit(ids, y, batch_size=3, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(hg, hk, rtol=2e-5)
    for a, b in zip(gm.get_weights(), km.get_weights()):
        assert rel_err(a, b) < 2e-5


def test_an_all_masked_batch_has_zero_loss_and_no_update(rng):
    T, V = 4, 6
    model = gk.Sequential([gk.Input((T,)), gk.layers.Embedding(V, 3, mask_zero=True),
                           gk.layers.LSTM(2, return_sequences=True)])
    model.compile(optimizer="sgd", loss="mse")
    before = model.get_weights()
    ids = np.zeros((3, T), np.int64)
    assert model.train_on_batch(ids, np.ones((3, T, 2), np.float32)) == 0.0
    for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)


def test_masked_output_with_metrics_is_refused_before_any_step(rng):
    T, V = 4, 6
    model = gk.Sequential([gk.Input((T,)), gk.layers.Embedding(V, 3, mask_zero=True),
                           gk.layers.LSTM(2, return_sequences=True)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    before = model.get_weights()
    with pytest.raises(NotImplementedError, match="masked output"):
        model.fit(rng.integers(0, V, (4, T)), np.zeros((4, T, 2), np.float32), verbose=0)
    for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)
    model.compile(optimizer="sgd", loss="mse")          # still usable
    model.fit(rng.integers(0, V, (4, T)), np.zeros((4, T, 2), np.float32), verbose=0)


# ------------------------------------------------------------------ merge masks

@pytest.mark.parametrize("merge", ["Add", "Concatenate"])
def test_merged_masks_follow_keras(rng, merge):
    """Two masked branches merged, then a recurrent layer reading the merged mask and a
    masked sequence output: Keras' OR of the masks (both masked), or no mask (one unmasked
    input of Add / Multiply; Concatenate: all True)."""
    T, V, B = 6, 8, 6
    for second_masked in (True, False):
        def build(K):
            a, b = K.Input((T,)), K.Input((T,))
            ea = K.layers.Embedding(V, 3, mask_zero=True)(a)
            eb = K.layers.Embedding(V, 3, mask_zero=second_masked)(b)
            m = getattr(K.layers, merge)()([ea, eb])
            h = K.layers.GRU(3, return_sequences=True)(m)
            return K.Model([a, b], K.layers.SimpleRNN(2, return_sequences=True)(h))
        ids_a, ids_b = _padded_ids(rng, B, T, V), _padded_ids(rng, B, T, V)[::-1].copy()
        _assert_step(_step_both(build, rng, [ids_a, ids_b]))


# ------------------------------------------------------------------ eager calls

@pytest.mark.parametrize("cell", CELLS)
def test_eager_mask_and_initial_state_match_keras(rng, cell):
    T, F, u, B = 6, 3, 4, 5
    n_states = 2 if cell == "LSTM" else 1
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    mask = np.ones((B, T), bool)
    mask[0, :2] = False
    mask[1, 2:4] = False
    mask[2, -2:] = False
    mask[3] = False
    states = [rng.standard_normal((B, u)).astype(np.float32) for _ in range(n_states)]
    for kw in ({"return_sequences": True}, {"return_state": True}, {"go_backwards": True, "return_sequences": True}):
        kl, gl = getattr(keras.layers, cell)(u, **kw), getattr(gk.layers, cell)(u, **kw)
        kl.build((None, T, F))
        gl.build((None, T, F))
        w = [rng.uniform(-0.5, 0.5, a.shape).astype(np.float32) for a in kl.get_weights()]
        kl.set_weights(w)
        gl.set_weights(w)
        # with a non-zero initial state, Keras' JAX backend emits h0 at leading masked steps
        # where its TensorFlow path (gpucmp's reference, RECURRENT_SPEC 1.8) emits 0: the
        # combined case pads in the middle only (go_backwards makes right padding leading)
        inner = np.ones((B, T), bool)
        inner[0, 3] = False
        inner[1, 2:4] = False
        for args in ({"mask": mask}, {"initial_state": states}, {"mask": inner, "initial_state": states}):
            want, got = kl(x, **args), gl(x, **args)
            want = [np.asarray(t) for t in want] if isinstance(want, (list, tuple)) else [np.asarray(want)]
            got = list(got) if isinstance(got, tuple) else [got]
            assert len(got) == len(want)
            for g, k in zip(got, want):
                assert g.shape == k.shape
                assert rel_err(g, k) < 1e-5, (kw, list(args))


def test_eager_bidirectional_with_mask_and_states(rng):
    T, F, B = 5, 3, 4
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    mask = np.ones((B, T), bool)           # no leading masked step (see above)
    mask[0, 2:4] = False
    mask[2, -1] = False
    states = [rng.standard_normal((B, 3)).astype(np.float32) for _ in range(4)]
    for mode in ("concat", None):
        kb = keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True, return_state=True),
                                        merge_mode=mode)
        gb = gk.layers.Bidirectional(gk.layers.LSTM(3, return_sequences=True, return_state=True), merge_mode=mode)
        kb.build((None, T, F))
        gb.build((None, T, F))
        w = [rng.uniform(-0.5, 0.5, a.shape).astype(np.float32) for a in kb.get_weights()]
        kb.set_weights(w)
        gb.set_weights(w)
        want = [np.asarray(t) for t in kb(x, mask=mask, initial_state=states)]
        got = gb(x, mask=mask, initial_state=states)
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, k in zip(got, want):
            assert rel_err(g, k) < 1e-5


def test_multiply_refuses_masked_inputs():
    T, V = 4, 6
    a, b = gk.Input((T,)), gk.Input((T,))
    m = gk.layers.Multiply()([gk.layers.Embedding(V, 3, mask_zero=True)(a), gk.layers.Embedding(V, 3)(b)])
    model = gk.Model([a, b], gk.layers.LSTM(2)(m))
    with pytest.raises(NotImplementedError, match="Multiply"):
        model.predict([np.ones((2, T)), np.ones((2, T))], verbose=0)


def test_eager_bad_mask_and_states_name_the_argument(rng):
    layer = gk.layers.LSTM(3)
    x = rng.standard_normal((4, 5, 2)).astype(np.float32)
    with pytest.raises(ValueError, match="`mask` must have shape"):
        layer(x, mask=np.ones((4, 4), bool))
    with pytest.raises(ValueError, match=r"initial_state\[1\]"):
        layer(x, initial_state=[np.zeros((4, 3)), np.zeros((3, 3))])
    with pytest.raises(ValueError, match="initial_state"):
        layer(x, initial_state=[np.zeros((4, 5)), np.zeros((4, 5))])
    with pytest.raises(ValueError, match="initial state"):
        layer(x, initial_state=[np.zeros((4, 3))])
    assert layer(x).shape == (4, 3)                   # still usable


# ------------------------------------------------------------------ CUDA

def _cuda():
    import gpucmp
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        pytest.skip("no CUDA device")
    return gpucmp


def _on_devices(gpucmp, run):
    out = []
    for dev in ("cpu", "cuda:0"):
        gpucmp.set_device(dev)
        try:
            out.append(run())
        finally:
            gpucmp.set_device("cpu")
    return out


@pytest.mark.cuda
@pytest.mark.parametrize("cell", CELLS)
def test_cuda_bidirectional_and_masked_loss_match_the_cpu(rng, cell):
    gpucmp = _cuda()
    T, V, B = 9, 20, 8
    ids = _padded_ids(rng, B, T, V)
    y = rng.standard_normal((B, T, 6)).astype(np.float32)
    seed = int(rng.integers(0, 2 ** 31))

    def run():
        gk.backend.clear_session()
        model = gk.Sequential([gk.Input((T,)), gk.layers.Embedding(V, 5, mask_zero=True),
                               gk.layers.Bidirectional(getattr(gk.layers, cell)(4, return_sequences=True),
                                                       merge_mode="ave"),
                               gk.layers.Bidirectional(getattr(gk.layers, cell)(3, return_sequences=True))])
        r = np.random.default_rng(seed)
        model.set_weights([r.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
        model.compile(optimizer=gk.optimizers.SGD(0.1), loss="mse")
        p = model.predict(ids, verbose=0)
        loss = model.fit(ids, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
        return p, loss, model.get_weights()

    (pc, lc, wc), (pg, lg, wg) = _on_devices(gpucmp, run)
    np.testing.assert_allclose(pg, pc, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lg, lc, rtol=1e-4)
    for a, b in zip(wg, wc):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
def test_cuda_merge_masks_states_and_eager_calls_match_the_cpu(rng):
    gpucmp = _cuda()
    T, V, B = 7, 12, 6
    ids_a, ids_b = _padded_ids(rng, B, T, V), _padded_ids(rng, B, T, V)[::-1].copy()
    x = rng.standard_normal((B, T, 3)).astype(np.float32)
    mask = ids_a != 0
    h0 = [rng.standard_normal((B, 4)).astype(np.float32) for _ in range(2)]
    seed = int(rng.integers(0, 2 ** 31))

    def run():
        gk.backend.clear_session()
        a, b = gk.Input((T,)), gk.Input((T,))
        m = gk.layers.Add()([gk.layers.Embedding(V, 3, mask_zero=True)(a),
                             gk.layers.Embedding(V, 3, mask_zero=True)(b)])
        outs = gk.layers.Bidirectional(gk.layers.GRU(3, return_sequences=True, return_state=True),
                                       merge_mode=None)(m)
        model = gk.Model([a, b], gk.layers.Concatenate()([outs[0], outs[1]]))
        r = np.random.default_rng(seed)
        model.set_weights([r.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
        model.compile(optimizer=gk.optimizers.SGD(0.1), loss="mse")
        p = model.predict([ids_a, ids_b], verbose=0)
        model.train_on_batch([ids_a, ids_b], np.ones((B, T, 6), np.float32))
        lstm = gk.layers.LSTM(4, return_sequences=True, return_state=True)
        lstm.build((None, T, 3))
        lstm.set_weights([r.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in lstm.get_weights()])
        eager = lstm(x, mask=mask, initial_state=h0)
        return p, model.get_weights(), eager

    (pc, wc, ec), (pg, wg, eg) = _on_devices(gpucmp, run)
    np.testing.assert_allclose(pg, pc, rtol=1e-4, atol=1e-5)
    for a, b in zip(list(wg) + list(eg), list(wc) + list(ec)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
