"""The CUDA fast paths for small / special shapes, against the float64 oracle.

test_ops.py's random shapes are small and mostly odd, so three kernels the seed CNN
relies on would be reached there only by chance. Here shapes are chosen to take them
(the dispatch conditions are in the kernels' files):

- maxpool2d_bwd, disjoint unclipped windows (pool2d.cu, maxpool_bwd_tiled_kernel):
  stride == pool and stride > pool, VALID, odd sizes (row / column not covered by any
  window: must be 0), 16-byte channel vectors (C % 4 / C % 8 == 0) and scalar channels,
  integer inputs so that windows hold ties (the first maximum wins). The result is a
  selection, so it must equal the oracle exactly, and the CPU backend bit for bit.
- conv2d_bwd_filter with KH*KW*C <= 64 (conv2d_simt.cu, conv_simt_wgrad_smallk_kernel,
  which the automatic choice must take): C = 1 and C = 3 (3x3, bias gradient), batches
  big enough for several pixel ranges and blocks, F below / at / above the 64-filter
  tile, padding and strides, and KH*KW*C = 63 / 64 (the 64-row template); also on every
  other kernel of cuda.conv2d.wgrad this device runs.
- conv2d_bwd_data with few input channels (conv2d_smallc_dgrad.cu, which the automatic
  choice must take for 16-bit and TF32 storage; exact float32 stays SIMT): the stem cut
  down, odd pads and ragged tiles, strides (1, 2) / (2, 1) / (2, 2), one tap per class
  (s == k), F not a multiple of 8 (element loads, two filter chunks); plain, accumulating,
  and bitwise repeatable.
- gemm, few 128 x 128 tiles (gemm_small.cu): every transpose case with N = 10 and
  K = 10 / 64 / 576, bias + relu, beta != 0 (and the seed CNN's Dense products), on the
  automatic path and every path of cuda.gemm.path the dtype may take (test_ops' list).
- conv2d_fwd / conv2d_bwd_data of large 16-bit stride-1 layers (conv2d_wgmma.cu on an
  H100 / H200: the halo and im2col kernels; 'same' / 'valid', ragged tiles, 1x1,
  several filter tiles, bias and every activation), on every kernel of cuda.conv2d.fwd
  / .bwd_data this device runs, the wgmma forward on each of cuda.conv2d.fwd_wgmma.
- conv2d_fwd (any stride) and the stride-1 conv2d_bwd_data on the Hopper GEMM kernel with
  an im2col A (conv2d_wgmma_igemm.cu), forced (cuda.conv2d.fwd_wgmma=igemm): strided 1x1
  and 3x3, 256 / 512-channel 3x3, ragged tiles, bias + activations; refusals named. The
  same in float32 as TF32 (test_conv_igemm_tf32: every geometry above, plus C / F = 32,
  5x5 and stride-1 1x1 ones), that its weight operand is rounded to nearest TF32, not
  truncated (test_conv_igemm_tf32_weights_rounded), that the automatic choice takes it
  for a big TF32 layer and exact float32 (TF32 off) never runs it, forced or not
  (test_conv_igemm_tf32_routing), and that float32 never reaches the 16-bit-only halo /
  im2col kernels (test_conv_igemm_refusals).
- conv2d_bwd_filter on the Hopper wgmma kernel (conv2d_wgmma_wgrad.cu), forced
  (cuda.conv2d.wgrad=wgmma) where the registry says it is available (sm_90a image on a
  compute capability 9.0 device; skipped elsewhere): 1x1 stride 1 and 2, 3x3 'same' /
  'valid', pixels not a multiple of the 64-pixel K-block, C / F not multiples of the
  64-wide boxes; against the oracle, bitwise repeatable, and against the mma.sync kernel
  (cuda.conv2d.wgrad=mma) on the same inputs; every block shape of
  cuda.conv2d.wgrad_wgmma on two layers.
Kernels are forced through gpucmp.variants, and each forced run checks that the pass's
`last` is the kernel forced.

Each in float32 (TF32 off and on), float16 and bfloat16, through gpucmp.ops (which
NaN-poisons outputs, so an unwritten element fails) with test_ops.py's Case: the same
inputs, tolerances and cancellation floor as the op matrix. Marked `cuda`: skipped
cleanly without a CUDA backend.
"""
import contextlib

import numpy as np
import pytest

import reference as ref
from gpucmp import _core, ops, variants
from test_ops import Case, _abs, _conv_ran, _conv_refused, _conv_run, _conv_variants, _gemm_paths

pytestmark = pytest.mark.cuda

DTYPES = ("float32", "tfloat32", "float16", "bfloat16")


def _gpu():
    names = [b for b in _core.backends() if b.startswith("cuda")]
    return names[0] if names else "cuda:0"


@pytest.fixture
def case():
    """A test_ops Case on the GPU for (op, dtype); TF32 set for the dtype, restored."""
    allowed = _core.get_allow_tf32()

    def make(op, dtype):
        c = Case(op, _gpu(), "float32" if dtype == "tfloat32" else dtype, None)
        c.tf32 = dtype == "tfloat32"
        _core.set_allow_tf32(c.tf32)
        return c

    yield make
    _core.set_allow_tf32(allowed)


# ---------------------------------------------------------------- max-pool backward
POOLS = [
    dict(N=3, H=11, W=11, C=64, P=(2, 2), s=None),    # seed CNN's 2nd pool: row/col 10 uncovered
    dict(N=2, H=27, W=26, C=32, P=(2, 2), s=None),    # odd H, vectors of 4 f32 / 8 f16
    dict(N=2, H=9, W=7, C=3, P=(2, 2), s=None),       # scalar channels
    dict(N=2, H=8, W=11, C=8, P=(2, 3), s=(3, 4)),    # stride > pool: gaps between windows
    dict(N=1, H=7, W=10, C=5, P=(3, 3), s=(3, 3)),
]


@pytest.mark.parametrize("dtype", DTYPES[:1] + DTYPES[2:])
@pytest.mark.parametrize("g", POOLS, ids=lambda g: f"{g['H']}x{g['W']}x{g['C']}-p{g['P']}-s{g['s']}")
def test_maxpool_bwd_disjoint(case, dtype, g):
    c = case("maxpool2d_bwd", dtype)
    shape = (g["N"], g["H"], g["W"], g["C"])
    for ties in (True, False):
        x = c.round(c.rng.integers(-2, 2, shape).astype(float)) if ties else c.normal(shape)
        dy = c.normal(ref.pool2d_output_shape(shape, g["P"], g["s"], "valid"))
        c.what = f"x={shape} pool={g['P']} strides={g['s']} valid" + (" (ties)" if ties else "")
        dx = ops.max_pool2d_backward(c.arg(x), c.arg(dy), g["P"], g["s"], "valid", **c.kw)
        c.check("dx", dx, ref.max_pool2d_backward(x, dy, g["P"], g["s"], "valid"), tol=0.0)
        cpu = ops.max_pool2d_backward(c.arg(x), c.arg(dy), g["P"], g["s"], "valid", backend="cpu",
                                      **{k: v for k, v in c.kw.items() if k != "backend"})
        assert np.array_equal(np.asarray(cpu).view(np.uint8), np.asarray(dx).view(np.uint8)), \
            c.msg("differs from the CPU backend bit for bit")


# ---------------------------------------------------------------- small-K weight gradient
CONVS = [
    dict(N=64, H=28, W=28, C=1, F=32, KH=3, KW=3, s=(1, 1), pad="valid"),  # seed CNN's 1st layer
    dict(N=16, H=20, W=21, C=3, F=16, KH=3, KW=3, s=(1, 1), pad="same"),   # RGB, padding
    dict(N=8, H=23, W=19, C=3, F=10, KH=3, KW=3, s=(2, 2), pad="same"),    # F = 10: 25 groups
    dict(N=8, H=15, W=15, C=1, F=80, KH=5, KW=5, s=(1, 1), pad="valid"),   # two filter tiles
    dict(N=4, H=12, W=13, C=7, F=9, KH=3, KW=3, s=(1, 2), pad="same"),     # 63 rows
    dict(N=4, H=10, W=10, C=16, F=4, KH=2, KW=2, s=(1, 1), pad="valid"),   # 64 rows, F < 8
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", CONVS, ids=lambda g: f"C{g['C']}-F{g['F']}-k{g['KH']}x{g['KW']}-{g['pad']}")
def test_conv_bwd_filter_small_k(case, dtype, g):
    c = case("conv2d_bwd_filter", dtype)
    x = c.normal((g["N"], g["H"], g["W"], g["C"]))
    k, d = (g["KH"], g["KW"]), (1, 1)
    yshape = ref.conv2d_output_shape(x.shape, (g["KH"], g["KW"], g["C"], g["F"]), g["s"], g["pad"], d)
    dy = c.normal(yshape)
    rows = yshape[0] * yshape[1] * yshape[2]
    want_w, want_b = ref.conv2d_backward_filter(x, dy, k, g["s"], g["pad"], d)
    terms_w, terms_b = ref.conv2d_backward_filter(abs(x), abs(dy), k, g["s"], g["pad"], d)
    gd = dict(g, d=d)
    for label, point, variant, path in _conv_variants(c, gd, "wgrad"):
        c.what = (f"x={x.shape} kernel=({g['KH']},{g['KW']},{g['C']},{g['F']}) strides={g['s']} "
                  f"padding={g['pad']} with_bias=True" + label)
        try:
            with _conv_run(point, variant, path):
                dw, db = ops.conv2d_backward_filter(c.arg(x), c.arg(dy), k, strides=g["s"], padding=g["pad"],
                                                    with_bias=True, **c.kw)
                if variant == "auto":  # these shapes are the small-K SIMT kernel's
                    assert variants.last(point) == "simt", c.msg(f"auto ran {variants.last(point)!r}")
                _conv_ran(c, gd, point, variant)
                c.check("dw", dw, want_w, k=rows, terms=terms_w)
                c.check("db", db, want_b, k=rows, terms=terms_b)
                c.what += " (without bias)"
                dw2, db2 = ops.conv2d_backward_filter(c.arg(x), c.arg(dy), k, strides=g["s"], padding=g["pad"],
                                                      with_bias=False, **c.kw)
        except NotImplementedError as e:
            if _conv_refused(c, variant, e):
                continue
        assert db2 is None, c.msg("db returned although with_bias=False")
        c.check("dw", dw2, want_w, k=rows, terms=terms_w)


# ---------------------------------------------------------------- small-C data gradient
SMALLC_DGRAD = [
    dict(N=2, H=38, W=38, C=3, F=64, KH=7, KW=7, s=(2, 2), pad="valid"),   # the stem cut down
    dict(N=1, H=45, W=50, C=3, F=64, KH=7, KW=7, s=(2, 2), pad="same"),    # odd pads, ragged tiles
    dict(N=3, H=28, W=28, C=1, F=32, KH=3, KW=3, s=(1, 1), pad="valid"),   # seed CNN's 1st layer
    dict(N=2, H=19, W=23, C=5, F=24, KH=5, KW=4, s=(1, 2), pad="same"),    # mixed strides
    # a tile too large for the kernel's 48 KB (12 x 18 dy rows + 125 weight rows + 1, of 144
    # bytes): auto and forced both run the SIMT kernel
    dict(N=2, H=19, W=23, C=5, F=24, KH=5, KW=5, s=(1, 2), pad="same", takes=False),
    dict(N=2, H=17, W=13, C=7, F=16, KH=2, KW=2, s=(2, 2), pad="valid"),   # s == k: one tap
    dict(N=1, H=20, W=21, C=4, F=100, KH=3, KW=4, s=(2, 1), pad="same"),   # F % 8 != 0: 2 chunks
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", SMALLC_DGRAD, ids=lambda g: f"C{g['C']}-F{g['F']}-k{g['KH']}x{g['KW']}-s{g['s']}"
                         + ("" if g.get("takes", True) else "-too-big"))
def test_conv_bwd_data_small_c(case, dtype, g):
    """conv2d_smallc_dgrad.cu: the automatic choice takes it for 16-bit and TF32 (exact
    float32 never: SIMT), plain and accumulating, bitwise repeatable; a shape beyond its
    shared memory goes to the SIMT kernel, forced or not."""
    c = case("conv2d_bwd_data", dtype)
    xshape = (g["N"], g["H"], g["W"], g["C"])
    w = c.normal((g["KH"], g["KW"], g["C"], g["F"]))
    d = (1, 1)
    yshape = ref.conv2d_output_shape(xshape, w.shape, g["s"], g["pad"], d)
    dy = c.normal(yshape)
    want = ref.conv2d_backward_data(dy, w, xshape, g["s"], g["pad"], d)
    terms = ref.conv2d_backward_data(abs(dy), abs(w), xshape, g["s"], g["pad"], d)
    base = c.normal(xshape)
    exact = c.dtype == "float32" and not c.tf32
    point = "cuda.conv2d.bwd_data"
    kw = dict(strides=g["s"], padding=g["pad"], dilation_rate=d, **c.kw)
    for variant in ("auto", "smallc"):
        c.what = (f"x={xshape} kernel={w.shape} strides={g['s']} padding={g['pad']} variant={variant}")
        with variants.forced(point, variant):
            dx = ops.conv2d_backward_data(c.arg(dy), c.arg(w), xshape, **kw)
            ran = variants.last(point)
            dx2 = ops.conv2d_backward_data(c.arg(dy), c.arg(w), xshape, **kw)
            dx_acc = ops.conv2d_backward_data(c.arg(dy), c.arg(w), xshape, accumulate_into=c.arg(base), **kw)
            ran_acc = variants.last(point)
        want_ran = "simt" if exact or not g.get("takes", True) else "smallc"
        assert ran == want_ran and ran_acc == want_ran, c.msg(f"ran {ran!r} / {ran_acc!r}, want {want_ran!r}")
        c.check("dx", dx, want, k=g["KH"] * g["KW"] * g["F"], terms=terms)
        assert np.array_equal(np.asarray(dx).view(np.uint8), np.asarray(dx2).view(np.uint8)), \
            c.msg("two runs differ")
        c.what += " accumulate"
        c.check("dx", dx_acc, base + want, k=g["KH"] * g["KW"] * g["F"] + 1, terms=abs(base) + terms)


# ---------------------------------------------------------------- small GEMMs
GEMMS = [(128, 10, 10), (128, 10, 64), (128, 10, 576), (33, 10, 577),
         (128, 64, 576), (576, 64, 128), (128, 576, 64)]  # seed CNN's Dense products


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("mnk", GEMMS, ids=lambda s: "x".join(map(str, s)))
def test_gemm_small(case, dtype, layout, mnk):
    c = case("gemm", dtype)
    m, n, k = mnk
    trans_a, trans_b = layout[0] == "T", layout[1] == "T"
    a = c.normal((k, m) if trans_a else (m, k))
    b = c.normal((n, k) if trans_b else (k, n))
    bias, cm = c.normal(n), c.normal((m, n))
    for path in _gemm_paths(c):
        for alpha, beta, act in ((1.0, 0.5, "relu"), (-0.75, -1.25, "linear"), (1.0, 0.0, "relu")):
            c.what = (f"path={path} M={m} N={n} K={k} trans_a={trans_a} trans_b={trans_b} alpha={alpha} "
                      f"beta={beta} bias=True act={act}")
            with variants.forced("cuda.gemm.path", path):
                out = ops.gemm(c.arg(a), c.arg(b), c.arg(bias), c.arg(cm) if beta else None,
                               trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta, activation=act,
                               **c.kw)
            if path != "auto":
                assert variants.last("cuda.gemm.path") == path, c.msg(f"ran {variants.last('cuda.gemm.path')!r}")
            want = ref.gemm(a, b, bias, cm if beta else None, trans_a, trans_b, alpha, beta, act)
            terms = ref.gemm(abs(a), abs(b), _abs(bias), _abs(cm) if beta else None, trans_a, trans_b,
                             abs(alpha), abs(beta))
            c.check("c", out, want, k=k, terms=terms)


# ---------------------------------------------------------------- large 16-bit stride-1 convolutions
# Big enough (N*OH*OW >= 128 x SMs, C and F multiples of 64) for the Hopper wgmma kernels
# on an H100 / H200 (conv2d_wgmma.cu: the halo kernel takes the forward and the data
# gradient where its shared memory fits, the im2col kernel the larger forward slices);
# elsewhere the mma.sync implicit GEMM. Either way the float64 oracle decides, through
# the same ops the plan calls.
BIG = [
    dict(N=6, H=56, W=56, C=64, F=64, KH=3, KW=3, pad="same", act="relu"),      # halo, BH 28
    dict(N=4, H=61, W=83, C=64, F=128, KH=3, KW=3, pad="valid", act="linear"),  # 2 filter tiles, ragged
    dict(N=20, H=30, W=30, C=128, F=64, KH=1, KW=1, pad="same", act="tanh"),    # 1x1, BH 32
    dict(N=9, H=47, W=45, C=128, F=64, KH=3, KW=3, pad="same", act="sigmoid"),  # im2col fwd, halo bwd
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("g", BIG, ids=lambda g: f"{g['H']}x{g['W']}x{g['C']}-F{g['F']}-k{g['KH']}-{g['pad']}")
def test_conv_large_16bit(case, dtype, g):
    c = case("conv2d_fwd", dtype)
    x = c.normal((g["N"], g["H"], g["W"], g["C"]))
    w = c.normal((g["KH"], g["KW"], g["C"], g["F"]), 0.25)
    bias = c.normal(g["F"])
    s, d, k = (1, 1), (1, 1), g["KH"] * g["KW"] * g["C"]
    gd = dict(g, s=s, d=d)
    want = ref.conv2d(x, w, bias, s, g["pad"], d, g["act"])
    terms = ref.conv2d(abs(x), abs(w), abs(bias), s, g["pad"], d)
    for label, point, variant, path in _conv_variants(c, gd, "fwd"):
        # the wgmma forward on each of its kernels (halo where its shared memory fits, im2col)
        kernels = variants.available("cuda.conv2d.fwd_wgmma") if variant == "wgmma" else ["auto"]
        for kernel in kernels:
            c.what = f"x={x.shape} kernel={w.shape} padding={g['pad']} act={g['act']}{label}" + (
                f" fwd_wgmma={kernel}" if variant == "wgmma" else "")
            try:
                with _conv_run(point, variant, path), variants.forced("cuda.conv2d.fwd_wgmma", kernel):
                    y = ops.conv2d(c.arg(x), c.arg(w), c.arg(bias), strides=s, padding=g["pad"],
                                   activation=g["act"], **c.kw)
                    if variant == "wgmma":
                        assert variants.last("cuda.conv2d.fwd_wgmma") == kernel, c.msg(
                            f"ran {variants.last('cuda.conv2d.fwd_wgmma')!r}")
            except NotImplementedError as e:
                if _conv_refused(c, variant, e):
                    continue
            _conv_ran(c, gd, point, variant)
            c.check("y", y, want, k=k, terms=terms)
    dy = c.normal(ref.conv2d_output_shape(x.shape, w.shape, s, g["pad"], d))
    want = ref.conv2d_backward_data(dy, w, x.shape, s, g["pad"], d)
    terms = ref.conv2d_backward_data(abs(dy), abs(w), x.shape, s, g["pad"], d)
    for label, point, variant, path in _conv_variants(c, gd, "bwd_data"):
        c.what = f"dy={dy.shape} kernel={w.shape} x={x.shape} padding={g['pad']}" + label
        try:
            with _conv_run(point, variant, path):
                dx = ops.conv2d_backward_data(c.arg(dy), c.arg(w), x.shape, strides=s, padding=g["pad"], **c.kw)
        except NotImplementedError as e:
            if _conv_refused(c, variant, e):
                continue
        _conv_ran(c, gd, point, variant)
        c.check("dx", dx, want, k=g["KH"] * g["KW"] * g["F"], terms=terms)
        # accumulate: the halo kernel's TMA reduce-add, the others' staged add
        base = c.normal(x.shape)
        c.what += " accumulate"
        with _conv_run(point, variant, path):
            dx = ops.conv2d_backward_data(c.arg(dy), c.arg(w), x.shape, strides=s, padding=g["pad"],
                                          accumulate_into=c.arg(base), **c.kw)
        _conv_ran(c, gd, point, variant)
        c.check("dx", dx, base + want, k=g["KH"] * g["KW"] * g["F"] + 1, terms=abs(base) + terms)


# ---------------------------------------------------------------- Hopper GEMM kernel with an im2col A
# conv2d_wgmma_igemm.cu, forced (cuda.conv2d.fwd / .bwd_data = wgmma, cuda.conv2d.fwd_wgmma =
# igemm) where the registry says it runs: strided 1x1 and 3x3 layers (ResNet-50's shortcuts
# and block-1 convolutions, asymmetric 'same' padding), 3x3 layers with 256 channels (too big
# for the resident weight slices), tiles past the batch (M % 128 != 0), N not a multiple of
# the 256-wide tile, 128-wide tiles (N <= 128), 'valid' padding, bias + each fused
# activation; the data gradient of stride-1 layers (dy convolved with the flipped kernel,
# w read in place) and of strided 1x1 layers (a GEMM scattered to dx's strided pixels,
# the others zero).
IGEMM = [
    dict(N=3, H=28, W=28, C=256, F=512, KH=1, KW=1, s=(2, 2), pad="valid", act="linear"),  # strided shortcut
    dict(N=2, H=15, W=17, C=128, F=256, KH=3, KW=3, s=(2, 2), pad="same", act="relu"),     # 3x3/2, odd sizes
    dict(N=2, H=14, W=14, C=256, F=256, KH=3, KW=3, s=(1, 1), pad="same", act="relu"),     # conv4 3x3
    dict(N=3, H=7, W=7, C=512, F=512, KH=3, KW=3, s=(1, 1), pad="same", act="linear"),     # conv5 3x3, M = 147
    dict(N=2, H=11, W=13, C=64, F=320, KH=3, KW=3, s=(1, 1), pad="valid", act="sigmoid"),  # F = 320: ragged N tile
    dict(N=1, H=9, W=10, C=192, F=64, KH=2, KW=3, s=(3, 2), pad="same", act="tanh"),       # uneven strides / kernel
    dict(N=2, H=28, W=28, C=128, F=128, KH=3, KW=3, s=(1, 1), pad="same", act="relu"),     # conv3 3x3: 128-wide tiles
    dict(N=4, H=16, W=16, C=256, F=128, KH=1, KW=1, s=(2, 2), pad="valid", act="linear"),  # strided 1x1, 128 wide
    dict(N=2, H=15, W=13, C=128, F=256, KH=1, KW=1, s=(2, 2), pad="same", act="linear"),   # odd sizes: scatter edges
]


@pytest.fixture
def igemm():
    """Skips unless the registry says the igemm kernel runs here (sm_90a image of the
    GEMM kernel on a compute capability 9.0 device)."""
    if "igemm" not in variants.available("cuda.conv2d.fwd_wgmma"):
        pytest.skip("cuda.conv2d.fwd_wgmma=igemm is not available here (needs sm_90a code on a 9.0 device)")


def _forced_all(c, forced, fn):
    """fn() with the variants `forced` ({point: name}); each point's `last` must be the forced one."""
    try:
        with contextlib.ExitStack() as stack:
            for point, name in forced.items():
                stack.enter_context(variants.forced(point, name))
            out = fn()
            for point, name in forced.items():
                assert variants.last(point) == name, c.msg(f"{point}={name} ran {variants.last(point)!r}")
            return out
    except AssertionError:
        raise
    except Exception as e:
        raise AssertionError(c.msg(f"{forced}: {type(e).__name__}: {e}")) from e


# float32 as TF32 only (C and F multiples of 32 there, 64 for 16-bit): one K-block (32
# channels of one tap) per tap, N = 32 / 96 in a 128-wide tile, a 5x5 kernel, a stride-1
# 1x1 layer (forced: never the GEMM route), the scatter with N = 160 in a 256-wide tile;
# M = 297 / 56 / 144 / 144 / 45: ragged last tiles everywhere.
IGEMM_TF32 = [
    dict(N=3, H=9, W=11, C=32, F=96, KH=3, KW=3, s=(1, 1), pad="same", act="relu"),        # C = 32, F = 96
    dict(N=2, H=13, W=7, C=96, F=32, KH=3, KW=3, s=(2, 2), pad="same", act="tanh"),        # F = 32, strided
    dict(N=1, H=12, W=12, C=64, F=32, KH=5, KW=5, s=(1, 1), pad="same", act="linear"),     # 5x5, dgrad K-block = F
    dict(N=2, H=8, W=9, C=288, F=32, KH=1, KW=1, s=(1, 1), pad="same", act="sigmoid"),     # 1x1: dgrad N = 288
    dict(N=5, H=6, W=5, C=160, F=224, KH=1, KW=1, s=(2, 2), pad="valid", act="linear"),    # scatter, N = 160
]


def _igemm_ids(g):
    return f"{g['H']}x{g['W']}x{g['C']}-F{g['F']}-k{g['KH']}x{g['KW']}-s{g['s'][0]}{g['s'][1]}-{g['pad']}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("g", IGEMM, ids=_igemm_ids)
def test_conv_igemm(case, igemm, dtype, g):
    _igemm_case(case("conv2d_fwd", dtype), g)


@pytest.mark.parametrize("g", IGEMM + IGEMM_TF32, ids=_igemm_ids)
def test_conv_igemm_tf32(case, igemm, g):
    """float32 storage as TF32 (wgmma .tf32: w^T rounded into the workspace for the
    forward, a rounded copy of w for the data gradients; x / dy truncated by the tensor
    cores). Tolerance: test_ops' TF32 one (1e-3): with one operand truncated and the
    other rounded the error is ~4.6e-4 (float64 simulation on normal operands, K = 32 ..
    4608; both rounded, as mma.sync: 2.9e-4; both truncated: 7.7e-4), so no
    truncation-specific tolerance is needed."""
    _igemm_case(case("conv2d_fwd", "tfloat32"), g)


def _igemm_case(c, g):
    """Forward (with and without bias, repeatable bit for bit) and data gradient of g on
    the forced igemm kernel against the float64 oracle; a strided layer's data gradient
    only for 1x1 kernels (else the named refusal)."""
    x = c.normal((g["N"], g["H"], g["W"], g["C"]))
    w = c.normal((g["KH"], g["KW"], g["C"], g["F"]), 0.25)
    bias = c.normal(g["F"])
    s, d, k = g["s"], (1, 1), g["KH"] * g["KW"] * g["C"]
    want = ref.conv2d(x, w, bias, s, g["pad"], d, g["act"])
    terms = ref.conv2d(abs(x), abs(w), abs(bias), s, g["pad"], d)
    c.what = f"x={x.shape} kernel={w.shape} strides={s} padding={g['pad']} act={g['act']} [igemm forced]"
    fwd = {"cuda.conv2d.fwd": "wgmma", "cuda.conv2d.fwd_wgmma": "igemm"}
    y = _forced_all(c, fwd, lambda: ops.conv2d(c.arg(x), c.arg(w), c.arg(bias), strides=s, padding=g["pad"],
                                               activation=g["act"], **c.kw))
    c.check("y", y, want, k=k, terms=terms)
    # no bias: the epilogue without it; repeatable bit for bit (no split, fixed order)
    want0 = ref.conv2d(x, w, None, s, g["pad"], d, g["act"])
    y0 = _forced_all(c, fwd, lambda: ops.conv2d(c.arg(x), c.arg(w), None, strides=s, padding=g["pad"],
                                                activation=g["act"], **c.kw))
    c.check("y (no bias)", y0, want0, k=k, terms=ref.conv2d(abs(x), abs(w), None, s, g["pad"], d))
    y1 = _forced_all(c, fwd, lambda: ops.conv2d(c.arg(x), c.arg(w), None, strides=s, padding=g["pad"],
                                                activation=g["act"], **c.kw))
    assert np.asarray(y1).tobytes() == np.asarray(y0).tobytes(), c.msg("two identical calls differ")
    if s != (1, 1) and (g["KH"], g["KW"]) != (1, 1):   # strided: only 1x1 layers (scattered GEMM)
        with variants.forced("cuda.conv2d.bwd_data", "wgmma"), variants.forced("cuda.conv2d.fwd_wgmma", "igemm"):
            dy = c.normal(want.shape)
            with pytest.raises(NotImplementedError, match="stride-1"):
                ops.conv2d_backward_data(c.arg(dy), c.arg(w), x.shape, strides=s, padding=g["pad"], **c.kw)
        return
    dy = c.normal(want.shape)
    want_dx = ref.conv2d_backward_data(dy, w, x.shape, s, g["pad"], d)
    terms_dx = ref.conv2d_backward_data(abs(dy), abs(w), x.shape, s, g["pad"], d)
    c.what = f"dy={dy.shape} kernel={w.shape} x={x.shape} padding={g['pad']} [igemm forced]"
    bwd = {"cuda.conv2d.bwd_data": "wgmma", "cuda.conv2d.fwd_wgmma": "igemm"}
    dx = _forced_all(c, bwd, lambda: ops.conv2d_backward_data(c.arg(dy), c.arg(w), x.shape, strides=s,
                                                             padding=g["pad"], **c.kw))
    c.check("dx", dx, want_dx, k=g["KH"] * g["KW"] * g["F"], terms=terms_dx)


@pytest.mark.parametrize("epi", ["regs", "tma"])
@pytest.mark.parametrize("g", [g for g in IGEMM if g["s"] == (1, 1) or (g["KH"], g["KW"]) == (1, 1)],
                         ids=lambda g: f"{g['H']}x{g['W']}x{g['C']}-F{g['F']}-k{g['KH']}x{g['KW']}-s{g['s'][0]}{g['s'][1]}")
def test_conv_igemm_bwd_data_accumulate(case, igemm, g, epi):
    """The data gradient added to what dx holds (the plan's fan-out): the epilogue's beta = 1
    on the flipped-kernel form (from registers, or the TMA reduce-add: cuda.gemm.wgmma_epi),
    and on the scattered strided 1x1 form without zeroing dx first (the pixels no dy pixel
    reaches keep their values; always the register epilogue)."""
    c = case("conv2d_bwd_data", "bfloat16")
    s, d = g["s"], (1, 1)
    xshape = (g["N"], g["H"], g["W"], g["C"])
    w = c.normal((g["KH"], g["KW"], g["C"], g["F"]), 0.25)
    dy = c.normal(ref.conv2d_output_shape(xshape, w.shape, s, g["pad"], d))
    base = c.normal(xshape)
    want = base + ref.conv2d_backward_data(dy, w, xshape, s, g["pad"], d)
    terms = abs(base) + ref.conv2d_backward_data(abs(dy), abs(w), xshape, s, g["pad"], d)
    c.what = f"dy={dy.shape} kernel={w.shape} x={xshape} strides={s} padding={g['pad']} [igemm forced, accumulate]"
    bwd = {"cuda.conv2d.bwd_data": "wgmma", "cuda.conv2d.fwd_wgmma": "igemm", "cuda.gemm.wgmma_epi": epi}
    if s != (1, 1):   # scattered rows: never through TMA
        bwd["cuda.gemm.wgmma_epi"] = "regs"
    dx = _forced_all(c, bwd, lambda: ops.conv2d_backward_data(c.arg(dy), c.arg(w), xshape, strides=s,
                                                             padding=g["pad"], accumulate_into=c.arg(base), **c.kw))
    c.check("dx", dx, want, k=g["KH"] * g["KW"] * g["F"] + 1, terms=terms)


@pytest.mark.parametrize("g", [g for g in IGEMM if g["act"] in ("linear", "relu")],
                         ids=lambda g: f"{g['H']}x{g['W']}x{g['C']}-F{g['F']}-k{g['KH']}x{g['KW']}-s{g['s'][0]}{g['s'][1]}")
def test_conv_igemm_tma_epilogue(case, igemm, g):
    """The igemm forward through the TMA epilogue (forced): bias and relu applied in
    registers, the tile staged in shared memory and stored by the copy engine, which clips
    the rows past the batch and the columns past F."""
    c = case("conv2d_fwd", "float16")
    x = c.normal((g["N"], g["H"], g["W"], g["C"]))
    w = c.normal((g["KH"], g["KW"], g["C"], g["F"]), 0.25)
    bias = c.normal(g["F"])
    s, d, k = g["s"], (1, 1), g["KH"] * g["KW"] * g["C"]
    c.what = f"x={x.shape} kernel={w.shape} strides={s} padding={g['pad']} act={g['act']} [igemm, tma epilogue]"
    fwd = {"cuda.conv2d.fwd": "wgmma", "cuda.conv2d.fwd_wgmma": "igemm", "cuda.gemm.wgmma_epi": "tma"}
    y = _forced_all(c, fwd, lambda: ops.conv2d(c.arg(x), c.arg(w), c.arg(bias), strides=s, padding=g["pad"],
                                               activation=g["act"], **c.kw))
    c.check("y", y, ref.conv2d(x, w, bias, s, g["pad"], d, g["act"]), k=k,
            terms=ref.conv2d(abs(x), abs(w), abs(bias), s, g["pad"], d))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_wgmma_tma_epilogue(case, dtype):
    """The wgmma GEMM kernel's two epilogues (cuda.gemm.wgmma_epi forced) on ragged tiles
    (M, N not multiples of 128 / 256; N a multiple of 8 so C's rows are 16-byte aligned),
    both B layouts, beta 0 with bias / relu and beta 1 (the TMA reduce-add), short and long
    K: each against the float64 oracle, and the forced epilogue is the one that ran; auto
    takes the TMA one at a long K too."""
    if "tma" not in variants.available("cuda.gemm.wgmma_epi"):
        pytest.skip("cuda.gemm.wgmma_epi=tma is not available here (needs sm_90a code on a 9.0 device)")
    c = case("gemm", dtype)
    for m, n, k in [(300, 328, 192), (512, 256, 256), (130, 64, 1000), (1000, 520, 64), (136, 264, 5000)]:
        for trans_b in (False, True):
            for beta, act, with_bias in [(0.0, "linear", False), (0.0, "relu", True), (1.0, "linear", True),
                                         (1.0, "linear", False)]:
                a = c.normal((m, k))
                b = c.normal((n, k) if trans_b else (k, n))
                bias = c.normal(n) if with_bias else None
                cm = c.normal((m, n)) if beta else None
                want = ref.gemm(a, b, bias, cm, False, trans_b, 1.0, beta, act)
                terms = ref.gemm(abs(a), abs(b), _abs(bias), _abs(cm), False, trans_b, 1.0, abs(beta))
                for epi in ("regs", "tma"):
                    c.what = f"M={m} N={n} K={k} trans_b={trans_b} beta={beta} act={act} bias={with_bias} epi={epi}"
                    out = _forced_all(c, {"cuda.gemm.path": "wgmma", "cuda.gemm.wgmma_epi": epi}, lambda: ops.gemm(
                        c.arg(a), c.arg(b), None if bias is None else c.arg(bias), None if cm is None else c.arg(cm),
                        trans_b=trans_b, beta=beta, activation=act, **c.kw))
                    c.check("c", out, want, k=k + 1, terms=terms)
    a, b = c.normal((136, 5000)), c.normal((5000, 264))
    c.what = "M=136 N=264 K=5000, epilogue auto"
    with variants.forced("cuda.gemm.path", "wgmma"):
        out = ops.gemm(c.arg(a), c.arg(b), **c.kw)
        ran = variants.last("cuda.gemm.wgmma_epi")
    assert ran == "tma", c.msg(f"auto ran the {ran!r} epilogue")
    c.check("c", out, ref.gemm(a, b, None, None, False, False, 1.0, 0.0, "linear"), k=5000,
            terms=ref.gemm(abs(a), abs(b), None, None, False, False, 1.0, 0.0))


def test_conv_igemm_refusals(case, igemm):
    """Where the kernel does not apply, a forced run refuses before any launch (the op's
    NotImplementedError names the rule) and the automatic choice still computes it; for
    float32 as TF32 its rule (C, F multiples of 32), and the 16-bit-only halo / im2col
    kernels refuse float32 in both passes."""
    c = case("conv2d_fwd", "bfloat16")
    fwd = {"cuda.conv2d.fwd": "wgmma", "cuda.conv2d.fwd_wgmma": "igemm"}
    for shape, kshape, why in [((2, 9, 9, 96), (3, 3, 96, 64), "multiples of 64"),
                               ((2, 9, 9, 64), (3, 3, 64, 100), "multiples of 64")]:
        x, w = c.normal(shape), c.normal(kshape, 0.25)
        with contextlib.ExitStack() as stack:
            for point, name in fwd.items():
                stack.enter_context(variants.forced(point, name))
            with pytest.raises(NotImplementedError, match=why):
                ops.conv2d(c.arg(x), c.arg(w), None, strides=(1, 1), padding="same", **c.kw)
        y = ops.conv2d(c.arg(x), c.arg(w), None, strides=(1, 1), padding="same", **c.kw)
        c.what = f"x={shape} kernel={kshape} (automatic choice)"
        c.check("y", y, ref.conv2d(x, w, None, (1, 1), "same", (1, 1)), k=9 * shape[3],
                terms=ref.conv2d(abs(x), abs(w), None, (1, 1), "same", (1, 1)))
    # float32 as TF32: C / F multiples of 32; and never the 16-bit-only kernels of
    # conv2d_wgmma.cu (halo, im2col), in either pass, even where igemm would take the layer
    c = case("conv2d_fwd", "tfloat32")
    for shape, kshape, why in [((2, 9, 9, 48), (3, 3, 48, 64), "multiples of 32"),
                               ((2, 9, 9, 64), (3, 3, 64, 80), "multiples of 32")]:
        x, w = c.normal(shape), c.normal(kshape, 0.25)
        with variants.forced("cuda.conv2d.fwd", "wgmma"), variants.forced("cuda.conv2d.fwd_wgmma", "igemm"):
            with pytest.raises(NotImplementedError, match=why):
                ops.conv2d(c.arg(x), c.arg(w), None, strides=(1, 1), padding="same", **c.kw)
    x, w = c.normal((2, 9, 9, 64)), c.normal((3, 3, 64, 64), 0.25)
    for kernel in ("halo", "im2col"):
        if kernel not in variants.available("cuda.conv2d.fwd_wgmma"):
            continue
        with variants.forced("cuda.conv2d.fwd", "wgmma"), variants.forced("cuda.conv2d.fwd_wgmma", kernel):
            with pytest.raises(NotImplementedError, match="float16 / bfloat16"):
                ops.conv2d(c.arg(x), c.arg(w), None, strides=(1, 1), padding="same", **c.kw)
        with variants.forced("cuda.conv2d.bwd_data", "wgmma"), variants.forced("cuda.conv2d.fwd_wgmma", kernel):
            with pytest.raises(NotImplementedError, match="float16 / bfloat16"):
                ops.conv2d_backward_data(c.arg(x), c.arg(w), x.shape, strides=(1, 1), padding="same", **c.kw)


def _coherent(got, want):
    """The part of the error along the result itself: <got - want, want> / <want, want>.
    Truncating an operand to TF32 scales every product by 1 - e (e in [0, 2^-10)), which
    on normal operands is -3.5e-4 of the result per truncated operand (float64
    simulation, any K), while rounding to nearest has mean 0; the random rest averages
    out over many outputs (its share here: ~1e-6)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.vdot(got - want, want) / np.vdot(want, want))


def test_conv_igemm_tf32_weights_rounded(case, igemm):
    """The TF32 igemm rounds its weight operand to nearest TF32 (the forward's w^T, the
    data gradients' copy of w), so the coherent error is that of the truncated activation
    alone, about -3.5e-4 of the result; with the weights truncated too it would be -7.0e-4
    (-3.5e-4 each). The bounds sit half-way between: the kernel computes with the rounded
    weights (and, should the tensor cores round the activation as well, ~0 passes)."""
    c = case("conv2d_fwd", "tfloat32")
    for g in (dict(N=2, H=14, W=14, C=128, F=256, KH=3, KW=3, s=(1, 1), pad="same"),   # fwd / FLIP dgrad
              dict(N=2, H=28, W=28, C=256, F=512, KH=1, KW=1, s=(2, 2), pad="valid")):  # fwd / scatter dgrad
        x = c.normal((g["N"], g["H"], g["W"], g["C"]))
        w = c.normal((g["KH"], g["KW"], g["C"], g["F"]), 0.25)
        s, d = g["s"], (1, 1)
        c.what = f"x={x.shape} kernel={w.shape} strides={s} padding={g['pad']} [igemm forced]"
        fwd = {"cuda.conv2d.fwd": "wgmma", "cuda.conv2d.fwd_wgmma": "igemm"}
        y = _forced_all(c, fwd, lambda: ops.conv2d(c.arg(x), c.arg(w), None, strides=s, padding=g["pad"], **c.kw))
        want = ref.conv2d(x, w, None, s, g["pad"], d)
        dy = c.normal(want.shape)
        bwd = {"cuda.conv2d.bwd_data": "wgmma", "cuda.conv2d.fwd_wgmma": "igemm"}
        dx = _forced_all(c, bwd, lambda: ops.conv2d_backward_data(c.arg(dy), c.arg(w), x.shape, strides=s,
                                                                 padding=g["pad"], **c.kw))
        want_dx = ref.conv2d_backward_data(dy, w, x.shape, s, g["pad"], d)
        for name, got, exp in (("y", y, want), ("dx", dx, want_dx)):
            c.check(name, got, exp, k=w.shape[0] * w.shape[1] * (g["C"] if name == "y" else g["F"]))
            e = _coherent(got, exp)
            assert -5.25e-4 < e < 1.75e-4, c.msg(
                f"{name}: coherent relative error {e:+.3e}: expected ~-3.5e-4 (activation truncated, weights "
                f"rounded); -7.0e-4 means the weights were truncated too")


def test_conv_igemm_tf32_routing(case, igemm):
    """Automatic choice: a float32 layer that the 16-bit rule sends to igemm (3x3, 128 ->
    256 channels, stride 1, 196 tiles of 128 rows: at least one per SM) goes there as TF32
    in both passes; with TF32 off (exact float32) the same layer runs the SIMT kernels and
    never reaches the wgmma kernels (`last` of cuda.conv2d.fwd_wgmma stays 'none'), and
    forcing igemm is refused. The exact SIMT results are the reference of the TF32 ones."""
    g = dict(N=8, H=56, W=56, C=128, F=256, KH=3, KW=3)
    c = case("conv2d_fwd", "float32")   # TF32 off
    x = c.normal((g["N"], g["H"], g["W"], g["C"]))
    w = c.normal((g["KH"], g["KW"], g["C"], g["F"]), 0.25)
    dy = c.normal((g["N"], g["H"], g["W"], g["F"]))
    conv = lambda: ops.conv2d(c.arg(x), c.arg(w), None, strides=(1, 1), padding="same", **c.kw)  # noqa: E731
    dgrad = lambda: ops.conv2d_backward_data(c.arg(dy), c.arg(w), x.shape, strides=(1, 1),  # noqa: E731
                                             padding="same", **c.kw)
    c.what = f"x={x.shape} kernel={w.shape} 'same' (automatic choice, TF32 off)"
    variants.reset("cuda.conv2d.fwd_wgmma")
    y_exact = conv()
    assert variants.last("cuda.conv2d.fwd") == "simt", c.msg(f"ran {variants.last('cuda.conv2d.fwd')!r}")
    dx_exact = dgrad()
    assert variants.last("cuda.conv2d.bwd_data") == "simt", c.msg(f"ran {variants.last('cuda.conv2d.bwd_data')!r}")
    assert variants.last("cuda.conv2d.fwd_wgmma") == "none", c.msg("a wgmma kernel was asked with TF32 off")
    for point, fn in (("cuda.conv2d.fwd", conv), ("cuda.conv2d.bwd_data", dgrad)):
        with variants.forced(point, "wgmma"), variants.forced("cuda.conv2d.fwd_wgmma", "igemm"):
            with pytest.raises(NotImplementedError, match="TF32"):
                fn()
    # TF32 on: igemm, checked against the exact float32 results
    c.tf32 = True
    _core.set_allow_tf32(True)
    c.what = f"x={x.shape} kernel={w.shape} 'same' (automatic choice, TF32)"
    for name, fn, point, exact, k in (("y", conv, "cuda.conv2d.fwd", y_exact, 9 * g["C"]),
                                      ("dx", dgrad, "cuda.conv2d.bwd_data", dx_exact, 9 * g["F"])):
        variants.reset("cuda.conv2d.fwd_wgmma")
        out = fn()
        assert variants.last(point) == "wgmma", c.msg(f"{name}: {point} ran {variants.last(point)!r}")
        assert variants.last("cuda.conv2d.fwd_wgmma") == "igemm", c.msg(
            f"{name}: cuda.conv2d.fwd_wgmma ran {variants.last('cuda.conv2d.fwd_wgmma')!r}")
        c.check(name, out, np.asarray(exact, np.float64), k=k)


# ---------------------------------------------------------------- Hopper wgmma weight gradient
# conv2d_wgmma_wgrad.cu, forced (cuda.conv2d.wgrad=wgmma):
# forced, any failure of the kernel is the op's error, so a pass means it ran. Shapes: the
# block shapes its rule picks for ResNet-50's layers (1x1 64->256 / 256->64, 3x3
# 64->64 / 128->128, strided 1x1), ragged pixel counts (P % 64 != 0) and C / F that are
# not multiples of 64 (zero-filled box edges). db comes from the kernel's column-sum
# warps, so every case checks it, also over several splits.
WGRAD = [
    dict(N=4, H=20, W=20, C=64, F=256, KH=1, KW=1, s=(1, 1), pad="valid"),    # 1x1 64->256 (A = x, alternate)
    dict(N=3, H=15, W=17, C=256, F=64, KH=1, KW=1, s=(1, 1), pad="same"),     # 1x1 256->64, P = 765 (ragged)
    dict(N=4, H=28, W=28, C=128, F=256, KH=1, KW=1, s=(2, 2), pad="valid"),   # 1x1/2, P = 784 (ragged)
    dict(N=2, H=16, W=16, C=64, F=128, KH=1, KW=1, s=(2, 2), pad="same"),     # 1x1/2 'same' (no padding)
    dict(N=3, H=20, W=20, C=64, F=64, KH=3, KW=3, s=(1, 1), pad="same"),      # 3x3 64->64, P = 1200
    dict(N=2, H=17, W=23, C=128, F=128, KH=3, KW=3, s=(1, 1), pad="valid"),   # 3x3 valid, P = 630
    dict(N=2, H=14, W=14, C=128, F=192, KH=3, KW=3, s=(1, 1), pad="same"),    # 3 dy boxes
    dict(N=2, H=12, W=13, C=72, F=40, KH=3, KW=3, s=(1, 1), pad="same"),      # C, F not multiples of 64
    dict(N=3, H=9, W=9, C=24, F=200, KH=1, KW=1, s=(1, 1), pad="valid"),      # 1x1, ragged C and F
    dict(N=1, H=6, W=5, C=64, F=64, KH=3, KW=3, s=(1, 1), pad="same"),        # one K-block (P = 30)
]


def _wgrad_ids(g):
    return f"{g['H']}x{g['W']}x{g['C']}-F{g['F']}-k{g['KH']}-s{g['s'][0]}-{g['pad']}"


@pytest.fixture
def hopper():
    """Skips unless the registry says the wgmma weight gradient runs here (compute
    capability 9.0 and the sm_90a image in this build)."""
    if "wgmma" not in variants.available("cuda.conv2d.wgrad"):
        pytest.skip("cuda.conv2d.wgrad=wgmma is not available here (needs sm_90a code on a 9.0 device)")


def _wgrad(c, g, x, dy, forced, with_bias=True, knobs_exact=True):
    """conv2d_backward_filter with the variants `forced` ({point: name}); each forced
    point's `last` must be what was forced (with knobs_exact=False not the split / stage
    knobs, which a kernel may adjust: TF32 doubles the K-blocks of a split)."""
    try:
        with contextlib.ExitStack() as stack:
            for point, name in forced.items():
                stack.enter_context(variants.forced(point, name))
            out = ops.conv2d_backward_filter(c.arg(x), c.arg(dy), (g["KH"], g["KW"]), strides=g["s"],
                                             padding=g["pad"], with_bias=with_bias, **c.kw)
            for point, name in forced.items():
                if knobs_exact or not point.endswith(("_splits", "_stages")):
                    assert variants.last(point) == name, c.msg(f"{point}={name} ran {variants.last(point)!r}")
            return out
    except AssertionError:
        raise
    except Exception as e:
        raise AssertionError(c.msg(f"{forced}: {type(e).__name__}: {e}")) from e


def _wgrad_inputs(c, g):
    x = c.normal((g["N"], g["H"], g["W"], g["C"]))
    yshape = ref.conv2d_output_shape(x.shape, (g["KH"], g["KW"], g["C"], g["F"]), g["s"], g["pad"], (1, 1))
    dy = c.normal(yshape)
    k = (g["KH"], g["KW"])
    want = ref.conv2d_backward_filter(x, dy, k, g["s"], g["pad"], (1, 1))
    terms = ref.conv2d_backward_filter(abs(x), abs(dy), k, g["s"], g["pad"], (1, 1))
    c.what = (f"x={x.shape} kernel=({g['KH']},{g['KW']},{g['C']},{g['F']}) strides={g['s']} "
              f"padding={g['pad']}")
    return x, dy, want, terms, yshape[0] * yshape[1] * yshape[2]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("g", WGRAD, ids=_wgrad_ids)
def test_conv_bwd_filter_wgmma(case, hopper, dtype, g):
    c = case("conv2d_bwd_filter", dtype)
    x, dy, (want_w, want_b), (terms_w, terms_b), rows = _wgrad_inputs(c, g)
    forced = {"cuda.conv2d.wgrad": "wgmma"}
    dw, db = _wgrad(c, g, x, dy, forced)
    c.what += " [wgmma forced]"
    c.check("dw", dw, want_w, k=rows, terms=terms_w)
    c.check("db", db, want_b, k=rows, terms=terms_b)
    # the same inputs again: bitwise the same (fixed split and summation order)
    dw2, db2 = _wgrad(c, g, x, dy, forced)
    assert np.asarray(dw2).tobytes() == np.asarray(dw).tobytes(), c.msg("dw differs between two identical calls")
    assert np.asarray(db2).tobytes() == np.asarray(db).tobytes(), c.msg("db differs between two identical calls")
    # without the bias gradient
    dw3, db3 = _wgrad(c, g, x, dy, forced, with_bias=False)
    assert db3 is None, c.msg("db returned although with_bias=False")
    assert np.asarray(dw3).tobytes() == np.asarray(dw).tobytes(), c.msg("dw differs without the bias gradient")
    # the mma.sync kernel on the same inputs (a forced kernel never takes the GEMM route)
    old, _ = _wgrad(c, g, x, dy, {"cuda.conv2d.wgrad": "mma"})
    c.what = c.what.replace("[wgmma forced]", "[mma.sync]")
    c.check("dw", old, want_w, k=rows, terms=terms_w)
    diff = np.linalg.norm(np.asarray(dw, np.float64) - np.asarray(old, np.float64))
    scale = np.linalg.norm(want_w) + 1e-30
    assert diff / scale <= 2e-2, c.msg(f"wgmma and mma.sync results differ by {diff / scale:.3e} (relative)")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,splits", [("xs4", "3"), ("ds4", "6"), ("da3", "2"), ("xa1", "4")])
def test_conv_bwd_filter_wgmma_split_db(case, hopper, dtype, shape, splits):
    """db's column sums are written per split into the partial slices and reduced with
    dw: forced split counts, each block shape family (dy as B shared, dy as A shared /
    alternating), a ragged last K-block."""
    g = dict(N=3, H=15, W=17, C=128, F=256, KH=3, KW=3, s=(1, 1), pad="same")  # P = 765
    if shape in ("da3", "xa1"):
        g = dict(g, F=64) if shape == "da3" else dict(g, C=64, F=64, KH=1, KW=1)
    c = case("conv2d_bwd_filter", dtype)
    x, dy, (want_w, want_b), (terms_w, terms_b), rows = _wgrad_inputs(c, g)
    forced = {"cuda.conv2d.wgrad": "wgmma", "cuda.conv2d.wgrad_wgmma": shape,
              "cuda.conv2d.wgrad_wgmma_splits": splits}
    c.what += f" [wgmma {shape}, {splits} splits]"
    dw, db = _wgrad(c, g, x, dy, forced)
    c.check("dw", dw, want_w, k=rows, terms=terms_w)
    c.check("db", db, want_b, k=rows, terms=terms_b)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("g", [WGRAD[4], WGRAD[2]], ids=_wgrad_ids)
def test_conv_bwd_filter_wgmma_variants(case, hopper, dtype, g):
    """Every block shape (A = x / dy, shared / alternate, NB = 1..4 boxes) on the same
    inputs: a failure names the variant, which localises a layout error."""
    c = case("conv2d_bwd_filter", dtype)
    x, dy, (want_w, want_b), (terms_w, terms_b), rows = _wgrad_inputs(c, g)
    base = c.what
    bad = []
    shapes = variants.available("cuda.conv2d.wgrad_wgmma")
    assert len(shapes) == 16, shapes
    for v in shapes:
        c.what = f"{base} [wgmma variant {v}]"
        dw, db = _wgrad(c, g, x, dy, {"cuda.conv2d.wgrad": "wgmma", "cuda.conv2d.wgrad_wgmma": v})
        try:
            c.check("dw", dw, want_w, k=rows, terms=terms_w)
            c.check("db", db, want_b, k=rows, terms=terms_b)
        except AssertionError as e:
            bad.append(f"{v}: {str(e).splitlines()[0][:300]}")
    assert not bad, "variants failing:\n" + "\n".join(bad)
