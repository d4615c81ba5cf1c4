"""Accuracy of the CPU recurrence's vector activations (csrc/cpu/rnn_fast.c), every variant.

The fused kernels compute tanh / sigmoid with their own vector exp (the Keras-exact
contract is 1e-5 relative; these should be within ~2 ulp of libm). Reached through the op
itself: a SimpleRNN step with U = 0 and T = 1 is y = act(xw), and its backward with
dy = 1 is dxw = act'(y), so a (rows, units) xw is a dense grid of inputs. Checked against
float64 over [-110, 110] (saturation and the subnormal range of sigmoid included), a
log-spaced grid near 0, and the special values (+-0, +-inf, NaN, the exp overflow and
underflow edges), where every variant must give what the stepwise (libm) path gives.
"""
import numpy as np
import pytest

from gpucmp import _core, variants

POINT = "cpu.rnn.simd"
HAVE = variants.available(POINT) if POINT in variants.points() else []
FUSED = [v for v in HAVE if v != "stepwise"]
# against float64 (sigmoid: the formula 1 / (1 + exp(-x)) rounds 1 + e, libm's as much);
# against the stepwise path, i.e. libm: LIBM_ULP (two roundings of 1 + e apart)
ULP = {"tanh": 2.0, "sigmoid": 3.0}
LIBM_ULP = {"tanh": 2.0, "sigmoid": 4.0}
PIECEWISE = ("relu", "linear", "hard_sigmoid")  # against the scalar float32 formula
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, 89.5, -87.3, -88.7, -103.9, -104.1,
                    44.3, 44.4, 9.01, 9.02, 0.625, -0.625, 0.62499997, 1e-30, -1e-30, 1e-45, 3.0, -3.0], np.float32)


def grid():
    lin = np.linspace(-110.0, 110.0, 1 << 20, dtype=np.float64)
    small = np.logspace(-30, 0.5, 1 << 16)
    return np.concatenate([lin, small, -small]).astype(np.float32)


def run(v, act, x):
    """(act(x), act'(act(x))) from the op at variant v, x of any length."""
    n = x.size
    u = 256
    B = -(-n // u)
    xw = np.zeros((B, 1, u), np.float32)
    xw.reshape(-1)[:n] = x
    U = np.zeros((u, u), np.float32)
    y = np.empty((B, u), np.float32)
    save = np.empty((2, B, 1, u), np.float32)
    p = {"cell": "simple", "activation": act}
    with variants.forced(POINT, v):
        _core.run_op("rnn_fwd", "cpu", (xw, U, None, None, None, None, None), (y, save, None, None), p)
        dxw = np.empty((B, 1, u), np.float32)
        _core.run_op("rnn_bwd", "cpu", (np.ones((B, u), np.float32), None, None, U, save, None, None),
                     (dxw, None, None, None), p)
        assert variants.last(POINT) == v
    return y.reshape(-1)[:n], dxw.reshape(-1)[:n]


def exact(act, x):
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return {"tanh": np.tanh(x), "sigmoid": 1.0 / (1.0 + np.exp(-x)), "relu": np.where(x > 0, x, 0.0),
                "linear": x, "hard_sigmoid": np.clip(x / 6.0 + 0.5, 0.0, 1.0)}[act]


def ulps(got, want):
    """|got - want| in units of the float32 spacing at want (subnormal spacing at least)."""
    sp = np.maximum(np.spacing(np.abs(want).astype(np.float32)).astype(np.float64), 2.0 ** -149)
    return np.abs(got.astype(np.float64) - want) / sp


needs = pytest.mark.skipif(not FUSED, reason=f"this build has no {POINT} point")


@needs
@pytest.mark.parametrize("act", sorted(ULP))
@pytest.mark.parametrize("v", FUSED)
def test_within_ulps_of_float64(v, act):
    x = grid()
    y, d = run(v, act, x)
    e = ulps(y, exact(act, x))
    if act == "sigmoid":  # 1 / (1 + exp(-x)) is 0 where exp(-x) overflows, in libm too
        e[x < -88.72] = 0.0
        assert not y[x < -88.73].any()
    worst = int(np.argmax(e))
    assert e[worst] <= ULP[act], f"{v} {act}({x[worst]!r}) = {y[worst]!r}, float64 {exact(act, x[worst:worst + 1])[0]!r}: " \
                                 f"{e[worst]:.2f} ulp"
    y_ref, d_ref = run("stepwise", act, x)
    e = ulps(y, y_ref.astype(np.float64))
    worst = int(np.argmax(e))
    assert e[worst] <= LIBM_ULP[act], f"{v} {act}({x[worst]!r}) = {y[worst]!r}, libm {y_ref[worst]!r}: {e[worst]:.2f} ulp"
    # the derivative from the output, computed in float32 as the stepwise path does
    np.testing.assert_allclose(d, d_ref, rtol=2e-6, atol=1e-6 if act in ("tanh", "sigmoid") else 0.0,
                               err_msg=f"{v} {act}' differs from the stepwise path")


@needs
@pytest.mark.parametrize("act", PIECEWISE)
@pytest.mark.parametrize("v", FUSED)
def test_piecewise_as_the_scalar_formula(v, act):
    """relu / linear / hard_sigmoid: the scalar definitions (hard_sigmoid's x/6 + 0.5 may
    be one fused multiply-add here: half an ulp of 0.5 apart)."""
    x = grid()
    y, d = run(v, act, x)
    y_ref, d_ref = run("stepwise", act, x)
    np.testing.assert_allclose(y, y_ref, rtol=1e-7, atol=3e-8 if act == "hard_sigmoid" else 0.0)
    np.testing.assert_array_equal(d, d_ref)


@needs
@pytest.mark.parametrize("act", sorted(ULP) + list(PIECEWISE))
@pytest.mark.parametrize("v", FUSED)
def test_special_values_as_libm(v, act):
    y, d = run(v, act, SPECIAL)
    y_ref, d_ref = run("stepwise", act, SPECIAL)
    for i, x in enumerate(SPECIAL):
        a, b = y[i], y_ref[i]
        if np.isnan(b) or np.isinf(b) or b == 0.0:
            assert (np.isnan(a) and np.isnan(b)) or a == b, f"{v} {act}({x!r}) = {a!r}, libm {b!r}"
        else:
            assert ulps(np.array([a]), np.array([b], np.float64))[0] <= ULP.get(act, 1.0) + 1.0, \
                f"{v} {act}({x!r}) = {a!r}, libm {b!r}"
        assert (np.isnan(d[i]) and np.isnan(d_ref[i])) or abs(d[i] - d_ref[i]) <= 1e-6 + 2e-6 * abs(d_ref[i]), \
            f"{v} {act}'({x!r}) = {d[i]!r}, stepwise {d_ref[i]!r}"
