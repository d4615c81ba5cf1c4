"""Keras mixed precision in gpucmp: the 'mixed_float16' / 'mixed_bfloat16' policies and
dynamic loss scaling, on the CPU (half-precision storage, float32 arithmetic) and on
cuda:0 (half-precision kernels; those cases carry the `cuda` marker).

1. The policy API behaves as Keras 3's: compile() wraps the optimizer in a
   LossScaleOptimizer under mixed_float16 only; variables stay float32; predict returns
   the last layer's compute dtype.
2. The seeds' CNN trains on the real digits under each mixed policy to the accuracy of
   float32 (within ACC_BAND, and above MIN_ACCURACY after 8 epochs; after 4, one
   GPU run had float16 2.4 points behind float32, within the spread over seeds).
3. Dynamic loss scaling: a scale so large that the float16 gradients overflow makes
   the step a no-op -- weights, optimizer slots and `iterations` bit for bit unchanged --
   and halves the scale, until steps go through; good steps double the scale every
   `dynamic_growth_steps`. Checked through train_on_batch (one step per call) and
   through fit over device-resident data (many steps per call, the step captured into a
   CUDA graph on the GPU), where the skip decision and Adam's step count live on the
   device: there, iterations + skipped steps must equal the steps run. On the GPU
   train_on_batch replays its step from a CUDA graph too (the scale goes up with the
   batch and comes back with the totals): the replayed steps equal the same steps run
   op by op, skips and scale exactly, weights to float32 rounding.
"""
import math

import numpy as np
import pytest

import gpucmp
from gpucmp import keras
from gpucmp.harness.workloads.seeds import build_seed_cnn

from test_seeds_cnn import CNN_EPOCHS, CNN_TEST_ACCURACY, digits  # noqa: F401  (digits: a fixture)

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]
MIN_ACCURACY = CNN_TEST_ACCURACY   # after CNN_EPOCHS (8) epochs on 4,000 images, as test_seeds_cnn.py
ACC_BAND = 0.015


@pytest.fixture(autouse=True)
def restore_state():
    dev, policy = gpucmp.get_device(), keras.mixed_precision.global_policy()
    yield
    gpucmp.set_device(dev)
    keras.mixed_precision.set_global_policy(policy)


def small_model(optimizer, policy="mixed_float16", seed=0):
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                          keras.layers.Dense(4, activation="softmax")])
    m.compile(optimizer=optimizer, loss="categorical_crossentropy", metrics=["accuracy"])
    return m


def toy_data(n, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, n)]
    return x, y


def snapshot(model):
    opt = model.optimizer
    return [w.copy() for w in model.get_weights()] + [b.read() for b in opt.variables]


def same_bits(a, b):
    return all(np.array_equal(x.view(np.uint8), y.view(np.uint8)) for x, y in zip(a, b))


# ------------------------------------------------------------------ 1. the policy API
def test_policy_api_matches_keras():
    m = small_model("adam", "mixed_float16")
    assert isinstance(m.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert m.optimizer.dynamic_scale == 2.0 ** 15 and m.optimizer.dynamic_growth_steps == 2000
    assert m.optimizer.inner_optimizer.kind == "adam"
    assert all(w.dtype == np.float32 for w in m.get_weights())
    assert m.layers[0].compute_dtype == "float16" and m.layers[0].variable_dtype == "float32"
    x, _ = toy_data(5)
    assert m.predict(x, verbose=0).dtype == np.float16
    m = small_model("adam", "mixed_bfloat16")
    assert not isinstance(m.optimizer, keras.mixed_precision.LossScaleOptimizer)
    keras.mixed_precision.set_global_policy("mixed_float16")
    with pytest.raises(ValueError, match="inner_optimizer"):
        keras.mixed_precision.LossScaleOptimizer("adam")
    with pytest.raises(ValueError, match="dynamic_growth_steps"):
        keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(), dynamic_growth_steps=0)


# ------------------------------------------------------------------ 2. training
@pytest.mark.parametrize("device", DEVICES)
def test_seed_cnn_trains_under_each_policy(digits, device):  # noqa: F811
    (x, y), (xt, yt) = digits
    gpucmp.set_device(device)
    acc = {}
    for policy in ("float32", "mixed_float16", "mixed_bfloat16"):
        keras.mixed_precision.set_global_policy(policy)
        keras.utils.set_random_seed(0)
        model = build_seed_cnn(keras)
        model.fit(x, y, batch_size=32, epochs=CNN_EPOCHS, verbose=0)
        loss, acc[policy] = model.evaluate(xt, yt, verbose=0)
        assert math.isfinite(loss)
    print(device, acc)
    for policy, a in acc.items():
        assert a >= MIN_ACCURACY, f"{policy}: test accuracy {a:.3f} < {MIN_ACCURACY}"
        assert abs(a - acc["float32"]) <= ACC_BAND, f"{policy}: {a:.3f} vs float32 {acc['float32']:.3f}"


# ------------------------------------------------------------------ 3. loss scaling
@pytest.mark.parametrize("device", DEVICES)
def test_overflowing_steps_are_skipped_and_halve_the_scale(device):
    gpucmp.set_device(device)
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(), initial_scale=2.0 ** 40)
    m = small_model(opt)
    x, y = toy_data(32)
    skipped = applied = 0
    for _ in range(40):
        before, scale, it = snapshot(m), opt.dynamic_scale, opt.iterations
        m.train_on_batch(x, y)
        if opt.dynamic_scale < scale:   # skipped: nothing moved, the scale halved
            assert opt.dynamic_scale == scale / 2 and opt.step_counter == 0
            assert opt.iterations == it and same_bits(snapshot(m), before), "a skipped step changed state"
            skipped += 1
        else:
            assert opt.dynamic_scale == scale and opt.iterations == it + 1
            assert not same_bits(snapshot(m), before), "an applied step changed nothing"
            applied += 1
    assert skipped >= 10, f"2^40 should overflow float16 gradients for many steps, skipped {skipped}"
    assert applied >= 5, f"the scale never came down far enough ({opt.dynamic_scale})"
    assert all(np.isfinite(w).all() for w in m.get_weights())


def _train_plans(model):
    return [p for by_size in model._train_plans._plans.values() for p in by_size.values()]


@pytest.mark.cuda
def test_train_on_batch_graph_replay_with_loss_scaling_equals_the_eager_steps():
    """Two identical mixed_float16 models, one with its train_on_batch step captured and
    replayed (the default on a GPU), one with graphs off: 40 steps from a scale of 2^40
    (many overflow and are skipped, then steps apply and the scale grows every 3 good
    steps) end in the same scale, step counter and iterations, exactly, and the same
    weights, optimizer slots and per-step losses to float32 rounding."""
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        pytest.skip("no CUDA device")
    gpucmp.set_device("cuda:0")
    x, y = toy_data(32 * 40)
    runs = []
    for graphs in (True, False):
        opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(), initial_scale=2.0 ** 40,
                                                       dynamic_growth_steps=3)
        m = small_model(opt)
        losses, scales = [m.train_on_batch(x[:32], y[:32])[0]], [opt.dynamic_scale]
        for plan in _train_plans(m):
            plan.use_graphs(graphs)
        for s in range(1, 40):
            losses.append(m.train_on_batch(x[32 * s:32 * (s + 1)], y[32 * s:32 * (s + 1)])[0])
            scales.append(opt.dynamic_scale)
        replays = sum(p.graph_replays for p in _train_plans(m))
        runs.append((snapshot(m), losses, scales, (opt.dynamic_scale, opt.step_counter, opt.iterations), replays))
    (wg, lg, sg, stg, rg), (we, le, se, ste, re_) = runs
    assert rg >= 30 and re_ == 0, f"graph replays: {rg} with graphs on, {re_} off"
    assert min(sg) < 2.0 ** 40 and stg[2] >= 5, f"the run must skip and then apply steps: {stg}"
    assert sg == se and stg == ste, f"scale / counter / iterations: graph {stg} vs eager {ste}"
    # the replayed step sums the loss in float32 on the device, the eager one in double on
    # the host (step_graph.c): the reported losses agree to float32 rounding; the update
    # is the same math in both
    np.testing.assert_allclose(np.asarray(lg), np.asarray(le), rtol=1e-6)
    for a, b in zip(wg, we):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_fit_counts_skipped_steps_on_the_device(device):
    gpucmp.set_device(device)
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(), initial_scale=2.0 ** 40)
    m = small_model(opt)
    x, y = toy_data(32 * 30)
    m.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False)
    steps = 2 * 30
    halvings = round(math.log2(2.0 ** 40 / opt.dynamic_scale))
    assert opt.dynamic_scale == 2.0 ** (40 - halvings) and 10 <= halvings < steps
    assert opt.iterations == steps - halvings, (opt.iterations, halvings)
    assert all(np.isfinite(w).all() for w in m.get_weights())
    # the same steps one call at a time end in the same state (device-side t and skips)
    opt2 = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(), initial_scale=2.0 ** 40)
    m2 = small_model(opt2)
    for _ in range(2):
        for s in range(30):
            m2.train_on_batch(x[32 * s:32 * (s + 1)], y[32 * s:32 * (s + 1)])
    assert opt2.dynamic_scale == opt.dynamic_scale and opt2.iterations == opt.iterations
    for a, b in zip(m.get_weights(), m2.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", ["fit", "train_on_batch"])
def test_good_steps_double_the_scale(device, path):
    gpucmp.set_device(device)
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01), initial_scale=1.0,
                                                   dynamic_growth_steps=3)
    m = small_model(opt)
    x, y = toy_data(32 * 7)
    if path == "fit":
        m.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
    else:
        for s in range(7):
            m.train_on_batch(x[32 * s:32 * (s + 1)], y[32 * s:32 * (s + 1)])
    # 7 good steps: doubled after the 3rd and the 6th, one good step since
    assert (opt.dynamic_scale, opt.step_counter, opt.iterations) == (4.0, 1, 7)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_output_layer_in_a_mixed_model(device):
    """Keras' advice for mixed precision: keep the last layer in float32. The plan then
    casts the float16 activations into that layer and its input gradient back: the model
    trains (loss falls, weights finite), predicts float32, and its first-step loss and
    predictions agree with the all-float32 model's to float16 rounding."""
    gpucmp.set_device(device)
    x, y = toy_data(256)

    def build(policy, last_dtype):
        keras.mixed_precision.set_global_policy(policy)
        keras.utils.set_random_seed(3)
        m = keras.Sequential([keras.layers.Dense(32, activation="relu", input_shape=(8,)),
                              keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(4, activation="softmax", dtype=last_dtype)])
        m.compile(optimizer="adam", loss="categorical_crossentropy")
        return m

    mixed, ref32 = build("mixed_float16", "float32"), build("float32", None)
    assert [l.compute_dtype for l in mixed.layers] == ["float16", "float16", "float32"]
    p_mixed, p_ref = mixed.predict(x, verbose=0), ref32.predict(x, verbose=0)
    assert p_mixed.dtype == np.float32
    np.testing.assert_allclose(p_mixed, p_ref, rtol=0, atol=5e-3)
    l_mixed = mixed.train_on_batch(x[:64], y[:64])
    l_ref = ref32.train_on_batch(x[:64], y[:64])
    assert abs(l_mixed - l_ref) <= 5e-3 * abs(l_ref), (l_mixed, l_ref)
    first = mixed.evaluate(x, y, verbose=0)
    mixed.fit(x, y, batch_size=32, epochs=5, verbose=0)
    assert mixed.evaluate(x, y, verbose=0) < first
    assert all(np.isfinite(w).all() for w in mixed.get_weights())


def test_save_and_load_keep_the_loss_scale_state(tmp_path):
    """A mixed_float16 model saved after training and loaded under another global policy:
    layers compute in float16 again, the optimizer is a LossScaleOptimizer with the saved
    scale, step counter, iterations and slots, and predictions are the same bits."""
    gpucmp.set_device("cpu")
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(), initial_scale=2.0 ** 40,
                                                   dynamic_growth_steps=5)
    m = small_model(opt)
    x, y = toy_data(32 * 12)
    m.fit(x, y, batch_size=32, epochs=1, verbose=0)
    assert opt.dynamic_scale < 2.0 ** 40 and opt.iterations < 12   # some steps skipped
    path = tmp_path / "mixed.keras"
    m.save(path)
    keras.mixed_precision.set_global_policy("float32")
    m2 = keras.models.load_model(path)
    o2 = m2.optimizer
    assert isinstance(o2, keras.mixed_precision.LossScaleOptimizer)
    assert (o2.dynamic_scale, o2.step_counter, o2.iterations, o2.dynamic_growth_steps) == \
        (opt.dynamic_scale, opt.step_counter, opt.iterations, 5)
    assert [l.compute_dtype for l in m2.layers] == ["float16", "float16"]
    assert same_bits([b.read() for b in o2.variables], [b.read() for b in opt.variables])
    assert np.array_equal(m2.predict(x, verbose=0), m.predict(x, verbose=0))
