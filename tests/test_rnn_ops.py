"""Tests of the recurrent ops rnn_fwd / rnn_bwd (the sequential part of SimpleRNN, LSTM and
GRU, both reset_after variants) on every backend, against the float64 oracle
(tests/reference.py: rnn_forward / rnn_backward, written from RECURRENT_SPEC.md).

What it covers, with fresh random inputs each run (the seed is in every message;
GPUCMP_TEST_SEED=<seed> replays a run):
- forward (y, every save block, h_T, c_T) and backward (dxw, dm, dh0, dc0) against the
  oracle for every cell x activation, go_backwards, sequences on / off,
  zero_output_for_mask, masks with left / middle / right padding and fully masked rows,
  with and without h0 / c0 / bh, odd sizes (u = 1, T = 1 included);
- the weight gradients the plan derives from the outputs (dU = hprev^T . dxw or dm, the
  reset_before h block from save[4], dbh = sum dm) against the oracle's;
- the oracle's backward against central differences of the oracle's forward, and the
  core's backward against central differences of the oracle (a few elements each);
- every output element written: outputs are NaN-poisoned before the call;
- float16 / bfloat16 storage (bfloat16 passed as uint16 bits) against the oracle on the
  rounded inputs;
- recurrent dropout: a fixed random rmask (B, G*u) (inverted-dropout values per gate
  block) in several configurations of every test above (forward, backward, the plan's
  per-gate dU, central differences), a mask of ones is no mask, and the masked cells
  against a per-gate hand computation of one step;
- bad inputs: a ValueError / TypeError naming the argument;
- on CUDA, every case for each recurrence of the variant point cuda.rnn (backend ids
  "cuda:0/stepwise", "cuda:0/persistent", "cuda:0/cluster", "cuda:0/resident": forced, and
  `last` checked after each call; recurrent dropout is refused by the persistent and
  resident kernels and then runs stepwise; a U too large for the resident kernel's
  registers is refused by it with a clear error, then runs under auto), shapes
  that give the persistent kernel several groups of rows and several CTAs per group,
  float16 / bfloat16 storage on it, a shape too large for it (forced: a clear error,
  auto: stepwise ran), and a CUDA-graph capture and replay of a training step through it.
- every CPU test at every available variant of cpu.rnn.simd (the fused kernels at each
  SIMD level and the stepwise path; the `rnn_variant` parameter), and that `last` reports
  the one that ran (stepwise for reset_before and recurrent dropout).
CUDA cases are marked `cuda` (skipped without a CUDA backend); a `cuda:0` case is listed
even where there is none, so the lead sees them skip rather than vanish.

`OP_CASES` (case_rnn_fwd / case_rnn_bwd on a tests/test_ops.py Case) is merged into
tests/test_ops.py's registry, so the op matrix there covers these ops too.
"""
import math
import os

import numpy as np
import pytest

import reference as ref
from gpucmp import _core, ops, variants
from gpucmp.harness import costs

CELLS = ("simple", "lstm", "gru", "gru_reset_before")
ACTS = ref.RNN_ACTIVATIONS
_BACKENDS = tuple(_core.backends())
_CUDA = tuple(b for b in _BACKENDS if b.startswith("cuda")) or ("cuda:0",)
# the recurrences of the variant point cuda.rnn a CUDA case runs (each forced in turn)
RNN_VARIANTS = ("stepwise", "persistent", "cluster", "resident")
BACKENDS = [pytest.param("cpu", id="cpu")] + [pytest.param(f"{b}/{v}", id=f"{b}-{v}", marks=pytest.mark.cuda)
                                              for b in _CUDA for v in RNN_VARIANTS]
DTYPES = ("float32", "float16", "bfloat16")
RNN_POINT = "cpu.rnn.simd"
CPU_RNN_VARIANTS = variants.available(RNN_POINT) if RNN_POINT in variants.points() else ["auto"]


def pytest_generate_tests(metafunc):
    """Every test with a backend runs at each CPU recurrence variant (other backends once)."""
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("rnn_variant", CPU_RNN_VARIANTS, indirect=True)


@pytest.fixture(autouse=True)
def rnn_variant(request):
    v = getattr(request, "param", None)
    if v is None or v == "auto":
        yield v
        return
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if params.get("backend", "cpu") != "cpu":
        if v != CPU_RNN_VARIANTS[0]:
            pytest.skip(f"{RNN_POINT} matters on the CPU backend only")
        yield v
        return
    with variants.forced(RNN_POINT, v):
        yield v
# rel. norm error: float32 compute vs float64 (T steps of error growth); storage dtypes
# (bfloat16: 8 mantissa bits in every saved gate value, compounded over T steps and through
# the backward; measured up to ~2.5e-2 on 7-step GRUs with relu)
TOL = {"float32": 3e-5, "float16": 1e-2, "bfloat16": 4e-2}
UNIT = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}  # one rounding (relative)
# gate activations that keep a recurrence bounded; linear / relu gates make an LSTM's f or a
# GRU's z unbounded and the state grows doubly exponentially (h_t ~ z(h) * h): overflow
BOUNDED = ("sigmoid", "hard_sigmoid", "tanh")


def _seed():
    env = os.environ.get("GPUCMP_TEST_SEED")
    return int(env) if env else int(np.random.SeedSequence().entropy % (1 << 63))


# ------------------------------------------------------------------ storage helpers

def to_store(a, dtype):
    """float64 values -> the array run_op takes for `dtype` (bfloat16: uint16 bits)."""
    if a is None:
        return None
    a = np.ascontiguousarray(a)
    if dtype == "float32":
        return a.astype(np.float32)
    if dtype == "float16":
        return a.astype(np.float16)
    return ops.float32_to_bfloat16_bits(a.astype(np.float32))


def from_store(a, dtype):
    if a is None:
        return None
    if dtype == "bfloat16":
        return np.asarray(ops.bfloat16_bits_to_float32(a), np.float64)
    return np.asarray(a, np.float64)


def poisoned(shape, dtype):
    """An output array full of NaN (unwritten elements stay NaN)."""
    return to_store(np.full(shape, np.nan), dtype)


def gates(cell):
    return ref.RNN_GATES[cell]


def save_blocks(cell):
    return {"simple": 2, "lstm": 7, "gru": 5, "gru_reset_before": 5}[cell]


# ------------------------------------------------------------------ calling the core

def rnn_variant_skip(var):
    """Why the cuda.rnn variant `var` cannot run on this build / device (None: it can):
    "cluster" needs compute capability 9.0 and the sm_90 image, and a run that plans for
    an sm_86 card (cuda.smem_limit_kb forced: test_cuda_sm86_limits.py) has no clusters."""
    if var != "cluster":
        return None
    info = variants.points().get("cuda.rnn")
    if info is None:
        return "this build has no cuda.rnn point"
    if variants.points().get("cuda.smem_limit_kb", {}).get("forced", "auto") != "auto":
        return "planning for an sm_86 card (cuda.smem_limit_kb): it has no thread-block clusters"
    if "cluster" not in info["available"]:
        return "cuda.rnn=cluster is not available here (thread-block clusters need sm_90)"
    return None


def resident_refusal(op, ins, p, rmask=None):
    """Why cuda.rnn=resident refuses this call (None: it runs it): recurrent dropout, or a
    U that does not fit in a block's registers -- gpucmp.harness.costs.rnn_resident_eligible,
    the Python twin of rres_plan (csrc/cuda/rnn_resident_kernels.cuh) that the harness's
    projections use too, checked against the C rule by tests/test_rnn_resident_emu.py."""
    if rmask is not None:
        return "recurrent dropout"
    U = ins[1] if op == "rnn_fwd" else ins[3]
    which = "fwd" if op == "rnn_fwd" else "bwd"
    if not costs.rnn_resident_eligible(p.get("cell", "lstm"), U.shape[0], which):
        return "U does not fit in one block's registers"
    return None


def run_rnn(op, backend, ins, outs, p, rmask=None):
    """run_op on `backend`, which may name a cuda.rnn variant ("cuda:0/persistent"): that
    variant is forced for the call and `last` must report it. Recurrent dropout is not
    the persistent or resident kernels': forced, they refuse (NotImplementedError naming
    the variant, nothing written), then the call runs under auto, which must take the
    stepwise path. A U too large for the resident kernel: refused the same way, then auto
    runs it (persistent or stepwise)."""
    be, _, var = backend.partition("/")
    if not var:
        _core.run_op(op, be, ins, outs, p)
        return
    why = rnn_variant_skip(var)
    if why:
        pytest.skip(why)
    want = var
    if (var in ("persistent", "cluster") and rmask is not None) or \
            (var == "resident" and resident_refusal(op, ins, p, rmask)):
        before = [None if o is None else o.copy() for o in outs]
        with variants.forced("cuda.rnn", var), pytest.raises(NotImplementedError, match=var):
            _core.run_op(op, be, ins, outs, p)
        for o, b in zip(outs, before):  # a refused call writes nothing (the outputs are NaN-poisoned)
            assert o is None or np.array_equal(o, b, equal_nan=True), f"{op}: cuda.rnn={var} refused but wrote"
        var = want = "auto"
    with variants.forced("cuda.rnn", var):
        _core.run_op(op, be, ins, outs, p)
        ran = variants.last("cuda.rnn")
    if want == "auto":
        want = "stepwise" if rmask is not None else ran
    assert ran == want, f"{op} with cuda.rnn={var} ran {ran!r}, expected {want!r}"


def core_forward(backend, dtype, xw, U, h0=None, c0=None, mask=None, bh=None, want_save=True,
                 want_h=True, want_c=None, rmask=None, **p):
    """rnn_fwd through run_op on storage-exact float64 inputs; returns float64 outputs."""
    B, T, Gu = xw.shape
    u = U.shape[0]
    cell = p.get("cell", "lstm")
    if want_c is None:
        want_c = cell == "lstm"
    y = poisoned((B, T, u) if p.get("sequences") else (B, u), dtype)
    save = poisoned((save_blocks(cell), B, T, u), dtype) if want_save else None
    hT = poisoned((B, u), dtype) if want_h else None
    cT = poisoned((B, u), dtype) if want_c else None
    m = None if mask is None else np.ascontiguousarray(mask, np.float32)
    rm = None if rmask is None else np.ascontiguousarray(rmask, np.float32)
    ins = (to_store(xw, dtype), to_store(U, dtype), to_store(h0, dtype), to_store(c0, dtype), m,
           to_store(bh, dtype), rm)
    run_rnn("rnn_fwd", backend, ins, (y, save, hT, cT), p, rm)
    return {"y": from_store(y, dtype), "save": from_store(save, dtype), "h": from_store(hT, dtype),
            "c": from_store(cT, dtype)}


def core_backward(backend, dtype, save, U, dy=None, dh_T=None, dc_T=None, mask=None, want_dm=None,
                  want_dh0=True, want_dc0=None, rmask=None, **p):
    S, B, T, u = save.shape
    cell = p.get("cell", "lstm")
    G = gates(cell)
    if want_dm is None:
        want_dm = cell == "gru"
    if want_dc0 is None:
        want_dc0 = cell == "lstm"
    dxw = poisoned((B, T, G * u), dtype)
    dm = poisoned((B, T, G * u), dtype) if want_dm else None
    dh0 = poisoned((B, u), dtype) if want_dh0 else None
    dc0 = poisoned((B, u), dtype) if want_dc0 else None
    m = None if mask is None else np.ascontiguousarray(mask, np.float32)
    rm = None if rmask is None else np.ascontiguousarray(rmask, np.float32)
    ins = (to_store(dy, dtype), to_store(dh_T, dtype), to_store(dc_T, dtype), to_store(U, dtype),
           to_store(save, dtype), m, rm)
    run_rnn("rnn_bwd", backend, ins, (dxw, dm, dh0, dc0), p, rm)
    return {"dxw": from_store(dxw, dtype), "dm": from_store(dm, dtype), "dh0": from_store(dh0, dtype),
            "dc0": from_store(dc0, dtype)}


def oracle_kw(p):
    return dict(cell=p.get("cell", "lstm"), activation=p.get("activation", "tanh"),
                recurrent_activation=p.get("recurrent_activation", "sigmoid"),
                go_backwards=bool(p.get("go_backwards", False)), sequences=bool(p.get("sequences", False)),
                zero_output_for_mask=bool(p.get("zero_output_for_mask", False)))


# ------------------------------------------------------------------ random problems

def make_mask(rng, B, T, kind):
    """(B, T) float32 0/1 (None for 'none'): right / left / middle padding, or a mix with
    a fully masked row and random holes."""
    if kind == "none":
        return None
    m = np.ones((B, T))
    for b in range(B):
        n = int(rng.integers(0, T)) if T > 1 else 0  # padded steps of the row
        if kind == "right" and n:
            m[b, T - n:] = 0
        elif kind == "left" and n:
            m[b, :n] = 0
        elif kind == "middle" and T > 2:
            a = int(rng.integers(1, T - 1))
            m[b, a:a + max(1, n // 2)] = 0
            m[b, -1] = 1
        elif kind == "mixed":
            m[b] = rng.random(T) < 0.6
    if kind == "mixed":
        m[int(rng.integers(0, B))] = 0  # a fully masked row
        if B > 1:
            m[(int(rng.integers(0, B)) + 1) % B, -1] = 0  # a row whose last step is masked
    return m


class Problem:
    """Random storage-exact inputs of one configuration (float64 arrays)."""

    def __init__(self, rng, dtype, cell, B, T, u, act="tanh", ract="sigmoid", go_backwards=False,
                 sequences=False, zero_output_for_mask=False, mask="none", h0=True, c0=True, bh=True,
                 scale=1.0, rmask=False):
        G = gates(cell)
        r = lambda a: ref.round_to(a, dtype)  # noqa: E731
        # moderate scales: relu / linear recurrences stay bounded over a few steps
        self.xw = r(rng.standard_normal((B, T, G * u)) * (0.8 * scale))
        self.U = r(rng.standard_normal((u, G * u)) * (0.9 * scale / math.sqrt(u)))
        self.h0 = r(rng.standard_normal((B, u)) * 0.5) if h0 else None
        self.c0 = r(rng.standard_normal((B, u)) * 0.5) if (c0 and cell == "lstm") else None
        self.bh = r(rng.standard_normal(G * u) * 0.3) if (bh and cell == "gru") else None
        self.mask = make_mask(rng, B, T, mask)
        # a recurrent dropout mask as the plan draws it: per gate block, 0 or 1/(1-rate)
        self.rmask = (rng.random((B, G * u)) >= 0.35) / 0.65 if rmask else None
        self.p = dict(cell=cell, activation=act, recurrent_activation=ract, go_backwards=go_backwards,
                      sequences=sequences, zero_output_for_mask=zero_output_for_mask)
        self.dy = r(rng.standard_normal((B, T, u) if sequences else (B, u)))
        self.dh_T = r(rng.standard_normal((B, u)))
        self.dc_T = r(rng.standard_normal((B, u))) if cell == "lstm" else None
        self.what = (f"{cell} B={B} T={T} u={u} act={act} ract={ract} go_backwards={go_backwards} "
                     f"sequences={sequences} zero_output={zero_output_for_mask} mask={mask} "
                     f"h0={h0} c0={self.c0 is not None} bh={self.bh is not None} rmask={rmask}")

    def inputs(self):
        return dict(h0=self.h0, c0=self.c0, mask=self.mask, bh=self.bh, rmask=self.rmask)


def dU_left(save, rmask, cell, col):
    """The plan's left operand of dU's column `col` (gpucmp.h, rnn_bwd): hprev = save[0],
    times the column's gate block of rmask (broadcast over T) when there is one;
    reset_before's h block: save[4] (r * the masked hprev already)."""
    S, B, T, u = save.shape
    if cell == "gru_reset_before" and col >= 2 * u:
        return save[4].reshape(B * T, u)
    hp = save[0]
    if rmask is not None:
        g = col // u
        hp = hp * rmask[:, None, g * u:(g + 1) * u]
    return hp.reshape(B * T, u)


def configs(rng, cell, n=10):
    """Fixed edge configurations plus random ones."""
    out = [dict(B=3, T=5, u=7), dict(B=2, T=1, u=3), dict(B=4, T=6, u=1, mask="mixed"),
           dict(B=3, T=5, u=7, go_backwards=True, sequences=True, mask="mixed"),
           dict(B=3, T=6, u=5, sequences=True, zero_output_for_mask=True, mask="mixed"),
           dict(B=1, T=4, u=2, h0=False, c0=False, bh=False, mask="left"),
           dict(B=5, T=4, u=16, go_backwards=True, mask="middle"),
           dict(B=3, T=7, u=4, sequences=True, mask="right", h0=False),
           dict(B=3, T=5, u=7, rmask=True), dict(B=4, T=6, u=1, mask="mixed", rmask=True),
           dict(B=3, T=5, u=6, go_backwards=True, sequences=True, mask="mixed", rmask=True, h0=False)]
    for _ in range(n):
        out.append(dict(B=int(rng.integers(1, 6)), T=int(rng.integers(1, 8)), u=int(rng.integers(1, 10)),
                        go_backwards=bool(rng.integers(0, 2)), sequences=bool(rng.integers(0, 2)),
                        zero_output_for_mask=bool(rng.integers(0, 2)),
                        mask=str(rng.choice(["none", "right", "left", "middle", "mixed"])),
                        h0=bool(rng.integers(0, 2)), c0=bool(rng.integers(0, 2)), bh=bool(rng.integers(0, 2)),
                        rmask=bool(rng.integers(0, 2))))
    return out


def rel_check(name, got, want, tol, what, floor=1e-12, scale=0.0):
    """||got - want|| <= tol * max(||want||, scale) + floor. scale: for a sum that cancels
    (a weight gradient over B*T products), the norm of the sum of the terms' magnitudes --
    the size a half-precision rounding error of the terms is relative to."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: {name}: shape {got.shape}, expected {want.shape}"
    assert np.isfinite(want).all(), f"{what}: {name}: the oracle is not finite (test bug)"
    bad = ~np.isfinite(got)
    assert not bad.any(), f"{what}: {name}: {bad.sum()} non-finite (unwritten?) values, first at " \
                          f"{np.argwhere(bad)[0].tolist()}"
    diff, norm = np.linalg.norm(got - want), max(np.linalg.norm(want), scale)
    if diff > tol * norm + floor:
        worst = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
        raise AssertionError(f"{what}: {name}: ||out-ref||/||ref|| = {diff / max(norm, 1e-300):.3e} > {tol:.1e}; "
                             f"worst at {list(worst)}: got {got[worst]!r}, expected {want[worst]!r}")


def check_forward(backend, dtype, pr, tol, what):
    got = core_forward(backend, dtype, pr.xw, pr.U, **pr.inputs(), **pr.p)
    want = ref.rnn_forward(pr.xw, pr.U, **pr.inputs(), **oracle_kw(pr.p))
    # a state that nearly cancels (a linear activation, B = u = 1: h_T = 4e-3 from O(1)
    # terms, 5.7e-5 relative in float32, seen in CI) is off by float32 roundings of the
    # inputs' size, not of itself: a floor of 8 of them (negligible beside the half
    # dtypes' relative tolerances)
    fl = 8 * UNIT["float32"] * sum(float(np.linalg.norm(a)) for a in (pr.xw, pr.h0, pr.c0, pr.bh)
                                   if a is not None) + 1e-12
    rel_check("y", got["y"], want["y"], tol, what, floor=fl)
    rel_check("h_T", got["h"], want["h"], tol, what, floor=fl)
    if pr.p["cell"] == "lstm":
        rel_check("c_T", got["c"], want["c"], tol, what, floor=fl)
    for q, blk in enumerate(want["save"]):
        rel_check(f"save[{q}]", got["save"][q], blk, tol, what, floor=fl)
    return got, want


def check_backward(backend, dtype, pr, tol, what):
    fwd = core_forward(backend, dtype, pr.xw, pr.U, **pr.inputs(), **pr.p)
    got = core_backward(backend, dtype, fwd["save"], pr.U, dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T, mask=pr.mask,
                        rmask=pr.rmask, **pr.p)
    want = ref.rnn_backward(pr.xw, pr.U, **pr.inputs(), dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T,
                            **oracle_kw(pr.p))
    cell = pr.p["cell"]
    incoming = sum(float(np.linalg.norm(a)) for a in (pr.dy, pr.dh_T, pr.dc_T) if a is not None)
    # dxw (and a GRU's dm): a gate gradient is an incoming gradient times differences of
    # stored values (dz = dh * (h_prev - n) * z(1 - z)); where such a difference nearly cancels (B =
    # u = 1, one element: 4.7e-2 relative in bf16, seen in CI) the error is one rounding of
    # the storage dtype at the incoming gradients' size, not a fraction of the value
    rel_check("dxw", got["dxw"], want["dxw"], tol, what, floor=UNIT[dtype] * incoming + 1e-12)
    # dh0 / dc0 are sums over every step of products of the incoming gradients: one that
    # nearly cancels (B = u = 1: a single value of 9e-4 from O(1) terms) carries a rounding
    # error relative to those gradients, not to itself -- 1% of their norm is its scale
    # (and, as for dxw, one rounding of the storage dtype at that size: a bf16 tanh output
    # near +-1 leaves its derivative a few % off at every step the gradient goes back)
    one = UNIT[dtype] * incoming
    rel_check("dh0", got["dh0"], want["dh0"], tol, what, scale=0.01 * incoming, floor=one)
    if cell == "lstm":
        rel_check("dc0", got["dc0"], want["dc0"], tol, what, scale=0.01 * incoming, floor=one)
    if cell == "gru":
        rel_check("dm", got["dm"], want["dm"], tol, what, floor=UNIT[dtype] * incoming + 1e-12)  # as dxw
    # masked (row, step): dxw exactly zero
    if pr.mask is not None:
        assert np.all(got["dxw"][pr.mask == 0] == 0.0), f"{what}: dxw of masked steps is not zero"
    # the plan's weight gradients from the outputs (gpucmp.h, rnn_bwd)
    S, B, T, u = fwd["save"].shape
    dz = (got["dm"] if cell == "gru" else got["dxw"]).reshape(B * T, -1)
    dU, terms = np.zeros_like(want["dU"]), np.zeros_like(want["dU"])
    for g in range(gates(cell)):  # one GEMM per gate block (the plan does one when it can)
        left, sl = dU_left(fwd["save"], pr.rmask, cell, g * u), slice(g * u, (g + 1) * u)
        dU[:, sl], terms[:, sl] = left.T @ dz[:, sl], np.abs(left).T @ np.abs(dz[:, sl])
    rel_check("dU (plan formula)", dU, want["dU"], tol * 3, what, scale=np.linalg.norm(terms))
    if cell == "gru":
        dm = got["dm"].reshape(B * T, -1)
        rel_check("dbh = sum dm", dm.sum(0), want["dbh"], tol * 3, what, scale=np.linalg.norm(np.abs(dm).sum(0)))
    return got, want, fwd


# ------------------------------------------------------------------ the oracle itself

def _loss(pr, xw=None, U=None, h0=None, c0=None, bh=None):
    kw = pr.inputs()
    kw.update({k: v for k, v in dict(h0=h0, c0=c0, bh=bh).items() if v is not None})
    o = ref.rnn_forward(pr.xw if xw is None else xw, pr.U if U is None else U, **kw, **oracle_kw(pr.p))
    s = float((o["y"] * pr.dy).sum() + (o["h"] * pr.dh_T).sum())
    if pr.dc_T is not None:
        s += float((o["c"] * pr.dc_T).sum())
    return s


def _fd(f, x, idx, eps=1e-6):
    x = np.array(x, np.float64, copy=True)
    old = x[idx]
    x[idx] = old + eps
    fp = f(x)
    x[idx] = old - eps
    fm = f(x)
    return (fp - fm) / (2 * eps)


def _some(rng, shape, n=6):
    return [tuple(int(rng.integers(0, s)) for s in shape) for _ in range(n)]


@pytest.mark.parametrize("cell", CELLS)
def test_oracle_backward_is_the_gradient_of_the_oracle(cell):
    seed = _seed()
    rng = np.random.default_rng(seed)
    for cfg in configs(rng, cell, n=4):
        act = str(rng.choice(["tanh", "sigmoid", "linear"]))
        pr = Problem(rng, "float64", cell, act=act, ract=str(rng.choice(["sigmoid", "tanh"])), **cfg)
        what = f"seed={seed} {pr.what}"
        g = ref.rnn_backward(pr.xw, pr.U, **pr.inputs(), dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T,
                             **oracle_kw(pr.p))
        num = ref.numerical_grad(lambda x: _loss(pr, xw=x), pr.xw)
        rel_check("dxw vs central differences", g["dxw"], num, 1e-6, what, floor=1e-8)
        num = ref.numerical_grad(lambda x: _loss(pr, U=x), pr.U)
        rel_check("dU vs central differences", g["dU"], num, 1e-6, what, floor=1e-8)
        if pr.h0 is not None:
            num = ref.numerical_grad(lambda x: _loss(pr, h0=x), pr.h0)
            rel_check("dh0 vs central differences", g["dh0"], num, 1e-6, what, floor=1e-8)
        if pr.c0 is not None:
            num = ref.numerical_grad(lambda x: _loss(pr, c0=x), pr.c0)
            rel_check("dc0 vs central differences", g["dc0"], num, 1e-6, what, floor=1e-8)
        if pr.bh is not None:
            num = ref.numerical_grad(lambda x: _loss(pr, bh=x), pr.bh)
            rel_check("dbh vs central differences", g["dbh"], num, 1e-6, what, floor=1e-8)


def test_oracle_masking_and_go_backwards_by_hand():
    """Keras' semantics on a case small enough to reason about: SimpleRNN with linear
    activation and U = 0, so h_t = xw_t at valid steps."""
    xw = np.array([[[1.0], [2.0], [3.0], [4.0]]])
    U = np.zeros((1, 1))
    mask = np.array([[0.0, 1.0, 0.0, 1.0]])
    o = ref.rnn_forward(xw, U, h0=np.array([[9.0]]), mask=mask, cell="simple", activation="linear",
                        sequences=True)
    assert o["y"][0, :, 0].tolist() == [0.0, 2.0, 2.0, 4.0]  # TF emits 0 before the first valid step
    assert o["h"][0, 0] == 4.0
    o = ref.rnn_forward(xw, U, h0=np.array([[9.0]]), mask=mask, cell="simple", activation="linear",
                        sequences=True, zero_output_for_mask=True)
    assert o["y"][0, :, 0].tolist() == [0.0, 2.0, 0.0, 4.0]
    # go_backwards: processing order x3, x2, x1, x0 (mask reversed with it), outputs not re-reversed
    o = ref.rnn_forward(xw, U, mask=mask, cell="simple", activation="linear", sequences=True,
                        go_backwards=True)
    assert o["y"][0, :, 0].tolist() == [4.0, 4.0, 2.0, 2.0]
    o = ref.rnn_forward(xw, U, mask=np.array([[1.0, 1.0, 0.0, 0.0]]), cell="simple", activation="linear",
                        zero_output_for_mask=True)
    assert o["y"][0, 0] == 0.0 and o["h"][0, 0] == 2.0  # last step masked: last output 0, state kept
    o = ref.rnn_forward(xw, U, h0=np.array([[9.0]]), mask=np.zeros((1, 4)), cell="simple")
    assert o["y"][0, 0] == 0.0 and o["h"][0, 0] == 9.0  # fully masked: initial state, zero output


# ------------------------------------------------------------------ the core vs the oracle

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cell", CELLS)
def test_forward_matches_oracle(backend, cell):
    seed = _seed()
    rng = np.random.default_rng(seed)
    for i, cfg in enumerate(configs(rng, cell)):
        act = ACTS[i % len(ACTS)]
        ract = BOUNDED[i % len(BOUNDED)]
        pr = Problem(rng, "float32", cell, act=act, ract=ract, **cfg)
        check_forward(backend, "float32", pr, TOL["float32"], f"[{backend} seed={seed}] {pr.what}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cell", CELLS)
def test_backward_matches_oracle(backend, cell):
    seed = _seed()
    rng = np.random.default_rng(seed)
    for i, cfg in enumerate(configs(rng, cell)):
        act = ACTS[(i + 2) % len(ACTS)]
        ract = BOUNDED[(i + 1) % len(BOUNDED)]
        pr = Problem(rng, "float32", cell, act=act, ract=ract, **cfg)
        check_backward(backend, "float32", pr, TOL["float32"], f"[{backend} seed={seed}] {pr.what}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("act", ACTS)
def test_each_activation(backend, cell, act):
    """Each activation as `activation` and as `recurrent_activation`, masks and
    go_backwards on, forward and backward."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    for ract in (["sigmoid", act] if cell != "simple" else ["sigmoid"]):
        # unbounded gates: short sequences and small weights keep the recurrence finite
        wild = ract not in BOUNDED
        pr = Problem(rng, "float32", cell, B=3, T=3 if wild else 5, u=7, act=act, ract=ract, go_backwards=True,
                     sequences=True, mask="mixed", scale=0.3 if wild else 1.0)
        what = f"[{backend} seed={seed}] {pr.what}"
        check_forward(backend, "float32", pr, TOL["float32"], what)
        check_backward(backend, "float32", pr, TOL["float32"], what)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cell", CELLS)
def test_backward_matches_finite_differences_of_the_oracle(backend, cell):
    """The core's gradients (and the plan's dU / dbh from them) against central
    differences of the float64 oracle at a few elements."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    for cfg in [dict(B=3, T=5, u=7, mask="mixed", sequences=True, go_backwards=True),
                dict(B=2, T=4, u=3, mask="left"), dict(B=3, T=3, u=1, mask="none", zero_output_for_mask=True),
                dict(B=3, T=4, u=5, mask="mixed", sequences=True, rmask=True)]:
        pr = Problem(rng, "float32", cell, act="tanh", ract="sigmoid", **cfg)
        what = f"[{backend} seed={seed}] {pr.what}"
        got, want, fwd = check_backward(backend, "float32", pr, TOL["float32"], what)
        B, T, Gu = pr.xw.shape
        u = pr.U.shape[0]

        def close(name, a, b):
            assert abs(a - b) <= 1e-4 * (1.0 + abs(b)), f"{what}: {name}: core {a!r}, central difference {b!r}"
        for idx in _some(rng, pr.xw.shape):
            close(f"dxw{idx}", got["dxw"][idx], _fd(lambda x: _loss(pr, xw=x), pr.xw, idx))
        dz = (got["dm"] if cell == "gru" else got["dxw"]).reshape(B * T, Gu)
        for idx in _some(rng, pr.U.shape, 4):
            left = dU_left(fwd["save"], pr.rmask, cell, idx[1])
            close(f"dU{idx}", float(left[:, idx[0]] @ dz[:, idx[1]]), _fd(lambda x: _loss(pr, U=x), pr.U, idx))
        if pr.h0 is not None:
            for idx in _some(rng, pr.h0.shape, 3):
                close(f"dh0{idx}", got["dh0"][idx], _fd(lambda x: _loss(pr, h0=x), pr.h0, idx))
        if pr.c0 is not None:
            for idx in _some(rng, pr.c0.shape, 3):
                close(f"dc0{idx}", got["dc0"][idx], _fd(lambda x: _loss(pr, c0=x), pr.c0, idx))
        if pr.bh is not None:
            for j in range(0, Gu, max(1, Gu // 4)):
                close(f"dbh[{j}]", float(got["dm"][..., j].sum()), _fd(lambda x: _loss(pr, bh=x), pr.bh, (j,)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("cell", CELLS)
def test_half_storage(backend, dtype, cell):
    """The kernels take the backward's activations from `save` as stored: a tanh output h
    near +-1 kept in bfloat16 (8 bits) leaves little of its derivative 1 - h^2 (a 2-in-150
    chance per run of a 5-8% error at full scale, the same on every backend), so bfloat16
    inputs come at 0.6 scale: the check measures the kernels, not the format."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    scale = 0.6 if dtype == "bfloat16" else 1.0
    for cfg in [dict(B=3, T=5, u=7, mask="mixed", sequences=True),
                dict(B=4, T=3, u=1, mask="right", zero_output_for_mask=True, sequences=True),
                dict(B=2, T=6, u=9, go_backwards=True, rmask=True)]:
        pr = Problem(rng, dtype, cell, scale=scale, **cfg)
        what = f"[{backend} {dtype} seed={seed}] {pr.what}"
        check_forward(backend, dtype, pr, TOL[dtype], what)
        check_backward(backend, dtype, pr, TOL[dtype], what)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cell", CELLS)
def test_optional_outputs_and_inputs(backend, cell):
    """save / h_T / c_T / dm / dh0 / dc0 may be None; dy / dh_T / dc_T absent = zeros;
    the results that are asked for do not change."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    pr = Problem(rng, "float32", cell, B=3, T=4, u=5, mask="mixed", sequences=True)
    what = f"[{backend} seed={seed}] {pr.what}"
    full = core_forward(backend, "float32", pr.xw, pr.U, **pr.inputs(), **pr.p)
    bare = core_forward(backend, "float32", pr.xw, pr.U, **pr.inputs(), want_save=False, want_h=False,
                        want_c=False, **pr.p)
    assert np.array_equal(full["y"], bare["y"]), what
    # only dh_T given: the loss sum(dh_T * h_T)
    got = core_backward(backend, "float32", full["save"], pr.U, dh_T=pr.dh_T, mask=pr.mask, want_dm=False,
                        want_dc0=False, **pr.p)
    want = ref.rnn_backward(pr.xw, pr.U, **pr.inputs(), dh_T=pr.dh_T, **oracle_kw(pr.p))
    rel_check("dxw (dh_T only)", got["dxw"], want["dxw"], TOL["float32"], what)
    rel_check("dh0 (dh_T only)", got["dh0"], want["dh0"], TOL["float32"], what)
    got = core_backward(backend, "float32", full["save"], pr.U, dy=pr.dy, mask=pr.mask, want_dh0=False, **pr.p)
    want = ref.rnn_backward(pr.xw, pr.U, **pr.inputs(), dy=pr.dy, **oracle_kw(pr.p))
    rel_check("dxw (dy only)", got["dxw"], want["dxw"], TOL["float32"], what)
    # nothing given: zeros everywhere
    got = core_backward(backend, "float32", full["save"], pr.U, mask=pr.mask, **pr.p)
    assert np.all(got["dxw"] == 0) and np.all(got["dh0"] == 0), what


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mask_of_ones_is_no_mask(backend):
    seed = _seed()
    rng = np.random.default_rng(seed)
    for cell in CELLS:
        pr = Problem(rng, "float32", cell, B=3, T=5, u=4, sequences=True, go_backwards=True)
        a = core_forward(backend, "float32", pr.xw, pr.U, **pr.inputs(), **pr.p)
        kw = pr.inputs()
        kw["mask"] = np.full((3, 5), 2.5)  # any nonzero value means "used"
        b = core_forward(backend, "float32", pr.xw, pr.U, **kw, **pr.p)
        assert np.array_equal(a["y"], b["y"]) and np.array_equal(a["save"], b["save"]), f"seed={seed} {cell}"


@pytest.mark.cuda
@pytest.mark.parametrize("cell", CELLS)
def test_cuda_matches_cpu(cell):
    """The two backends on the same problems (larger sizes than the oracle can afford)."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    cfgs = [dict(B=64, T=20, u=128, mask="mixed", sequences=True), dict(B=7, T=33, u=65, go_backwards=True),
            dict(B=130, T=3, u=40, mask="right", zero_output_for_mask=True, sequences=True),
            dict(B=33, T=9, u=70, mask="mixed", sequences=True, rmask=True),
            dict(B=9, T=4, u=200, mask="left", go_backwards=True, sequences=True)]
    for cfg, dtype, var in [(c, d, v) for c in cfgs for d in DTYPES for v in RNN_VARIANTS]:
        if rnn_variant_skip(var):
            continue
        cuda = f"{_CUDA[0]}/{var}"
        pr = Problem(rng, dtype, cell, **cfg)
        what = f"[{cuda} vs cpu {dtype} seed={seed}] {pr.what}"
        a = core_forward("cpu", dtype, pr.xw, pr.U, **pr.inputs(), **pr.p)
        b = core_forward(cuda, dtype, pr.xw, pr.U, **pr.inputs(), **pr.p)
        tol = 1e-5 if dtype == "float32" else TOL[dtype]
        for k in ("y", "h", "save"):
            rel_check(k, b[k], a[k], tol, what)
        ga = core_backward("cpu", dtype, a["save"], pr.U, dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T, mask=pr.mask,
                           rmask=pr.rmask, **pr.p)
        gb = core_backward(cuda, dtype, a["save"], pr.U, dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T, mask=pr.mask,
                           rmask=pr.rmask, **pr.p)
        for k in ("dxw", "dh0") + (("dm",) if cell == "gru" else ()) + (("dc0",) if cell == "lstm" else ()):
            rel_check(k, gb[k], ga[k], tol * 3, what)


# ------------------------------------------------------------------ Keras' golden numbers
# RECURRENT_SPEC 1.0: Keras' own tests of constant-initialised layers (kernel 0.01,
# recurrent kernel 0.02, bias 0.03), K3:layers/rnn/{simple_rnn,lstm,gru}_test.py, ported
# as-is: x = arange reshaped, the layer's input projection done here as the plan does it
# (xw = x.W + b; LSTM's unit_forget_bias puts ones in the f block; GRU reset_after's bias is
# (2, 3u): row 0 into xw, row 1 = bh). Each row of the expected values is one batch row; a
# scalar row means every unit has that value.
_T, _F = True, False
_M_SRNN = [[_T, _T, _F, _T], [_T, _F, _F, _T]]
_M_LSTM = [[_T, _T, _T, _F], [_T, _T, _F, _F]]
_M_LSTM_BACK = [[_F, _T, _T, _T], [_F, _F, _T, _T]]
KERAS_GOLDEN = [
    # (id, layer cell, units, x shape, layer kwargs, call kwargs, expected)
    ("simple", "simple", 4, (2, 3, 4), {}, {}, [0.405432, 0.73605347]),
    ("simple-go_backwards", "simple", 4, (2, 3, 4), {"go_backwards": True}, {}, [0.11144729, 0.5528889]),
    ("simple-initial_state", "simple", 4, (2, 4, 3), {}, {"h0": (2, 4)}, [0.33621645, 0.6262637]),
    ("simple-initial_state-go_backwards", "simple", 4, (2, 4, 3), {"go_backwards": True}, {"h0": (2, 4)},
     [0.07344437, 0.43043602]),
    ("simple-mask", "simple", 4, (2, 4, 3), {}, {"mask": _M_SRNN}, [0.32951632, 0.61799484]),
    ("simple-mask-sequences", "simple", 2, (2, 4, 3), {"sequences": True}, {"mask": _M_SRNN},
     [[0.0599281, 0.15122814, 0.15122814, 0.32394567], [0.3969304, 0.3969304, 0.3969304, 0.608085]]),
    ("simple-mask-zero_output", "simple", 2, (2, 4, 3), {"sequences": True, "zero_output_for_mask": True},
     {"mask": _M_SRNN}, [[0.0599281, 0.15122814, 0.0, 0.32394567], [0.3969304, 0.0, 0.0, 0.608085]]),
    ("simple-mask-go_backwards", "simple", 4, (2, 4, 3), {"go_backwards": True}, {"mask": _M_SRNN},
     [0.07376196, 0.43645123]),
    ("lstm", "lstm", 3, (3, 6, 4), {}, {}, [0.6288687, 0.86899155, 0.9460773]),
    ("lstm-go_backwards", "lstm", 3, (3, 6, 4), {"go_backwards": True}, {}, [0.35622165, 0.74789524, 0.8872726]),
    ("lstm-no_unit_forget_bias", "lstm", 3, (3, 6, 4), {"unit_forget_bias": False}, {},
     [0.57019705, 0.8661914, 0.9459622]),
    ("lstm-no_bias", "lstm", 3, (3, 6, 4), {"use_bias": False}, {}, [0.54986924, 0.86226785, 0.9443936]),
    ("lstm-initial_state", "lstm", 2, (2, 4, 3), {}, {"h0": (2, 2), "c0": (2, 2)},
     [[0.20574439, 0.3558822], [0.64930826, 0.66276]]),
    ("lstm-initial_state-go_backwards", "lstm", 2, (2, 4, 3), {"go_backwards": True}, {"h0": (2, 2), "c0": (2, 2)},
     [[0.13281618, 0.2790356], [0.5839337, 0.5992567]]),
    ("lstm-mask", "lstm", 2, (2, 4, 3), {}, {"mask": _M_LSTM}, [0.11755939, 0.28556206]),
    ("lstm-mask-sequences", "lstm", 2, (2, 4, 3), {"sequences": True}, {"mask": _M_LSTM},
     [[0.01588910, 0.05552048, 0.11755939, 0.11755939], [0.14185596, 0.28556206, 0.28556206, 0.28556206]]),
    ("lstm-mask-zero_output", "lstm", 2, (2, 4, 3), {"sequences": True, "zero_output_for_mask": True},
     {"mask": _M_LSTM}, [[0.01588910, 0.05552048, 0.11755939, 0.0], [0.14185596, 0.28556206, 0.0, 0.0]]),
    ("lstm-mask-go_backwards", "lstm", 2, (2, 4, 3), {"go_backwards": True}, {"mask": _M_LSTM_BACK},
     [0.15341201, 0.3844719]),
    ("gru", "gru", 3, (3, 6, 4), {}, {}, [0.5217289, 0.6371659, 0.39384964]),
    ("gru-go_backwards", "gru", 3, (3, 6, 4), {"go_backwards": True}, {}, [0.24406259, 0.611516, 0.3928808]),
    ("gru-reset_before", "gru_reset_before", 3, (3, 6, 4), {}, {}, [0.51447755, 0.6426879, 0.40208298]),
    ("gru-no_bias", "gru", 3, (3, 6, 4), {"use_bias": False}, {}, [0.49988455, 0.64701194, 0.4103359]),
    ("gru-initial_state", "gru", 2, (2, 4, 3), {}, {"h0": (2, 2)}, [[0.23774096, 0.33508456], [0.83659905, 1.0227708]]),
    ("gru-initial_state-go_backwards", "gru", 2, (2, 4, 3), {"go_backwards": True}, {"h0": (2, 2)},
     [[0.13486053, 0.23261218], [0.78257304, 0.9691353]]),
    ("gru-mask", "gru", 2, (2, 4, 3), {}, {"mask": _M_SRNN}, [0.19393763, 0.30818558]),
    ("gru-mask-sequences", "gru", 2, (2, 4, 3), {"sequences": True}, {"mask": _M_SRNN},
     [[0.03606692, 0.09497581, 0.09497581, 0.19393763], [0.16051409, 0.16051409, 0.16051409, 0.30818558]]),
    ("gru-mask-zero_output", "gru", 2, (2, 4, 3), {"sequences": True, "zero_output_for_mask": True},
     {"mask": _M_SRNN}, [[0.03606692, 0.09497581, 0.0, 0.19393763], [0.16051409, 0.0, 0.0, 0.30818558]]),
    ("gru-mask-go_backwards", "gru", 2, (2, 4, 3), {"go_backwards": True}, {"mask": _M_SRNN},
     [0.11669192, 0.28380975]),
]


def keras_constant_layer(cell, u, xshape, unit_forget_bias=True, use_bias=True):
    """x, xw = x.W + b_x, U, bh of Keras' constant-initialised layer."""
    x = np.arange(int(np.prod(xshape)), dtype=np.float64).reshape(xshape)
    G = gates(cell)
    W = np.full((xshape[-1], G * u), 0.01)
    U = np.full((u, G * u), 0.02)
    b = np.full(G * u, 0.03) if use_bias else np.zeros(G * u)
    if cell == "lstm" and use_bias and unit_forget_bias:
        b[u:2 * u] = 1.0
    xw = ref.round_to(x @ W + b, "float32")
    bh = np.full(G * u, 0.03) if (cell == "gru" and use_bias) else None
    return xw, ref.round_to(U, "float32"), bh


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", KERAS_GOLDEN, ids=[g[0] for g in KERAS_GOLDEN])
def test_keras_golden_numbers(backend, case):
    name, cell, u, xshape, lkw, ckw, expected = case
    lkw = dict(lkw)
    layer = {k: lkw.pop(k) for k in ("unit_forget_bias", "use_bias") if k in lkw}
    xw, U, bh = keras_constant_layer(cell, u, xshape, **layer)
    B = xshape[0]
    kw = {"bh": bh}
    for k in ("h0", "c0"):
        if k in ckw:
            kw[k] = np.arange(int(np.prod(ckw[k])), dtype=np.float64).reshape(ckw[k])
    if "mask" in ckw:
        kw["mask"] = np.array(ckw["mask"], np.float64)
    p = dict(cell=cell, **lkw)
    want = np.asarray(expected, np.float64)
    if want.ndim == 1:  # one value per row, every unit alike
        want = np.repeat(want[:, None], u, axis=1)
    if p.get("sequences"):  # (B, T) values per row, every unit alike
        want = np.repeat(np.asarray(expected, np.float64)[:, :, None], u, axis=2)
    got = core_forward(backend, "float32", xw, U, **kw, **p)["y"]
    assert got.shape == (B,) + want.shape[1:]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{backend} {name}")
    orc = ref.rnn_forward(xw, U, **kw, **oracle_kw(p))["y"]
    np.testing.assert_allclose(orc, want, rtol=1e-5, atol=1e-5, err_msg=f"oracle {name}")


# ------------------------------------------------------------------ bad inputs

def _fwd_args(cell="lstm", B=2, T=3, u=4, seq=False):
    G = gates(cell)
    f = np.float32
    ins = [np.zeros((B, T, G * u), f), np.zeros((u, G * u), f), None, None, None, None, None]
    outs = [np.zeros((B, T, u) if seq else (B, u), f), np.zeros((save_blocks(cell), B, T, u), f), None, None]
    return ins, outs, dict(cell=cell, sequences=seq)


def _bwd_args(cell="lstm", B=2, T=3, u=4, seq=False):
    G = gates(cell)
    f = np.float32
    ins = [np.zeros((B, T, u) if seq else (B, u), f), None, None, np.zeros((u, G * u), f),
           np.zeros((save_blocks(cell), B, T, u), f), None, None]
    outs = [np.zeros((B, T, G * u), f), None, None, None]
    return ins, outs, dict(cell=cell, sequences=seq)


BAD_FWD = [
    ("xw last dim", lambda i, o, p: i.__setitem__(0, np.zeros((2, 3, 15), np.float32)), ValueError, "xw"),
    ("U shape", lambda i, o, p: i.__setitem__(1, np.zeros((4, 12), np.float32)), ValueError, "'U'"),
    ("xw rank", lambda i, o, p: i.__setitem__(0, np.zeros((2, 16), np.float32)), ValueError, "xw"),
    ("T == 0", lambda i, o, p: (i.__setitem__(0, np.zeros((2, 0, 16), np.float32)),
                                o.__setitem__(1, np.zeros((7, 2, 0, 4), np.float32))), ValueError, "time steps"),
    ("B == 0", lambda i, o, p: (i.__setitem__(0, np.zeros((0, 3, 16), np.float32)),
                                o.__setitem__(0, np.zeros((0, 4), np.float32))), ValueError, "batch"),
    ("mask shape", lambda i, o, p: i.__setitem__(4, np.ones((3, 2), np.float32)), ValueError, "mask"),
    ("mask dtype", lambda i, o, p: i.__setitem__(4, np.ones((2, 3), np.float16)), TypeError, "mask"),
    ("h0 shape", lambda i, o, p: i.__setitem__(2, np.zeros((2, 5), np.float32)), ValueError, "h0"),
    ("c0 shape", lambda i, o, p: i.__setitem__(3, np.zeros((3, 4), np.float32)), ValueError, "c0"),
    ("bh for lstm", lambda i, o, p: i.__setitem__(5, np.zeros((16,), np.float32)), ValueError, "bh"),
    ("y shape", lambda i, o, p: o.__setitem__(0, np.zeros((2, 3, 4), np.float32)), ValueError, "'y'"),
    ("save shape", lambda i, o, p: o.__setitem__(1, np.zeros((6, 2, 3, 4), np.float32)), ValueError, "save"),
    ("h_T shape", lambda i, o, p: o.__setitem__(2, np.zeros((4, 2), np.float32)), ValueError, "h_T"),
    ("mixed dtypes", lambda i, o, p: i.__setitem__(1, np.zeros((4, 16), np.float16)), TypeError, "U"),
    ("int dtype", lambda i, o, p: i.__setitem__(0, np.zeros((2, 3, 16), np.int32)), TypeError, "xw"),
    ("unknown cell", lambda i, o, p: p.__setitem__("cell", "transformer"), ValueError, "cell"),
    ("unknown act", lambda i, o, p: p.__setitem__("activation", "softmax"), ValueError, "activation"),
    ("rmask shape", lambda i, o, p: i.__setitem__(6, np.ones((2, 4), np.float32)), ValueError, "rmask"),
    ("rmask dtype", lambda i, o, p: i.__setitem__(6, np.ones((2, 16), np.float16)), TypeError, "rmask"),
]


@pytest.mark.parametrize("name,edit,exc,word", BAD_FWD, ids=[b[0] for b in BAD_FWD])
def test_bad_forward_inputs(name, edit, exc, word):
    i, o, p = _fwd_args()
    edit(i, o, p)
    with pytest.raises(exc, match=word):
        _core.run_op("rnn_fwd", "cpu", tuple(i), tuple(o), p)


def test_bad_forward_inputs_per_cell():
    for cell in ("simple", "gru", "gru_reset_before"):
        i, o, p = _fwd_args(cell)
        i[3] = np.zeros((2, 4), np.float32)
        with pytest.raises(ValueError, match="c0"):
            _core.run_op("rnn_fwd", "cpu", tuple(i), tuple(o), p)
        i, o, p = _fwd_args(cell)
        o[3] = np.zeros((2, 4), np.float32)
        with pytest.raises(ValueError, match="c_T"):
            _core.run_op("rnn_fwd", "cpu", tuple(i), tuple(o), p)
    for cell in ("simple", "gru_reset_before"):
        i, o, p = _fwd_args(cell)
        i[5] = np.zeros((gates(cell) * 4,), np.float32)
        with pytest.raises(ValueError, match="bh"):
            _core.run_op("rnn_fwd", "cpu", tuple(i), tuple(o), p)
    i, o, p = _fwd_args("gru")
    i[5] = np.zeros((11,), np.float32)
    with pytest.raises(ValueError, match="bh"):
        _core.run_op("rnn_fwd", "cpu", tuple(i), tuple(o), p)
    i, o, p = _fwd_args("gru", seq=True)
    o[0] = np.zeros((2, 4), np.float32)  # sequences needs (B, T, u)
    with pytest.raises(ValueError, match="'y'"):
        _core.run_op("rnn_fwd", "cpu", tuple(i), tuple(o), p)


BAD_BWD = [
    ("save blocks", lambda i, o, p: i.__setitem__(4, np.zeros((5, 2, 3, 4), np.float32)), ValueError, "save"),
    ("save rank", lambda i, o, p: i.__setitem__(4, np.zeros((7, 2, 12), np.float32)), ValueError, "save"),
    ("U shape", lambda i, o, p: i.__setitem__(3, np.zeros((4, 4), np.float32)), ValueError, "'U'"),
    ("dy shape", lambda i, o, p: i.__setitem__(0, np.zeros((2, 3, 4), np.float32)), ValueError, "dy"),
    ("dh_T shape", lambda i, o, p: i.__setitem__(1, np.zeros((2, 3), np.float32)), ValueError, "dh_T"),
    ("dxw shape", lambda i, o, p: o.__setitem__(0, np.zeros((2, 3, 12), np.float32)), ValueError, "dxw"),
    ("dxw missing", lambda i, o, p: o.__setitem__(0, None), ValueError, "dxw"),
    ("dm for lstm", lambda i, o, p: o.__setitem__(1, np.zeros((2, 3, 16), np.float32)), ValueError, "dm"),
    ("mask shape", lambda i, o, p: i.__setitem__(5, np.ones((2, 4), np.float32)), ValueError, "mask"),
    ("dc0 shape", lambda i, o, p: o.__setitem__(3, np.zeros((2, 5), np.float32)), ValueError, "dc0"),
    ("T == 0", lambda i, o, p: i.__setitem__(4, np.zeros((7, 2, 0, 4), np.float32)), ValueError, "time steps"),
    ("dtype mix", lambda i, o, p: o.__setitem__(0, np.zeros((2, 3, 16), np.float16)), TypeError, "dxw"),
    ("rmask shape", lambda i, o, p: i.__setitem__(6, np.ones((3, 16), np.float32)), ValueError, "rmask"),
    ("rmask dtype", lambda i, o, p: i.__setitem__(6, np.ones((2, 16), np.int32)), TypeError, "rmask"),
]


@pytest.mark.parametrize("name,edit,exc,word", BAD_BWD, ids=[b[0] for b in BAD_BWD])
def test_bad_backward_inputs(name, edit, exc, word):
    i, o, p = _bwd_args()
    edit(i, o, p)
    with pytest.raises(exc, match=word):
        _core.run_op("rnn_bwd", "cpu", tuple(i), tuple(o), p)


def test_bad_backward_inputs_per_cell():
    for cell in ("simple", "gru", "gru_reset_before"):
        i, o, p = _bwd_args(cell)
        o[3] = np.zeros((2, 4), np.float32)
        with pytest.raises(ValueError, match="dc0"):
            _core.run_op("rnn_bwd", "cpu", tuple(i), tuple(o), p)
        i, o, p = _bwd_args(cell)
        i[2] = np.zeros((2, 4), np.float32)
        with pytest.raises(ValueError, match="dc_T"):
            _core.run_op("rnn_bwd", "cpu", tuple(i), tuple(o), p)
    for cell in ("simple", "gru_reset_before"):
        i, o, p = _bwd_args(cell)
        o[1] = np.zeros((2, 3, gates(cell) * 4), np.float32)
        with pytest.raises(ValueError, match="dm"):
            _core.run_op("rnn_bwd", "cpu", tuple(i), tuple(o), p)


def test_arity_and_names():
    assert "rnn_fwd" in _core.op_names() and "rnn_bwd" in _core.op_names()
    assert tuple(_core.op_arity("rnn_fwd")) == (7, 4)
    assert tuple(_core.op_arity("rnn_bwd")) == (7, 4)


# ------------------------------------------------------------------ tests/test_ops.py's matrix

def _case(c, bwd):
    """One random configuration per cell on a tests/test_ops.py Case (backend, dtype)."""
    tol = TOL[c.dtype]
    for cell in CELLS:
        cfg = configs(c.rng, cell, n=1)[-1]
        ract = str(c.rng.choice(BOUNDED))
        pr = Problem(c.rng, c.dtype, cell, act=str(c.rng.choice(ACTS)), ract=ract, **cfg)
        c.what = pr.what
        if bwd:
            check_backward(c.backend, c.dtype, pr, tol, c.msg("rnn_bwd"))
        else:
            check_forward(c.backend, c.dtype, pr, tol, c.msg("rnn_fwd"))


def case_rnn_fwd(c):
    _case(c, False)


def case_rnn_bwd(c):
    _case(c, True)


OP_CASES = {"rnn_fwd": case_rnn_fwd, "rnn_bwd": case_rnn_bwd}


# ------------------------------------------------------------------ recurrent dropout (rmask)

def _one_step_by_hand(cell, x, h, c, U, bh, rm, u):
    """One step of Keras' implementation 1 (RECURRENT_SPEC 1.2, 1.3, 1.7) written gate by
    gate with each gate's own masked copy of h: (h_new, c_new)."""
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    blk = lambda a, g: a[..., g * u:(g + 1) * u]  # noqa: E731
    hm = [h * blk(rm, g) for g in range(gates(cell))]
    if cell == "simple":
        return np.tanh(x + hm[0] @ U), c
    if cell == "lstm":
        i = sig(blk(x, 0) + hm[0] @ blk(U, 0))
        f = sig(blk(x, 1) + hm[1] @ blk(U, 1))
        cn = f * c + i * np.tanh(blk(x, 2) + hm[2] @ blk(U, 2))
        o = sig(blk(x, 3) + hm[3] @ blk(U, 3))
        return o * np.tanh(cn), cn
    if cell == "gru":
        z = sig(blk(x, 0) + hm[0] @ blk(U, 0) + blk(bh, 0))
        r = sig(blk(x, 1) + hm[1] @ blk(U, 1) + blk(bh, 1))
        hh = np.tanh(blk(x, 2) + r * (hm[2] @ blk(U, 2) + blk(bh, 2)))
    else:
        z = sig(blk(x, 0) + hm[0] @ blk(U, 0))
        r = sig(blk(x, 1) + hm[1] @ blk(U, 1))
        hh = np.tanh(blk(x, 2) + (r * hm[2]) @ blk(U, 2))
    return z * h + (1.0 - z) * hh, c  # the mix uses the unmasked h


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cell", CELLS)
def test_rmask_two_steps_by_hand(backend, cell):
    """The core and the oracle against the gate-by-gate formulas, two steps, the same
    rmask at both steps; a mask that zeroes a whole gate block changes the result."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    pr = Problem(rng, "float32", cell, B=3, T=2, u=4, sequences=True, rmask=True)
    h, c = pr.h0, (pr.c0 if pr.c0 is not None else np.zeros_like(pr.h0))
    bh = pr.bh if pr.bh is not None else np.zeros(gates(cell) * 4)
    ys = []
    for t in range(2):
        h, c = _one_step_by_hand(cell, pr.xw[:, t], h, c, pr.U, bh, pr.rmask, 4)
        ys.append(h)
    want = np.stack(ys, 1)
    orc = ref.rnn_forward(pr.xw, pr.U, **pr.inputs(), **oracle_kw(pr.p))
    got = core_forward(backend, "float32", pr.xw, pr.U, **pr.inputs(), **pr.p)
    what = f"[{backend} seed={seed}] {pr.what}"
    rel_check("oracle y", orc["y"], want, 1e-12, what)
    rel_check("core y", got["y"], want, TOL["float32"], what)
    plain = core_forward(backend, "float32", pr.xw, pr.U, **dict(pr.inputs(), rmask=None), **pr.p)
    assert not np.allclose(plain["y"], got["y"]), f"{what}: rmask had no effect"
    ones = core_forward(backend, "float32", pr.xw, pr.U, **dict(pr.inputs(), rmask=np.ones_like(pr.rmask)),
                        **pr.p)
    # a mask runs the stepwise recurrence, none the fused one on the CPU (cpu.rnn.simd):
    # another summation order, so float32 rounding apart
    for k in ("y", "h", "save"):
        np.testing.assert_allclose(ones[k], plain[k], rtol=1e-5, atol=1e-6, err_msg=f"{what}: ones vs none {k}")
    gp = core_backward(backend, "float32", plain["save"], pr.U, dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T, **pr.p)
    go = core_backward(backend, "float32", ones["save"], pr.U, dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T,
                       rmask=np.ones_like(pr.rmask), **pr.p)
    for k in ("dxw", "dh0"):
        np.testing.assert_allclose(go[k], gp[k], rtol=1e-5, atol=1e-6, err_msg=f"{what}: ones vs none {k}")


# ------------------------------------------------------------------ the persistent recurrence (cuda.rnn)
# Shapes for rnn_persistent.cu's grid: several groups of rows (B above the rows per group),
# several CTAs per group (u large enough that U is split: 70, 128, 200 for the gated cells),
# units not a multiple of anything, B = 1, T = 1, every mask pattern, go_backwards,
# sequences, absent h0 / c0 / bh; B = 1100 gives more than 8 rows per group (row tiles).
PERSISTENT_SHAPES = [
    dict(B=64, T=12, u=128, mask="mixed", sequences=True),
    dict(B=1, T=5, u=200, mask="none", go_backwards=True),
    dict(B=5, T=1, u=33, mask="none", sequences=True, h0=False, c0=False, bh=False),
    dict(B=3, T=6, u=70, mask="left", zero_output_for_mask=True, sequences=True),
    dict(B=40, T=4, u=1, mask="right", go_backwards=True),
    dict(B=17, T=5, u=7, mask="middle", sequences=True, go_backwards=True, h0=False),
    dict(B=1100, T=3, u=128, mask="mixed", zero_output_for_mask=True),
]
CUDA_VARIANT_PARAMS = [pytest.param(f"{b}/{v}", id=f"{b}-{v}", marks=pytest.mark.cuda) for b in _CUDA
                       for v in RNN_VARIANTS]


@pytest.mark.parametrize("backend", CUDA_VARIANT_PARAMS)
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("cfg", PERSISTENT_SHAPES, ids=[f"B{c['B']}T{c['T']}u{c['u']}" for c in PERSISTENT_SHAPES])
def test_recurrence_variants_on_grid_shapes(backend, cell, cfg):
    seed = _seed()
    rng = np.random.default_rng(seed)
    ract = BOUNDED[cfg["u"] % len(BOUNDED)]
    pr = Problem(rng, "float32", cell, act=ACTS[cfg["T"] % len(ACTS)], ract=ract, **cfg)
    what = f"[{backend} seed={seed}] {pr.what}"
    check_forward(backend, "float32", pr, TOL["float32"], what)
    check_backward(backend, "float32", pr, TOL["float32"], what)


@pytest.mark.parametrize("backend", CUDA_VARIANT_PARAMS)
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("cell", CELLS)
def test_recurrence_variants_half_storage_on_grid_shapes(backend, dtype, cell):
    seed = _seed()
    rng = np.random.default_rng(seed)
    for cfg in (PERSISTENT_SHAPES[0], PERSISTENT_SHAPES[3], PERSISTENT_SHAPES[1]):
        pr = Problem(rng, dtype, cell, **cfg)
        what = f"[{backend} {dtype} seed={seed}] {pr.what}"
        check_forward(backend, dtype, pr, TOL[dtype], what)
        check_backward(backend, dtype, pr, TOL[dtype], what)


@pytest.mark.cuda
@pytest.mark.parametrize("var", ("persistent", "cluster", "resident"))
@pytest.mark.parametrize("cell", ("lstm", "gru"))
def test_persistent_refuses_a_shape_too_large_and_auto_runs_stepwise(cell, var):
    """U of u = 1024 does not fit on chip in 16 CTAs (nor in one block's registers) on any
    device: forced persistent (or cluster, or resident) is a NotImplementedError naming the
    variant and writing nothing; auto runs it stepwise."""
    if _CUDA[0] not in _BACKENDS:
        pytest.skip("no CUDA backend")
    why = rnn_variant_skip(var)
    if why:
        pytest.skip(why)
    seed = _seed()
    rng = np.random.default_rng(seed)
    pr = Problem(rng, "float32", cell, B=2, T=2, u=1024, mask="right", sequences=True, scale=0.5)
    B, T, Gu = pr.xw.shape
    u = pr.U.shape[0]
    y = poisoned((B, T, u), "float32")
    save = poisoned((save_blocks(cell), B, T, u), "float32")
    ins = (to_store(pr.xw, "float32"), to_store(pr.U, "float32"), to_store(pr.h0, "float32"),
           to_store(pr.c0, "float32"), np.ascontiguousarray(pr.mask, np.float32), to_store(pr.bh, "float32"), None)
    with variants.forced("cuda.rnn", var):
        with pytest.raises(NotImplementedError, match=var):
            _core.run_op("rnn_fwd", _CUDA[0], ins, (y, save, None, None), pr.p)
    assert np.isnan(y).all() and np.isnan(save).all(), "a refused call wrote outputs"
    with variants.forced("cuda.rnn", var):
        dxw = poisoned((B, T, Gu), "float32")
        with pytest.raises(NotImplementedError, match=var):
            _core.run_op("rnn_bwd", _CUDA[0], (None, None, None, ins[1], to_store(np.zeros(save.shape), "float32"),
                                               ins[4], None), (dxw, None, None, None), pr.p)
    what = f"[{_CUDA[0]} auto seed={seed}] {pr.what}"
    with variants.forced("cuda.rnn", "auto"):
        check_forward(_CUDA[0], "float32", pr, TOL["float32"], what)
        assert variants.last("cuda.rnn") == "stepwise", what
        check_backward(_CUDA[0], "float32", pr, TOL["float32"], what)
        assert variants.last("cuda.rnn") == "stepwise", what


def test_the_recurrence_variant_point_is_listed():
    pts = variants.points()
    if not _core.built_with_cuda:
        assert "cuda.rnn" not in pts
        return
    assert pts["cuda.rnn"]["variants"] == ["auto", "stepwise", "persistent", "cluster", "resident"]
    avail = pts["cuda.rnn"]["available"]
    if not any(b.startswith("cuda") for b in _BACKENDS):   # built with CUDA, no GPU here
        assert avail == ["auto"], avail
        return
    assert {"auto", "stepwise", "persistent", "resident"} <= set(avail), avail
    with pytest.raises(ValueError, match="cuda.rnn"):
        variants.force("cuda.rnn", "cluster9")
    if "cluster" not in avail:  # forcing an unavailable variant is refused, naming it
        with pytest.raises(NotImplementedError, match="cluster"):
            variants.force("cuda.rnn", "cluster")


def _rnn_plan(backend, cell, seed, B, T, F, u, classes=3):
    """rnn (return_sequences=False) -> dense softmax, Adam, fresh weights from `seed`."""
    rng = np.random.default_rng(seed)
    G = gates(cell)
    sizes = {"k": F * G * u, "r": u * G * u, "b": (2 if cell == "gru" else 1) * G * u, "dk": u * classes,
             "db": classes}
    bufs = {}
    for name, n in sizes.items():
        bufs[name] = _core.Buffer(backend, n)
        bufs[name].write(rng.uniform(-0.3, 0.3, n))
    state = [_core.Buffer(backend, n) for n in sizes.values() for _ in range(2)]
    layers = [dict(kind="rnn", in_shape=(T, F), out_shape=(u,), cell=cell, kernel=bufs["k"],
                   recurrent_kernel=bufs["r"], bias=bufs["b"]),
              dict(kind="dense", in_shape=(u,), out_shape=(classes,), activation="softmax", kernel=bufs["dk"],
                   bias=bufs["db"])]
    plan = _core.Plan(backend, layers, B, dict(loss="categorical_crossentropy", optimizer="adam",
                                               metrics=["acc_categorical"], opt_state=state))
    return plan, bufs


@pytest.mark.cuda
@pytest.mark.parametrize("var", ("persistent", "cluster", "resident"))
@pytest.mark.parametrize("cell", CELLS)
def test_persistent_recurrence_in_a_captured_graph(cell, var):
    """Training steps of an rnn -> dense plan with cuda.rnn=persistent (or cluster: a
    cluster launch is a kernel node with its cluster dimension; or resident, a plain
    launch, on a U it holds in registers: u = 48), replayed from a CUDA graph
    (train_steps) and run op by op: the same weights bit for bit (the kernel is
    deterministic), steps replayed, and the forced kernel is what ran."""
    if _CUDA[0] not in _BACKENDS:
        pytest.skip("no CUDA backend")
    why = rnn_variant_skip(var)
    if why:
        pytest.skip(why)
    seed = _seed()
    rng = np.random.default_rng(seed)
    B, T, F, u = 16, 9, 5, (48 if var == "resident" else 70)
    n = 6 * B
    x = rng.standard_normal((n, T, F)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]
    idx = rng.permutation(n).astype(np.int32)
    out = []
    with variants.forced("cuda.rnn", var):
        for graphs in (True, False):
            plan, bufs = _rnn_plan(_CUDA[0], cell, seed, B, T, F, u)
            plan.use_graphs(graphs)
            plan.set_data(x, y)
            stats = plan.train_steps(idx, B, {"lr": 1e-3, "t": 1})
            assert variants.last("cuda.rnn") == var, f"seed={seed} {var} {cell} graphs={graphs}"
            out.append((plan.graph_replays, {k: b.read() for k, b in bufs.items()}, stats))
    (rg, wg, sg), (re_, we, se) = out
    assert rg >= 3 and re_ == 0, f"seed={seed} {var} {cell}: graph replays {rg} / {re_}"
    for k in wg:
        np.testing.assert_array_equal(wg[k], we[k], err_msg=f"{k} seed={seed} {cell}")
    assert np.isfinite(sg["loss"]) and sg == se, (sg, se)
@pytest.mark.parametrize("backend", [pytest.param("cpu", id="cpu")])
@pytest.mark.parametrize("cell", CELLS)
def test_the_variant_that_ran_is_reported(backend, cell, rnn_variant):
    """cpu.rnn.simd's `last`: the forced fused kernel for the cells it covers, stepwise for
    reset_before and with a recurrent dropout mask; both ops."""
    if rnn_variant in (None, "auto"):
        pytest.skip("this build has no cpu.rnn.simd point")
    rng = np.random.default_rng(_seed())
    B, T, u = 3, 2, 5
    Gu = gates(cell) * u
    for rm in (None, np.ones((B, Gu))):
        xw, U = rng.standard_normal((B, T, Gu)), rng.standard_normal((u, Gu)) * 0.3
        out = core_forward(backend, "float32", xw, U, rmask=rm, cell=cell)
        want = "stepwise" if cell == "gru_reset_before" or rm is not None else rnn_variant
        assert variants.last(RNN_POINT) == want
        core_backward(backend, "float32", out["save"].reshape(-1, B, T, u), U, dy=rng.standard_normal((B, u)),
                      rmask=rm, cell=cell)
        assert variants.last(RNN_POINT) == want
