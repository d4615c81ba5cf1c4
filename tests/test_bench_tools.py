"""gpucmp._core.bench_gemm / bench_conv (csrc/python/bench.c) on the CPU backend.

The benchmarks call these on the GPU (benchmarks/bench_gemm.py, bench_conv.py); here they
run on 'cpu' with small sizes: each returns a positive median in seconds, every dtype,
layout and conv pass is accepted, the TF32 switch is restored, and bad arguments raise
ValueError / TypeError / NotImplementedError with the module's usual mapping.
"""
import math

import pytest

from gpucmp import _core

pytestmark = pytest.mark.skipif(not hasattr(_core, "bench_gemm"),
                                reason="this build of gpucmp._core has no bench_gemm (bench.c not wired in)")

DTYPES = ["float32", "tfloat32", "float16", "bfloat16"]


def positive(t):
    return isinstance(t, float) and math.isfinite(t) and t > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_bench_gemm_returns_seconds(dtype, trans_a, trans_b):
    t = _core.bench_gemm("cpu", 48, 40, 24, dtype, "own", 3, trans_a, trans_b, warmup=1)
    assert positive(t)


def test_bench_gemm_keywords_and_scaling():
    tiny = _core.bench_gemm("cpu", 8, 8, 8, "float32", repeats=5)
    big = _core.bench_gemm(device="cpu", m=256, n=256, k=256, dtype="float32", impl="own", repeats=3,
                           warmup=1, inner=2)
    assert positive(tiny) and positive(big)
    assert big > tiny  # 32,768x the arithmetic


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["fwd", "bwd_data", "bwd_filter"])
def test_bench_conv_returns_seconds(dtype, which):
    t = _core.bench_conv("cpu", 2, 13, 13, 8, 16, 3, 3, dtype=dtype, which=which, repeats=3, warmup=1)
    assert positive(t)


@pytest.mark.parametrize("strides,padding", [((1, 1), "same"), ((2, 2), "valid"), (2, "same"), ([1, 2], "valid")])
def test_bench_conv_strides_padding(strides, padding):
    for which in ("fwd", "bwd_data", "bwd_filter"):
        assert positive(_core.bench_conv("cpu", 2, 9, 11, 3, 4, 3, 3, strides=strides, padding=padding,
                                         dtype="float32", which=which, repeats=2))


def test_tf32_setting_is_restored():
    before = _core.get_allow_tf32()
    try:
        for setting in (False, True):
            _core.set_allow_tf32(setting)
            _core.bench_gemm("cpu", 16, 16, 16, "tfloat32", repeats=1)
            assert _core.get_allow_tf32() == setting
            _core.bench_conv("cpu", 1, 8, 8, 2, 2, 3, 3, dtype="float32", repeats=1)
            assert _core.get_allow_tf32() == setting
            with pytest.raises(ValueError):
                _core.bench_gemm("cpu", 16, 16, 16, "float64")
            assert _core.get_allow_tf32() == setting
    finally:
        _core.set_allow_tf32(before)


def test_vendor_is_not_implemented_on_the_cpu():
    with pytest.raises(NotImplementedError, match="vendor"):
        _core.bench_gemm("cpu", 16, 16, 16, "float16", impl="vendor", repeats=1)
    with pytest.raises(NotImplementedError, match="vendor"):
        _core.bench_conv("cpu", 1, 8, 8, 2, 2, 3, 3, impl="vendor", repeats=1)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(dtype="float64"), ValueError, "dtype"),
    (dict(dtype=32), TypeError, "dtype"),
    (dict(impl="cublas"), ValueError, "impl"),
    (dict(m=0), ValueError, "m must be"),
    (dict(k=-3), ValueError, "k must be"),
    (dict(repeats=0), ValueError, "repeats"),
    (dict(warmup=-1), ValueError, "warmup"),
    (dict(inner=0), ValueError, "inner"),
    (dict(device=0), TypeError, "device"),
    (dict(device="tpu:0"), ValueError, "tpu"),
    (dict(m=1.5), TypeError, None),
])
def test_bench_gemm_bad_arguments(kwargs, exc, match):
    args = dict(device="cpu", m=16, n=16, k=16, dtype="float32", repeats=1)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        _core.bench_gemm(**args)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(which="bwd"), ValueError, "which"),
    (dict(padding="full"), ValueError, "padding"),
    (dict(dtype="int8"), ValueError, "dtype"),
    (dict(strides=(1, 2, 3)), ValueError, "strides"),
    (dict(strides=(0, 1)), ValueError, "strides"),
    (dict(strides="2"), TypeError, "strides"),
    (dict(dilation=(1, 0)), ValueError, "dilation"),
    (dict(kh=9), ValueError, "larger than the input"),
    (dict(c=0), ValueError, "c must be"),
    (dict(device=None), TypeError, "device"),
])
def test_bench_conv_bad_arguments(kwargs, exc, match):
    args = dict(device="cpu", n=1, h=8, w=8, c=2, f=2, kh=3, kw=3, repeats=1)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        _core.bench_conv(**args)
