"""The Hopper wgmma weight gradient (conv2d_wgmma_wgrad.cu) for float32 storage as TF32.

gc_wgrad_wgmma_tf32_kernel transposes the TMA-staged x / dy boxes into the K-major
layout wgmma .tf32 needs, rounding every operand element to nearest TF32 on the way,
and accumulates in fp32; db sums the unrounded dy in fp32. Checked here, on a compute
capability 9.0 device whose build has the sm_90a image (skipped elsewhere):

- every geometry class the kernel takes -- 1x1 stride 1, 1x1 stride 2 unpadded, 3x3 and
  7x7 stride 1 ('same' and 'valid') -- with C, F in {64, 128, 256}, C / F that are not
  multiples of 64 (96, 36 / 32, 20: a 32-channel half of a box wholly past C or F is a
  repeat of the box's first half, rows that are never stored), pixel counts that are not
  multiples of the 32-pixel K-block, a single partial K-block; with and without db;
- against the float64 oracle (reference.py). Tolerance: each operand rounded to nearest
  TF32 has a relative error uniform in +-2^-11 (RMS 2^-11 / sqrt(3) = 2.8e-4), so a
  product's is ~4e-4 RMS with mean 0; on random-sign operands the sum of K products
  then has a relative error of ~4e-4 RMS whatever K is, and the fp32 accumulation over
  K <= 10^4 terms adds < 1e-5. ||dw - ref|| / ||ref|| <= 1e-3 (2.5x that), with no
  cancellation floor. db is a plain fp32 sum of unrounded dy: 1e-4 (TF32-rounded dy
  would give ~3e-4);
- that every element is written (ops fills dw / db with NaN before the call), that the
  variant that ran is the forced / chosen one (`last`), two identical calls give the
  same bits, and dw does not change without db;
- the rounding: the coherent part of the error (<err, ref> / <ref, ref>) is ~0 with
  both operands rounded to nearest; truncating one operand would give -3.5e-4, both
  -7e-4 (conv2d_wgmma_igemm.cu's header);
- every block shape of cuda.conv2d.wgrad_wgmma (the alternating NB = 4 ones, xa4 / da4,
  do not fit their rings on a 227 KB device and must be refused), forced split counts;
- routing: a float32 layer of the automatic rule's kind goes to the kernel with TF32 on;
  with TF32 off (exact float32) it never reaches it (cuda.conv2d.wgrad_wgmma's `last`
  stays 'none') and forcing it is refused.
"""

import numpy as np
import pytest

import reference as ref
from gpucmp import _core, ops, variants
from test_cuda_fast_paths import _wgrad as _wgrad_forced
from test_ops import Case

pytestmark = pytest.mark.cuda

TOL_DW = 1e-3  # TF32 products (both operands rounded to nearest), fp32 accumulation: see above
TOL_DB = 1e-4  # fp32 sums of unrounded dy


def _gpu():
    names = [b for b in _core.backends() if b.startswith("cuda")]
    return names[0] if names else "cuda:0"


@pytest.fixture
def case():
    """A float32 test_ops Case on the GPU with TF32 on (c.tf32); TF32 restored after."""
    allowed = _core.get_allow_tf32()

    def make(tf32=True):
        c = Case("conv2d_bwd_filter", _gpu(), "float32", None)
        c.tf32 = tf32
        _core.set_allow_tf32(tf32)
        return c

    yield make
    _core.set_allow_tf32(allowed)


@pytest.fixture
def hopper():
    """Skips unless the registry says the wgmma weight gradient runs here."""
    if "wgmma" not in variants.available("cuda.conv2d.wgrad"):
        pytest.skip("cuda.conv2d.wgrad=wgmma is not available here (needs sm_90a code on a 9.0 device)")


GEOMS = [
    # 1x1 stride 1
    dict(N=3, H=15, W=17, C=64, F=256, KH=1, KW=1, s=(1, 1), pad="valid"),    # xs4, P = 765 (ragged)
    dict(N=3, H=15, W=17, C=256, F=64, KH=1, KW=1, s=(1, 1), pad="same"),     # da2 (the 16-bit da4)
    dict(N=4, H=10, W=10, C=128, F=128, KH=1, KW=1, s=(1, 1), pad="valid"),   # cost model, P = 400
    dict(N=3, H=9, W=9, C=64, F=64, KH=1, KW=1, s=(1, 1), pad="valid"),       # xa1, P = 243
    # 1x1 stride 2, unpadded
    dict(N=4, H=28, W=28, C=128, F=256, KH=1, KW=1, s=(2, 2), pad="valid"),   # P = 784 (ragged)
    dict(N=2, H=16, W=16, C=256, F=64, KH=1, KW=1, s=(2, 2), pad="same"),     # 'same' = no padding here
    # 3x3 stride 1
    dict(N=3, H=20, W=20, C=64, F=64, KH=3, KW=3, s=(1, 1), pad="same"),      # da3, P = 1200
    dict(N=2, H=17, W=23, C=128, F=128, KH=3, KW=3, s=(1, 1), pad="valid"),   # ds4, P = 630
    dict(N=2, H=10, W=10, C=256, F=256, KH=3, KW=3, s=(1, 1), pad="same"),    # xs4, P = 200
    # 7x7 stride 1 (49 taps)
    dict(N=2, H=12, W=12, C=64, F=64, KH=7, KW=7, s=(1, 1), pad="same"),
    # C / F not multiples of 64
    dict(N=2, H=12, W=13, C=96, F=32, KH=3, KW=3, s=(1, 1), pad="same"),      # halves wholly past C / F
    dict(N=3, H=9, W=9, C=36, F=20, KH=1, KW=1, s=(1, 1), pad="valid"),       # partial halves
    dict(N=2, H=11, W=11, C=64, F=96, KH=3, KW=3, s=(1, 1), pad="same"),
    # one partial K-block (P = 30 < 32)
    dict(N=1, H=6, W=5, C=64, F=64, KH=3, KW=3, s=(1, 1), pad="same"),
]


def _ids(g):
    return f"{g['N']}x{g['H']}x{g['W']}x{g['C']}-F{g['F']}-k{g['KH']}-s{g['s'][0]}-{g['pad']}"


def _inputs(c, g):
    x = c.normal((g["N"], g["H"], g["W"], g["C"]))
    yshape = ref.conv2d_output_shape(x.shape, (g["KH"], g["KW"], g["C"], g["F"]), g["s"], g["pad"], (1, 1))
    dy = c.normal(yshape)
    want_w, want_b = ref.conv2d_backward_filter(x, dy, (g["KH"], g["KW"]), g["s"], g["pad"], (1, 1))
    c.what = (f"x={x.shape} kernel=({g['KH']},{g['KW']},{g['C']},{g['F']}) strides={g['s']} "
              f"padding={g['pad']}")
    return x, dy, want_w, want_b


def _wgrad(c, g, x, dy, forced, with_bias=True):
    """test_cuda_fast_paths' forced weight gradient; the split / stage knobs are not
    checked (the TF32 kernel doubles a split's 32-pixel K-blocks)."""
    return _wgrad_forced(c, g, x, dy, forced, with_bias=with_bias, knobs_exact=False)


def _check(c, dw, db, want_w, want_b):
    for name, got in (("dw", dw), ("db", db)):
        if got is None:
            continue
        a = np.asarray(got)
        assert a.dtype == np.float32, c.msg(f"{name}: dtype {a.dtype}")
        assert np.isfinite(a).all(), c.msg(f"{name}: {(~np.isfinite(a)).sum()} elements not written (NaN) "
                                           f"or not finite, first at {np.argwhere(~np.isfinite(a))[0].tolist()}")
    c.check("dw", dw, want_w, tol=TOL_DW)
    if db is not None:
        c.check("db", db, want_b, tol=TOL_DB)


def _coherent(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.vdot(got - want, want) / np.vdot(want, want))


FORCED = {"cuda.conv2d.wgrad": "wgmma"}


@pytest.mark.parametrize("g", GEOMS, ids=_ids)
def test_wgrad_tf32(case, hopper, g):
    c = case()
    x, dy, want_w, want_b = _inputs(c, g)
    c.what += " [wgmma forced, TF32]"
    variants.reset("cuda.conv2d.wgrad_wgmma")
    dw, db = _wgrad(c, g, x, dy, FORCED)
    assert variants.last("cuda.conv2d.wgrad_wgmma") != "none", c.msg("no wgmma block shape reported")
    _check(c, dw, db, want_w, want_b)
    # bitwise the same on a second call (fixed split and summation order)
    dw2, db2 = _wgrad(c, g, x, dy, FORCED)
    assert np.asarray(dw2).tobytes() == np.asarray(dw).tobytes(), c.msg("dw differs between two identical calls")
    assert np.asarray(db2).tobytes() == np.asarray(db).tobytes(), c.msg("db differs between two identical calls")
    # without db: the same dw
    dw3, db3 = _wgrad(c, g, x, dy, FORCED, with_bias=False)
    assert db3 is None, c.msg("db returned although with_bias=False")
    assert np.asarray(dw3).tobytes() == np.asarray(dw).tobytes(), c.msg("dw differs without the bias gradient")


def test_wgrad_tf32_rounded(case, hopper):
    """Both operands rounded to nearest TF32: the coherent error is ~0 (|.| < 1.75e-4,
    half-way to one truncated operand's -3.5e-4), on many outputs."""
    c = case()
    for g in (dict(N=4, H=16, W=16, C=128, F=128, KH=3, KW=3, s=(1, 1), pad="same"),    # ds4
              dict(N=4, H=16, W=16, C=256, F=256, KH=1, KW=1, s=(1, 1), pad="valid"),   # xs4
              dict(N=4, H=16, W=16, C=64, F=64, KH=3, KW=3, s=(1, 1), pad="same")):     # da3
        x, dy, want_w, want_b = _inputs(c, g)
        c.what += " [wgmma forced, TF32]"
        dw, db = _wgrad(c, g, x, dy, FORCED)
        _check(c, dw, db, want_w, want_b)
        e = _coherent(dw, want_w)
        assert abs(e) < 1.75e-4, c.msg(f"dw: coherent relative error {e:+.3e}: expected ~0 (both operands "
                                       f"rounded to nearest); -3.5e-4 / -7e-4: one / both truncated")


def test_wgrad_tf32_block_shapes(case, hopper):
    """Every block shape on two layers (3x3 'same', strided 1x1); xa4 / da4 may only be
    refused (their rings do not fit), never wrong."""
    c = case()
    shapes = variants.available("cuda.conv2d.wgrad_wgmma")
    assert len(shapes) == 16, shapes
    bad = []
    for g in (GEOMS[6], GEOMS[4]):
        x, dy, want_w, want_b = _inputs(c, g)
        base = c.what
        for v in shapes:
            c.what = f"{base} [wgmma variant {v}, TF32]"
            if v in ("xa4", "da4"):
                try:
                    with variants.forced("cuda.conv2d.wgrad", "wgmma"), variants.forced("cuda.conv2d.wgrad_wgmma", v):
                        dw, db = ops.conv2d_backward_filter(c.arg(x), c.arg(dy), (g["KH"], g["KW"]),
                                                            strides=g["s"], padding=g["pad"], **c.kw)
                except NotImplementedError as e:
                    assert "shared memory" in str(e), c.msg(f"refused for another reason: {e}")
                    continue
            else:
                dw, db = _wgrad(c, g, x, dy, {"cuda.conv2d.wgrad": "wgmma", "cuda.conv2d.wgrad_wgmma": v})
            try:
                _check(c, dw, db, want_w, want_b)
            except AssertionError as e:
                bad.append(f"{v}: {str(e).splitlines()[0][:300]}")
    assert not bad, "variants failing:\n" + "\n".join(bad)


@pytest.mark.parametrize("shape,splits", [("xs4", "3"), ("ds4", "6"), ("da3", "2"), ("da2", "5"),
                                          ("xa1", "4"), ("ds2", "1")])
def test_wgrad_tf32_splits(case, hopper, shape, splits):
    """Forced split counts for each block shape family (dy as B shared, dy as A shared /
    alternating, x alternating), a ragged last K-block; db per split."""
    g = dict(N=3, H=15, W=17, C=128, F=256, KH=3, KW=3, s=(1, 1), pad="same")  # P = 765
    if shape in ("da3", "da2"):
        g = dict(g, F=64)
    elif shape == "xa1":
        g = dict(g, C=64, F=64, KH=1, KW=1)
    c = case()
    x, dy, want_w, want_b = _inputs(c, g)
    forced = {"cuda.conv2d.wgrad": "wgmma", "cuda.conv2d.wgrad_wgmma": shape,
              "cuda.conv2d.wgrad_wgmma_splits": splits}
    c.what += f" [wgmma {shape}, {splits} splits, TF32]"
    dw, db = _wgrad(c, g, x, dy, forced)
    _check(c, dw, db, want_w, want_b)
    dw2, db2 = _wgrad(c, g, x, dy, forced)
    assert np.asarray(dw2).tobytes() == np.asarray(dw).tobytes(), c.msg("dw differs between two identical calls")
    assert np.asarray(db2).tobytes() == np.asarray(db).tobytes(), c.msg("db differs between two identical calls")


def test_wgrad_tf32_stages_cap(case, hopper):
    """The stages knob caps the operand ring (2 shared, 4 alternating at least)."""
    c = case()
    for g, shape in ((GEOMS[7], "ds4"), (GEOMS[6], "da3")):
        x, dy, want_w, want_b = _inputs(c, g)
        c.what += f" [wgmma {shape}, 2 stages, TF32]"
        dw, db = _wgrad(c, g, x, dy, {"cuda.conv2d.wgrad": "wgmma", "cuda.conv2d.wgrad_wgmma": shape,
                                      "cuda.conv2d.wgrad_wgmma_stages": "2"})
        _check(c, dw, db, want_w, want_b)


def test_wgrad_tf32_routing(case, hopper):
    """Automatic choice: a layer the 16-bit rule sends to the wgmma kernel (3x3, 64 -> 128
    channels, P = 9216 >= 64 pixels per SM up to 144 SMs) goes there as TF32; with TF32 off
    it runs the exact SIMT kernel, never asks the wgmma one, and forcing it is refused."""
    g = dict(N=4, H=48, W=48, C=64, F=128, KH=3, KW=3, s=(1, 1), pad="same")
    c = case(tf32=False)
    x, dy, want_w, want_b = _inputs(c, g)
    base = c.what
    run = lambda: ops.conv2d_backward_filter(c.arg(x), c.arg(dy), (3, 3), strides=(1, 1),  # noqa: E731
                                             padding="same", **c.kw)
    c.what = base + " (automatic choice, TF32 off)"
    variants.reset("cuda.conv2d.wgrad_wgmma")
    dw_exact, db_exact = run()
    assert variants.last("cuda.conv2d.wgrad") == "simt", c.msg(f"ran {variants.last('cuda.conv2d.wgrad')!r}")
    assert variants.last("cuda.conv2d.wgrad_wgmma") == "none", c.msg("the wgmma kernel ran with TF32 off")
    c.check("dw", dw_exact, want_w, k=g["N"] * g["H"] * g["W"])
    with variants.forced("cuda.conv2d.wgrad", "wgmma"):
        with pytest.raises(NotImplementedError, match="TF32"):
            run()
    c.tf32 = True
    _core.set_allow_tf32(True)
    c.what = base + " (automatic choice, TF32)"
    variants.reset("cuda.conv2d.wgrad_wgmma")
    dw, db = run()
    assert variants.last("cuda.conv2d.wgrad") == "wgmma", c.msg(f"ran {variants.last('cuda.conv2d.wgrad')!r}")
    assert variants.last("cuda.conv2d.wgrad_wgmma") != "none", c.msg("no wgmma block shape reported")
    _check(c, dw, db, want_w, want_b)
