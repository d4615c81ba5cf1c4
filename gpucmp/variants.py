"""Kernel variants of the core: list them, force one, see which one ran.

The C core chooses kernels automatically (the CPU GEMM's SIMD level, the CUDA GEMM path,
the convolution kernel of each pass, pipeline depths...). Each choice is a "variant
point" of one registry (csrc/include/gpucmp_variants.h), e.g. "cpu.gemm.simd",
"cuda.gemm.path", "cuda.conv2d.wgrad". This module is the Python side of it:

    from gpucmp import variants
    variants.points()                        # {point: {"variants", "available", "forced", "last", ...}}
    variants.available("cpu.gemm.simd")      # ['avx512', 'fma', 'generic'] on this CPU
    with variants.forced("cuda.conv2d.wgrad", "wgmma"):
        ...                                  # every weight gradient in here runs the wgmma kernel
    variants.last("cuda.conv2d.wgrad")       # what this thread's last weight gradient ran

Forcing is process-wide (for tests and benchmarks); `last` is per thread. The environment
does the same before the process starts: GPUCMP_FORCE="cuda.gemm.path=mma,cpu.gemm.simd=fma".
"""
import contextlib

from . import _core


def points():
    """Every variant point of this build: {point: {"backend", "kind" ('choice' | 'knob'),
    "help", "variants" (names that may be forced, 'auto' first), "available" (those this
    build and device run), "forced", "last", "range" ((lo, hi) for a knob, else None)}}."""
    return _core.variants()


def available(point, auto=False):
    """The variants of `point` this build and device can run ('auto' only with auto=True);
    [] when the point's backend is not in this build. A knob has no list: its range is in
    points()."""
    info = _core.variants().get(point)
    if info is None:
        _core.variant_forced(point)  # no such point at all: the ValueError listing the points
        return []
    return [v for v in info["available"] if auto or v != "auto"]


def force(point, name):
    """Force `point` to `name` ('auto' returns to the automatic choice; a knob takes an
    int or its text). ValueError for an unknown point or name (the message lists the valid
    ones), NotImplementedError when the variant cannot run here (it says why)."""
    _core.force_variant(point, name)


def forced_name(point):
    """The forced value of `point` ('auto' when nothing is forced)."""
    return _core.variant_forced(point)


def last(point):
    """What the calling thread's last call at `point` ran ('none' before any)."""
    return _core.variant_last(point)


def reset(point=None):
    """Every point (or one) back to 'auto'; the calling thread's `last` of it to 'none'."""
    _core.reset_variants(point)


@contextlib.contextmanager
def forced(point, name):
    """Force `point` to `name` inside the block; the previous forced value comes back after
    it (also when the block raises)."""
    before = _core.variant_forced(point)
    _core.force_variant(point, name)
    try:
        yield
    finally:
        _core.force_variant(point, before)

