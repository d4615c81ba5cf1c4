"""LSTM / GRU (and SimpleRNN, forced) through cuDNN's RNN API: the baseline of issue 10.

Everywhere (no GPU, no cuDNN needed): the weight map between Keras' layout and cuDNN's
weight space (_core.rnn_cudnn_weight_map, the function the plan packs and unpacks with)
against a hand-derived layout and round trips; use_cudnn's checks (ValueError naming the
option, as Keras); use_cudnn=True on the CPU is a clear error when the plan is built.

With the `cuda` marker (skipped without a CUDA backend; the lead runs them on the H200):
use_cudnn=True against use_cudnn="auto" (gpucmp's kernels) and the float64 oracle
(tests/reference.py) -- forward outputs, final states (return_state), one SGD step's weight
change (the gradients), with and without right-padded masks, return_sequences both ways,
go_backwards; the cuda.rnn.impl variant point; a masked fit of several steps (the plan
takes no CUDA graphs then). cuDNN runs float32 as CUDNN_FMA_MATH (exact fp32, no TF32),
so the tolerances are float32's.
"""
import numpy as np
import pytest

import reference as R
from gpucmp import _core, keras

# ------------------------------------------------------------------ the weight map (pure)
GATES = {"simple": 1, "lstm": 4, "gru": 3}
KERAS_GATE = {"simple": [0], "lstm": [0, 1, 2, 3], "gru": [1, 0, 2]}   # cuDNN gate c <- Keras gate


def _keras_weights(cell, F, u, bias, rng):
    G = GATES[cell]
    K = rng.standard_normal((F, G * u))
    Rk = rng.standard_normal((u, G * u))
    b = rng.standard_normal(((2, G * u) if cell == "gru" else (G * u,))) if bias else None
    return K, Rk, b


def _flat(K, Rk, b):
    return np.concatenate([K.ravel(), Rk.ravel()] + ([] if b is None else [b.ravel()]))


def _map(cell, F, u, bias, layout=None):
    raw, lay = _core.rnn_cudnn_weight_map(cell, F, u, bias, layout)
    return np.frombuffer(raw, np.int32), lay


def _pack(m, flat):
    return np.where(m >= 0, flat[np.maximum(m, 0)], 0.0)


def _unpack(m, ws, n):
    out = np.full(n, np.nan)
    out[m[m >= 0]] = ws[m >= 0]
    return out


def _hand_packed(cell, K, Rk, b, u):
    """cuDNN's canonical space written out: per gate c the (u, in) matrix W_c = K_g^T,
    then the (u, u) R_c = R_g^T, then the input biases, then the recurrent ones."""
    G = GATES[cell]
    blk = [lambda A, g: A[:, g * u:(g + 1) * u].T]
    mats = [blk[0](K, g).ravel() for g in KERAS_GATE[cell]] + [blk[0](Rk, g).ravel() for g in KERAS_GATE[cell]]
    if b is None:
        bias = [np.zeros(u)] * (2 * G)
    else:
        b2 = b if b.ndim == 2 else np.stack([b, np.zeros_like(b)])   # one bias: recurrent ones are 0
        bias = [b2[0, g * u:(g + 1) * u] for g in KERAS_GATE[cell]] + [b2[1, g * u:(g + 1) * u]
                                                                      for g in KERAS_GATE[cell]]
    return np.concatenate(mats + bias)


@pytest.mark.parametrize("cell", ["simple", "lstm", "gru"])
@pytest.mark.parametrize("bias", [True, False])
def test_weight_map_packs_as_derived_by_hand(cell, bias):
    rng = np.random.default_rng(1)
    F, u = 3, 2
    K, Rk, b = _keras_weights(cell, F, u, bias, rng)
    m, lay = _map(cell, F, u, bias)
    G = GATES[cell]
    assert lay["ws_elems"] == 2 * G * u + G * u * (F + u) and len(lay["mat"]) == 2 * G
    np.testing.assert_array_equal(_pack(m, _flat(K, Rk, b)), _hand_packed(cell, K, Rk, b, u))


def test_gru_gate_order_is_swapped_and_lstm_is_not():
    """Element (k, j) of Keras' z block (gate 0) is cuDNN's gate 1 (z) row j, column k."""
    F, u = 2, 3
    m, lay = _map("gru", F, u, True)
    Gu = 3 * u
    for k in range(F):
        for j in range(u):
            assert m[lay["mat"][1] + j * F + k] == k * Gu + 0 * u + j     # z: Keras gate 0
            assert m[lay["mat"][0] + j * F + k] == k * Gu + 1 * u + j     # r: Keras gate 1
    nk, nr = F * Gu, u * Gu
    assert m[lay["bias"][3]] == nk + nr + Gu + 1 * u                      # recurrent r bias: row 1
    m, lay = _map("lstm", F, u, True)
    assert [m[lay["mat"][c]] for c in range(4)] == [c * u for c in range(4)]
    assert (m[lay["bias"][4]:lay["bias"][4] + 4 * u] == -1).all()        # LSTM: no recurrent bias


@pytest.mark.parametrize("cell", ["simple", "lstm", "gru"])
def test_weight_map_round_trips_on_a_scattered_layout(cell):
    """Any layout cuDNN may report (blocks out of order, gaps): unpack(pack(w)) == w."""
    rng = np.random.default_rng(2)
    F, u, G = 4, 3, GATES[cell]
    sizes = [u * (F if i < G else u) for i in range(2 * G)] + [u] * (2 * G)
    order = rng.permutation(len(sizes))
    offs, pos = [0] * len(sizes), 5                                     # leading gap
    for i in order:
        offs[i] = pos
        pos += sizes[i] + int(rng.integers(0, 3))                        # gaps between blocks
    layout = {"mat": offs[:2 * G], "bias": offs[2 * G:], "ws_elems": pos + 2}
    K, Rk, b = _keras_weights(cell, F, u, True, rng)
    flat = _flat(K, Rk, b)
    m, _ = _map(cell, F, u, True, layout)
    assert m.size == layout["ws_elems"]
    ws = _pack(m, flat)
    np.testing.assert_array_equal(_unpack(m, ws, flat.size), flat)
    assert sorted(m[m >= 0]) == list(range(flat.size))                  # a bijection onto Keras'


def test_weight_map_refuses_bad_layouts():
    _, lay = _map("lstm", 2, 2, True)
    overlap = dict(lay, mat=[lay["mat"][0]] * 8)
    with pytest.raises(ValueError, match="overlaps"):
        _map("lstm", 2, 2, True, overlap)
    with pytest.raises(ValueError, match="outside"):
        _map("lstm", 2, 2, True, dict(lay, ws_elems=lay["ws_elems"] - 1))
    with pytest.raises(ValueError, match="no bias"):
        _map("lstm", 2, 2, True, dict(lay, bias=[-1] * 8))
    with pytest.raises(ValueError, match="needs 8 offsets"):
        _map("lstm", 2, 2, True, dict(lay, mat=[0]))
    with pytest.raises(ValueError, match="cell"):
        _core.rnn_cudnn_weight_map("gru_reset_before", 2, 2, True)
    with pytest.raises(ValueError, match="units"):
        _core.rnn_cudnn_weight_map("lstm", 2, 0, True)


# ------------------------------------------------------------------ the front end's checks
@pytest.mark.parametrize("cls,kw,named", [
    ("LSTM", {"recurrent_dropout": 0.2}, "recurrent_dropout"),
    ("GRU", {"recurrent_dropout": 0.1}, "recurrent_dropout"),
    ("GRU", {"reset_after": False}, "reset_after=False"),
    ("LSTM", {"activation": "relu"}, "activation='relu'"),
    ("GRU", {"recurrent_activation": "hard_sigmoid"}, "recurrent_activation='hard_sigmoid'"),
    ("LSTM", {"stateful": True}, "stateful=True"),
    ("GRU", {"unroll": True}, "unroll=True"),
])
def test_use_cudnn_true_names_what_cudnn_lacks(cls, kw, named):
    with pytest.raises(ValueError, match="use_cudnn=True") as e:
        getattr(keras.layers, cls)(4, use_cudnn=True, **kw)
    assert named in str(e.value)
    getattr(keras.layers, cls)(4, use_cudnn="auto", **kw)               # auto: gpucmp's kernels
    getattr(keras.layers, cls)(4, use_cudnn=False, **kw)


@pytest.mark.parametrize("value", ["yes", 1, None, "AUTO"])
def test_use_cudnn_takes_auto_true_false(value):
    with pytest.raises(ValueError, match="use_cudnn"):
        keras.layers.LSTM(3, use_cudnn=value)


def test_use_cudnn_round_trips_through_the_config():
    for cls in (keras.layers.LSTM, keras.layers.GRU):
        layer = cls(3, use_cudnn=True, use_bias=False, dropout=0.25)     # both fine for cuDNN
        assert cls.from_config(layer.get_config()).use_cudnn is True
        assert cls(3).get_config()["use_cudnn"] == "auto"


def test_simple_rnn_has_no_use_cudnn():
    with pytest.raises(ValueError, match="use_cudnn"):     # as Keras: an unknown argument
        keras.layers.SimpleRNN(3, use_cudnn=True)


@pytest.mark.parametrize("bad_row,what", [([1, 0, 1, 1], "not right-padded"), ([0, 0, 0, 0], "no valid step")])
def test_eager_mask_must_be_right_padded(bad_row, what):
    layer = keras.layers.LSTM(3, use_cudnn=True)
    x = np.ones((2, 4, 2), np.float32)
    mask = np.array([[1, 1, 0, 0], bad_row], bool)
    with pytest.raises(ValueError, match=what) as e:
        layer(x, mask=mask)
    assert "row 1" in str(e.value)


def test_go_backwards_with_a_mask_is_refused():
    inp = keras.Input((5,))
    e = keras.layers.Embedding(10, 3, mask_zero=True)(inp)
    with pytest.raises(ValueError, match="go_backwards"):
        model = keras.Model(inp, keras.layers.GRU(4, go_backwards=True, use_cudnn=True)(e))
        model.predict(np.ones((2, 5), np.int32), verbose=0)


def _on_cpu():
    import gpucmp
    gpucmp.set_device("cpu")


def test_on_the_cpu_use_cudnn_true_says_it_needs_cuda():
    _on_cpu()
    model = keras.models.Sequential([keras.layers.Input((4, 2)), keras.layers.LSTM(3, use_cudnn=True)])
    with pytest.raises(NotImplementedError, match="CUDA device"):
        model.predict(np.ones((2, 4, 2), np.float32), verbose=0)
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(NotImplementedError, match="CUDA device"):
        model.train_on_batch(np.ones((2, 4, 2), np.float32), np.ones((2, 3), np.float32))


def test_the_variant_point_lists_own_and_cudnn():
    from gpucmp import variants
    info = variants.points().get("cuda.rnn.impl")
    if info is None:
        pytest.skip("no CUDA backend in this build / machine: the point is not present")
    assert info["variants"] == ["auto", "own", "cudnn"]


# ------------------------------------------------------------------ on a CUDA device
CUDNN_CELLS = [("LSTM", "lstm"), ("GRU", "gru")]


@pytest.fixture
def cuda():
    import gpucmp
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        pytest.skip("no CUDA device")
    gpucmp.set_device("cuda:0")
    try:
        yield
    finally:
        gpucmp.set_device("cpu")


def _rnn(cls, u, use_cudnn, **kw):
    return getattr(keras.layers, cls)(u, use_cudnn=use_cudnn, **kw)


def _oracle_xw(layer, x):
    W, U = (np.asarray(w, np.float64) for w in layer.get_weights()[:2])
    b = np.asarray(layer.get_weights()[2], np.float64)
    bh = None
    if b.ndim == 2:
        b, bh = b[0], b[1]
    return np.einsum("bti,ij->btj", x.astype(np.float64), W) + b, U, bh


def _right_padded(rng, B, T, F):
    """x with rows of lengths T, 1, random; padded steps all zeros (Masking(0.0) masks them)."""
    x = rng.uniform(0.2, 1.0, (B, T, F)).astype(np.float32) * rng.choice([-1, 1], (B, T, F))
    lens = rng.integers(1, T + 1, B)
    lens[0], lens[1] = T, 1
    for r, n in enumerate(lens):
        x[r, n:] = 0.0
    return x, np.arange(T)[None, :] < lens[:, None]


def _model(cls, T, F, u, use_cudnn, masked, **kw):
    """Input -> [Masking] -> the layer. With return_state the plan's one output is the
    Concatenate of [y (flattened when a sequence), h, (c)]: _split takes it apart."""
    inp = keras.Input((T, F))
    h = keras.layers.Masking(0.0)(inp) if masked else inp
    if masked and kw.get("return_sequences"):
        kw.setdefault("zero_output_for_mask", True)      # cuDNN's padded outputs are 0
    layer = _rnn(cls, u, use_cudnn, **kw)
    out = layer(h)
    if kw.get("return_state"):
        y, states = out[0], list(out[1:])
        if kw.get("return_sequences"):
            y = keras.layers.Flatten()(y)
        out = keras.layers.Concatenate()([y] + states)
    return keras.Model(inp, out), layer


def _split(out, B, T, u, sequences, n_states):
    """The Concatenate of _model back into [y, h, (c)]."""
    ny = T * u if sequences else u
    y = out[:, :ny].reshape((B, T, u) if sequences else (B, u))
    return [y] + [out[:, ny + k * u: ny + (k + 1) * u] for k in range(n_states)]


def _both(cls, T, F, u, masked, rng, **kw):
    m_dnn, l_dnn = _model(cls, T, F, u, True, masked, **kw)
    m_own, l_own = _model(cls, T, F, u, "auto", masked, **kw)
    w = [rng.uniform(-0.5, 0.5, a.shape).astype(np.float32) for a in l_own.get_weights()]
    l_dnn.set_weights(w)
    l_own.set_weights(w)
    return (m_dnn, l_dnn), (m_own, l_own)


@pytest.mark.cuda
@pytest.mark.filterwarnings("ignore:.*destroy the mask")     # Flatten after a masked sequence
@pytest.mark.parametrize("cls,cell", CUDNN_CELLS)
@pytest.mark.parametrize("return_sequences", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_forward_and_states_match_own_kernels_and_oracle(cuda, cls, cell, return_sequences, masked):
    from gpucmp import variants
    rng = np.random.default_rng(10)
    B, T, F, u = 6, 9, 5, 16
    x, used = _right_padded(rng, B, T, F) if masked else (rng.standard_normal((B, T, F)).astype(np.float32), None)
    (md, ld), (mo, lo) = _both(cls, T, F, u, masked, rng, return_sequences=return_sequences, return_state=True)
    n_states = 2 if cell == "lstm" else 1
    out_d = _split(md.predict(x, verbose=0), B, T, u, return_sequences, n_states)
    assert variants.last("cuda.rnn.impl") == "cudnn"
    out_o = _split(mo.predict(x, verbose=0), B, T, u, return_sequences, n_states)
    xw, U, bh = _oracle_xw(lo, x)
    ref = R.rnn_forward(xw, U, mask=used, bh=bh, cell=cell, sequences=return_sequences,
                        zero_output_for_mask=masked and return_sequences)
    refs = [ref["y"], ref["h"]] + ([ref["c"]] if cell == "lstm" else [])
    assert len(out_d) == len(refs)
    for a, b, r, what in zip(out_d, out_o, refs, ("y", "h", "c")):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5, err_msg=f"{what}: cudnn vs own")
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=2e-5, err_msg=f"{what}: cudnn vs oracle")


@pytest.mark.cuda
@pytest.mark.parametrize("cls,cell", CUDNN_CELLS)
@pytest.mark.parametrize("return_sequences", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_one_sgd_step_matches_own_kernels_and_oracle(cuda, cls, cell, return_sequences, masked):
    rng = np.random.default_rng(11)
    B, T, F, u, lr = 5, 7, 4, 12, 0.1
    x, used = _right_padded(rng, B, T, F) if masked else (rng.standard_normal((B, T, F)).astype(np.float32), None)
    (md, ld), (mo, lo) = _both(cls, T, F, u, masked, rng, return_sequences=return_sequences)
    t = rng.standard_normal((B, T, u) if return_sequences else (B, u)).astype(np.float32)
    before = [np.asarray(w, np.float64) for w in lo.get_weights()]
    for m in (md, mo):
        m.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
        m.train_on_batch(x, t)
    # the oracle: Keras' mse gradient through the float64 recurrence
    W64, U64 = before[0], before[1]
    b64 = before[2]
    b_in, bh64 = (b64[0], b64[1]) if b64.ndim == 2 else (b64, None)
    xw = np.einsum("bti,ij->btj", x.astype(np.float64), W64) + b_in
    zo = masked and return_sequences
    fwd = R.rnn_forward(xw, U64, mask=used, bh=bh64, cell=cell, sequences=return_sequences, zero_output_for_mask=zo)
    if masked and return_sequences:       # Keras' masked loss: the mean over the unmasked steps
        dy = 2.0 * (fwd["y"] - t) / u / used.sum() * used[:, :, None]
    else:
        dy = 2.0 * (fwd["y"] - t) / (t.size / B) / B
    bwd = R.rnn_backward(xw, U64, mask=used, bh=bh64, dy=dy, cell=cell, sequences=return_sequences,
                         zero_output_for_mask=zo)
    x64, dxw = x.astype(np.float64).reshape(B * T, F), bwd["dxw"].reshape(B * T, -1)
    db = dxw.sum(0)
    want = [x64.T @ dxw, bwd["dU"], np.stack([db, bwd["dm"].reshape(B * T, -1).sum(0)]) if cell == "gru" else db]
    got_d = [(w0 - np.asarray(w1, np.float64)) / lr for w0, w1 in zip(before, ld.get_weights())]
    got_o = [(w0 - np.asarray(w1, np.float64)) / lr for w0, w1 in zip(before, lo.get_weights())]
    for gd, go, g, what in zip(got_d, got_o, want, ("kernel", "recurrent_kernel", "bias")):
        np.testing.assert_allclose(gd, go, rtol=1e-3, atol=2e-5, err_msg=f"{what}: cudnn vs own")
        np.testing.assert_allclose(gd, g, rtol=1e-3, atol=2e-5, err_msg=f"{what}: cudnn vs oracle")


@pytest.mark.cuda
@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_go_backwards_initial_states_and_input_gradient(cuda, cls):
    """go_backwards (no mask), initial states as inputs (their gradients flow) and an
    Embedding before the layer (dx reaches its table): one SGD step, cudnn against own."""
    rng = np.random.default_rng(12)
    B, T, F, u, V = 4, 6, 3, 8, 11
    n_states = 2 if cls == "LSTM" else 1

    def build(use_cudnn):
        inp = keras.Input((T,), dtype="int32")
        st = [keras.Input((u,)) for _ in range(n_states)]
        h = keras.layers.Embedding(V, F)(inp)
        s = [keras.layers.Dense(u, activation="tanh")(k) for k in st]
        y = _rnn(cls, u, use_cudnn, go_backwards=True, return_sequences=True)(h, initial_state=s)
        return keras.Model([inp] + st, y)
    md, mo = build(True), build("auto")
    mo.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in mo.get_weights()])
    md.set_weights(mo.get_weights())
    feeds = [rng.integers(0, V, (B, T)).astype(np.int32)] + \
        [rng.standard_normal((B, u)).astype(np.float32) for _ in range(n_states)]
    np.testing.assert_allclose(md.predict(feeds, verbose=0), mo.predict(feeds, verbose=0), rtol=1e-4, atol=2e-5)
    t = rng.standard_normal((B, T, u)).astype(np.float32)
    for m in (md, mo):
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        m.train_on_batch(feeds, t)
    for a, b in zip(md.get_weights(), mo.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-5)


@pytest.mark.cuda
def test_forced_variant_runs_every_layer_through_cudnn(cuda):
    """GPUCMP_FORCE=cuda.rnn.impl=cudnn as the benchmarks use it: SimpleRNN included."""
    from gpucmp import variants
    rng = np.random.default_rng(13)
    B, T, F, u = 3, 5, 4, 6
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    for act in ("tanh", "relu"):
        layer = keras.layers.SimpleRNN(u, activation=act)
        model = keras.models.Sequential([keras.layers.Input((T, F)), layer])
        layer.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in layer.get_weights()])
        with variants.forced("cuda.rnn.impl", "cudnn"):
            fm = keras.models.Sequential([keras.layers.Input((T, F)), keras.layers.SimpleRNN(u, activation=act)])
            fm.set_weights(model.get_weights())
            y_dnn = fm.predict(x, verbose=0)
            assert variants.last("cuda.rnn.impl") == "cudnn"
        xw, U, _ = _oracle_xw(layer, x)
        ref = R.rnn_forward(xw, U, cell="simple", activation=act)["y"]
        np.testing.assert_allclose(y_dnn, ref, rtol=1e-4, atol=2e-5)
    with variants.forced("cuda.rnn.impl", "cudnn"):    # an incompatible layer: refused, named
        bad = keras.models.Sequential([keras.layers.Input((T, F)), keras.layers.GRU(u, reset_after=False)])
        with pytest.raises(ValueError, match="reset_after=False"):
            bad.predict(x, verbose=0)
    with variants.forced("cuda.rnn.impl", "own"):      # own wins over use_cudnn=True
        m = keras.models.Sequential([keras.layers.Input((T, F)), keras.layers.LSTM(u, use_cudnn=True)])
        m.predict(x, verbose=0)


@pytest.mark.cuda
def test_masked_fit_runs_without_graphs_and_learns(cuda):
    """Several steps of fit with a mask (the plan reads the lengths each pass and takes no
    CUDA graphs); a mask that is not right-padded fails at run time naming the row."""
    rng = np.random.default_rng(14)
    B, T, V = 64, 8, 20
    ids = rng.integers(1, V, (B, T))
    lens = rng.integers(1, T + 1, B)
    for r, n in enumerate(lens):
        ids[r, n:] = 0
    y = (ids[:, :1] % 2).astype(np.float32)
    model = keras.models.Sequential([keras.layers.Input((T,)), keras.layers.Embedding(V, 8, mask_zero=True),
                                     keras.layers.LSTM(16, use_cudnn=True), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    hist = model.fit(ids, y, batch_size=16, epochs=5, verbose=0)
    assert hist.history["loss"][-1] < hist.history["loss"][0]
    bad = ids.copy()
    bad[3, 0] = 0
    bad[3, 1] = 5
    with pytest.raises(ValueError, match="row 3"):
        model.predict(bad[:16], verbose=0)


@pytest.mark.cuda
@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_mixed_float16_stays_near_float32(cuda, cls):
    rng = np.random.default_rng(15)
    B, T, F, u = 4, 6, 8, 16
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    (md, ld), (mo, lo) = _both(cls, T, F, u, False, rng)
    y32 = md.predict(x, verbose=0)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        m16, l16 = _model(cls, T, F, u, True, False)
        l16.set_weights(lo.get_weights())
        y16 = m16.predict(x, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    np.testing.assert_allclose(np.asarray(y16, np.float32), y32, rtol=2e-2, atol=2e-2)
