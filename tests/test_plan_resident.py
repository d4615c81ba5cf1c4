"""Device-resident training: Plan.set_data + Plan.train_steps against Plan.train_step.

train_steps gathers each batch on the device, reads each step's learning rate, Adam
step and dropout seed from backend memory, keeps the loss / metric totals there and, on
GPUs, replays the full-size step from a captured CUDA graph. Whatever the path, the
arithmetic of a step is the same as one train_step call: these tests train two copies of
a model from identical weights, one step per call and many steps per call, and compare
the weights and the totals. On GPUs they also compare graphs on and off.
"""
import numpy as np
import pytest

from gpucmp import _core

BACKENDS = [pytest.param(b, marks=[pytest.mark.cuda] if b.startswith("cuda") else [])
            for b in _core.backends()]


def make_plan(backend, seed, optimizer="adam", loss="categorical_crossentropy", rate=0.25,
              max_batch=16):
    """conv -> pool -> flatten -> dropout -> dense softmax, with fresh weights from `seed`."""
    rng = np.random.default_rng(seed)
    sizes = {"k1": 3 * 3 * 2 * 4, "b1": 4, "k2": 3 * 3 * 4 * 5, "b2": 5}
    bufs = {}
    for name, n in sizes.items():
        bufs[name] = _core.Buffer(backend, n)
        bufs[name].write(rng.uniform(-0.5, 0.5, n))
    per = {"adam": 2, "rmsprop": 1, "sgd": 1}[optimizer]
    state = [_core.Buffer(backend, sizes[k]) for k in ("k1", "b1", "k2", "b2") for _ in range(per)]
    layers = [
        dict(kind="conv2d", in_shape=(8, 8, 2), out_shape=(6, 6, 4), kernel_size=(3, 3),
             activation="relu", kernel=bufs["k1"], bias=bufs["b1"]),
        dict(kind="maxpool2d", in_shape=(6, 6, 4), out_shape=(3, 3, 4), pool_size=(2, 2)),
        dict(kind="reshape", in_shape=(3, 3, 4), out_shape=(36,)),
        dict(kind="dropout", in_shape=(36,), out_shape=(36,), rate=rate),
        dict(kind="dense", in_shape=(36,), out_shape=(5,), activation="softmax",
             kernel=bufs["k2"], bias=bufs["b2"]),
    ]
    metric = "acc_sparse" if loss.startswith("sparse") else "acc_categorical"
    plan = _core.Plan(backend, layers, max_batch,
                      dict(loss=loss, optimizer=optimizer, metrics=[metric], opt_state=state))
    return plan, bufs


def data(rng, n, sparse=False):
    x = rng.standard_normal((n, 8, 8, 2)).astype(np.float32)
    labels = rng.integers(0, 5, n)
    y = labels.astype(np.int32) if sparse else np.eye(5, dtype=np.float32)[labels]
    return x, y


def hparams(optimizer, lr, t):
    return {"lr": lr, "t": t, "momentum": 0.9 if optimizer == "sgd" else 0.0}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optimizer,loss", [("adam", "categorical_crossentropy"),
                                            ("sgd", "sparse_categorical_crossentropy"),
                                            ("rmsprop", "categorical_crossentropy")])
def test_train_steps_equals_one_step_calls(backend, optimizer, loss):
    seed = int(np.random.SeedSequence().entropy % (1 << 31))
    rng = np.random.default_rng(seed)
    n, batch = 45, 16                       # 3 steps, the last one partial (13 rows)
    x, y = data(rng, n, sparse=loss.startswith("sparse"))
    idx = rng.permutation(n).astype(np.int32)
    lrs = np.array([0.01, 0.005, 0.0025], np.float32)
    seeds = rng.integers(0, 2 ** 62, 3).astype(np.uint64)

    ref, ref_w = make_plan(backend, seed, optimizer, loss)
    totals = {}
    for s in range(3):
        rows = idx[s * batch:(s + 1) * batch]
        out = ref.train_step(x[rows], y[rows], hparams(optimizer, float(lrs[s]), 10 + s), int(seeds[s]))
        for k, v in out.items():
            totals[k] = totals.get(k, 0.0) + v

    got, got_w = make_plan(backend, seed, optimizer, loss)
    got.set_data(x, y)
    out = got.train_steps(idx, batch, hparams(optimizer, 0.0, 10), lrs, seeds)
    msg = f"seed={seed} backend={backend}"
    for name in ref_w:
        np.testing.assert_allclose(got_w[name].read(), ref_w[name].read(), rtol=2e-5, atol=2e-6,
                                   err_msg=f"{name} {msg}")
    assert set(out) == set(totals), msg
    for k in totals:
        assert out[k] == pytest.approx(totals[k], rel=1e-5, abs=1e-5), f"{k} {msg}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_steps_rejects_bad_calls(backend):
    plan, _ = make_plan(backend, 1)
    rng = np.random.default_rng(0)
    x, y = data(rng, 20)
    with pytest.raises(ValueError, match="set_data"):
        plan.train_steps(np.arange(16, dtype=np.int32), 16, {"lr": 0.001, "t": 1})
    plan.set_data(x, y)
    with pytest.raises(ValueError, match="outside"):
        plan.train_steps(np.array([0, 20], np.int32), 16, {"lr": 0.001, "t": 1})
    with pytest.raises(ValueError, match="batch"):
        plan.train_steps(np.arange(20, dtype=np.int32), 17, {"lr": 0.001, "t": 1})
    with pytest.raises(ValueError, match="one value per step"):
        plan.train_steps(np.arange(20, dtype=np.int32), 16, {"lr": 0.001, "t": 1},
                         lrs=np.ones(3, np.float32))
    with pytest.raises(ValueError):
        plan.set_data(x[:, :4], y)
    # the plan still trains after the refused calls
    out = plan.train_steps(np.arange(20, dtype=np.int32), 16, {"lr": 0.001, "t": 1})
    assert np.isfinite(out["loss"])


@pytest.mark.cuda
@pytest.mark.parametrize("backend", [b for b in _core.backends() if b.startswith("cuda")])
def test_graph_replay_gives_the_weights_of_eager_steps(backend):
    seed = int(np.random.SeedSequence().entropy % (1 << 31))
    rng = np.random.default_rng(seed)
    n, batch = 16 * 6 + 5, 16
    x, y = data(rng, n)
    idx = rng.permutation(n).astype(np.int32)
    steps = -(-n // batch)
    lrs = np.full(steps, 0.003, np.float32)
    seeds = rng.integers(0, 2 ** 62, steps).astype(np.uint64)
    eager, eager_w = make_plan(backend, seed)
    eager.use_graphs(False)
    eager.set_data(x, y)
    a = eager.train_steps(idx, batch, {"lr": 0.003, "t": 1}, lrs, seeds)
    graph, graph_w = make_plan(backend, seed)
    graph.set_data(x, y)
    b = graph.train_steps(idx, batch, {"lr": 0.003, "t": 1}, lrs, seeds)
    assert eager.graph_replays == 0
    assert graph.graph_replays >= steps - 3, "the full-size steps were not replayed from a graph"
    for name in eager_w:
        np.testing.assert_array_equal(graph_w[name].read(), eager_w[name].read(), err_msg=f"{name} seed={seed}")
    assert a == b


def test_fit_on_resident_data_matches_one_call_per_step(monkeypatch):
    """Keras-level: fit with the data set on the device (several steps per call), and
    with it streamed through the device in windows of 2 batches (as when it does not
    fit), gives the history and weights of fit with one train_step call per batch."""
    from gpucmp import keras
    from gpucmp.keras.models import trainer

    def run(mode):
        keras.utils.set_random_seed(123)
        model = keras.Sequential([keras.layers.Dense(8, activation="relu", input_shape=(5,)),
                                  keras.layers.Dropout(0.3),
                                  keras.layers.Dense(3, activation="softmax")])
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                      loss="categorical_crossentropy", metrics=["accuracy"])
        rng = np.random.default_rng(7)
        x = rng.standard_normal((70, 5)).astype(np.float32)
        y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 70)]
        calls = []
        real = trainer._train_steps

        def counted(plan, idx, batch, k, *rest):
            calls.append(k)
            return real(plan, idx, batch, k, *rest)

        with monkeypatch.context() as m:
            if mode == "one":
                m.setattr(trainer._ResidentData, "make", classmethod(lambda cls, *args: None))
            if mode == "windows":
                m.setattr(trainer, "MAX_RESIDENT_ROWS", 32)
            m.setattr(trainer, "_train_steps", counted)
            # several steps per call even on a fast machine
            m.setattr(trainer._ChunkSizer, "next", lambda self, step: min(3, self.steps - step))
            history = model.fit(x, y, batch_size=16, epochs=3, verbose=0)
        return history.history, model.get_weights(), model.optimizer.iterations, calls

    h_res, w_res, it_res, calls_res = run("resident")
    h_win, w_win, it_win, calls_win = run("windows")
    h_one, w_one, it_one, calls_one = run("one")
    # 70 rows, batch 16: 5 steps; windows of 32 rows hold 2, 2 and 1 of them
    assert calls_res == [3, 2] * 3 and calls_win == [2, 2, 1] * 3 and calls_one == [], \
        (calls_res, calls_win, calls_one)
    assert it_res == it_win == it_one == 15
    assert h_res.keys() == h_one.keys() == h_win.keys()
    for key in h_res:
        np.testing.assert_allclose(h_res[key], h_one[key], rtol=1e-6, err_msg=key)
        np.testing.assert_allclose(h_win[key], h_one[key], rtol=1e-6, err_msg=key)
    for a, b in zip(w_win, w_one):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for a, b in zip(w_res, w_one):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_windows_shrink_until_the_device_takes_them():
    """_ResidentData halves its window (in whole batches) while set_data raises
    MemoryError, and gives up (None: one call per step) when not even a batch fits."""
    from gpucmp.keras.models import trainer

    class Device:
        def __init__(self, limit):
            self.limit, self.sizes = limit, []

        def set_data(self, x, y):
            if x is not None:
                self.sizes.append(len(x))
                if len(x) > self.limit:
                    raise MemoryError(f"{len(x)} rows do not fit")

    x = np.zeros((100, 3), np.float32)
    y = np.zeros((100, 2), np.float32)
    dev = Device(40)
    r = trainer._ResidentData.make(dev, [x], y, 16)
    # 100 rows do not fit, 48 (half, in whole batches) neither, 16 do
    assert dev.sizes == [100, 48, 16] and r.window == 16, (dev.sizes, r.window)
    dev = Device(70)
    r = trainer._ResidentData.make(dev, [x], y, 16)
    assert dev.sizes == [100, 48] and r.window == 48, (dev.sizes, r.window)
    # windows hold 3 steps; a chunk never crosses one; indices are window-local
    assert r.clip(0, 5) == 3 and r.clip(1, 5) == 2 and r.clip(3, 2) == 2
    order = np.random.default_rng(0).permutation(100)
    idx = r.indices(order, 48, 80)
    assert dev.sizes[-1] == 48 and idx.tolist() == list(range(32))
    idx = r.indices(order, 96, 100)       # the last window is short: 4 rows
    assert dev.sizes[-1] == 4 and idx.tolist() == [0, 1, 2, 3]
    assert trainer._ResidentData.make(Device(10), [x], y, 16) is None
    # an unshuffled epoch starts on the rows make() left on the device: no second upload
    # of them; a shuffled one gathers its own first window
    dev = Device(70)
    r = trainer._ResidentData.make(dev, [x], y, 16)
    assert r.indices(None, 0, 16).tolist() == list(range(16)) and dev.sizes == [100, 48]
    assert r.indices(None, 48, 64).tolist() == list(range(16)) and dev.sizes == [100, 48, 48]
    dev = Device(70)
    r = trainer._ResidentData.make(dev, [x], y, 16)
    r.indices(order, 0, 16)
    assert dev.sizes == [100, 48, 48]


@pytest.mark.cuda
@pytest.mark.parametrize("backend", [b for b in _core.backends() if b.startswith("cuda")])
@pytest.mark.parametrize("optimizer", ["adam", "sgd", "rmsprop"])
def test_one_batch_steps_replayed_from_a_graph_match_eager_steps(backend, optimizer):
    """train_step from host arrays (train_on_batch) on a GPU replays a captured graph
    (step_graph.c): the same weights and totals as the eager step, with the batch size,
    the learning rate, Adam's t and the dropout seed changing between calls, and a
    hyperparameter the graph holds (beta_1 / momentum / rho) changed half-way (recaptured)."""
    seed = int(np.random.SeedSequence().entropy % (1 << 31))
    rng = np.random.default_rng(seed)
    rows = [16, 16, 16, 13, 16, 16, 16, 16, 7, 16, 16]
    x, y = data(rng, sum(rows))
    seeds = rng.integers(0, 2 ** 62, len(rows)).astype(np.uint64)
    eager, eager_w = make_plan(backend, seed, optimizer)
    eager.use_graphs(False)
    graph, graph_w = make_plan(backend, seed, optimizer)
    baked = {"adam": "beta_1", "sgd": "momentum", "rmsprop": "rho"}[optimizer]
    lo = 0
    for k, r in enumerate(rows):
        hp = hparams(optimizer, 0.004 / (1 + k), 5 + k)
        hp[baked] = 0.8 if k >= 6 else 0.9
        xb, yb = x[lo:lo + r], y[lo:lo + r]
        lo += r
        a = eager.train_step(xb, yb, hp, int(seeds[k]))
        b = graph.train_step(xb, yb, hp, int(seeds[k]))
        assert set(a) == set(b)
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), f"{key} step {k} seed={seed}"
        for name in eager_w:
            np.testing.assert_allclose(graph_w[name].read(), eager_w[name].read(), rtol=1e-5, atol=1e-7,
                                       err_msg=f"{name} step {k} seed={seed}")
    assert eager.graph_replays == 0
    # full-size steps: 0 warm, 1 captured, 2 / 4 / 5 replayed (the 13-row step 3 runs
    # beside the graph); 6 changes the baked value: warm again, 7 captured, 9-10 replayed
    assert graph.graph_replays == 7, "single-batch steps were not replayed from a graph"
    assert np.isfinite(graph.predict(x[:16])).all()
