"""The op test matrix: every op of the core x every backend x every storage dtype,
against the NumPy oracle (tests/reference.py), through gpucmp.ops.

What it provides:
- `test_op[op-backend-dtype(-simd)]`: one case per name in `_core.op_names()`, per
  backend in `_core.backends()` (CUDA ones marked `cuda`), per dtype (float32,
  float16, bfloat16); GEMM and convolution cases also per available variant of the
  point they cover (gpucmp.variants: on the CPU each micro-kernel of cpu.gemm.simd, one
  test each; on CUDA every path of cuda.gemm.path and every kernel of cuda.conv2d.fwd /
  .bwd_data / .wgrad this device runs, inside the case, each checked to have run what was
  forced -- its `last`). Each case draws FRESH random inputs (odd sizes, strides
  1-3, dilation, both paddings, edge geometries), rounds them to the dtype, runs the
  op and compares with the oracle evaluated in float64 on the same rounded inputs:
  ||out - ref|| / ||ref|| <= 1e-5 (float32, scaled by sqrt(K) for a K-long reduction,
  at most 1e-4) or 1e-2 (float16 / bfloat16 storage), plus a floor of 16 float32
  ulps of the magnitudes of the terms that a random draw may make cancel (see
  Case.check_values; it is zero-cost when nothing cancels). The oracle gets the
  hyper-parameters as the float32 values the C structs hold. NaN never passes;
  output shapes and dtypes are checked; outputs are NaN-poisoned by gpucmp.ops.
- For every backward op, in float32, a directional central-difference check of the
  core's backward against the core's own forward (in float64 sums of the float32
  outputs, with the perturbation taken exactly as rounded).
- `test_every_op_has_a_case`: a new op of GC_OP_LIST cannot skip its tests.

Every failure message carries the seed; GPUCMP_TEST_SEED=<seed> replays a run.
"""
import contextlib
import math
import os

import numpy as np
import pytest

import reference as ref
from gpucmp import _core, ops, variants

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

DTYPES = ("float32", "float16", "bfloat16")
BACKENDS = tuple(_core.backends())
SIMD_POINT = "cpu.gemm.simd"
SIMD_VARIANTS = tuple(variants.available(SIMD_POINT))
SIMD_OPS = {"gemm", "conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_filter", "weight_grads"}
ELEMENTWISE_ACTS = ("linear", "relu", "tanh", "sigmoid")


def _fresh_seed():
    env = os.environ.get("GPUCMP_TEST_SEED")
    return int(env) if env else int(np.random.SeedSequence().entropy % (1 << 63))


# =====================================================================================
# the per-case context: random inputs, dtype handling, comparisons
# =====================================================================================

class Case:
    """Random inputs rounded to the case's dtype, calls into gpucmp.ops, and checks."""

    def __init__(self, op, backend, dtype, simd):
        self.op, self.backend, self.dtype, self.simd = op, backend, dtype, simd
        self.seed = _fresh_seed()
        self.rng = np.random.default_rng(self.seed)
        self.what = ""  # the configuration being checked, for messages
        self.tf32 = False  # float32 storage computed as TF32 on Tensor Cores (GPU backends)
        # dtype is inferred from the typed arrays; without ml_dtypes bf16 must be named
        self.kw = {"backend": backend}
        if dtype == "bfloat16" and ml_dtypes is None:
            self.kw["dtype"] = "bfloat16"

    # ---- inputs
    def round(self, a):
        return ref.round_to(a, self.dtype)

    def normal(self, shape, scale=1.0):
        return self.round(self.rng.standard_normal(shape) * scale)

    def uniform(self, shape, lo, hi):
        return self.round(self.rng.uniform(lo, hi, shape))

    def arg(self, a):
        """A float64 array of dtype-exact values as a typed array for gpucmp.ops."""
        if self.dtype == "float16":
            return np.asarray(a, dtype=np.float16)
        if self.dtype == "bfloat16" and ml_dtypes is not None:
            return np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16)
        return np.asarray(a, dtype=np.float32)

    def out_dtype(self):
        if self.dtype == "float16":
            return np.dtype(np.float16)
        if self.dtype == "bfloat16" and ml_dtypes is not None:
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(np.float32)

    # ---- checks
    def msg(self, text):
        simd = f" simd={self.simd}" if self.simd else ""
        dtype = "tfloat32" if self.tf32 else self.dtype
        return (f"[{self.op} backend={self.backend} dtype={dtype}{simd} "
                f"seed={self.seed}] {self.what}: {text}")

    def tol(self, k=1):
        if self.tf32:
            # TF32 rounds operands to 10 mantissa bits (u = 2^-11 ~ 4.9e-4): the typical
            # error is ~3e-4 (DESIGN.md: "tf32 ~ 5e-4"); 1e-3 leaves room for unlucky draws
            return 1e-3
        if self.dtype == "float32":
            return 1e-5 * min(max(1.0, math.sqrt(k)), 10.0)
        return 1e-2

    def check(self, name, out, want, k=1, tol=None, terms=None):
        """out (from the core) against want (oracle, float64): dtype, shape, NaN, error.

        `terms`: the oracle evaluated on the magnitudes of what gets summed (e.g. the
        product of |a| and |b|); see check_values."""
        assert out is not None, self.msg(f"{name}: no output")
        assert np.asarray(out).dtype == self.out_dtype(), \
            self.msg(f"{name}: dtype {np.asarray(out).dtype}, expected {self.out_dtype()}")
        self.check_values(name, np.asarray(out).astype(np.float64), want, k, tol, terms)

    def check_values(self, name, got, want, k=1, tol=None, terms=None):
        """||got - want|| <= tol * ||want|| + floor.

        The floor is what float32 arithmetic cannot avoid when the terms of a sum
        cancel (a random draw where a * b + c is nearly 0, tanh' = 1 - y*y with
        y near 1): 2^-20 * sqrt(k) * ||terms||, i.e. 16 float32 ulps of the
        magnitudes involved per sqrt(reduction length); 2^-12 for TF32 operands. Without cancellation it is
        far below tol * ||want||, so it never hides a wrong result."""
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        assert got.shape == want.shape, self.msg(f"{name}: shape {got.shape}, expected {want.shape}")
        assert np.all(np.isfinite(want)), self.msg(f"{name}: the oracle is not finite (test bug)")
        bad = ~np.isfinite(got)
        assert not bad.any(), self.msg(
            f"{name}: {bad.sum()} non-finite values, first at {np.argwhere(bad)[0].tolist()}")
        tol = self.tol(k) if tol is None else tol
        # TF32 rounds each operand to 10 mantissa bits (2^-11 relative): its unit is 2^-12
        # per term instead of float32's 2^-20 (measured: K=39 with cancellation, 1.2e-3)
        unit = 2.0 ** -12 if getattr(self, "tf32", False) else 2.0 ** -20
        floor = 0.0 if terms is None else \
            unit * math.sqrt(max(k, 1)) * np.linalg.norm(np.asarray(terms, np.float64))
        diff, norm = np.linalg.norm(got - want), np.linalg.norm(want)
        if diff > tol * norm + floor:
            err = diff / norm if norm > 0 else diff
            worst = np.unravel_index(np.argmax(np.abs(got - want)), got.shape) if got.size else ()
            raise AssertionError(self.msg(
                f"{name}: ||out-ref||/||ref|| = {err:.3e} > {tol:.1e} (cancellation floor "
                f"{floor:.1e} absolute); worst at {list(worst)}: got {got[worst]!r}, "
                f"expected {want[worst]!r}"))


def _abs(a):
    return None if a is None else np.abs(a)


def _act_bwd_terms(y, dy, act):
    """Magnitudes of the terms of act_bwd (1 - y*y cancels when |y| -> 1, etc.)."""
    if act == "softmax":
        return np.abs(y) * (np.abs(dy) + np.abs((dy * y).sum(axis=-1, keepdims=True)))
    return np.abs(dy) * (1.0 + y * y + np.abs(y))


def _pair_str(p):
    return "x".join(str(v) for v in p)


# =====================================================================================
# random geometries
# =====================================================================================

def conv_configs(c, n_random=12):
    """Fixed edge geometries plus fresh random ones (odd sizes, strides 1-3, dilation)."""
    fixed = [
        dict(N=1, H=5, W=7, C=3, F=2, KH=1, KW=1, s=(1, 1), d=(1, 1), pad="valid"),
        dict(N=2, H=4, W=6, C=2, F=3, KH=4, KW=6, s=(1, 1), d=(1, 1), pad="valid"),  # k == in
        dict(N=1, H=3, W=4, C=2, F=2, KH=5, KW=4, s=(2, 1), d=(1, 1), pad="same"),   # k > in
        dict(N=2, H=9, W=11, C=8, F=16, KH=3, KW=3, s=(1, 1), d=(1, 1), pad="same"),  # a real layer
        dict(N=1, H=10, W=9, C=3, F=5, KH=3, KW=2, s=(2, 3), d=(2, 2), pad="same"),
        dict(N=1, H=8, W=8, C=2, F=3, KH=2, KW=2, s=(3, 3), d=(1, 1), pad="valid"),  # s > k
        dict(N=3, H=28, W=28, C=1, F=32, KH=3, KW=3, s=(1, 1), d=(1, 1), pad="valid"),  # seed CNN
        dict(N=2, H=13, W=13, C=32, F=64, KH=3, KW=3, s=(1, 1), d=(1, 1), pad="valid"),
        dict(N=2, H=15, W=14, C=17, F=33, KH=5, KW=3, s=(2, 2), d=(1, 1), pad="same"),
        # small C, KH*KW*C > 64 (conv2d_smallc.cu on CUDA): ResNet's stem cut down
        # (7x7/2 3->64, 16-byte words), odd W*C / left padding / F (element loads,
        # padded windows), dilation along h, two GEMM-row tiles and two filter tiles
        dict(N=2, H=38, W=38, C=3, F=64, KH=7, KW=7, s=(2, 2), d=(1, 1), pad="valid"),
        dict(N=1, H=21, W=19, C=3, F=10, KH=7, KW=7, s=(2, 2), d=(1, 1), pad="same"),
        dict(N=2, H=12, W=11, C=5, F=9, KH=5, KW=5, s=(1, 1), d=(2, 1), pad="same"),
        dict(N=1, H=16, W=20, C=5, F=70, KH=6, KW=9, s=(1, 2), d=(1, 1), pad="same"),
        # strided 1x1 (Keras' ResNet stages 3-5): data gradient scattered to the strided
        # pixels, the rest zero; C, F multiples of 8 and odd ones, odd sizes
        dict(N=2, H=14, W=14, C=64, F=128, KH=1, KW=1, s=(2, 2), d=(1, 1), pad="valid"),
        dict(N=2, H=9, W=11, C=13, F=9, KH=1, KW=1, s=(3, 2), d=(1, 1), pad="valid"),
        dict(N=1, H=7, W=9, C=24, F=40, KH=1, KW=1, s=(2, 2), d=(1, 1), pad="same"),
        # stride-1 1x1 (plain GEMMs: on CUDA also through the GEMM backend, _conv_variants):
        # C, F multiples of 8 and odd ones, 'same' (= no padding), dilation (no effect)
        dict(N=2, H=14, W=14, C=64, F=72, KH=1, KW=1, s=(1, 1), d=(1, 1), pad="valid"),
        dict(N=3, H=7, W=9, C=13, F=21, KH=1, KW=1, s=(1, 1), d=(1, 1), pad="same"),
        dict(N=1, H=5, W=6, C=40, F=9, KH=1, KW=1, s=(1, 1), d=(2, 2), pad="valid"),
    ]
    if c.backend != "cpu":  # the full stem at batch 2 (too slow for every CPU SIMD variant)
        fixed.append(dict(N=2, H=230, W=230, C=3, F=64, KH=7, KW=7, s=(2, 2), d=(1, 1), pad="valid"))
        # a 1x1 layer big enough for the automatic GEMM route in every pass on an H200
        # (wgmma forward / data gradient, split-K mma.sync weight gradient)
        fixed.append(dict(N=6, H=28, W=28, C=256, F=256, KH=1, KW=1, s=(1, 1), d=(1, 1), pad="valid"))
    out = list(fixed)
    r = c.rng
    while len(out) < len(fixed) + n_random:
        cfg = dict(N=int(r.integers(1, 4)), H=int(r.integers(3, 13)), W=int(r.integers(3, 13)),
                   C=int(r.integers(1, 7)), F=int(r.integers(1, 8)), KH=int(r.integers(1, 5)),
                   KW=int(r.integers(1, 5)), s=tuple(int(v) for v in r.integers(1, 4, 2)),
                   d=tuple(int(v) for v in r.choice([1, 1, 2], 2)),
                   pad=str(r.choice(["valid", "same"])))
        try:
            ref.window_geometry(cfg["H"], cfg["KH"], cfg["s"][0], cfg["d"][0], cfg["pad"])
            ref.window_geometry(cfg["W"], cfg["KW"], cfg["s"][1], cfg["d"][1], cfg["pad"])
        except ValueError:
            continue
        out.append(cfg)
    return out


def _plain_1x1(g):
    return g["KH"] == 1 and g["KW"] == 1 and tuple(g["s"]) == (1, 1)


# the variant point of each convolution pass on CUDA, and its kernels that compute with
# TF32 / 16-bit operands (not run for exact float32: they would not meet its tolerance)
CONV_POINTS = {"fwd": "cuda.conv2d.fwd", "bwd_data": "cuda.conv2d.bwd_data", "wgrad": "cuda.conv2d.wgrad"}
TENSOR_CORE_CONV = {"mma", "smallc", "wgmma"}


def _conv_variants(c, g, pass_):
    """The runs of one convolution pass: on the CPU one (test_op forces its SIMD variant);
    on CUDA the automatic choice and every variant of the pass's point this device runs
    (gpucmp.variants.available), the GEMM route ("gemm") of a stride-1 1x1 layer also on
    each GEMM kernel the dtype may take, as case_gemm forces them. (label, point, variant,
    GEMM path) per run, for _conv_run / _conv_ran."""
    if c.backend == "cpu":
        return [("", None, None, None)]
    point = CONV_POINTS[pass_]
    exact = c.dtype == "float32" and not c.tf32
    runs = [(" variant=auto", point, "auto", "auto")]
    for v in variants.available(point):
        if exact and v in TENSOR_CORE_CONV:
            continue
        runs.append((f" variant={v}", point, v, "auto"))
        if v == "gemm" and _plain_1x1(g) and not exact:
            runs += [(f" variant=gemm/{p}", point, v, p) for p in ("mma", "small")
                     if p in variants.available("cuda.gemm.path")]
    return runs


@contextlib.contextmanager
def _conv_run(point, variant, gemm_path):
    """Forces the pass's variant (and the GEMM path under the GEMM route); nothing on the CPU."""
    if point is None:
        yield
        return
    with variants.forced(point, variant), variants.forced("cuda.gemm.path", gemm_path):
        yield


def _conv_refused(c, variant, e):
    """A forced wgmma kernel refuses the layers it does not take (NotImplementedError
    before any launch): that run is skipped. Anything else is a failure."""
    if variant == "wgmma" and "wgmma" in str(e):
        return True
    raise AssertionError(c.msg(f"forced {variant!r}: {type(e).__name__}: {e}")) from e


def _conv_ran(c, g, point, variant):
    """After a forced run: the pass's `last` is the forced kernel (the GEMM route where it is
    valid: stride-1 1x1 and not exact float32); "conv" never takes the route; "smallc"
    falls back to the automatic choice where it does not apply, "auto" is not checked."""
    if point is None or variant in ("auto", "smallc"):
        return
    ran = variants.last(point)
    exact = c.dtype == "float32" and not c.tf32
    if variant == "gemm":
        routed = _plain_1x1(g) and not exact
        assert (ran == "gemm") == routed, c.msg(f"{point}=gemm ran {ran!r}")
        return
    if variant == "conv":
        assert ran != "gemm", c.msg(f"{point}=conv ran the GEMM route")
        return
    want = {variant, "scatter"} if (variant == "mma" and point.endswith("bwd_data")) else {variant}
    assert ran in want, c.msg(f"{point}={variant} ran {ran!r}")


def _conv_desc(g):
    return (f"x=({g['N']},{g['H']},{g['W']},{g['C']}) kernel=({g['KH']},{g['KW']},{g['C']},"
            f"{g['F']}) strides={_pair_str(g['s'])} dilation={_pair_str(g['d'])} "
            f"padding={g['pad']}")


def pool_configs(c, n_random=10):
    fixed = [
        dict(N=2, H=6, W=6, C=3, P=(2, 2), s=None, pad="valid"),
        dict(N=1, H=7, W=5, C=2, P=(2, 2), s=None, pad="valid"),   # odd: floor
        dict(N=1, H=7, W=5, C=2, P=(2, 2), s=None, pad="same"),    # odd: padded edge
        dict(N=2, H=7, W=6, C=3, P=(3, 3), s=(2, 2), pad="same"),  # overlapping
        dict(N=1, H=6, W=7, C=2, P=(2, 3), s=(3, 1), pad="valid"),  # stride > pool
        dict(N=1, H=3, W=3, C=4, P=(3, 3), s=(1, 1), pad="same"),
        dict(N=4, H=26, W=26, C=32, P=(2, 2), s=None, pad="valid"),  # the seed CNN's pool
    ]
    out = list(fixed)
    r = c.rng
    while len(out) < len(fixed) + n_random:
        p = tuple(int(v) for v in r.integers(1, 5, 2))
        cfg = dict(N=int(r.integers(1, 4)), H=int(r.integers(2, 12)), W=int(r.integers(2, 12)),
                   C=int(r.integers(1, 6)), P=p,
                   s=None if r.random() < 0.3 else tuple(int(v) for v in r.integers(1, 4, 2)),
                   pad=str(r.choice(["valid", "same"])))
        if cfg["pad"] == "valid" and (cfg["H"] < p[0] or cfg["W"] < p[1]):
            continue
        out.append(cfg)
    if c.backend.startswith("cuda"):
        # pool2d.cu's 16-byte channel paths (C a multiple of 8): pool_fwd_vec_kernel and, for
        # overlapping or clipped windows, maxpool_bwd_smem_kernel -- ResNet's 3x3 / 2 stem pool
        # scaled down, several tiles in h, w and channels (the last one partial), padding, a
        # halo of 39 window rows; and 256 cells per window (the plain gather again)
        out += [
            dict(N=2, H=17, W=19, C=64, P=(3, 3), s=(2, 2), pad="valid"),
            dict(N=1, H=21, W=75, C=64, P=(3, 3), s=(2, 2), pad="valid"),
            dict(N=2, H=30, W=70, C=16, P=(3, 3), s=(2, 2), pad="same"),
            dict(N=1, H=9, W=9, C=72, P=(3, 3), s=(2, 2), pad="valid"),
            dict(N=2, H=12, W=40, C=8, P=(3, 3), s=(1, 1), pad="same"),
            dict(N=1, H=20, W=21, C=40, P=(5, 5), s=(1, 2), pad="same"),
            dict(N=1, H=40, W=3, C=16, P=(40, 3), s=(1, 1), pad="same"),
            dict(N=2, H=9, W=9, C=8, P=(2, 2), s=(3, 3), pad="same"),
            dict(N=1, H=5, W=30, C=3, P=(1, 256), s=(1, 1), pad="same"),
            dict(N=3, H=7, W=7, C=72, P=(7, 7), s=(7, 7), pad="valid"),  # ResNet-50's global average pool
        ]
    return out


def _pool_desc(g):
    s = _pair_str(g["s"]) if g["s"] else "default"
    return (f"x=({g['N']},{g['H']},{g['W']},{g['C']}) pool_size={_pair_str(g['P'])} "
            f"strides={s} padding={g['pad']}")


def _pool_overlap(g):
    s = g["s"] or g["P"]
    return math.ceil(g["P"][0] / s[0]) * math.ceil(g["P"][1] / s[1])


# =====================================================================================
# directional finite differences of the core's own forward (float32 only)
# =====================================================================================

def fd_check(c, name, f, x, grad, h, tol=1e-2, mixed=0.5):
    """Checks <grad, d> against f(x + d/2) - f(x - d/2), f evaluated by the core.

    The direction mixes the analytic gradient and noise, so <grad, d> is never tiny;
    d is taken as the exact difference of the two float32-rounded points, and f sums
    the core's float32 outputs in float64, returning (sum, sum of magnitudes): the
    magnitudes bound the float32 noise of f, which is allowed on top of tol. A coarse
    check on purpose (1e-2): it catches a wrong sign, scale or missing term; the
    oracle comparison does the rest."""
    x = np.asarray(x, np.float64)
    grad = np.asarray(grad, np.float64)
    gnorm = np.linalg.norm(grad)
    if gnorm == 0:
        return
    v = c.rng.standard_normal(x.shape)
    direction = grad / gnorm + mixed * v / np.linalg.norm(v)
    xp = np.asarray(x + h * direction, np.float32).astype(np.float64)
    xm = np.asarray(x - h * direction, np.float32).astype(np.float64)
    (fp, mag_p), (fm, mag_m) = f(xp), f(xm)
    fd = fp - fm
    an = float(np.sum(grad * (xp - xm)))
    noise = 2.0 ** -20 * (mag_p + mag_m)
    err = abs(fd - an) / abs(an)
    assert abs(fd - an) <= tol * abs(an) + noise, c.msg(
        f"{name}: finite difference of the core's forward {fd:.6e} vs <core grad, step> "
        f"{an:.6e} (relative {err:.2e} > {tol:.0e}, float32 noise {noise:.1e})")


def _sum64(a):
    """(sum, sum of magnitudes) of a core output, in float64."""
    a = np.asarray(a, np.float64)
    return float(np.sum(a)), float(np.sum(np.abs(a)))


def _dot64(r, y):
    """(sum(r * y), sum|r * y|) with y a core output, in float64."""
    return _sum64(np.asarray(r, np.float64) * np.asarray(y, np.float64))


# =====================================================================================
# the cases, one per op
# =====================================================================================

def _gemm_paths(c):
    """The CUDA GEMM kernels a case runs through: the automatic choice and every path of
    cuda.gemm.path this device runs (forced, so every kernel is covered whatever the
    dispatcher picks for these small shapes) that computes the case's precision: the
    SIMT kernel float32 only (exact, so also within TF32's tolerance), mma.sync and wgmma
    TF32 / 16-bit operands only, the small-tile kernel every dtype. A path missing from
    the table below is a KeyError: a new kernel cannot skip this test."""
    if c.backend == "cpu":
        return [None]
    exact = c.dtype == "float32" and not c.tf32
    fits = {"simt": c.dtype == "float32", "mma": not exact, "wgmma": not exact, "small": True}
    return ["auto"] + [p for p in variants.available("cuda.gemm.path") if fits[p]]


def case_gemm(c):
    for path in _gemm_paths(c):
        if path is None:
            _case_gemm(c, "")
            continue
        with variants.forced("cuda.gemm.path", path):
            _case_gemm(c, path)


def _vendor_cross_check(c, what, run, want, terms, k):
    """On a GPU with the vendor library present: the same call with impl='cublas' /
    'cudnn' against the oracle too (the baselines are only worth comparing with when
    they are right)."""
    lib = "cublas" if what == "gemm" else "cudnn"
    if c.backend == "cpu" or not ops.vendor_available(lib, c.backend):
        return
    c.what += f" impl={lib}"
    try:
        out = run(lib)
    except NotImplementedError as e:
        # cuDNN has no asymmetric padding (Keras 'same', odd total), and for the odd random
        # layer no algorithm at all (the message names it): nothing to compare with
        assert "asymmetric" in str(e) or "no algorithm" in str(e), c.msg(f"{lib} refused: {e}")
        return
    c.check(f"{what} ({lib})", out, want, k=k, terms=terms)


def _case_gemm(c, path):
    r = c.rng
    shapes = [(1, 1, 1), (3, 5, 0), (67, 45, 129), (64, 64, 64), (17, 33, 9)]
    shapes += [tuple(int(v) for v in r.integers(1, 40, 3)) for _ in range(4)]
    for i, (m, n, k) in enumerate(shapes):
        for trans_a in (False, True):
            for trans_b in (False, True):
                a = c.normal((k, m) if trans_a else (m, k))
                b = c.normal((n, k) if trans_b else (k, n))
                bias = c.normal(n) if r.random() < 0.5 or k == 0 else None
                beta = float(r.choice([0.0, 0.0, 0.5, -1.25])) if k else 0.5
                alpha = float(r.choice([1.0, 1.0, 0.75, -2.0]))
                cm = c.normal((m, n)) if beta else None
                act = str(r.choice(ELEMENTWISE_ACTS))
                c.what = (f"path={path} M={m} N={n} K={k} trans_a={trans_a} trans_b={trans_b} "
                          f"alpha={alpha} beta={beta} bias={bias is not None} act={act}")
                out = ops.gemm(c.arg(a), c.arg(b), None if bias is None else c.arg(bias),
                               None if cm is None else c.arg(cm), trans_a=trans_a,
                               trans_b=trans_b, alpha=alpha, beta=beta, activation=act, **c.kw)
                if path not in ("", "auto") and m * n and k:
                    assert variants.last("cuda.gemm.path") == path, c.msg(
                        f"ran {variants.last('cuda.gemm.path')!r}, not the forced {path!r}")
                if c.simd and m * n:
                    assert variants.last(SIMD_POINT) == c.simd, c.msg(
                        f"the CPU GEMM ran {variants.last(SIMD_POINT)!r}, not the forced {c.simd!r}")
                want = ref.gemm(a, b, bias, cm, trans_a, trans_b, alpha, beta, act)
                terms = ref.gemm(abs(a), abs(b), _abs(bias), _abs(cm), trans_a, trans_b,
                                 abs(alpha), abs(beta))
                c.check("c", out, want, k=k, terms=terms)
                if path == "auto" and i == 2:
                    _vendor_cross_check(c, "gemm", lambda lib: ops.gemm(
                        c.arg(a), c.arg(b), None if bias is None else c.arg(bias),
                        None if cm is None else c.arg(cm), trans_a=trans_a, trans_b=trans_b, alpha=alpha,
                        beta=beta, activation=act, impl=lib, **c.kw), want, terms, k)
    # matmul: batch axes in front of a (a Dense layer)
    a, b, bias = c.normal((2, 3, 7)), c.normal((7, 5)), c.normal(5)
    c.what = "matmul a (2, 3, 7) @ b (7, 5) + bias, relu"
    c.check("matmul", ops.matmul(c.arg(a), c.arg(b), bias=c.arg(bias), activation="relu", **c.kw),
            ref.matmul(a, b, bias, "relu"), k=7, terms=ref.matmul(abs(a), abs(b), abs(bias)))


def case_conv2d_fwd(c):
    for g in conv_configs(c):
        x = c.normal((g["N"], g["H"], g["W"], g["C"]))
        w = c.normal((g["KH"], g["KW"], g["C"], g["F"]))
        bias = c.normal(g["F"]) if c.rng.random() < 0.6 else None
        act = str(c.rng.choice(ELEMENTWISE_ACTS))
        if c.backend != "cpu" and _plain_1x1(g):  # the GEMM route's epilogue: both kinds
            _conv_fwd_case(c, g, x, w, None, "linear")
            bias = c.normal(g["F"])
            act = act if act != "linear" else "relu"
        _conv_fwd_case(c, g, x, w, bias, act)


def _conv_fwd_case(c, g, x, w, bias, act):
    want = ref.conv2d(x, w, bias, g["s"], g["pad"], g["d"], act)
    terms = ref.conv2d(abs(x), abs(w), _abs(bias), g["s"], g["pad"], g["d"])
    for label, point, variant, path in _conv_variants(c, g, "fwd"):
        c.what = _conv_desc(g) + f" bias={bias is not None} act={act}" + label
        try:
            with _conv_run(point, variant, path):
                y = ops.conv2d(c.arg(x), c.arg(w), None if bias is None else c.arg(bias), strides=g["s"],
                               padding=g["pad"], dilation_rate=g["d"], activation=act, **c.kw)
        except NotImplementedError as e:
            if _conv_refused(c, variant, e):
                continue
        _conv_ran(c, g, point, variant)
        c.check("y", y, want, k=g["KH"] * g["KW"] * g["C"], terms=terms)
    c.what = _conv_desc(g) + f" bias={bias is not None} act={act}"
    _vendor_cross_check(c, "conv2d_fwd", lambda lib: ops.conv2d(
        c.arg(x), c.arg(w), None if bias is None else c.arg(bias), strides=g["s"], padding=g["pad"],
        dilation_rate=g["d"], activation=act, impl=lib, **c.kw), want, terms, g["KH"] * g["KW"] * g["C"])


def _conv_fwd_f64(c, g, x, w, bias=None):
    y = ops.conv2d(np.asarray(x, np.float32), np.asarray(w, np.float32),
                   None if bias is None else np.asarray(bias, np.float32), strides=g["s"],
                   padding=g["pad"], dilation_rate=g["d"], backend=c.backend)
    return np.asarray(y, np.float64)


def case_conv2d_bwd_data(c):
    for g in conv_configs(c):
        xshape = (g["N"], g["H"], g["W"], g["C"])
        w = c.normal((g["KH"], g["KW"], g["C"], g["F"]))
        yshape = ref.conv2d_output_shape(xshape, w.shape, g["s"], g["pad"], g["d"])
        dy = c.normal(yshape)
        want = ref.conv2d_backward_data(dy, w, xshape, g["s"], g["pad"], g["d"])
        terms = ref.conv2d_backward_data(abs(dy), abs(w), xshape, g["s"], g["pad"], g["d"])
        for label, point, variant, path in _conv_variants(c, g, "bwd_data"):
            c.what = _conv_desc(g) + label
            try:
                with _conv_run(point, variant, path):
                    dx = ops.conv2d_backward_data(c.arg(dy), c.arg(w), xshape, strides=g["s"],
                                                  padding=g["pad"], dilation_rate=g["d"], **c.kw)
            except NotImplementedError as e:
                if _conv_refused(c, variant, e):
                    continue
            _conv_ran(c, g, point, variant)
            c.check("dx", dx, want, k=g["KH"] * g["KW"] * g["F"], terms=terms)
            # accumulate (the plan's fan-out): dx = base + the gradient, on the same kernel
            base = c.normal(xshape)
            c.what = _conv_desc(g) + label + " accumulate"
            with _conv_run(point, variant, path):
                dx_acc = ops.conv2d_backward_data(c.arg(dy), c.arg(w), xshape, strides=g["s"], padding=g["pad"],
                                                  dilation_rate=g["d"], accumulate_into=c.arg(base), **c.kw)
            _conv_ran(c, g, point, variant)
            c.check("dx", dx_acc, base + want, k=g["KH"] * g["KW"] * g["F"] + 1, terms=abs(base) + terms)
        c.what = _conv_desc(g)
        _vendor_cross_check(c, "conv2d_bwd_data", lambda lib: ops.conv2d_backward_data(
            c.arg(dy), c.arg(w), xshape, strides=g["s"], padding=g["pad"], dilation_rate=g["d"], impl=lib,
            **c.kw), want, terms, g["KH"] * g["KW"] * g["F"])
        base = c.normal(xshape)
        c.what = _conv_desc(g) + " accumulate"
        _vendor_cross_check(c, "conv2d_bwd_data", lambda lib: ops.conv2d_backward_data(
            c.arg(dy), c.arg(w), xshape, strides=g["s"], padding=g["pad"], dilation_rate=g["d"], impl=lib,
            accumulate_into=c.arg(base), **c.kw), base + want, abs(base) + terms, g["KH"] * g["KW"] * g["F"] + 1)
        if c.dtype == "float32":
            x = c.normal(xshape)
            fd_check(c, "dx", lambda t: _dot64(dy, _conv_fwd_f64(c, g, t, w)), x,
                     np.asarray(dx, np.float64), h=0.1)


def case_conv2d_bwd_filter(c):
    for g in conv_configs(c):
        x = c.normal((g["N"], g["H"], g["W"], g["C"]))
        kshape = (g["KH"], g["KW"], g["C"], g["F"])
        yshape = ref.conv2d_output_shape(x.shape, kshape, g["s"], g["pad"], g["d"])
        dy = c.normal(yshape)
        with_bias = bool(c.rng.random() < 0.7) or (c.backend != "cpu" and _plain_1x1(g))
        want_w, want_b = ref.conv2d_backward_filter(x, dy, (g["KH"], g["KW"]), g["s"], g["pad"],
                                                    g["d"])
        terms_w, terms_b = ref.conv2d_backward_filter(abs(x), abs(dy), (g["KH"], g["KW"]),
                                                      g["s"], g["pad"], g["d"])
        rows = yshape[0] * yshape[1] * yshape[2]
        for label, point, variant, path in _conv_variants(c, g, "wgrad"):
            c.what = _conv_desc(g) + f" with_bias={with_bias}" + label
            try:
                with _conv_run(point, variant, path):
                    dw, db = ops.conv2d_backward_filter(c.arg(x), c.arg(dy), (g["KH"], g["KW"]),
                                                        strides=g["s"], padding=g["pad"],
                                                        dilation_rate=g["d"], with_bias=with_bias, **c.kw)
                    _conv_ran(c, g, point, variant)
                    dw2, db2 = (ops.conv2d_backward_filter(c.arg(x), c.arg(dy), (g["KH"], g["KW"]),
                                                           strides=g["s"], padding=g["pad"],
                                                           dilation_rate=g["d"], with_bias=with_bias,
                                                           **c.kw) if point else (dw, db))
            except NotImplementedError as e:
                if _conv_refused(c, variant, e):
                    continue
            c.check("dw", dw, want_w, k=rows, terms=terms_w)
            if with_bias:
                c.check("db", db, want_b, k=rows, terms=terms_b)
            else:
                assert db is None, c.msg("db returned although with_bias=False")
            if point:  # deterministic: a second call gives the same bits
                assert np.array_equal(np.asarray(dw).view(np.uint8), np.asarray(dw2).view(np.uint8)) and (
                    db is None or np.array_equal(np.asarray(db).view(np.uint8),
                                                 np.asarray(db2).view(np.uint8))), c.msg("not deterministic")
        c.what = _conv_desc(g) + f" with_bias={with_bias}"
        _vendor_cross_check(c, "conv2d_bwd_filter", lambda lib: ops.conv2d_backward_filter(
            c.arg(x), c.arg(dy), (g["KH"], g["KW"]), strides=g["s"], padding=g["pad"], dilation_rate=g["d"],
            with_bias=False, impl=lib, **c.kw)[0], want_w, terms_w, rows)
        if c.dtype == "float32":
            w = c.normal(kshape)
            fd_check(c, "dw", lambda t: _dot64(dy, _conv_fwd_f64(c, g, x, t)), w,
                     np.asarray(dw, np.float64), h=0.1)
            if with_bias:
                b0 = c.normal(g["F"])
                fd_check(c, "db", lambda t: _dot64(dy, _conv_fwd_f64(c, g, x, w, t)), b0,
                         np.asarray(db, np.float64), h=0.1)


def case_maxpool2d_fwd(c):
    for g in pool_configs(c):
        x = c.normal((g["N"], g["H"], g["W"], g["C"]))
        if c.rng.random() < 0.3:
            x = c.round(-np.abs(x) - 1.0)  # all negative: a zero pad would win if counted
        c.what = _pool_desc(g)
        y = ops.max_pool2d(c.arg(x), g["P"], g["s"], g["pad"], **c.kw)
        c.check("y", y, ref.max_pool2d(x, g["P"], g["s"], g["pad"]), tol=0.0)  # a selection


def case_maxpool2d_bwd(c):
    for i, g in enumerate(pool_configs(c)):
        shape = (g["N"], g["H"], g["W"], g["C"])
        ties = i % 3 == 0
        # every third configuration: few distinct values, so windows hold ties
        x = c.round(c.rng.integers(-2, 2, shape).astype(float)) if ties else c.normal(shape)
        dy = c.normal(ref.pool2d_output_shape(shape, g["P"], g["s"], g["pad"]))
        c.what = _pool_desc(g) + (" (ties)" if ties else "")
        dx = ops.max_pool2d_backward(c.arg(x), c.arg(dy), g["P"], g["s"], g["pad"], **c.kw)
        c.check("dx", dx, ref.max_pool2d_backward(x, dy, g["P"], g["s"], g["pad"]),
                k=_pool_overlap(g),
                terms=ref.max_pool2d_backward(x, abs(dy), g["P"], g["s"], g["pad"]))
        # the ReLU backward folded in: the same routing, times relu'(x) = (x > 0)
        c.what += " act=relu"
        dxr = ops.max_pool2d_backward(c.arg(x), c.arg(dy), g["P"], g["s"], g["pad"], activation="relu",
                                      **c.kw)
        c.check("dx (relu)", dxr, ref.max_pool2d_backward(x, dy, g["P"], g["s"], g["pad"]) * (x > 0),
                k=_pool_overlap(g),
                terms=ref.max_pool2d_backward(x, abs(dy), g["P"], g["s"], g["pad"]) * (x > 0))
        if c.backend.startswith("cuda"):
            # every CUDA path routes and sums as the CPU does (same cell, same order, float32
            # sums rounded once): bit for bit, in every dtype
            kw = {k: v for k, v in c.kw.items() if k != "backend"}
            for act, got in (("linear", dx), ("relu", dxr)):
                cpu = ops.max_pool2d_backward(c.arg(x), c.arg(dy), g["P"], g["s"], g["pad"], activation=act,
                                              backend="cpu", **kw)
                assert np.array_equal(np.asarray(cpu).view(np.uint8), np.asarray(got).view(np.uint8)), \
                    c.msg(f"dx (activation={act}) differs from the CPU backend bit for bit")
        if c.dtype == "float32" and not ties:
            xd = c.rng.permutation(x.size).reshape(shape) * 0.01  # distinct, 0.01 apart
            dxd = ops.max_pool2d_backward(xd, dy, g["P"], g["s"], g["pad"], backend=c.backend)

            def f(t):
                return _dot64(dy, ops.max_pool2d(
                    np.asarray(t, np.float32), g["P"], g["s"], g["pad"], backend=c.backend))
            fd_check(c, "dx", f, xd, np.asarray(dxd, np.float64), h=1e-3)
    _maxpool2d_pads(c)


def _pads_configs(c):
    """Explicit pads ((top, bottom), (left, right)), each < the pool: ResNet-50's stem (3x3 / 2,
    1 all round) at a CUDA-vector width and small odd cases."""
    out = [dict(N=2, H=12, W=14, C=64, P=(3, 3), s=(2, 2), pads=((1, 1), (1, 1))),
           dict(N=1, H=9, W=7, C=3, P=(3, 2), s=(2, 1), pads=((2, 0), (0, 1))),
           dict(N=2, H=5, W=6, C=8, P=(2, 2), s=(2, 2), pads=((1, 0), (1, 1)))]
    for _ in range(4):
        P = tuple(int(v) for v in c.rng.integers(2, 5, 2))
        out.append(dict(N=int(c.rng.integers(1, 3)), H=int(c.rng.integers(3, 10)), W=int(c.rng.integers(3, 10)),
                        C=int(c.rng.integers(1, 9)), P=P, s=tuple(int(v) for v in c.rng.integers(1, 4, 2)),
                        pads=tuple(tuple(int(v) for v in c.rng.integers(0, P[a], 2)) for a in (0, 1))))
    return out


def _pool_padded_ref(x, dy, g):
    """The oracle of explicit pads: x padded with -inf (a padded cell never wins), a 'valid'
    pool over it; the gradient cropped back to x."""
    (t, b), (l, r) = g["pads"]
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (t, b), (l, r), (0, 0)), constant_values=-np.inf)
    y = ref.max_pool2d(xp, g["P"], g["s"], "valid")
    if dy is None:
        return y, None
    dxp = ref.max_pool2d_backward(np.where(np.isinf(xp), -1e300, xp), dy, g["P"], g["s"], "valid")
    return y, dxp[:, t:t + x.shape[1], l:l + x.shape[2], :]


def _maxpool2d_pads(c):
    """Explicit pads (the plan's ZeroPadding2D + MaxPooling2D fusion): forward and backward
    against the -inf-padded oracle, linear and with relu' folded in; over a ReLU's output
    (x >= 0) the forward is the zero-padded pool's and the masked gradient its cropped one;
    every CUDA path bit for bit with the CPU."""
    for g in _pads_configs(c):
        shape = (g["N"], g["H"], g["W"], g["C"])
        x = c.normal(shape)
        c.what = f"pool {g['P']} strides {g['s']} pads {g['pads']} x {shape}"
        want_y, _ = _pool_padded_ref(x, None, g)
        y = ops.max_pool2d(c.arg(x), g["P"], g["s"], pads=g["pads"], **c.kw)
        c.check("y", y, want_y, tol=0.0)
        dy = c.normal(want_y.shape)
        _, want_dx = _pool_padded_ref(x, dy, g)
        _, terms = _pool_padded_ref(x, abs(dy), g)
        k = -(-g["P"][0] // g["s"][0]) * -(-g["P"][1] // g["s"][1])
        for act, mask in (("linear", 1.0), ("relu", x > 0)):
            dx = ops.max_pool2d_backward(c.arg(x), c.arg(dy), g["P"], g["s"], pads=g["pads"], activation=act,
                                         **c.kw)
            c.check(f"dx ({act})", dx, want_dx * mask, k=k, terms=terms * mask)
            if c.backend.startswith("cuda"):
                kw = {kk: v for kk, v in c.kw.items() if kk != "backend"}
                cpu = ops.max_pool2d_backward(c.arg(x), c.arg(dy), g["P"], g["s"], pads=g["pads"], activation=act,
                                              backend="cpu", **kw)
                assert np.array_equal(np.asarray(cpu).view(np.uint8), np.asarray(dx).view(np.uint8)), \
                    c.msg(f"dx ({act}) differs from the CPU backend")
        # over a ReLU's output: the zero-padded pool (ZeroPadding2D + MaxPooling2D 'valid')
        xr = np.maximum(x, 0.0)
        (t, b), (l, r) = g["pads"]
        xz = np.pad(xr, ((0, 0), (t, b), (l, r), (0, 0)))
        yr = ops.max_pool2d(c.arg(xr), g["P"], g["s"], pads=g["pads"], **c.kw)
        c.check("y (relu input, zero padding)", yr, ref.max_pool2d(xz, g["P"], g["s"], "valid"), tol=0.0)
        dxr = ops.max_pool2d_backward(c.arg(xr), c.arg(dy), g["P"], g["s"], pads=g["pads"], activation="relu",
                                      **c.kw)
        dz = ref.max_pool2d_backward(xz, dy, g["P"], g["s"], "valid")[:, t:t + g["H"], l:l + g["W"], :] * (xr > 0)
        c.check("dx (relu input, zero padding, masked)", dxr, dz, k=k,
                terms=ref.max_pool2d_backward(xz, abs(dy), g["P"], g["s"], "valid")[:, t:t + g["H"], l:l + g["W"], :])
    for bad, match in ((dict(pads=((3, 0), (0, 0))), "pads"), (dict(pads=((0, 0), (0, 0)), padding="same"), "pads"),
                       (dict(pads=((-1, 0), (0, 0))), "pads")):
        kw = dict(bad)
        with pytest.raises(ValueError, match=match):
            ops.max_pool2d(np.ones((1, 6, 6, 2), np.float32), (3, 3), (2, 2), **kw, **c.kw)


def case_avgpool2d_fwd(c):
    for g in pool_configs(c):
        x = c.normal((g["N"], g["H"], g["W"], g["C"]))
        c.what = _pool_desc(g)
        y = ops.avg_pool2d(c.arg(x), g["P"], g["s"], g["pad"], **c.kw)
        c.check("y", y, ref.avg_pool2d(x, g["P"], g["s"], g["pad"]), k=g["P"][0] * g["P"][1],
                terms=ref.avg_pool2d(abs(x), g["P"], g["s"], g["pad"]))


def case_avgpool2d_bwd(c):
    for g in pool_configs(c):
        shape = (g["N"], g["H"], g["W"], g["C"])
        dy = c.normal(ref.pool2d_output_shape(shape, g["P"], g["s"], g["pad"]))
        c.what = _pool_desc(g)
        dx = ops.avg_pool2d_backward(c.arg(dy), shape, g["P"], g["s"], g["pad"], **c.kw)
        c.check("dx", dx, ref.avg_pool2d_backward(dy, shape, g["P"], g["s"], g["pad"]),
                k=_pool_overlap(g),
                terms=ref.avg_pool2d_backward(abs(dy), shape, g["P"], g["s"], g["pad"]))
        if c.backend.startswith("cuda"):
            # the scalar and the 16-byte-vector kernels sum as the CPU does: bit for bit
            kw = {k: v for k, v in c.kw.items() if k != "backend"}
            cpu = ops.avg_pool2d_backward(c.arg(dy), shape, g["P"], g["s"], g["pad"], backend="cpu", **kw)
            assert np.array_equal(np.asarray(cpu).view(np.uint8), np.asarray(dx).view(np.uint8)), \
                c.msg("dx differs from the CPU backend bit for bit")
        if c.dtype == "float32":
            x = c.normal(shape)

            def f(t):
                return _dot64(dy, ops.avg_pool2d(
                    np.asarray(t, np.float32), g["P"], g["s"], g["pad"], backend=c.backend))
            fd_check(c, "dx", f, x, np.asarray(dx, np.float64), h=0.1)


def _act_shapes(c):
    r = c.rng
    return [(1,), (7,), (3, 1), (5, 9), (2, 3, 17), (int(r.integers(1, 40)), int(r.integers(1, 70)))]


def case_act_fwd(c):
    for act in ref.ACTIVATIONS:
        for shape in _act_shapes(c):
            x = c.normal(shape, scale=3.0)
            c.what = f"act={act} x{shape}"
            y = ops.activation(c.arg(x), act, **c.kw)
            c.check("y", y, ref.activation(x, act), k=shape[-1] if act == "softmax" else 1)


def case_act_bwd(c):
    for act in ref.ACTIVATIONS:
        for shape in _act_shapes(c):
            x = c.normal(shape, scale=3.0)
            y = c.round(ref.activation(x, act))  # the forward output as stored
            dy = c.normal(shape)
            c.what = f"act={act} y{shape}"
            dx = ops.activation_backward(c.arg(y), c.arg(dy), act, **c.kw)
            c.check("dx", dx, ref.activation_backward(y, dy, act),
                    k=shape[-1] if act == "softmax" else 1, terms=_act_bwd_terms(y, dy, act))
            if c.dtype == "float32" and len(shape) == 2 and shape[1] > 1:
                if act == "relu":
                    x = np.where(np.abs(x) < 0.05, 0.5, x)  # off the kink

                def fwd(t):
                    return np.asarray(ops.activation(np.asarray(t, np.float32), act,
                                                     backend=c.backend), np.float64)
                y32 = fwd(x)
                dxc = np.asarray(ops.activation_backward(y32, dy, act, backend=c.backend),
                                 np.float64)
                fd_check(c, "dx", lambda t: _dot64(dy, fwd(t)), x, dxc, h=1e-2)


def case_bias_grad(c):
    r = c.rng
    for shape in [(1, 1), (3, 7), (int(r.integers(50, 300)), int(r.integers(1, 40))),
                  (2, 5, 4, 6), (9,)]:
        dy = c.normal(shape)
        c.what = f"dy{shape}"
        db = ops.bias_grad(c.arg(dy), **c.kw)
        c.check("db", db, ref.bias_grad(dy), k=int(np.prod(shape[:-1])),
                terms=ref.bias_grad(abs(dy)))
    if c.dtype == "float32":
        # through the core's gemm bias epilogue: d/db sum(dy * (a @ w + b)) = bias_grad(dy)
        a, w, dy, b0 = c.normal((13, 6)), c.normal((6, 5)), c.normal((13, 5)), c.normal(5)
        c.what = "d/dbias of sum(dy * gemm(a, w, bias))"
        db = np.asarray(ops.bias_grad(dy, backend=c.backend), np.float64)
        fd_check(c, "db", lambda t: _dot64(dy, ops.gemm(a, w, np.asarray(t, np.float32),
                                                       backend=c.backend)), b0, db, h=0.1)


def _loss_rows_cols(c):
    r = c.rng
    return [(1, 1), (1, 7), (5, 3), (int(r.integers(2, 40)), int(r.integers(2, 30))), (17, 10)]


def _check_loss(c, fn, x, labels, want_fn, kwargs, k):
    """want_fn(grad_scale) -> (loss, grad, loss terms, grad terms) from the oracle."""
    gs = float(c.rng.choice([1.0, 0.5, 1.0 / 32]))
    loss, grad = fn(c.arg(x), labels, grad_scale=gs, **kwargs, **c.kw)
    want_loss, want_grad, loss_terms, grad_terms = want_fn(gs)
    c.check("loss", loss, want_loss, k=k, terms=loss_terms)
    c.check("grad", grad, want_grad, k=k, terms=grad_terms)
    loss2, none = fn(c.arg(x), labels, grad_scale=gs, return_grad=False, **kwargs, **c.kw)
    assert none is None, c.msg("grad returned although return_grad=False")
    c.check("loss (no grad)", loss2, want_loss, k=k, terms=loss_terms)
    return gs


def _softmax_xent_ref(z, labels, gs):
    loss, grad = ref.softmax_cross_entropy(z, labels, gs)
    y = np.abs(ref._dense_labels(labels, z.shape[-1]))
    lse = np.abs(np.log(np.exp(z).sum(axis=-1, keepdims=True)))
    return loss, grad, (y * (np.abs(z) + lse)).sum(axis=-1), \
        gs * (ref.activation(z, "softmax") * y.sum(axis=-1, keepdims=True) + y)


def _sigmoid_bce_ref(z, y, gs):
    loss, grad = ref.sigmoid_binary_cross_entropy(z, y, gs)
    cols = z.shape[-1]
    return loss, grad, (2 * np.abs(z) + 1.0).mean(axis=-1), \
        gs * (ref.activation(z, "sigmoid") + np.abs(y)) / cols


def _xent_probs_ref(p, labels, binary, gs):
    loss, grad = ref.cross_entropy_from_probs(p, labels, binary, gs)
    cols = p.shape[-1]
    if binary:
        q = np.clip(p, ref.CLIP_LO, ref.CLIP_HI)
        return loss, grad, loss, gs * (np.abs(labels) / q + np.abs(1 - labels) / (1 - q)) / cols
    y = ref._dense_labels(labels, cols)
    s = p.sum(axis=-1, keepdims=True)
    n = p / s
    g_n = np.abs(y) / np.clip(n, ref.CLIP_LO, ref.CLIP_HI)
    return loss, grad, loss, gs * (g_n + (g_n * n).sum(axis=-1, keepdims=True)) / s


def _regression_ref(p, t, kind, gs):
    loss, grad = ref.regression_loss(p, t, kind, gs)
    return loss, grad, loss, gs * 2 * (np.abs(p) + np.abs(t)) / p.shape[-1]


def _fd_loss(c, fn, x, labels, kwargs, h):
    """float32: finite differences of the core's loss against the core's gradient."""
    if c.dtype != "float32":
        return
    loss, grad = fn(np.asarray(x, np.float32), labels, **kwargs, backend=c.backend)
    fd_check(c, "grad", lambda t: _sum64(fn(np.asarray(t, np.float32), labels, **kwargs,
                                            return_grad=False, backend=c.backend)[0]),
             x, np.asarray(grad, np.float64), h=h)


def case_softmax_xent(c):
    for rows, cols in _loss_rows_cols(c):
        z = c.normal((rows, cols), scale=3.0)
        idx = c.rng.integers(0, cols, rows)
        # (rows, 1) class indices are only unambiguous when there is more than one class
        for kind in ("onehot", "soft", "sparse") + (("sparse_col",) if cols > 1 else ()):
            if kind == "onehot":
                labels = c.arg(np.eye(cols)[idx])
            elif kind == "soft":  # rows summing to one after rounding
                p = c.round(ref.activation(c.rng.standard_normal((rows, cols)), "softmax"))
                p[:, -1] = 0.0
                p[:, -1] = np.maximum(1.0 - p.sum(axis=1), 0.0)
                labels = c.arg(c.round(p))
            elif kind == "sparse":
                labels = idx.astype(np.int64)
            else:
                labels = idx.astype(np.int32).reshape(rows, 1)
            c.what = f"logits ({rows}, {cols}) labels={kind}"
            lab64 = (np.asarray(labels, np.float64) if kind in ("onehot", "soft")
                     else idx.astype(np.int32))
            _check_loss(c, ops.softmax_cross_entropy, z, labels,
                        lambda gs: _softmax_xent_ref(z, lab64, gs), {}, cols)
            _fd_loss(c, ops.softmax_cross_entropy, z, labels, {}, h=1e-2)


def case_sigmoid_bce(c):
    for rows, cols in _loss_rows_cols(c):
        z = c.normal((rows, cols), scale=3.0)
        for kind in ("binary", "soft"):
            y = (c.rng.random((rows, cols)) < 0.5).astype(float) if kind == "binary" else \
                c.uniform((rows, cols), 0.0, 1.0)
            c.what = f"logits ({rows}, {cols}) labels={kind}"
            _check_loss(c, ops.sigmoid_binary_cross_entropy, z, c.arg(y),
                        lambda gs: _sigmoid_bce_ref(z, y, gs), {}, cols)
            _fd_loss(c, ops.sigmoid_binary_cross_entropy, z, c.arg(y), {}, h=1e-2)


def case_xent_probs(c):
    for rows, cols in _loss_rows_cols(c):
        # categorical: positive, unnormalised probabilities; a few exact zeros get clipped
        p = c.uniform((rows, cols), 0.05, 1.0)
        if cols > 1:
            p[c.rng.random((rows, cols)) < 0.15] = 0.0
            p[:, 0] = np.maximum(p[:, 0], 0.05)
        idx = c.rng.integers(0, cols, rows)
        for kind in ("onehot", "sparse"):
            labels = c.arg(np.eye(cols)[idx]) if kind == "onehot" else idx.astype(np.int32)
            lab64 = np.eye(cols)[idx] if kind == "onehot" else idx.astype(np.int32)
            c.what = f"categorical probs ({rows}, {cols}) labels={kind}"
            _check_loss(c, ops.cross_entropy_from_probs, p, labels,
                        lambda gs: _xent_probs_ref(p, lab64, False, gs), {}, cols)
            pin = c.uniform((rows, cols), 0.2, 1.0)  # smooth region for the difference check
            _fd_loss(c, ops.cross_entropy_from_probs, pin, labels, {}, h=1e-3)
        # binary: inside (0, 1), plus exact 0 and 1 (clipped: loss at the bounds, no gradient)
        pb = c.uniform((rows, cols), 0.02, 0.98)
        pb[c.rng.random((rows, cols)) < 0.1] = 0.0
        pb[c.rng.random((rows, cols)) < 0.1] = 1.0
        y = c.uniform((rows, cols), 0.0, 1.0)
        c.what = f"binary probs ({rows}, {cols})"
        _check_loss(c, ops.cross_entropy_from_probs, pb, c.arg(y),
                    lambda gs: _xent_probs_ref(pb, y, True, gs), {"binary": True},
                    cols)
        pin = c.uniform((rows, cols), 0.1, 0.9)
        _fd_loss(c, ops.cross_entropy_from_probs, pin, c.arg(y), {"binary": True}, h=1e-3)


def case_regression_loss(c):
    for kind in ("mse", "mae"):
        for rows, cols in _loss_rows_cols(c):
            p, t = c.normal((rows, cols)), c.normal((rows, cols))
            t[0, 0] = p[0, 0]  # one exact tie: mae's gradient is sign(0) = 0 there
            c.what = f"{kind} pred ({rows}, {cols})"
            _check_loss(c, ops.regression_loss, p, c.arg(t),
                        lambda gs: _regression_ref(p, t, kind, gs), {"kind": kind}, cols)
            if c.dtype == "float32":
                # away from the kink of |d|: |p - t| >= 0.5
                tf = p + np.where(c.rng.random(p.shape) < 0.5, -1, 1) * c.uniform(p.shape, 0.5, 2)
                _fd_loss(c, ops.regression_loss, p, np.asarray(tf, np.float32), {"kind": kind},
                         h=1e-2)
    p, t = c.normal(6), c.normal(6)
    c.what = "mse of a vector (one column per row)"
    loss, grad = ops.mse(c.arg(p), c.arg(t), **c.kw)
    want_loss, want_grad = ref.mse(p.reshape(6, 1), t.reshape(6, 1))
    c.check("loss", loss, want_loss.reshape(6))
    c.check("grad", grad, want_grad.reshape(6))


def _dropout_cases(c):
    r = c.rng
    return [(0.0, 0, (3, 5)), (0.5, (1 << 64) - 1, (17,)), (float(r.uniform(0.05, 0.9)),
            int(r.integers(0, 1 << 63)) * 2 + 1, (4, 3, 7)),
            (float(r.uniform(0.05, 0.9)), int(r.integers(0, 1 << 32)), (2, 999))]


def _check_dropout(c, fn, ref_fn, name):
    for rate, seed, shape in _dropout_cases(c):
        x = c.normal(shape)
        x[x == 0] = 1.0
        c.what = f"rate={rate} seed={seed} shape={shape}"
        out = fn(c.arg(x), rate, seed, **c.kw)
        want = ref_fn(x, rate, seed)
        keep = ref.dropout_mask(shape, rate, seed)
        got = np.asarray(out).astype(np.float64)
        dropped_wrong = np.flatnonzero(((got == 0) != ~keep).reshape(-1))
        assert dropped_wrong.size == 0, c.msg(
            f"{name}: the mask differs from gc_uniform01 at {dropped_wrong.size} elements, first "
            f"flat index {dropped_wrong[:5].tolist()}")
        c.check(name, out, want)
    return x


def case_dropout_fwd(c):
    _check_dropout(c, ops.dropout, ref.dropout, "y")


def case_dropout_bwd(c):
    _check_dropout(c, ops.dropout_backward, ref.dropout_backward, "dx")
    if c.dtype == "float32":
        x, dy = c.normal((5, 11)), c.normal((5, 11))
        seed, rate = int(c.rng.integers(0, 1 << 63)), 0.3
        c.what = f"finite differences rate={rate} seed={seed}"
        dx = np.asarray(ops.dropout_backward(dy, rate, seed, backend=c.backend), np.float64)
        fd_check(c, "dx", lambda t: _dot64(dy, ops.dropout(
            np.asarray(t, np.float32), rate, seed, backend=c.backend)), x, dx, h=0.1)


def _state(c, a):
    """A typed array to be updated in place (bf16: ml_dtypes or uint16 bits)."""
    if c.dtype == "bfloat16" and ml_dtypes is None:
        return ops.float32_to_bfloat16_bits(np.asarray(a, np.float32))
    return c.arg(a).copy()


def _read_state(c, a):
    if a.dtype == np.uint16:
        return ops.bfloat16_bits_to_float32(a).astype(np.float64)
    return a.astype(np.float64)


def _opt_shapes(c):
    return [(1,), (7, 3), (int(c.rng.integers(100, 2000)),), (3, 3, 2, 5)]


def f32r(v):
    """A hyper-parameter as the core sees it (the C param structs hold float32)."""
    return float(np.float32(v))


def _check_state(c, name, arr, want, before, cond=0.0):
    """`cond`: condition number of the step's own computation (Adam's 1 - beta^t)."""
    assert arr.dtype == (np.dtype(np.uint16) if ml_dtypes is None and c.dtype == "bfloat16"
                         else c.out_dtype()), c.msg(f"{name}: dtype changed to {arr.dtype}")
    got = _read_state(c, arr)
    step = want - before
    # the new value is old + step: they may cancel; the step carries its own rounding
    terms = np.abs(before) + np.abs(step) * (1.0 + cond)
    c.check_values(name, got, want, terms=terms)
    if c.dtype == "float32" and np.linalg.norm(step) > 0:
        # the step itself, so a wrong update cannot hide behind |w|; the allowance is
        # what storing the new value in float32 alone costs
        storage = np.linalg.norm(ref.round_to(want, "float32") - want) / np.linalg.norm(step)
        c.check_values(name + " step", got - before, step, tol=1e-4 + 4 * storage, terms=terms)


def case_adam(c):
    for shape in _opt_shapes(c):
        w, g, m = c.normal(shape), c.normal(shape), c.normal(shape, 0.1)
        v = c.round(np.abs(c.normal(shape, 0.1)))
        lr = float(c.rng.choice([0.001, 0.05, 0.3]))
        b1, b2 = (0.9, 0.999) if c.rng.random() < 0.5 else (0.8, 0.95)
        eps, t = float(c.rng.choice([1e-7, 1e-3])), int(c.rng.integers(1, 30))
        c.what = f"shape={shape} lr={lr} beta_1={b1} beta_2={b2} epsilon={eps} t={t}"
        W, M, V = _state(c, w), _state(c, m), _state(c, v)
        res = ops.adam_update(W, c.arg(g), M, V, t=t, lr=lr, beta_1=b1, beta_2=b2, epsilon=eps,
                              backend=c.backend, dtype=c.dtype)
        assert res[0] is W and res[1] is M and res[2] is V, c.msg("not updated in place")
        # Keras 3's moment factors: float32(1 - beta) from the double beta (0.001f for
        # 0.999, not 1.0f - 0.999f = 0.000999987f)
        rw, rm, rv = ref.adam_update(w, g, m, v, f32r(lr), f32r(b1), f32r(b2), f32r(eps), t,
                                     one_minus_beta_1=f32r(1 - b1), one_minus_beta_2=f32r(1 - b2))
        # alpha = lr*sqrt(1-b2^t)/(1-b1^t): float32 rounding of b^t is amplified by 1/(1-b^t)
        b1t, b2t = f32r(b1) ** t, f32r(b2) ** t
        cond = b1t / (1 - b1t) + 0.5 * b2t / (1 - b2t)
        _check_state(c, "w", W, rw, w, cond)
        _check_state(c, "m", M, rm, m)
        _check_state(c, "v", V, rv, v)
        _check_skip(c, (W, M, V), lambda flag: ops.adam_update(
            W, c.arg(g), M, V, t=t, lr=lr, beta_1=b1, beta_2=b2, epsilon=eps, skip=flag,
            backend=c.backend, dtype=c.dtype))


def case_sgd(c):
    for shape in _opt_shapes(c):
        for momentum, nesterov in ((0.0, False), (0.9, False), (0.5, True)):
            w, g, m = c.normal(shape), c.normal(shape), c.normal(shape, 0.1)
            lr = float(c.rng.choice([0.01, 0.1]))
            use_m = momentum != 0.0 or c.rng.random() < 0.5
            c.what = f"shape={shape} lr={lr} momentum={momentum} nesterov={nesterov} m={use_m}"
            W, M = _state(c, w), (_state(c, m) if use_m else None)
            ops.sgd_update(W, c.arg(g), M, lr=lr, momentum=momentum, nesterov=nesterov,
                           backend=c.backend, dtype=c.dtype)
            rw, rm = ref.sgd_update(w, g, m if use_m else None, f32r(lr), f32r(momentum),
                                    nesterov)
            _check_state(c, "w", W, rw, w)
            if momentum != 0.0:
                _check_state(c, "m", M, rm, m)
            elif use_m:  # momentum 0: the buffer is not used, so not changed
                c.check_values("m (unused)", _read_state(c, M), m, tol=0.0)
            _check_skip(c, (W,) if M is None else (W, M), lambda flag: ops.sgd_update(
                W, c.arg(g), M, lr=lr, momentum=momentum, nesterov=nesterov, skip=flag,
                backend=c.backend, dtype=c.dtype))


def _check_skip(c, arrays, update):
    """The `skip` flag of dynamic loss scaling: a non-zero flag (any count, NaN too) leaves
    every array bit for bit as it was; a zero flag updates as without one."""
    for value in (1.0, 7.0, float("nan")):
        before = [a.copy() for a in arrays]
        update(ops.skip_flag(value, c.backend))
        for k, (a, b) in enumerate(zip(arrays, before)):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), \
                c.msg(f"skip={value}: array {k} changed")
    before = [a.copy() for a in arrays]
    update(ops.skip_flag(0.0, c.backend))
    # a flag of 0 updates: visible in float32; in half precision a step below half an ulp
    # of a weight rounds away, so only a tensor of many elements must show a change
    if c.dtype == "float32" or arrays[0].size >= 64:
        assert any(not np.array_equal(a, b) for a, b in zip(arrays, before)), c.msg("skip=0: nothing updated")


def case_rmsprop(c):
    for shape in _opt_shapes(c):
        w, g = c.normal(shape), c.normal(shape)
        v = c.round(np.abs(c.normal(shape, 0.1)))
        lr, rho = float(c.rng.choice([0.001, 0.05])), float(c.rng.choice([0.9, 0.7]))
        eps = float(c.rng.choice([1e-7, 1e-3]))
        c.what = f"shape={shape} lr={lr} rho={rho} epsilon={eps}"
        W, V = _state(c, w), _state(c, v)
        ops.rmsprop_update(W, c.arg(g), V, lr=lr, rho=rho, epsilon=eps, backend=c.backend,
                           dtype=c.dtype)
        rw, rv = ref.rmsprop_update(w, g, v, f32r(lr), f32r(rho), f32r(eps), one_minus_rho=f32r(1 - rho))
        _check_state(c, "w", W, rw, w)
        _check_state(c, "v", V, rv, v)
        _check_skip(c, (W, V), lambda flag: ops.rmsprop_update(
            W, c.arg(g), V, lr=lr, rho=rho, epsilon=eps, skip=flag, backend=c.backend, dtype=c.dtype))


def case_accuracy(c):
    for rows, cols in [(1, 3), (9, 4), (int(c.rng.integers(20, 300)), int(c.rng.integers(2, 12)))]:
        p = c.uniform((rows, cols), 0.0, 1.0)
        p[0, :] = p[0, 0]  # a fully tied row: argmax takes the first index
        idx = c.rng.integers(0, cols, rows)
        idx[rows // 2:] = p[rows // 2:].argmax(axis=1)  # make about half correct
        y = np.eye(cols)[idx]
        c.what = f"categorical pred ({rows}, {cols})"
        got = ops.accuracy(c.arg(p), c.arg(y), "categorical", **c.kw)
        c.check_values("count", got, ref.accuracy(p, y, "categorical"), tol=0.0)
        c.what = f"sparse pred ({rows}, {cols})"
        got = ops.accuracy(c.arg(p), idx.astype(np.int32), **c.kw)  # kind resolved: sparse
        c.check_values("count", got, ref.accuracy(p, idx, "sparse"), tol=0.0)
        for thr in (0.5, float(c.rng.uniform(0.2, 0.8))):
            yb = (c.rng.random((rows, cols)) < 0.5).astype(float)
            c.what = f"binary pred ({rows}, {cols}) threshold={thr}"
            got = ops.accuracy(c.arg(p), c.arg(yb), "binary", threshold=thr, **c.kw)
            c.check_values("count", got, ref.accuracy(p, yb, "binary", thr), tol=1e-6)
    pb = c.uniform((50, 1), 0.0, 1.0)
    yb = (c.rng.random(50) < 0.5).astype(float)
    c.what = "binary pred (50, 1), labels (50,) (kind resolved)"
    c.check_values("count", ops.accuracy(c.arg(pb), c.arg(yb), **c.kw),
                   ref.accuracy(pb, yb, "binary"), tol=0.0)


def case_cast(c):
    x = c.rng.standard_normal(300) * 10.0 ** c.rng.integers(-8, 8, 300)
    x = np.concatenate([x, [0.0, -0.0, 1.0, 65504.0, 65520.0, 1e5, -3e38, 1e-8, 1e-42,
                            np.inf, -np.inf, np.nan]])
    x = c.round(x)
    for target in DTYPES:
        c.what = f"{c.dtype} -> {target}"
        y = ops.cast(c.arg(x), target, backend=c.backend)
        want = ref.cast(x, target)
        got = np.asarray(y).astype(np.float64)
        exp_dtype = {"float32": np.float32, "float16": np.float16}.get(
            target, ml_dtypes.bfloat16 if ml_dtypes is not None else np.float32)
        assert np.asarray(y).dtype == np.dtype(exp_dtype), c.msg(f"dtype {np.asarray(y).dtype}")
        nan = np.isnan(got) & np.isnan(want)
        same = ((got == want) & (np.signbit(got) == np.signbit(want))) | nan
        assert same.all(), c.msg(
            f"cast differs at {np.flatnonzero(~same)[:5].tolist()}: got "
            f"{got[~same][:5].tolist()}, expected {want[~same][:5].tolist()}")


def case_reduce_sum(c):
    for n in (1, 7, 33, 1000, 4099):
        x = c.normal((n,), scale=3.0)
        scale = float(np.float32(c.rng.uniform(0.1, 2.0)))
        c.what = f"n={n} scale={scale}"
        y = ops.reduce_sum(c.arg(x), scale=scale, backend=c.backend)
        assert y.dtype == np.float32 and y.shape == (1,), c.msg(f"got {y.dtype} {y.shape}")
        # a float32 result of a double sum: one rounding of the total
        c.check_values("y", y, np.array([ref.reduce_sum(x, scale)]), tol=1e-6,
                       terms=np.array([ref.reduce_sum(np.abs(x), scale)]))
        start = np.array([c.rng.standard_normal()], np.float32)
        acc = start.copy()
        out = ops.reduce_sum(c.arg(x), scale=scale, accumulate_into=acc, backend=c.backend)
        assert out is acc, c.msg("accumulate_into was not updated in place")
        c.check_values("y += sum", acc, np.array([ref.reduce_sum(x, scale, float(start[0]))]),
                       tol=1e-6, terms=np.array([ref.reduce_sum(np.abs(x), scale, abs(float(start[0])))]))


def case_scale_cast(c):
    x = c.rng.standard_normal(300) * 10.0 ** c.rng.integers(-6, 6, 300)
    x = np.concatenate([x, [0.0, -0.0, 1.0, 2000.0, 65504.0, 1e30, -3e38, np.inf, -np.inf, np.nan]])
    x = c.round(x)
    x32 = x.astype(np.float32)  # exact: x holds values of the storage dtype
    for target in DTYPES:
        for scale in (1.0, 32768.0, 2.0 ** -15, float(np.float32(c.rng.uniform(0.1, 3.0)))):
            c.what = f"{c.dtype} -> {target} scale={scale}"
            start = float(c.rng.integers(0, 5))
            count = np.array([start], np.float32)
            y = ops.scale_cast(c.arg(x), target, scale=scale, count_into=count, backend=c.backend)
            # one float32 product, one rounding to the target
            with np.errstate(over="ignore", invalid="ignore"):
                prod = (x32 * np.float32(scale)).astype(np.float64)
            want = ref.cast(prod, target)
            got = np.asarray(y).astype(np.float64)
            nan = np.isnan(got) & np.isnan(want)
            same = ((got == want) & (np.signbit(got) == np.signbit(want))) | nan
            assert same.all(), c.msg(
                f"differs at {np.flatnonzero(~same)[:5].tolist()}: got {got[~same][:5].tolist()}, "
                f"expected {want[~same][:5].tolist()}")
            bad = int((~np.isfinite(want)).sum())
            assert bad >= 3 and count[0] == start + bad, c.msg(f"count {count[0]} != {start} + {bad}")
            y2 = ops.scale_cast(c.arg(x), target, scale=scale, backend=c.backend)  # no count
            assert np.array_equal(np.asarray(y2).astype(np.float64), got, equal_nan=True), c.msg("count changed y")


def case_loss_scale_update(c):
    rng = c.rng
    for growth in (1, 3, 2000):
        scale, good, t = float(2.0 ** rng.integers(0, 20)), 0.0, float(rng.integers(1, 100))
        state = np.array([scale, good], np.float32)
        dyn = np.array([0.01, t], np.float32)
        for step in range(12):
            bad_count = float(rng.choice([0.0, 0.0, 0.0, 1.0, 5.0]))
            bad = np.array([bad_count], np.float32)
            c.what = f"growth={growth} step={step} bad={bad_count}"
            use_dyn = step % 2 == 0
            ops.loss_scale_update(bad, state, dyn if use_dyn else None, growth_steps=growth, backend=c.backend)
            if bad_count == 0.0:  # Keras: counter == growth-1 -> scale * 2, counter 0; else counter + 1
                if good == growth - 1:
                    scale, good = scale * 2.0, 0.0
                else:
                    good += 1.0
                t += 1.0 if use_dyn else 0.0
            else:
                scale, good = scale * 0.5, 0.0
            assert bad[0] == 0.0, c.msg("bad was not reset")
            assert state[0] == scale and state[1] == good, c.msg(f"state {state.tolist()} != {[scale, good]}")
            assert dyn[1] == t and dyn[0] == np.float32(0.01), c.msg(f"dyn {dyn.tolist()}, t should be {t}")


def _embedding_configs(c):
    """((V, D), indices shape): row sizes that take every vector width of the GPU gather
    (16, 8, 4, 2 bytes), rank 1-3 indices, heavy repeats."""
    r = c.rng
    rnd = ((int(r.integers(2, 60)), int(r.integers(1, 40))),
           tuple(int(v) for v in r.integers(1, 6, int(r.integers(1, 4)))))
    return [((1, 1), (1,)), ((7, 5), (3,)), ((9, 4), (11,)), ((13, 8), (4, 6)),
            ((5, 3), (2, 3, 4)), ((50, 33), (17,)), ((3, 70), (400,)), rnd]


def _embedding_indices(c, V, shape):
    """Random indices in [0, V) that include the first and the last row, as int64 or
    int32 (gpucmp.ops converts)."""
    idx = c.rng.integers(0, V, shape)
    flat = idx.reshape(-1)
    flat[0] = V - 1
    flat[-1] = 0 if flat.size > 1 else flat[-1]
    return idx.astype(np.int32) if c.rng.random() < 0.5 else idx


def case_embedding_fwd(c):
    for (V, D), ishape in _embedding_configs(c):
        table = c.normal((V, D))
        idx = _embedding_indices(c, V, ishape)
        c.what = f"table ({V}, {D}) indices {ishape} ({idx.dtype})"
        out = ops.embedding(c.arg(table), idx, **c.kw)
        c.check("out", out, ref.embedding(table, idx), tol=0.0)  # a copy: exact
        # the bits as stored (NaN payloads, -0, infinities: a gather does no arithmetic)
        if c.dtype != "bfloat16" or ml_dtypes is not None:
            special = np.array(c.arg(table))
            special.reshape(-1)[:3] = np.array([np.nan, -0.0, np.inf]).astype(special.dtype)[:special.size]
            got = np.asarray(ops.embedding(special, idx, **c.kw))
            want = special[idx]
            assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8)), \
                c.msg("the gathered rows differ from the table's bits")
        # an integer table is gathered as int32, exactly
        ti = c.rng.integers(-(1 << 31), (1 << 31) - 1, (V, D)).astype(np.int32)
        c.what = f"int32 table ({V}, {D}) indices {ishape}"
        got = ops.embedding(ti, idx, backend=c.backend)
        assert got.dtype == np.int32 and got.shape == ishape + (D,), c.msg(f"{got.dtype} {got.shape}")
        assert np.array_equal(got, ref.embedding(ti, idx)), c.msg("int32 gather differs")
    # a scalar index gives one row
    table = c.normal((6, 7))
    c.what = "scalar index"
    c.check("row", ops.embedding(c.arg(table), 4, **c.kw), table[4], tol=0.0)


def case_embedding_bwd(c):
    for (V, D), ishape in _embedding_configs(c):
        dy = c.normal(ishape + (D,))
        idx = _embedding_indices(c, V, ishape)
        counts = np.bincount(idx.reshape(-1), minlength=V)
        c.what = f"dtable ({V}, {D}) indices {ishape} (at most {counts.max()} repeats)"
        dt = ops.embedding_backward(c.arg(dy), idx, V, **c.kw)
        c.check("dtable", dt, ref.embedding_backward(dy, idx, V), k=int(counts.max()),
                terms=ref.embedding_backward(np.abs(dy), idx, V))
        got = np.asarray(dt).astype(np.float64)
        assert np.all(got[counts == 0] == 0.0), c.msg("rows never indexed are not zero")
        again = ops.embedding_backward(c.arg(dy), idx, V, **c.kw)
        assert np.array_equal(np.asarray(again).view(np.uint8), np.asarray(dt).view(np.uint8)), \
            c.msg("two runs differ (the scatter-add must be deterministic)")
        if c.backend != "cpu":  # the same float32 sums in the same order: the CPU's bits
            cpu = ops.embedding_backward(c.arg(dy), idx, V, backend="cpu",
                                         **{k: v for k, v in c.kw.items() if k != "backend"})
            assert np.array_equal(np.asarray(cpu).view(np.uint8), np.asarray(dt).view(np.uint8)), \
                c.msg("differs from the CPU backend's sums")
        if c.dtype == "float32":
            t0 = c.normal((V, D))
            fd_check(c, "dtable", lambda t: _dot64(dy, ops.embedding(
                np.asarray(t, np.float32), idx, backend=c.backend)), t0, np.asarray(dt, np.float64),
                h=0.1)


# ---- graph ops: add, mul, batch normalization, zero padding, concat / slice

def _ew_shapes(c):
    n = int(c.rng.integers(500, 3000))
    return [(1,), (7, 3), (2, 5, 4, 6), (n,), (3, 1, 17)]


def _check_inplace(c, name, fn, a, b, want, k, terms):
    """fn(A, B, out=A) with A a typed copy of a: written into A's own memory (one device
    buffer on GPUs too), returned as A."""
    A = _state(c, a)
    res = fn(A, c.arg(b), out=A)
    assert res is A, c.msg(f"{name}: out= was not returned")
    c.check_values(name + " (in place, out=x0)", _read_state(c, A), want, k=k, terms=terms)


def case_add(c):
    # on GPUs also many blocks of 16-byte packs, full and partial steps (elementwise.cu)
    for shape in _ew_shapes(c) + ([(3, 70001)] if c.backend.startswith("cuda") else []):
        for n_in in (2, 3, 8):
            xs = [c.normal(shape) for _ in range(n_in)]
            if n_in == 3:  # operands of another rank but the same element count
                xs[1] = xs[1].reshape(-1)
            for act in ("linear", "relu"):
                c.what = f"{n_in} operands of shape {shape} activation={act}"
                y = ops.add(*[c.arg(x) for x in xs], activation=act, **c.kw)
                want = ref.add(*xs, activation=act)
                terms = sum(np.abs(x).reshape(shape) for x in xs)
                c.check("y", y, want, k=n_in, terms=terms)
                assert y.shape == shape, c.msg(f"y: shape {y.shape}")
        a, b = c.normal(shape), c.normal(shape)
        c.what = f"add(g, g2, out=g) shape {shape}"
        _check_inplace(c, "y", lambda A, B, out: ops.add(A, B, out=out, **c.kw), a, b, ref.add(a, b), 2,
                       np.abs(a) + np.abs(b))
        # x2..x7 absent in the middle of the list: straight into the core
        if c.dtype == "float32":
            x0, x1, x5 = c.normal(shape), c.normal(shape), c.normal(shape)
            y = np.full(shape, np.nan, np.float32)
            st = [np.asarray(v, np.float32) for v in (x0, x1, x5)]
            _core.run_op("add", c.backend, (st[0], st[1], None, None, None, st[2], None, None), (y,), {})
            c.check_values("y (x0, x1, x5)", y, x0 + x1 + x5, k=3, terms=np.abs(x0) + np.abs(x1) + np.abs(x5))


def case_mul(c):
    for shape in _ew_shapes(c):
        a, b = c.normal(shape), c.normal(shape)
        c.what = f"shape {shape}"
        c.check("y", ops.mul(c.arg(a), c.arg(b).reshape(-1), **c.kw), ref.mul(a, b))
        _check_inplace(c, "y", lambda A, B, out: ops.mul(A, B, out=out, **c.kw), a, b, ref.mul(a, b), 1, None)


def _bn_shapes(c):
    r = c.rng
    return [(1, 1), (5, 3), (2, 4, 5, 8), (37, 13), (3, 7, 7, 16),
            (int(r.integers(1, 4)), int(r.integers(1, 9)), int(r.integers(1, 9)), int(r.integers(1, 70))),
            (4, 48, 48, 8),  # R = 9216 rows: many chunks in every backend's reduction
            # wide rows: the CUDA partial stage's several column blocks (the last one part
            # idle) and elementwise layouts of more than 256 vectors of channels per row
            (70, 264), (3, 2056)]


def _bn_combos(c, shape):
    full = [(tr, act, g, b, res) for tr in (True, False) for act in ("linear", "relu")
            for g in (True, False) for b in (True, False) for res in (True, False)]
    if int(np.prod(shape)) > 20000:  # the big shape: a few combinations
        idx = c.rng.choice(len(full), 4, replace=False)
        return [full[i] for i in idx]
    return full


def _bn_inputs(c, shape, offset=0.0):
    C = shape[-1]
    x = c.round(offset + c.rng.standard_normal(shape) * c.rng.uniform(0.5, 2.0, C))
    gamma = np.asarray(c.rng.uniform(0.5, 1.5, C), np.float32).astype(np.float64)
    beta = np.asarray(c.rng.standard_normal(C), np.float32).astype(np.float64)
    mm = np.asarray(c.rng.standard_normal(C) * 0.1, np.float32)
    mv = np.asarray(c.rng.uniform(0.5, 2.0, C), np.float32)
    return x, gamma, beta, mm, mv


def _bn_fwd(c, x, mm, mv, gamma, beta, res, training, act, eps=1e-3, mom=0.99, backend=None):
    """The core's forward on copies of the moving statistics: (y, save, mm, mv)."""
    mm, mv = mm.copy(), mv.copy()
    kw = dict(c.kw) if backend is None else {"backend": backend}
    y, save = ops.batchnorm_forward(x, mm, mv, gamma, beta, res, epsilon=eps, momentum=mom,
                                    training=training, activation=act, **kw)
    return y, save, mm, mv


def case_batchnorm_fwd(c):
    for shape in _bn_shapes(c):
        C, R = shape[-1], int(np.prod(shape[:-1]))
        offset = 10.0 if shape == (37, 13) else 0.0  # a mean far from 0: the variance stays exact
        x, gamma, beta, mm0, mv0 = _bn_inputs(c, shape, offset)
        res = c.normal(shape)
        eps, mom = float(c.rng.choice([1e-3, 1.001e-5])), float(c.rng.choice([0.99, 0.9]))
        for training, act, ug, ub, ur in _bn_combos(c, shape):
            c.what = (f"x {shape} training={training} act={act} gamma={ug} beta={ub} residual={ur} "
                      f"epsilon={eps} momentum={mom}")
            g, b, r = (gamma if ug else None), (beta if ub else None), (res if ur else None)
            mm, mv = mm0.copy(), mv0.copy()
            y, save = ops.batchnorm_forward(c.arg(x), mm, mv, g, b, None if r is None else c.arg(r),
                                            epsilon=eps, momentum=mom, training=training,
                                            activation=act, **c.kw)
            wy, wmm, wmv, wsave = ref.batchnorm_forward(x, mm0, mv0, g, b, r, f32r(eps), f32r(mom),
                                                        training, act)
            assert save.dtype == np.float32 and save.shape == (2, C), c.msg(f"save {save.dtype} {save.shape}")
            mag = np.abs(x).reshape(-1, C).mean(axis=0)
            c.check_values("save mean", save[0], wsave[0], tol=1e-5, terms=mag)
            c.check_values("save invstd", save[1], wsave[1], tol=1e-5 * max(1.0, offset))
            gi = np.abs(wsave[1] * (1.0 if g is None else g))
            terms = (np.abs(x) + np.abs(wsave[0])) * gi + (0.0 if b is None else np.abs(b)) + \
                (0.0 if r is None else np.abs(r))
            c.check("y", y, wy, terms=terms)
            if training:
                c.check_values("moving_mean", mm, wmm, tol=1e-5, terms=np.abs(mm0) + mag)
                c.check_values("moving_variance", mv, wmv, tol=1e-5 * max(1.0, offset), terms=np.abs(mv0))
            else:
                assert np.array_equal(mm, mm0) and np.array_equal(mv, mv0), \
                    c.msg("inference changed the moving statistics")
    if c.backend != "cpu" and c.dtype == "float32":  # a reduction in a fixed order: the same bits twice
        x, gamma, beta, mm0, mv0 = _bn_inputs(c, (4, 48, 48, 8))
        c.what = "determinism"
        a1 = _bn_fwd(c, x, mm0, mv0, gamma, beta, None, True, "relu")
        a2 = _bn_fwd(c, x, mm0, mv0, gamma, beta, None, True, "relu")
        for u, v in zip(a1, a2):
            assert np.array_equal(np.asarray(u).view(np.uint8), np.asarray(v).view(np.uint8)), c.msg("two runs differ")


def _bn_mask_from_x(c):
    """mask_from_x (relu without a residual): the mask recomputed from x gives the same
    bits as the mask read from y, in training and inference, with gamma / beta present or
    not -- including pre-activations at the storage dtype's rounding edge: rows where x
    equals the moving mean make the pre-activation exactly beta, and beta holds values at
    and around half of float16's / bfloat16's smallest subnormal (a positive value that
    rounds to a stored 0 is masked off)."""
    edge = np.array([0.0, 2.0 ** -25, 2.0 ** -24, 3 * 2.0 ** -26, 2.0 ** -134, 2.0 ** -133, -2.0 ** -140, 1e-30],
                    np.float32)
    for shape in [(5, 3), (4, 6, 8), (70, 264)]:
        C = shape[-1]
        x, gamma, beta, mm0, mv0 = _bn_inputs(c, shape)
        dy = c.normal(shape)
        mm0 = np.asarray(c.round(mm0), np.float32)  # x's dtype holds it: x - mean is exactly 0
        if C >= 8:
            beta[:8] = edge
            rows = x.reshape(-1, C)
            rows[::2, :] = mm0  # half the rows at the moving mean
            x = rows.reshape(shape)
        for training in (True, False):
            for ug, ub in ((True, True), (False, True), (True, False), (False, False)):
                g, b = (gamma if ug else None), (beta if ub else None)
                c.what = f"mask_from_x x {shape} training={training} gamma={ug} beta={ub}"
                y, save, _, _ = _bn_fwd(c, c.arg(x), mm0, mv0, g, b, None, training, "relu")
                flags = dict(training=training, activation="relu", **c.kw)
                want = ops.batchnorm_backward(c.arg(x), c.arg(dy), save, g, y, **flags)
                got = ops.batchnorm_backward(c.arg(x), c.arg(dy), save, g, None, mask_from_x=True, beta=b, **flags)
                for name, u, v in zip(("dx", "dgamma", "dbeta"), got, want):
                    assert np.array_equal(np.asarray(u).view(np.uint8), np.asarray(v).view(np.uint8)), \
                        c.msg(f"{name}: the mask from x differs from the mask from y")
                if C >= 8 and not training and ub:  # the edge channels: some masked on, some off
                    on = np.asarray(y, np.float64).reshape(-1, C)[::2, :8] > 0
                    assert on.any() and not on.all(), c.msg("the rounding-edge rows test nothing")
    with pytest.raises(ValueError, match="mask_from_x"):
        ops.batchnorm_backward(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32),
                               np.ones((2, 3), np.float32), mask_from_x=True, **c.kw)
    with pytest.raises(ValueError, match="y: not taken"):
        ops.batchnorm_backward(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32),
                               np.ones((2, 3), np.float32), y=np.ones((2, 3), np.float32), activation="relu",
                               mask_from_x=True, **c.kw)
    with pytest.raises(ValueError, match="beta: read only"):
        ops.batchnorm_backward(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32),
                               np.ones((2, 3), np.float32), beta=np.ones(3, np.float32), **c.kw)


def case_batchnorm_bwd(c):
    for shape in _bn_shapes(c):
        C, R = shape[-1], int(np.prod(shape[:-1]))
        x, gamma, beta, mm0, mv0 = _bn_inputs(c, shape)
        res, dy = c.normal(shape), c.normal(shape)
        for training, act, ug, _, ur in _bn_combos(c, shape)[::2]:
            g = gamma if ug else None
            c.what = f"x {shape} training={training} act={act} gamma={ug}"
            y, save, _, _ = _bn_fwd(c, c.arg(x), mm0, mv0, g, beta, c.arg(res) if ur else None, training, act)
            y64 = np.asarray(y).astype(np.float64)
            want = ref.batchnorm_backward(x, dy, save, g, y64, training, act)
            flags = dict(return_dx=True, return_dgamma=True, return_dbeta=True, return_dresidual=ur)
            got = ops.batchnorm_backward(c.arg(x), c.arg(dy), save, g, y if act == "relu" else None,
                                         training=training, activation=act, **flags, **c.kw)
            dz = want[3]
            xhat = (x - save[0]) * save[1]
            gi = np.abs(save[1] * (1.0 if g is None else g))
            tdx = gi * (np.abs(dz) + np.abs(dz).reshape(-1, C).mean(axis=0) +
                        np.abs(xhat) * np.abs(dz * xhat).reshape(-1, C).mean(axis=0))
            c.check("dx", got[0], want[0], k=R if training else 1, terms=tdx)
            assert got[1].dtype == np.float32 and got[2].dtype == np.float32, c.msg("dgamma / dbeta dtype")
            c.check_values("dgamma", got[1], want[1], k=R, terms=np.abs(dz * xhat).reshape(-1, C).sum(axis=0))
            c.check_values("dbeta", got[2], want[2], k=R, terms=np.abs(dz).reshape(-1, C).sum(axis=0))
            if ur:
                c.check("dresidual", got[3], dz, tol=0.0 if c.dtype == "float32" else None)
            else:
                assert got[3] is None, c.msg("dresidual returned though not asked for")
            # only some outputs; dx written over dy (the plan's in-place backward)
            dxo = ops.batchnorm_backward(c.arg(x), c.arg(dy), save, g, y if act == "relu" else None,
                                         training=training, activation=act, return_dgamma=False,
                                         return_dbeta=False, **c.kw)
            assert dxo[1] is None and dxo[2] is None, c.msg("unrequested outputs returned")
            c.check("dx (dx only)", dxo[0], want[0], k=R if training else 1, terms=tdx)
            if c.dtype != "bfloat16" or ml_dtypes is not None:
                st = [ops._storage(c.arg(v), c.dtype) for v in (x, dy)]
                ys = ops._storage(y, c.dtype) if act == "relu" else None
                _core.run_op("batchnorm_bwd", c.backend, (st[0], st[1], g if g is None else np.float32(g), save, ys, None),
                             (st[1], None, None, None), dict(training=training, act=act))
                alias = ops._result(st[1], c.dtype)
                assert np.array_equal(np.asarray(alias).view(np.uint8), np.asarray(dxo[0]).view(np.uint8)), \
                    c.msg("dx written over dy differs from dx in its own array")
    _bn_mask_from_x(c)
    if c.dtype != "float32":
        return
    # finite differences of the core's forward: training and inference, relu or not,
    # a residual or not, gamma / beta absent or not
    shape = (3, 4, 5, 6)
    x, gamma, beta, mm0, mv0 = _bn_inputs(c, shape)
    res, r = c.normal(shape), c.normal(shape)
    for training in (True, False):
        for act, ug, ur in (("linear", False, False), ("relu", True, True), ("linear", True, True),
                            ("relu", False, False)):
            g, b, rs = (gamma if ug else None), (beta if ug else None), (res if ur else None)
            c.what = f"finite differences training={training} act={act} gamma/beta={ug} residual={ur}"

            def fwd(xx=x, gg=g, bb=b, rr=rs):
                f = lambda v: None if v is None else np.asarray(v, np.float32)
                return _bn_fwd(c, f(xx), mm0, mv0, f(gg), f(bb), f(rr), training, act)

            y, save, _, _ = fwd()
            dx, dg, db, dres = ops.batchnorm_backward(
                np.float32(x), np.float32(r), save, None if g is None else np.float32(g),
                y if act == "relu" else None, training=training, activation=act, return_dresidual=True,
                backend=c.backend)
            # relu: a step moves a few pre-activations across the kink, an error of order h
            # relative to the change (a beta step moves a whole channel: 1e-3 gave ~1.7% on
            # one seed in six), so the step is smaller there; the fd_check noise term grows
            # with 1 / h to match
            h = 2e-4 if act == "relu" else 1e-2
            fd_check(c, "dx", lambda t: _dot64(r, fwd(xx=t)[0]), x, dx, h=h)
            fd_check(c, "dgamma", lambda t: _dot64(r, fwd(gg=t)[0]), gamma if ug else np.ones(shape[-1]), dg, h=h)
            fd_check(c, "dbeta", lambda t: _dot64(r, fwd(bb=t)[0]), beta if ug else np.zeros(shape[-1]), db, h=h)
            fd_check(c, "dresidual", lambda t: _dot64(r, fwd(rr=t)[0]), res if ur else np.zeros(shape), dres, h=h)


def _pad_configs(c):
    r = c.rng
    out = [((1, 3, 4, 2), ((1, 1), (1, 1))), ((2, 5, 6, 3), ((0, 2), (3, 0))), ((1, 1, 1, 1), ((0, 0), (0, 0))),
           ((2, 7, 7, 8), ((3, 3), (3, 3)))]  # ResNet's conv1_pad
    for _ in range(4):
        shp = tuple(int(v) for v in r.integers(1, 9, 4))
        out.append((shp, tuple(tuple(int(v) for v in r.integers(0, 4, 2)) for _ in range(2))))
    if c.backend.startswith("cuda"):
        # layout.cu's pack widths: 16 bytes (ResNet's 64-channel pad), 8, 4, and 2-byte words
        # (the 3-channel stem pad), over many blocks
        out += [((2, 14, 14, 64), ((1, 1), (1, 1))), ((2, 28, 28, 3), ((3, 3), (3, 3))),
                ((3, 9, 10, 4), ((2, 1), (1, 2))), ((2, 6, 5, 2), ((0, 3), (1, 0)))]
    return out


def case_pad2d_fwd(c):
    for shape, pad in _pad_configs(c):
        x = c.normal(shape)
        c.what = f"x {shape} padding {pad}"
        c.check("y", ops.pad2d(c.arg(x), pad, **c.kw), ref.pad2d(x, pad), tol=0.0)
    x = c.normal((2, 3, 3, 1))
    c.what = "padding as an int and as (h, w)"
    c.check("y", ops.pad2d(c.arg(x), 2, **c.kw), ref.pad2d(x, ((2, 2), (2, 2))), tol=0.0)
    c.check("y", ops.pad2d(c.arg(x), (1, 3), **c.kw), ref.pad2d(x, ((1, 1), (3, 3))), tol=0.0)


def case_pad2d_bwd(c):
    for shape, pad in _pad_configs(c):
        (t, b), (l, r) = pad
        pshape = (shape[0], shape[1] + t + b, shape[2] + l + r, shape[3])
        dy = c.normal(pshape)
        c.what = f"dy {pshape} padding {pad}"
        dx = ops.pad2d_backward(c.arg(dy), pad, **c.kw)
        c.check("dx", dx, ref.pad2d_backward(dy, pad), tol=0.0)
        # the adjoint of the forward: <dy, pad(x)> = <pad_bwd(dy), x>
        x = c.normal(shape)
        lhs = float(np.sum(dy * np.asarray(ops.pad2d(c.arg(x), pad, **c.kw)).astype(np.float64)))
        rhs = float(np.sum(np.asarray(dx).astype(np.float64) * x))
        assert abs(lhs - rhs) <= 1e-9 * (1.0 + np.sum(np.abs(dy)) * np.abs(x).max()), c.msg(f"<dy, pad x> {lhs} != {rhs}")


def _concat_configs(c):
    r = c.rng
    out = [([(3, 4), (3, 1)], -1), ([(2, 5, 6, 3), (2, 5, 6, 7), (2, 5, 6, 1)], -1), ([(4, 2)], 0),
           ([(2, 3, 4)] * 8, 1), ([(2, 1, 3), (2, 0, 3), (2, 4, 3)], 1)]
    for _ in range(3):
        nd = int(r.integers(1, 5))
        base = [int(v) for v in r.integers(1, 6, nd)]
        ax = int(r.integers(0, nd))
        shapes = []
        for _ in range(int(r.integers(1, 9))):
            s = list(base)
            s[ax] = int(r.integers(1, 7))
            shapes.append(tuple(s))
        out.append((shapes, ax))
    return out


def case_concat(c):
    for shapes, ax in _concat_configs(c):
        xs = [c.normal(s) for s in shapes]
        c.what = f"{len(xs)} arrays {shapes} axis={ax}"
        y = ops.concat([c.arg(x) for x in xs], axis=ax, **c.kw)
        c.check("y", y, ref.concat(xs, ax), tol=0.0)
        off = 0
        for k, x in enumerate(xs):  # the round trip: slice_cols gives each input back
            part = ops.slice_cols(y, off, x.shape[ax], axis=ax, **c.kw)
            c.check(f"slice {k} of the concat", part, x, tol=0.0)
            off += x.shape[ax]


def case_slice_cols(c):
    r = c.rng
    for shape, ax in [((5, 9), -1), ((2, 3, 4, 10), -1), ((6, 4, 3), 1), ((7,), 0),
                      (tuple(int(v) for v in r.integers(1, 8, 3)), int(r.integers(0, 3)))]:
        x = c.normal(shape)
        n = shape[ax]
        offset = int(r.integers(0, n))
        width = int(r.integers(0, n - offset + 1))
        c.what = f"x {shape} axis={ax} [{offset}, {offset + width})"
        c.check("y", ops.slice_cols(c.arg(x), offset, width, axis=ax, **c.kw),
                ref.slice_cols(x, offset, width, ax), tol=0.0)
        # the round trip: the slices of a split, concatenated, are x again
        cuts = sorted(set([0, n] + [int(v) for v in r.integers(0, n + 1, 2)]))
        parts = [ops.slice_cols(c.arg(x), a, b - a, axis=ax, **c.kw) for a, b in zip(cuts, cuts[1:])]
        c.check("concat of the slices", ops.concat(parts, axis=ax, **c.kw), x, tol=0.0)


def case_seq_mask(c):
    r = c.rng
    for shape in [(1, 1, 1), (3, 7, 1), (2, 5, 4), (int(r.integers(1, 5)), int(r.integers(1, 40)), 6), (64, 33, 3)]:
        value = float(c.round(np.array([r.choice([0.0, 0.5, -1.25])]))[0])
        x = c.normal(shape)
        hit = r.random(shape[:-1]) < 0.4           # whole steps equal to value ...
        x[hit] = value
        one = r.random(shape) < 0.2                # ... and single features equal to it
        x[one] = value
        c.what = f"x {shape} value={value}"
        m = np.full(shape[:-1], np.nan, np.float32)
        _core.run_op("seq_mask", c.backend, (c.arg(x),), (m,), {"value": value})
        c.check_values("mask", m, ref.seq_mask(x, value), tol=0.0)
    x = np.array([[[np.nan, 0.0], [0.0, 0.0]]])    # NaN differs from every value
    m = np.zeros((1, 2), np.float32)
    _core.run_op("seq_mask", c.backend, (c.arg(x),), (m,), {"value": 0.0})
    np.testing.assert_array_equal(m, [[1.0, 0.0]], err_msg=c.msg("NaN"))
    with pytest.raises(ValueError, match="mask"):
        _core.run_op("seq_mask", c.backend, (c.arg(np.zeros((2, 3, 4))),), (np.zeros((2, 4), np.float32),), {})


def case_mul_bcast(c):
    r = c.rng
    for shape in [(1, 1, 1), (4, 9, 1), (3, 5, 7), (int(r.integers(1, 9)), int(r.integers(1, 30)),
                                                     int(r.integers(1, 20))), (16, 100, 64)]:
        x = c.normal(shape)
        m = np.where(r.random((shape[0], shape[2])) < 0.3, 0.0, 1.0 / 0.7).astype(np.float32)
        c.what = f"x {shape}"
        y = np.full(shape, np.nan, c.out_dtype())
        _core.run_op("mul_bcast", c.backend, (c.arg(x), m), (y,), {})
        c.check("y", y, ref.mul_bcast(x, m))
        xa = c.arg(x).copy()                      # in place
        _core.run_op("mul_bcast", c.backend, (xa, m), (xa,), {})
        c.check("y in place", xa, ref.mul_bcast(x, m))
    with pytest.raises(ValueError, match="'m' has shape"):
        _core.run_op("mul_bcast", c.backend, (c.arg(np.zeros((2, 3, 4))), np.zeros((2, 3), np.float32)),
                     (np.zeros((2, 3, 4), c.out_dtype()),), {})


def case_reverse_seq(c):
    r = c.rng
    for shape in [(1, 1, 1), (2, 7, 1), (3, 5, 4), (int(r.integers(1, 9)), int(r.integers(1, 30)),
                                                    int(r.integers(1, 20))), (16, 64, 33)]:
        x = c.normal(shape)
        c.what = f"x {shape}"
        y = np.full(shape, np.nan, c.out_dtype())
        _core.run_op("reverse_seq", c.backend, (c.arg(x),), (y,), {})
        c.check("y", y, ref.reverse_seq(x), tol=0.0)
        back = np.full(shape, np.nan, c.out_dtype())     # its own inverse (the backward)
        _core.run_op("reverse_seq", c.backend, (y,), (back,), {})
        c.check("reverse of the reverse", back, x, tol=0.0)
    xa = c.arg(np.ones((2, 3, 4)))
    with pytest.raises(ValueError, match="alias"):
        _core.run_op("reverse_seq", c.backend, (xa,), (xa,), {})
    with pytest.raises(ValueError, match="'y'"):
        _core.run_op("reverse_seq", c.backend, (c.arg(np.zeros((2, 3, 4))),),
                     (np.zeros((2, 4, 3), c.out_dtype()),), {})


def case_weight_grads(c):
    """dw = x^T g, du = h^T g, db = column sums of g, with and without h and db: against the
    oracle, every element written (NaN-poisoned outputs), and dw / du bitwise equal to the
    gemm op's x^T g (the CPU stacks both products over one packing of g, whose K blocks and
    summation order are the plain GEMM's; CUDA runs that GEMM)."""
    r = c.rng
    shapes = [(1, 1, 1, 1), (7, 3, 2, 5), (0, 3, 2, 4), (641, 37, 13, 45),
              (int(r.integers(300, 1400)), int(r.integers(1, 40)), int(r.integers(1, 30)), int(r.integers(1, 80)))]
    for K, m1, m2, n in shapes:
        x, h, g = c.normal((K, m1)), c.normal((K, m2)), c.normal((K, n))
        want_dw, want_du, want_db = ref.weight_grads(x, h, g)
        for with_h, with_db in ((True, True), (True, False), (False, True)):
            c.what = f"x {(K, m1)}, h {(K, m2) if with_h else None}, g {(K, n)}, db {with_db}"
            dw = np.full((m1, n), np.nan, c.out_dtype())
            du = np.full((m2, n), np.nan, c.out_dtype()) if with_h else None
            db = np.full(n, np.nan, c.out_dtype()) if with_db else None
            _core.run_op("weight_grads", c.backend, (c.arg(x), c.arg(h) if with_h else None, c.arg(g)),
                         (dw, du, db), {})
            c.check("dw", dw, want_dw, k=K, terms=np.abs(x).T @ np.abs(g))
            same = np.asarray(ops.gemm(c.arg(x), c.arg(g), trans_a=True, **c.kw))
            assert np.array_equal(dw.view(np.uint8), same.view(np.uint8)), \
                c.msg("dw differs bitwise from gemm(x, g, trans_a=True)")
            if with_h:
                c.check("du", du, want_du, k=K, terms=np.abs(h).T @ np.abs(g))
                same = np.asarray(ops.gemm(c.arg(h), c.arg(g), trans_a=True, **c.kw))
                assert np.array_equal(du.view(np.uint8), same.view(np.uint8)), \
                    c.msg("du differs bitwise from gemm(h, g, trans_a=True)")
            if with_db:
                c.check("db", db, want_db, k=K, terms=np.abs(g).sum(axis=0))
    x, h, g = (c.arg(np.ones(s)) for s in ((5, 3), (5, 2), (5, 4)))
    out = lambda *s: np.zeros(s, c.out_dtype())  # noqa: E731
    with pytest.raises(ValueError, match="same rows"):
        _core.run_op("weight_grads", c.backend, (c.arg(np.ones((6, 3))), h, g), (out(3, 4), out(2, 4), None), {})
    with pytest.raises(ValueError, match="'dw' has shape"):
        _core.run_op("weight_grads", c.backend, (x, h, g), (out(4, 3), out(2, 4), None), {})
    with pytest.raises(ValueError, match="both or neither"):
        _core.run_op("weight_grads", c.backend, (x, None, g), (out(3, 4), out(2, 4), None), {})
    with pytest.raises(ValueError, match="'db' has shape"):
        _core.run_op("weight_grads", c.backend, (x, h, g), (out(3, 4), out(2, 4), out(3)), {})
    with pytest.raises(ValueError, match="must not alias"):
        gg = c.arg(np.ones((3, 3)))
        _core.run_op("weight_grads", c.backend, (c.arg(np.ones((3, 3))), None, gg), (gg, None, None), {})


# The registry: op name -> case. test_every_op_has_a_case fails when an op of
# GC_OP_LIST has none, so a new op cannot skip its tests.
OP_CASES = {
    "gemm": case_gemm,
    "conv2d_fwd": case_conv2d_fwd,
    "conv2d_bwd_data": case_conv2d_bwd_data,
    "conv2d_bwd_filter": case_conv2d_bwd_filter,
    "maxpool2d_fwd": case_maxpool2d_fwd,
    "maxpool2d_bwd": case_maxpool2d_bwd,
    "avgpool2d_fwd": case_avgpool2d_fwd,
    "avgpool2d_bwd": case_avgpool2d_bwd,
    "act_fwd": case_act_fwd,
    "act_bwd": case_act_bwd,
    "bias_grad": case_bias_grad,
    "softmax_xent": case_softmax_xent,
    "sigmoid_bce": case_sigmoid_bce,
    "xent_probs": case_xent_probs,
    "regression_loss": case_regression_loss,
    "dropout_fwd": case_dropout_fwd,
    "dropout_bwd": case_dropout_bwd,
    "adam": case_adam,
    "sgd": case_sgd,
    "rmsprop": case_rmsprop,
    "accuracy": case_accuracy,
    "cast": case_cast,
    "reduce_sum": case_reduce_sum,
    "scale_cast": case_scale_cast,
    "loss_scale_update": case_loss_scale_update,
    "embedding_fwd": case_embedding_fwd,
    "embedding_bwd": case_embedding_bwd,
    "add": case_add,
    "mul": case_mul,
    "batchnorm_fwd": case_batchnorm_fwd,
    "batchnorm_bwd": case_batchnorm_bwd,
    "pad2d_fwd": case_pad2d_fwd,
    "pad2d_bwd": case_pad2d_bwd,
    "concat": case_concat,
    "slice_cols": case_slice_cols,
    "seq_mask": case_seq_mask,
    "mul_bcast": case_mul_bcast,
    "reverse_seq": case_reverse_seq,
    "weight_grads": case_weight_grads,
}
# the recurrent ops' cases (rnn_fwd, rnn_bwd) live in tests/test_rnn_ops.py
from test_rnn_ops import OP_CASES as _RNN_CASES  # noqa: E402
OP_CASES.update(_RNN_CASES)


def _matrix():
    params = []
    for op in _core.op_names():
        for backend in BACKENDS:
            marks = [pytest.mark.cuda] if backend.startswith("cuda") else []
            # on GPUs, float32 GEMM/conv run exact (tf32 off) and as TF32 (the default)
            extra = ("tfloat32",) if backend != "cpu" and op in SIMD_OPS else ()
            for dtype in DTYPES + extra:
                simds = SIMD_VARIANTS if backend == "cpu" and op in SIMD_OPS else (None,)
                for simd in simds:
                    pid = f"{op}-{backend}-{dtype}" + (f"-{simd}" if simd else "")
                    params.append(pytest.param(op, backend, dtype, simd, marks=marks, id=pid))
    return params


@pytest.mark.parametrize("op,backend,dtype,simd", _matrix())
def test_op(op, backend, dtype, simd):
    assert op in OP_CASES, f"op {op!r} of GC_OP_LIST has no case in tests/test_ops.py"
    c = Case(op, backend, "float32" if dtype == "tfloat32" else dtype, simd)
    if simd is None:
        c.tf32 = dtype == "tfloat32"
        allowed = _core.get_allow_tf32()
        _core.set_allow_tf32(c.tf32)
        try:
            OP_CASES[op](c)
        finally:
            _core.set_allow_tf32(allowed)
        return
    with variants.forced(SIMD_POINT, simd):
        assert _core.cpu_simd_variant() == simd, c.msg(f"forcing {SIMD_POINT}={simd!r} did not stick")
        OP_CASES[op](c)


def test_every_op_has_a_case():
    missing = [op for op in _core.op_names() if op not in OP_CASES]
    assert not missing, f"ops of GC_OP_LIST without a case in tests/test_ops.py: {missing}"
    stale = [op for op in OP_CASES if op not in _core.op_names()]
    assert not stale, f"cases for ops the core does not have: {stale}"


def test_arity_matches_the_header():
    # gpucmp.h's GC_OP_LIST (inputs, outputs) as the cases use them
    want = {"gemm": (3, 1), "conv2d_fwd": (3, 1), "conv2d_bwd_data": (2, 1),
            "conv2d_bwd_filter": (2, 2), "maxpool2d_fwd": (1, 1), "maxpool2d_bwd": (2, 1),
            "avgpool2d_fwd": (1, 1), "avgpool2d_bwd": (1, 1), "act_fwd": (1, 1),
            "act_bwd": (2, 1), "bias_grad": (1, 1), "softmax_xent": (2, 2),
            "sigmoid_bce": (2, 2), "xent_probs": (2, 2), "regression_loss": (2, 2),
            "dropout_fwd": (1, 1), "dropout_bwd": (1, 1), "adam": (1, 3), "sgd": (1, 2),
            "rmsprop": (1, 2), "accuracy": (2, 1), "cast": (1, 1), "embedding_fwd": (2, 1),
            "embedding_bwd": (2, 1), "reduce_sum": (1, 1), "scale_cast": (1, 2),
            "loss_scale_update": (0, 3), "add": (8, 1), "mul": (2, 1), "batchnorm_fwd": (4, 4),
            "batchnorm_bwd": (6, 4), "pad2d_fwd": (1, 1), "pad2d_bwd": (1, 1), "concat": (8, 1),
            "slice_cols": (1, 1), "seq_mask": (1, 1), "mul_bcast": (2, 1),
            "reverse_seq": (1, 1), "weight_grads": (3, 3)}
    for op, arity in want.items():
        if op in _core.op_names():
            assert tuple(_core.op_arity(op)) == arity, op


@pytest.mark.parametrize("backend", [pytest.param(b, marks=[pytest.mark.cuda] if
                                                  b.startswith("cuda") else []) for b in BACKENDS])
def test_dtype_is_inferred_and_bf16_bits_round_trip(backend):
    seed = _fresh_seed()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 4))
    y16 = ops.activation(x.astype(np.float16), "relu", backend=backend)
    assert y16.dtype == np.float16, seed
    y32 = ops.activation(x, "relu", backend=backend)  # float64 -> float32
    assert y32.dtype == np.float32, seed
    yb = ops.activation(x, "tanh", backend=backend, dtype="bfloat16")
    want = ref.round_bf16(np.tanh(ref.round_bf16(x)))
    got = np.asarray(yb).astype(np.float64)
    assert np.abs(got - want).max() <= 2 ** -7 * np.abs(want).max(), seed
    if ml_dtypes is not None:
        assert yb.dtype == ml_dtypes.bfloat16
        xb = x.astype(np.float32).astype(ml_dtypes.bfloat16)
        assert ops.activation(xb, "linear", backend=backend).dtype == ml_dtypes.bfloat16
        # the NumPy conversion of gpucmp.ops agrees with ml_dtypes bit for bit
        f = (rng.standard_normal(4000) * 10.0 ** rng.integers(-40, 38, 4000)).astype(np.float32)
        f = np.concatenate([f, np.float32([np.inf, -np.inf, 3.3961e38, 1.00390625, -0.0])])
        assert np.array_equal(ops.float32_to_bfloat16_bits(f),
                              f.astype(ml_dtypes.bfloat16).view(np.uint16)), seed
    bits = ops.float32_to_bfloat16_bits(np.float32([np.nan, 1.0, -2.5]))
    assert np.isnan(ops.bfloat16_bits_to_float32(bits)[0])
    assert ops.bfloat16_bits_to_float32(bits)[1:].tolist() == [1.0, -2.5]


@pytest.mark.parametrize("backend", [pytest.param(b, marks=[pytest.mark.cuda] if
                                                  b.startswith("cuda") else []) for b in BACKENDS])
def test_nan_inputs_propagate(backend):
    x = np.ones((2, 4), np.float32)
    x[1, 2] = np.nan
    y = ops.activation(x, "relu", backend=backend)
    assert np.isnan(y[1, 2]) and np.isfinite(y[0]).all()
    w = np.ones((4, 3), np.float32)
    out = ops.gemm(x, w, backend=backend)
    assert np.isnan(out[1]).all() and np.isfinite(out[0]).all()
    loss, grad = ops.softmax_cross_entropy(x, np.array([0, 1]), backend=backend)
    assert np.isfinite(loss[0]) and np.isnan(loss[1])


def test_float16_conversions_match_numpy_bit_for_bit():
    """Every float16 bit pattern to float32 and 2^20 random float32 bit patterns (plus the
    rounding boundaries) to float16, through the core's cast on the CPU (the F16C path
    where the processor has it, the scalar code otherwise), against NumPy's conversions;
    NaNs must stay NaNs with their sign (quiet 0x7E00 pattern for float32 -> float16)."""
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = np.asarray(ops.cast(h, "float32", backend="cpu"))
    want = h.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all() and np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    rng = np.random.default_rng()
    bits = rng.integers(0, 2 ** 32, 2 ** 20, dtype=np.uint64).astype(np.uint32)
    edges = np.array([65504.0, 65519.99, 65520.0, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -14,
                      np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], np.float32).view(np.uint32)
    f = np.concatenate([bits, edges]).view(np.float32)
    got = np.asarray(ops.cast(f, "float16", backend="cpu"))
    with np.errstate(over="ignore", invalid="ignore"):
        want = f.astype(np.float16)
    nan = np.isnan(f)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    gb = got[nan].view(np.uint16)
    assert np.array_equal(gb & 0x7FFF, np.full(gb.shape, 0x7E00, np.uint16))
    assert np.array_equal(gb >> 15, (f[nan].view(np.uint32) >> 31).astype(np.uint16))
