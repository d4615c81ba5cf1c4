"""Self-test of the oracle (tests/reference.py): proves it instead of assuming it.

What it checks, with NumPy only:
- every backward function of the oracle against a float64 central-difference
  gradient of the matching forward function (`reference.numerical_grad`);
- the vectorised conv2d against the textbook index-by-index sum, all padding /
  stride / dilation cases; gemm against explicit loops in every transpose case;
- the window geometry against worked Keras examples; pooling tie and padding rules;
- the dropout hash against a second implementation in Python integers;
- bfloat16 rounding against ml_dtypes (when importable).
And, when Keras 3 with the JAX backend is importable, the forward ops, the
convolution gradients (through jax.vjp), the losses and the optimizers against Keras
itself: the semantics the core must match.

Random inputs come from a fresh seed each run; the seed is in every failure message
(set GPUCMP_TEST_SEED to replay one).
"""
import os

import numpy as np
import pytest

import reference as ref


def _seed():
    env = os.environ.get("GPUCMP_TEST_SEED")
    return int(env) if env else int(np.random.SeedSequence().entropy % (1 << 63))


class SeededRng(np.random.Generator):
    """A Generator that remembers its seed, for failure messages."""

    def __init__(self, seed):
        super().__init__(np.random.PCG64(seed))
        self.seed_value = seed


@pytest.fixture
def rng():
    return SeededRng(_seed())


def _close(a, b, tol, what, rng):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape} (seed {rng.seed_value})"
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)), f"{what}: non-finite (seed {rng.seed_value})"
    denom = max(np.linalg.norm(b), 1e-300)
    err = np.linalg.norm(a - b) / denom if np.linalg.norm(b) > 0 else np.linalg.norm(a)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e} (seed {rng.seed_value})"


# ----------------------------------------------------------------- numerical_grad itself

def test_numerical_grad_of_known_function(rng):
    x = rng.standard_normal((3, 4))
    g = ref.numerical_grad(lambda t: np.sum(np.sin(t) * t), x, 1e-6)
    _close(g, np.cos(x) * x + np.sin(x), 1e-8, "d/dx sum(x sin x)", rng)


# ----------------------------------------------------------------- gemm

@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm_against_loops(rng, trans_a, trans_b):
    m, n, k = 3, 5, 4
    a = rng.standard_normal((k, m) if trans_a else (m, k))
    b = rng.standard_normal((n, k) if trans_b else (k, n))
    c = rng.standard_normal((m, n))
    bias = rng.standard_normal(n)
    out = ref.gemm(a, b, bias, c, trans_a, trans_b, alpha=0.7, beta=-1.3, activation="tanh")
    want = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            s = sum((a[p, i] if trans_a else a[i, p]) * (b[j, p] if trans_b else b[p, j])
                    for p in range(k))
            want[i, j] = np.tanh(0.7 * s - 1.3 * c[i, j] + bias[j])
    _close(out, want, 1e-13, "gemm", rng)


def test_gemm_beta_zero_ignores_c(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 2))
    out = ref.gemm(a, b, c=np.full((2, 2), np.nan), beta=0.0)
    assert np.all(np.isfinite(out))


# ----------------------------------------------------------------- geometry

@pytest.mark.parametrize("size,k,s,d,pad,want", [
    (28, 3, 1, 1, "valid", (26, 0, 0)),     # the seed CNN's first conv
    (26, 2, 2, 1, "valid", (13, 0, 0)),     # its first pool
    (13, 2, 2, 1, "valid", (6, 0, 0)),      # floor
    (5, 3, 2, 1, "same", (3, 1, 1)),        # ceil(5/2) = 3, pad 2 -> 1 + 1
    (6, 3, 2, 1, "same", (3, 0, 1)),        # pad 1 -> the extra on the bottom
    (7, 3, 1, 2, "same", (7, 2, 2)),        # dilated span 5
    (7, 3, 1, 2, "valid", (3, 0, 0)),
    (4, 5, 3, 1, "same", (2, 2, 2)),        # kernel larger than input is fine in 'same'
    (5, 1, 3, 1, "same", (2, 0, 0)),        # total pad negative -> 0
])
def test_window_geometry_keras_examples(size, k, s, d, pad, want):
    assert ref.window_geometry(size, k, s, d, pad) == want


def test_window_geometry_rejects_kernel_larger_than_input():
    with pytest.raises(ValueError):
        ref.window_geometry(4, 3, 1, 2, "valid")


# ----------------------------------------------------------------- conv2d

CONV_CASES = [
    # (H, W, C, KH, KW, F, strides, dilation, padding)
    (5, 6, 2, 3, 3, 3, (1, 1), (1, 1), "valid"),
    (5, 6, 2, 3, 2, 2, (2, 1), (1, 1), "same"),
    (7, 5, 3, 2, 3, 2, (3, 2), (1, 1), "same"),
    (7, 8, 1, 3, 3, 2, (1, 2), (2, 2), "same"),
    (9, 7, 2, 2, 3, 3, (2, 3), (2, 1), "valid"),
    (4, 4, 2, 4, 4, 1, (1, 1), (1, 1), "valid"),  # kernel == input
    (3, 5, 2, 5, 4, 2, (2, 2), (1, 1), "same"),   # kernel > input under 'same'
    (6, 6, 3, 1, 1, 4, (3, 3), (1, 1), "valid"),  # 1x1, stride > kernel
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_against_naive_sum(rng, case):
    h, w, c, kh, kw, f, s, d, pad = case
    x = rng.standard_normal((2, h, w, c))
    k = rng.standard_normal((kh, kw, c, f))
    b = rng.standard_normal(f)
    out = ref.conv2d(x, k, b, s, pad, d)
    assert out.shape == ref.conv2d_output_shape(x.shape, k.shape, s, pad, d)
    _close(out, ref.conv2d_naive(x, k, b, s, pad, d), 1e-12, f"conv2d {case}", rng)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_backward_by_finite_differences(rng, case):
    h, w, c, kh, kw, f, s, d, pad = case
    x = rng.standard_normal((2, h, w, c))
    k = rng.standard_normal((kh, kw, c, f))
    b = rng.standard_normal(f)
    y = ref.conv2d(x, k, b, s, pad, d)
    r = rng.standard_normal(y.shape)  # loss = sum(r * conv(x, k) + b)
    dx = ref.conv2d_backward_data(r, k, x.shape, s, pad, d)
    dw, db = ref.conv2d_backward_filter(x, r, (kh, kw), s, pad, d)
    # the loss is linear in each of x, k and b, so a central difference has no truncation
    # error at any step: a large step keeps the rounding error (~1e-16 |loss| / eps) far
    # below the tolerance (eps = 1e-6 failed it about once in five draws)
    eps = 1e-2
    num_dx = ref.numerical_grad(lambda t: np.sum(r * ref.conv2d(t, k, b, s, pad, d)), x, eps)
    num_dw = ref.numerical_grad(lambda t: np.sum(r * ref.conv2d(x, t, b, s, pad, d)), k, eps)
    num_db = ref.numerical_grad(lambda t: np.sum(r * ref.conv2d(x, k, t, s, pad, d)), b, eps)
    _close(dx, num_dx, 1e-7, f"conv2d_bwd_data {case}", rng)
    _close(dw, num_dw, 1e-7, f"conv2d_bwd_filter dw {case}", rng)
    _close(db, num_db, 1e-7, f"conv2d_bwd_filter db {case}", rng)


def test_conv2d_activation_epilogue(rng):
    x, k = rng.standard_normal((1, 4, 4, 2)), rng.standard_normal((3, 3, 2, 2))
    _close(ref.conv2d(x, k, activation="relu"), np.maximum(ref.conv2d(x, k), 0), 0,
           "conv relu", rng)


# ----------------------------------------------------------------- pooling

POOL_CASES = [
    # (H, W, pool, strides, padding)
    (4, 6, (2, 2), None, "valid"),
    (5, 7, (2, 2), None, "valid"),
    (5, 7, (3, 2), (1, 2), "same"),
    (7, 6, (3, 3), (2, 2), "same"),   # overlapping windows
    (6, 5, (2, 3), (3, 1), "valid"),  # stride larger than the window
    (3, 3, (3, 3), (1, 1), "same"),
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool_backward_by_finite_differences(rng, case):
    h, w, pool, strides, pad = case
    # distinct values well apart, so a small step never changes which cell wins
    x = rng.permutation(2 * h * w * 3).reshape(2, h, w, 3) * 0.1
    y = ref.max_pool2d(x, pool, strides, pad)
    r = rng.standard_normal(y.shape)
    dx = ref.max_pool2d_backward(x, r, pool, strides, pad)
    num = ref.numerical_grad(lambda t: np.sum(r * ref.max_pool2d(t, pool, strides, pad)), x, 1e-4)
    _close(dx, num, 1e-8, f"maxpool bwd {case}", rng)


@pytest.mark.parametrize("case", POOL_CASES)
def test_avg_pool_backward_by_finite_differences(rng, case):
    h, w, pool, strides, pad = case
    x = rng.standard_normal((2, h, w, 3))
    y = ref.avg_pool2d(x, pool, strides, pad)
    r = rng.standard_normal(y.shape)
    dx = ref.avg_pool2d_backward(r, x.shape, pool, strides, pad)
    num = ref.numerical_grad(lambda t: np.sum(r * ref.avg_pool2d(t, pool, strides, pad)), x)
    _close(dx, num, 1e-8, f"avgpool bwd {case}", rng)


def test_pool_padding_rules():
    # 'same' on 3x3 with a 2x2 pool, stride 2: out 2x2, pad 1 on the bottom/right only.
    x = -np.arange(1.0, 10.0).reshape(1, 3, 3, 1)  # all negative: a zero pad would win
    y = ref.max_pool2d(x, (2, 2), (2, 2), "same")
    assert y[0, :, :, 0].tolist() == [[-1.0, -3.0], [-7.0, -9.0]]
    a = ref.avg_pool2d(x, (2, 2), (2, 2), "same")
    # averages only over the in-bounds cells
    assert a[0, :, :, 0].tolist() == [[-3.0, -4.5], [-7.5, -9.0]]


def test_max_pool_backward_routes_ties_to_first_max():
    x = np.array([[5.0, 5.0], [5.0, 1.0]]).reshape(1, 2, 2, 1)
    dx = ref.max_pool2d_backward(x, np.ones((1, 1, 1, 1)), (2, 2))
    assert dx[0, :, :, 0].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    x = np.array([[0.0, 2.0], [2.0, 2.0]]).reshape(1, 2, 2, 1)
    dx = ref.max_pool2d_backward(x, np.full((1, 1, 1, 1), 3.0), (2, 2))
    assert dx[0, :, :, 0].tolist() == [[0.0, 3.0], [0.0, 0.0]]


# ----------------------------------------------------------------- activations

@pytest.mark.parametrize("act", ref.ACTIVATIONS)
def test_activation_backward_by_finite_differences(rng, act):
    x = rng.standard_normal((3, 5)) * 2
    if act == "relu":
        x[np.abs(x) < 1e-3] = 0.5  # stay off the kink
    r = rng.standard_normal(x.shape)
    dx = ref.activation_backward(ref.activation(x, act), r, act)
    num = ref.numerical_grad(lambda t: np.sum(r * ref.activation(t, act)), x)
    _close(dx, num, 1e-8, f"act_bwd {act}", rng)


def test_activation_values():
    x = np.array([[-2.0, 0.0, 3.0]])
    assert ref.activation(x, "relu").tolist() == [[0.0, 0.0, 3.0]]
    np.testing.assert_allclose(ref.activation(x, "sigmoid"), 1 / (1 + np.exp(-x)), rtol=1e-15)
    s = ref.activation(np.array([[1000.0, 1000.0]]), "softmax")  # no overflow
    assert s.tolist() == [[0.5, 0.5]]
    assert np.isfinite(ref.activation(np.array([-800.0, 800.0]), "sigmoid")).all()


# ----------------------------------------------------------------- bias_grad

def test_bias_grad_by_finite_differences(rng):
    dy = rng.standard_normal((2, 3, 4, 5))
    x = rng.standard_normal(dy.shape)
    num = ref.numerical_grad(lambda b: np.sum(dy * (x + b)), np.zeros(5))
    _close(ref.bias_grad(dy), num, 1e-8, "bias_grad", rng)


# ----------------------------------------------------------------- batch normalization

@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("act", ["linear", "relu"])
def test_batchnorm_backward_by_finite_differences(rng, training, act):
    x = rng.standard_normal((3, 2, 4, 5)) * 2.0 + 0.5
    g, b, res = rng.uniform(0.5, 1.5, 5), rng.standard_normal(5), rng.standard_normal(x.shape)
    mm, mv = rng.standard_normal(5) * 0.1, rng.uniform(0.5, 2.0, 5)
    r = rng.standard_normal(x.shape)

    def f(xx=x, gg=g, bb=b, rr=res):
        return np.sum(r * ref.batchnorm_forward(xx, mm, mv, gg, bb, rr, 1e-3, 0.9, training, act)[0])

    y, new_mm, new_mv, save = ref.batchnorm_forward(x, mm, mv, g, b, res, 1e-3, 0.9, training, act)
    dx, dg, db, dres = ref.batchnorm_backward(x, r, save, g, y, training, act)
    _close(dx, ref.numerical_grad(lambda t: f(xx=t), x), 1e-6, "dx", rng)
    _close(dg, ref.numerical_grad(lambda t: f(gg=t), g), 1e-6, "dgamma", rng)
    _close(db, ref.numerical_grad(lambda t: f(bb=t), b), 1e-6, "dbeta", rng)
    _close(dres, ref.numerical_grad(lambda t: f(rr=t), res), 1e-6, "dresidual", rng)
    rows = x.reshape(-1, 5)
    if training:  # biased variance; the moving averages move towards the batch
        _close(new_mv, 0.9 * mv + 0.1 * rows.var(axis=0), 1e-12, "moving_var", rng)
        _close(new_mm, 0.9 * mm + 0.1 * rows.mean(axis=0), 1e-12, "moving_mean", rng)
    else:
        _close(save[0], mm, 0, "save mean (inference)", rng)


def test_layout_oracles_are_adjoint(rng):
    x, pad = rng.standard_normal((2, 3, 4, 5)), ((1, 2), (0, 3))
    dy = rng.standard_normal(ref.pad2d(x, pad).shape)
    assert abs(np.sum(dy * ref.pad2d(x, pad)) - np.sum(ref.pad2d_backward(dy, pad) * x)) < 1e-9
    parts = [rng.standard_normal((2, w, 3)) for w in (1, 4, 2)]
    y = ref.concat(parts, axis=1)
    assert np.array_equal(ref.slice_cols(y, 1, 4, axis=1), parts[1])


# ----------------------------------------------------------------- losses

def _probs(rng, rows, cols):
    return ref.activation(rng.standard_normal((rows, cols)), "softmax")


@pytest.mark.parametrize("labels_kind", ["onehot", "soft", "sparse", "unnormalised"])
def test_softmax_xent_gradient(rng, labels_kind):
    rows, cols = 4, 6
    z = rng.standard_normal((rows, cols)) * 3
    if labels_kind == "sparse":
        y = rng.integers(0, cols, rows).astype(np.int32)
    elif labels_kind == "onehot":
        y = np.eye(cols)[rng.integers(0, cols, rows)]
    elif labels_kind == "soft":
        y = _probs(rng, rows, cols)
    else:
        y = rng.random((rows, cols))
    loss, grad = ref.softmax_cross_entropy(z, y, grad_scale=0.25)
    num = ref.numerical_grad(lambda t: 0.25 * ref.softmax_cross_entropy(t, y)[0].sum(), z)
    _close(grad, num, 1e-7, f"softmax_xent {labels_kind}", rng)
    dense = ref._dense_labels(y, cols)
    _close(loss, -(dense * np.log(ref.activation(z, "softmax"))).sum(axis=1), 1e-12,
           "softmax_xent loss", rng)


def test_sigmoid_bce_gradient(rng):
    z = rng.standard_normal((4, 5)) * 3
    y = rng.random((4, 5))
    loss, grad = ref.sigmoid_binary_cross_entropy(z, y, grad_scale=0.5)
    num = ref.numerical_grad(lambda t: 0.5 * ref.sigmoid_binary_cross_entropy(t, y)[0].sum(), z)
    _close(grad, num, 1e-7, "sigmoid_bce grad", rng)
    s = 1 / (1 + np.exp(-z))
    _close(loss, (-(y * np.log(s) + (1 - y) * np.log(1 - s))).mean(axis=1), 1e-12,
           "sigmoid_bce loss", rng)


@pytest.mark.parametrize("labels_kind", ["onehot", "sparse", "soft"])
def test_xent_probs_categorical_gradient(rng, labels_kind):
    rows, cols = 4, 5
    p = rng.random((rows, cols)) + 0.05  # unnormalised: the loss normalises by the sum
    p[0, 1] = 1e-12  # clipped from below after normalisation: no gradient there
    if labels_kind == "sparse":
        y = rng.integers(0, cols, rows).astype(np.int32)
        y[0] = 1
    elif labels_kind == "onehot":
        y = np.eye(cols)[rng.integers(0, cols, rows)]
        y[0] = np.eye(cols)[1]
    else:
        y = _probs(rng, rows, cols)
    loss, grad = ref.cross_entropy_from_probs(p, y, grad_scale=0.3)
    num = ref.numerical_grad(lambda t: 0.3 * ref.cross_entropy_from_probs(t, y)[0].sum(), p, 1e-9)
    _close(grad, num, 1e-5, f"xent_probs categorical {labels_kind}", rng)
    q = np.clip(p / p.sum(axis=1, keepdims=True), ref.CLIP_LO, ref.CLIP_HI)
    _close(loss, -(ref._dense_labels(y, cols) * np.log(q)).sum(axis=1), 1e-12,
           "xent_probs categorical loss", rng)


def test_xent_probs_binary_gradient(rng):
    p = rng.uniform(0.02, 0.98, (4, 5))
    p[0, 0], p[1, 1] = 0.0, 1.0  # clipped: loss uses eps / 1-eps, gradient blocked
    y = rng.random((4, 5))
    loss, grad = ref.cross_entropy_from_probs(p, y, binary=True, grad_scale=2.0)
    inner = (np.abs(p - 0.5) < 0.49)
    num = ref.numerical_grad(
        lambda t: 2.0 * ref.cross_entropy_from_probs(t, y, binary=True)[0].sum(), p, 1e-7)
    _close(grad[inner], num[inner], 1e-6, "xent_probs binary grad", rng)
    assert grad[0, 0] == 0 and grad[1, 1] == 0
    q = np.clip(p, ref.CLIP_LO, ref.CLIP_HI)
    _close(loss, (-(y * np.log(q) + (1 - y) * np.log(1 - q))).mean(axis=1), 1e-12,
           "xent_probs binary loss", rng)


@pytest.mark.parametrize("kind", ["mse", "mae"])
def test_regression_loss_gradient(rng, kind):
    p, t = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    loss, grad = ref.regression_loss(p, t, kind, grad_scale=0.7)
    num = ref.numerical_grad(lambda u: 0.7 * ref.regression_loss(u, t, kind)[0].sum(), p)
    _close(grad, num, 1e-7, kind, rng)
    d = p - t
    _close(loss, (d * d if kind == "mse" else np.abs(d)).mean(axis=1), 1e-14, kind, rng)


# ----------------------------------------------------------------- dropout

def test_dropout_hash_matches_python_integers(rng):
    for seed in [0, 1, 12345, (1 << 64) - 1, int(rng.integers(0, 1 << 63))]:
        idx = np.concatenate([np.arange(50), rng.integers(0, 1 << 40, 50)]).astype(np.uint64)
        fast = ref.hash32(seed, idx)
        slow = [ref.hash32_python(seed, int(i)) for i in idx]
        assert fast.tolist() == slow, f"seed {seed}"


def test_dropout_mask_statistics(rng):
    seed = int(rng.integers(0, 1 << 63))
    u = ref.uniform01(seed, np.arange(200000, dtype=np.uint64))
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01
    keep = ref.dropout_mask((400, 500), 0.3, seed)
    assert abs(keep.mean() - 0.7) < 0.01
    assert (ref.dropout_mask((400, 500), 0.3, seed) == keep).all()
    assert (ref.dropout_mask((400, 500), 0.3, seed + 1) != keep).any()
    assert ref.dropout_mask(10, 0.0, seed).all()


def test_dropout_backward_by_finite_differences(rng):
    x = rng.standard_normal((3, 7))
    r = rng.standard_normal(x.shape)
    seed = int(rng.integers(0, 1 << 63))
    y = ref.dropout(x, 0.4, seed)
    keep = ref.dropout_mask(x.shape, 0.4, seed)
    _close(y, np.where(keep, x / (1 - float(np.float32(0.4))), 0), 1e-15, "dropout fwd", rng)
    num = ref.numerical_grad(lambda t: np.sum(r * ref.dropout(t, 0.4, seed)), x)
    _close(ref.dropout_backward(r, 0.4, seed), num, 1e-8, "dropout bwd", rng)


# ----------------------------------------------------------------- optimizers

def test_adam_unrolled(rng):
    w, m, v = rng.standard_normal(5), np.zeros(5), np.zeros(5)
    w0 = w.copy()
    grads = [rng.standard_normal(5) for _ in range(3)]
    for t, g in enumerate(grads, start=1):
        w, m, v = ref.adam_update(w, g, m, v, lr=0.01, t=t)
    # closed form of m, v after 3 steps from zero state
    b1, b2 = 0.9, 0.999
    m3 = (1 - b1) * (b1 ** 2 * grads[0] + b1 * grads[1] + grads[2])
    v3 = (1 - b2) * (b2 ** 2 * grads[0] ** 2 + b2 * grads[1] ** 2 + grads[2] ** 2)
    _close(m, m3, 1e-14, "adam m", rng)
    _close(v, v3, 1e-14, "adam v", rng)
    # first step: m = (1-b1) g, v = (1-b2) g^2  ->  w1 = w0 - lr g / (|g| + eps/sqrt(1-b2))
    g = grads[0]
    w1, _, _ = ref.adam_update(w0, g, np.zeros(5), np.zeros(5), lr=0.01, t=1)
    _close(w0 - w1, 0.01 * g / (np.abs(g) + 1e-7 / np.sqrt(1 - b2)), 1e-12, "adam step 1", rng)


def test_sgd_and_rmsprop_unrolled(rng):
    w, g1, g2 = rng.standard_normal((3, 4))
    w1, m = ref.sgd_update(w, g1, np.zeros(4), lr=0.1, momentum=0.9)
    w2, m = ref.sgd_update(w1, g2, m, lr=0.1, momentum=0.9)
    _close(w2, w - 0.1 * g1 + (0.9 * (-0.1 * g1) - 0.1 * g2), 1e-14, "sgd momentum", rng)
    wn, mn = ref.sgd_update(w, g1, np.zeros(4), lr=0.1, momentum=0.9, nesterov=True)
    _close(wn, w + 0.9 * (-0.1 * g1) - 0.1 * g1, 1e-14, "sgd nesterov", rng)
    wp, none = ref.sgd_update(w, g1, lr=0.1)
    assert none is None
    _close(wp, w - 0.1 * g1, 1e-15, "sgd plain", rng)
    wr, v = ref.rmsprop_update(w, g1, np.zeros(4), lr=0.01, rho=0.9)
    _close(v, 0.1 * g1 ** 2, 1e-15, "rmsprop v", rng)
    _close(wr, w - 0.01 * g1 / np.sqrt(0.1 * g1 ** 2 + 1e-7), 1e-15, "rmsprop w", rng)


# ----------------------------------------------------------------- accuracy, cast

def test_accuracy_rules():
    pred = np.array([[0.1, 0.7, 0.2], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4]])
    onehot = np.eye(3)[[1, 1, 2]]
    assert ref.accuracy(pred, onehot, "categorical") == 2.0  # row 1: tie -> index 0
    assert ref.accuracy(pred, np.array([1, 0, 2]), "sparse") == 3.0
    p = np.array([[0.6, 0.5], [0.2, 0.9]])
    y = np.array([[1.0, 1.0], [0.0, 1.0]])
    # matches: T, F (0.5 is not > 0.5), T, T -> mean 0.75 * 2 rows
    assert ref.accuracy(p, y, "binary") == 1.5


def test_round_bf16_against_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.concatenate([
        rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 38, 5000),
        [0.0, -0.0, np.inf, -np.inf, 3.3895314e38, 3.40e38, 1e-40, -1e-45, 1.00390625,
         1.01171875, 1.0 + 2 ** -8 + 2 ** -20],
    ]).astype(np.float32)
    want = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    got = ref.round_bf16(x)
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]
    assert np.isnan(ref.round_bf16(np.array([np.nan]))).all()


def test_round_to_other_dtypes(rng):
    x = rng.standard_normal(100)
    assert np.array_equal(ref.round_to(x, "float32"), x.astype(np.float32).astype(np.float64))
    assert np.array_equal(ref.cast(x, "float16"), x.astype(np.float16).astype(np.float64))


# ----------------------------------------------------------------- against Keras itself

@pytest.fixture(scope="module")
def keras_jax():
    os.environ.setdefault("KERAS_BACKEND", "jax")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "jax":
        pytest.skip("the Keras cross-check uses the JAX backend")
    import jax
    return keras, jax


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_matches_keras(rng, keras_jax, case):
    keras, jax = keras_jax
    h, w, c, kh, kw, f, s, d, pad = case
    if max(s) > 1 and max(d) > 1:
        pytest.skip("Keras does not allow strides > 1 together with dilation > 1")
    x = rng.standard_normal((2, h, w, c)).astype(np.float32)
    k = rng.standard_normal((kh, kw, c, f)).astype(np.float32)
    y = np.asarray(keras.ops.conv(x, k, strides=s, padding=pad, dilation_rate=d))
    _close(ref.conv2d(x, k, None, s, pad, d), y, 1e-5, f"conv vs keras {case}", rng)
    r = rng.standard_normal(y.shape).astype(np.float32)
    _, vjp = jax.vjp(lambda a, b: keras.ops.conv(a, b, strides=s, padding=pad,
                                                 dilation_rate=d), x, k)
    kdx, kdw = vjp(r)
    _close(ref.conv2d_backward_data(r, k, x.shape, s, pad, d), np.asarray(kdx), 1e-5,
           "conv bwd data vs keras", rng)
    _close(ref.conv2d_backward_filter(x, r, (kh, kw), s, pad, d)[0], np.asarray(kdw), 1e-5,
           "conv bwd filter vs keras", rng)


@pytest.mark.parametrize("case", POOL_CASES)
def test_pooling_matches_keras(rng, keras_jax, case):
    keras, _ = keras_jax
    h, w, pool, strides, pad = case
    x = rng.standard_normal((2, h, w, 3)).astype(np.float32)
    ks = strides or pool  # (Keras' JAX pooling mishandles strides=None)
    _close(ref.max_pool2d(x, pool, strides, pad),
           np.asarray(keras.ops.max_pool(x, pool, ks, pad)), 1e-6, "max_pool", rng)
    _close(ref.avg_pool2d(x, pool, strides, pad),
           np.asarray(keras.ops.average_pool(x, pool, ks, pad)), 1e-6, "avg_pool", rng)


def test_losses_match_keras(rng, keras_jax):
    keras, jax = keras_jax
    rows, cols = 6, 5
    z = (rng.standard_normal((rows, cols)) * 2).astype(np.float32)
    p = rng.uniform(0.01, 1.0, (rows, cols)).astype(np.float32)
    p[0, 0] = 1e-9
    pb1 = np.clip(p, 0, 1)
    pb1[1, 1] = 1.0  # clipped at the top: Keras' float32 bound 1 - 1.19e-7
    y = np.eye(cols, dtype=np.float32)[rng.integers(0, cols, rows)]
    yb = rng.random((rows, cols)).astype(np.float32)
    L = keras.losses
    checks = [
        (ref.softmax_cross_entropy(z, y)[0],
         L.categorical_crossentropy(y, z, from_logits=True)),
        (ref.cross_entropy_from_probs(p, y)[0], L.categorical_crossentropy(y, p)),
        (ref.cross_entropy_from_probs(p, y.argmax(1).astype(np.int32))[0],
         L.sparse_categorical_crossentropy(y.argmax(1), p)),
        (ref.sigmoid_binary_cross_entropy(z, yb)[0],
         L.binary_crossentropy(yb, z, from_logits=True)),
        (ref.cross_entropy_from_probs(pb1, yb, binary=True)[0],
         L.binary_crossentropy(yb, pb1)),
        (ref.mse(z, yb)[0], L.mean_squared_error(yb, z)),
        (ref.mae(z, yb)[0], L.mean_absolute_error(yb, z)),
    ]
    for i, (mine, theirs) in enumerate(checks):
        _close(mine, np.asarray(theirs), 1e-5, f"loss #{i} vs keras", rng)
    # gradients of the probability path through JAX's autodiff of Keras' formula
    g = jax.grad(lambda t: 0.5 * keras.ops.sum(L.categorical_crossentropy(y, t)))(p)
    _close(ref.cross_entropy_from_probs(p, y, grad_scale=0.5)[1], np.asarray(g), 1e-4,
           "xent_probs grad vs keras", rng)
    pb = np.clip(p, 0.02, 0.98)
    g = jax.grad(lambda t: 0.5 * keras.ops.sum(L.binary_crossentropy(yb, t)))(pb)
    _close(ref.cross_entropy_from_probs(pb, yb, True, 0.5)[1], np.asarray(g), 1e-4,
           "binary xent_probs grad vs keras", rng)


def _keras_steps(keras, opt, w, grads):
    var = keras.Variable(w.astype(np.float32))
    for g in grads:
        opt.apply_gradients([(g.astype(np.float32), var)])
    return np.asarray(var.value, dtype=np.float64)


def test_optimizers_match_keras(rng, keras_jax):
    keras, _ = keras_jax
    w0 = rng.standard_normal(8)
    grads = [rng.standard_normal(8) for _ in range(4)]

    w, m, v = w0, np.zeros(8), np.zeros(8)
    for t, g in enumerate(grads, start=1):
        w, m, v = ref.adam_update(w, g, m, v, lr=0.05, beta_1=0.8, beta_2=0.99, t=t)
    kw = _keras_steps(keras, keras.optimizers.Adam(0.05, beta_1=0.8, beta_2=0.99), w0, grads)
    _close(w - w0, kw - w0, 1e-4, "adam vs keras", rng)

    for nesterov in (False, True):
        w, m = w0, np.zeros(8)
        for g in grads:
            w, m = ref.sgd_update(w, g, m, lr=0.1, momentum=0.9, nesterov=nesterov)
        kw = _keras_steps(keras, keras.optimizers.SGD(0.1, momentum=0.9, nesterov=nesterov),
                          w0, grads)
        _close(w - w0, kw - w0, 1e-5, f"sgd nesterov={nesterov} vs keras", rng)

    w, v = w0, np.zeros(8)
    for g in grads:
        w, v = ref.rmsprop_update(w, g, v, lr=0.01, rho=0.8)
    kw = _keras_steps(keras, keras.optimizers.RMSprop(0.01, rho=0.8), w0, grads)
    _close(w - w0, kw - w0, 1e-4, "rmsprop vs keras", rng)


def test_accuracy_matches_keras(rng, keras_jax):
    keras, _ = keras_jax
    rows, cols = 20, 4
    p = rng.random((rows, cols)).astype(np.float32)
    lab = rng.integers(0, cols, rows)
    y = np.eye(cols, dtype=np.float32)[lab]
    M = keras.metrics
    assert ref.accuracy(p, y, "categorical") / rows == pytest.approx(
        float(np.mean(M.categorical_accuracy(y, p))))
    assert ref.accuracy(p, lab, "sparse") / rows == pytest.approx(
        float(np.mean(M.sparse_categorical_accuracy(lab, p))))
    yb = (rng.random((rows, cols)) > 0.5).astype(np.float32)
    assert ref.accuracy(p, yb, "binary") / rows == pytest.approx(
        float(np.mean(M.binary_accuracy(yb, p))))
