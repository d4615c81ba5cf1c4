"""gpucmp.distribute.MirroredStrategy on CPU replicas: a distributed fit is the fit of one
replica on the whole global batch (to float rounding), the replicas stay bit-identical,
a last batch smaller than the group still trains, BatchNormalization's moving statistics
are the replicas' mean, a failing replica stops the others instead of hanging them, and
bad configurations raise clear errors. (Several GPUs need NCCL: see issue 13.)"""
import threading

import numpy as np
import pytest

import gpucmp
from gpucmp import _core, keras
from gpucmp.distribute import MirroredStrategy, get_strategy, has_strategy
from gpucmp.distribute.replicas import ReplicatedPlan, shard_sizes


def dense_model(seed=3, dropout=0.0, optimizer="adam"):
    keras.utils.set_random_seed(seed)
    layers = [keras.layers.Input((7,)), keras.layers.Dense(6, activation="tanh")]
    if dropout:
        layers.append(keras.layers.Dropout(dropout))
    layers.append(keras.layers.Dense(4, activation="softmax"))
    m = keras.Sequential(layers)
    m.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def data(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 7)).astype(np.float32), rng.integers(0, 4, n)


def in_strategy(strategy, make, **kw):
    with strategy.scope():
        return make(**kw)


@pytest.mark.parametrize("replicas, n, batch", [(2, 50, 8), (3, 41, 9), (4, 9, 4)])
def test_distributed_fit_equals_one_replica_on_the_global_batch(replicas, n, batch):
    # (4, 9, 4): the last batch has 1 row, so three replicas take no rows in that step
    x, y = data(n, seed=replicas)
    ref = dense_model()
    h_ref = ref.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0)
    strategy = MirroredStrategy(["cpu"] * replicas)
    assert strategy.num_replicas_in_sync == replicas
    m = in_strategy(strategy, dense_model)
    h = m.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(ref.get_weights(), m.get_weights()):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)
    for k in h_ref.history:
        np.testing.assert_allclose(h.history[k], h_ref.history[k], rtol=1e-5)
    assert m.optimizer.iterations == ref.optimizer.iterations == 2 * -(-n // batch)
    # the model still trains and predicts on its own afterwards
    np.testing.assert_allclose(m.predict(x, verbose=0), ref.predict(x, verbose=0), rtol=1e-4, atol=1e-5)


def test_shards_are_contiguous_and_cover_the_batch():
    assert shard_sizes(9, 4) == [3, 2, 2, 2]
    assert shard_sizes(1, 3) == [1, 0, 0]
    assert sum(shard_sizes(1000, 7)) == 1000


def replicated(model, x, y, n):
    cfg = model._train_config(y.shape, model.output_shape)
    nodes, train = model._train_plan_args(cfg, [(None, 7)])
    return ReplicatedPlan(nodes, train, n, len(y), "cpu")


def test_replicas_stay_bit_identical_with_their_own_dropout_masks():
    x, y = data(24, seed=5)
    m = dense_model(dropout=0.5)
    rp = replicated(m, x, y.astype(np.int32), 3)
    try:
        before = [w.copy() for w in m.get_weights()]
        for t in range(1, 4):
            rp.train_step(x, y.astype(np.int32), dict(m.optimizer.hparams(), t=t), seed=1234 + t)
        rp.check_in_sync()
        arrays = [rp._trainable_arrays(r) for r in range(3)]
        for r in (1, 2):
            for a, b in zip(arrays[0], arrays[r]):
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert any(not np.array_equal(a, b) for a, b in zip(before, m.get_weights()))   # the model's own weights moved
        # the checker itself can fail: a replica's weight nudged is found
        kernel = next(d["kernel"] for d in rp.nodes[2] if d.get("kernel") is not None)
        v = kernel.read()
        v[0] += 1.0
        kernel.write(v)
        with pytest.raises(RuntimeError, match="replica 2 diverged"):
            rp.check_in_sync()
    finally:
        rp.finish()


def test_batchnorm_moving_statistics_are_the_replicas_mean():
    def bn_model():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.layers.Input((7,)), keras.layers.BatchNormalization(),
                              keras.layers.Dense(4, activation="softmax")])
        m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        return m

    x, y = data(10, seed=9)
    m = in_strategy(MirroredStrategy(["cpu", "cpu"]), bn_model)
    m.fit(x, y, batch_size=10, epochs=1, shuffle=False, verbose=0)
    # one step: each replica's statistics come from its own 5 rows only (BatchNormalization
    # is the first layer), so one-replica fits on each shard give them
    shards = []
    for lo in (0, 5):
        s = bn_model()
        s.fit(x[lo:lo + 5], y[lo:lo + 5], batch_size=5, epochs=1, shuffle=False, verbose=0)
        shards.append(s.layers[0])
    bn = m.layers[0]
    for name in ("moving_mean", "moving_variance"):
        want = np.mean([getattr(s, name).numpy() for s in shards], axis=0)
        np.testing.assert_allclose(getattr(bn, name).numpy(), want, rtol=1e-6, atol=1e-7)
    # and they differ from a fit on the whole batch (local statistics, as Keras' unsynchronised BN)
    whole = bn_model()
    whole.fit(x, y, batch_size=10, epochs=1, shuffle=False, verbose=0)
    assert not np.allclose(whole.layers[0].moving_variance.numpy(), bn.moving_variance.numpy(), rtol=1e-7, atol=0)


def test_a_failing_replica_stops_the_others_and_the_model_stays_usable():
    x, y = data(12, seed=2)
    m = dense_model()
    rp = replicated(m, x, y.astype(np.int32), 3)
    bad = y.astype(np.int32).copy()
    bad[5] = 40          # a class id outside [0, 4) in the second replica's shard only
    before = [w.copy() for w in m.get_weights()]
    outcome = {}

    def step():
        try:
            rp.train_step(x, bad, dict(m.optimizer.hparams()), 0)
        except Exception as e:   # noqa: BLE001
            outcome["error"] = e

    t = threading.Thread(target=step, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the replicas hung on a failing one"
    rp.finish()
    assert "error" in outcome and "another replica failed" not in str(outcome["error"])
    assert rp.group.aborted
    for a, b in zip(before, m.get_weights()):   # no replica applied the step
        assert np.array_equal(a, b)
    with MirroredStrategy(["cpu", "cpu"]).scope():
        m.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    m.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(m.evaluate(x, y, verbose=0))


def test_a_nan_in_one_replicas_shard_is_refused_by_train_on_batch():
    """Repeated train_on_batch calls leave the NaN / Inf check to the plans (stage.c): the
    replica whose shard holds the NaN refuses it, the others stop, nothing is applied, the
    front end names the element, and the next good call trains."""
    x, y = data(12, seed=6)
    m = in_strategy(MirroredStrategy(["cpu", "cpu", "cpu"]), dense_model)
    m.train_on_batch(x, y)
    before = [w.copy() for w in m.get_weights()]
    bad = x.copy()
    bad[9, 3] = np.inf                         # the third replica's shard (rows 8-11)
    with pytest.raises(ValueError, match=r"x contains NaN or Inf.*x\[9, 3\] = inf"):
        m.train_on_batch(bad, y)
    for a, b in zip(before, m.get_weights()):
        assert np.array_equal(a, b)
    m.train_on_batch(x, y)
    assert not all(np.array_equal(a, b) for a, b in zip(before, m.get_weights()))


def test_mixed_float16_with_loss_scaling_matches_one_replica():
    x, y = data(32, seed=4)

    def make():
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            return dense_model(seed=8)
        finally:
            keras.mixed_precision.set_global_policy("float32")

    ref = make()
    ref.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    m = in_strategy(MirroredStrategy(["cpu", "cpu"]), make)
    m.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(ref.get_weights(), m.get_weights()):
        np.testing.assert_allclose(b, a, rtol=2e-3, atol=2e-3)
    assert m.optimizer.iterations == ref.optimizer.iterations


def test_scope_and_default_strategy():
    assert not has_strategy() and get_strategy().num_replicas_in_sync == 1
    before = gpucmp.get_device()
    s = MirroredStrategy(["/cpu:0", "CPU:0"])
    assert s.devices == ("cpu", "cpu")
    with s.scope() as inner:
        assert inner is s and has_strategy() and get_strategy() is s
        assert gpucmp.get_device() == "cpu"
    assert not has_strategy() and gpucmp.get_device() == before
    m = dense_model()          # made and compiled outside any scope: an ordinary model
    assert m._distribute_strategy is None


def test_bad_configurations_are_clear_errors():
    with pytest.raises(ValueError, match="multiple of its 2 replicas"):
        m = in_strategy(MirroredStrategy(["cpu", "cpu"]), dense_model)
        m.fit(*data(10, 1), batch_size=5, verbose=0)
    with pytest.raises(ValueError, match="empty"):
        MirroredStrategy([])
    with pytest.raises(ValueError, match="one CPU device"):
        MirroredStrategy(["cpu:1"])
    with pytest.raises(ValueError, match="not present"):
        MirroredStrategy(["tpu:0"])
    with pytest.raises(TypeError, match="must be names"):
        MirroredStrategy([0])
    with pytest.raises(NotImplementedError, match="cross_device_ops"):
        MirroredStrategy(["cpu"], cross_device_ops=object())
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        with pytest.raises(ValueError, match="not present"):
            MirroredStrategy(["cuda:0", "cuda:1"])
    with pytest.raises(ValueError, match="1 to 64"):
        _core.ReplicaGroup(0)


def test_join_group_checks_its_arguments():
    x, y = data(8, seed=1)
    m = dense_model()
    cfg = m._train_config(y.shape, m.output_shape)
    nodes, train = m._train_plan_args(cfg, [(None, 7)])
    plan = _core.Plan("cpu", nodes, 4, train)
    g = _core.ReplicaGroup(2)
    with pytest.raises(IndexError, match="rank 2 of a group of 2"):
        plan.join_group(g, 2)
    with pytest.raises(TypeError, match="ReplicaGroup"):
        plan.join_group(object(), 0)
    plan.join_group(g, 0)
    with pytest.raises(ValueError, match="in a group already"):
        plan.join_group(g, 1)
    other = _core.Plan("cpu", nodes, 4, train)
    with pytest.raises(ValueError, match="rank 0 is taken"):
        other.join_group(g, 0)
    infer = _core.Plan("cpu", nodes, 4)
    with pytest.raises(ValueError, match="without a loss"):
        infer.join_group(g, 1)
