"""Every block tile of the mma.sync GEMM (cuda.gemm.mma_tile) against the float64 oracle.

The mma.sync path plans a tile per device (csrc/cuda/gemm_mma.cu), so a given GPU runs
only some tiles at some shapes; here each tile is forced (with cuda.gemm.path=mma) for
float16, bfloat16 and float32 as TF32, all four transpose cases, and shapes that cross
the tile edges in M, N and K (tails), K slices of both alignments (an odd leading
dimension takes the scalar-load path), a long K with few output tiles (split K), and the
fused epilogue (alpha, beta * C, bias, activation). The oracle is tests/reference.py on the
operands as stored (rounded to the dtype first), and every element must lie within a
bound proportional to its |a| @ |b| + |bias| + |beta * C| sum; outputs start as NaN
(gpucmp.ops poisons them), so an unwritten element fails. A tile the device cannot hold
must be refused with NotImplementedError, never run (tests/test_cuda_sm86_limits.py runs
this file under an sm_86 card's limits). Without a GPU every case skips.
"""
import numpy as np
import pytest

from gpucmp import _core, ops, variants

import reference as ref

POINT = "cuda.gemm.mma_tile"
DTYPES = ("float16", "bfloat16", "tfloat32")
# per-element error bound, relative to the |a| @ |b| + ... sum: operand rounding to TF32
# (2^-11 each), output rounding (f16 2^-11, bf16 2^-8), fp32 accumulation
TOL = {"float16": 2e-3, "bfloat16": 1e-2, "tfloat32": 3e-3}
SHAPES = [
    (1, 1, 1),
    (67, 45, 129),      # odd K: scalar loads for a non-transposed A
    (130, 257, 100),    # crosses 128 / 256 tile edges in M and N
    (256, 128, 64),     # whole tiles, 16-byte aligned
    (64, 72, 4096),     # few output tiles, long K: split K
    (200, 136, 520),    # K past several slices with a tail
]


def _cuda():
    try:
        return next((d for d in _core.backends() if d.startswith("cuda")), None)
    except Exception:  # noqa: BLE001 -- no CUDA in this build
        return None


def _tiles():
    info = variants.points().get(POINT)
    if info is None:
        return []
    return [v for v in info["variants"] if v != "auto"]


def _round(x, dtype):
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":
        return ref.round_bf16(x).astype(np.float64)
    return x.astype(np.float32).astype(np.float64)


def _storage(x, dtype):
    if dtype == "float16":
        return x.astype(np.float16)
    return x.astype(np.float32)  # bfloat16: gpucmp rounds float32 to bf16 (exact here: pre-rounded)


def _run_case(dev, dtype, tile, m, n, k, ta, tb, rng, epilogue):
    store = "float32" if dtype == "tfloat32" else dtype
    a = _round(rng.standard_normal((k, m) if ta else (m, k)), dtype)
    b = _round(rng.standard_normal((n, k) if tb else (k, n)), dtype)
    bias = cm = None
    alpha, beta, act = 1.0, 0.0, "linear"
    if epilogue:
        bias = _round(rng.standard_normal(n), dtype)
        cm = _round(rng.standard_normal((m, n)), dtype)
        alpha, beta, act = -0.75, 0.5, str(rng.choice(["relu", "tanh", "sigmoid", "linear"]))
    out = ops.gemm(_storage(a, store), _storage(b, store), None if bias is None else _storage(bias, store),
                   None if cm is None else _storage(cm, store), trans_a=ta, trans_b=tb, alpha=alpha, beta=beta,
                   activation=act, backend=dev, dtype=store)
    what = f"tile={tile} {dtype} M={m} N={n} K={k} trans_a={ta} trans_b={tb} epilogue={epilogue}"
    assert variants.last("cuda.gemm.path") == "mma", what + f": ran {variants.last('cuda.gemm.path')!r}"
    assert variants.last(POINT) == tile, what + f": the tile that ran is {variants.last(POINT)!r}"
    want = ref.gemm(a, b, bias, cm, ta, tb, alpha, beta, act)
    terms = ref.gemm(np.abs(a), np.abs(b), None if bias is None else np.abs(bias),
                     None if cm is None else np.abs(cm), ta, tb, abs(alpha), abs(beta))
    got = np.asarray(out, np.float64)
    assert got.shape == (m, n), what
    bad = ~(np.abs(got - want) <= TOL[dtype] * terms + 1e-6)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {m * n} elements wrong (NaN: "
                           f"{int(np.isnan(got).sum())}), first at {np.argwhere(bad)[0].tolist()}: "
                           f"{got[tuple(np.argwhere(bad)[0])]} vs {want[tuple(np.argwhere(bad)[0])]}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", _tiles() or ["none"])
def test_tile_against_the_oracle(tile, dtype):
    dev = _cuda()
    if dev is None or tile == "none":
        pytest.skip("no CUDA backend")
    if "mma" not in variants.available("cuda.gemm.path"):
        pytest.skip("this device has no mma.sync (compute capability < 8.0)")
    rng = np.random.default_rng(abs(hash((tile, dtype))) % 2**32)
    allowed = _core.get_allow_tf32()
    _core.set_allow_tf32(dtype == "tfloat32")
    try:
        with variants.forced("cuda.gemm.path", "mma"), variants.forced(POINT, tile):
            try:
                ops.gemm(np.ones((8, 8), np.float32 if dtype != "float16" else np.float16),
                         np.ones((8, 8), np.float32 if dtype != "float16" else np.float16), backend=dev,
                         dtype="float32" if dtype == "tfloat32" else dtype)
            except NotImplementedError as e:
                # refused: only for want of resources on this device (or its planned limits)
                assert tile in str(e) and ("shared memory" in str(e) or "does not fit" in str(e)), str(e)
                pytest.skip(f"{tile} does not fit this device: {e}")
            for i, (m, n, k) in enumerate(SHAPES):
                for ta in (False, True):
                    for tb in (False, True):
                        _run_case(dev, dtype, tile, m, n, k, ta, tb, rng, epilogue=(i + ta + tb) % 2 == 1)
    finally:
        _core.set_allow_tf32(allowed)


@pytest.mark.cuda
def test_auto_runs_a_tile_that_fits_and_reports_it():
    dev = _cuda()
    if dev is None or "mma" not in variants.available("cuda.gemm.path"):
        pytest.skip("no CUDA backend with mma.sync")
    rng = np.random.default_rng(1)
    with variants.forced("cuda.gemm.path", "mma"):
        for m, n, k in ((8, 8, 8), (512, 512, 512), (96, 4096, 256)):
            a = _round(rng.standard_normal((m, k)), "float16")
            b = _round(rng.standard_normal((k, n)), "float16")
            out = ops.gemm(a.astype(np.float16), b.astype(np.float16), backend=dev)
            assert variants.last(POINT) in _tiles(), variants.last(POINT)
            want = a @ b
            assert np.all(np.abs(out.astype(np.float64) - want) <= 2e-3 * (np.abs(a) @ np.abs(b)) + 1e-6)


def test_the_point_lists_every_tile():
    info = variants.points().get(POINT)
    if info is None:
        pytest.skip("this build has no CUDA backend")
    assert info["kind"] == "choice" and info["backend"] == "cuda"
    assert {"128x128x32", "128x256x32", "64x64x32"} <= set(info["variants"])
    with pytest.raises(ValueError, match=POINT):
        variants.force(POINT, "100x100x100")
