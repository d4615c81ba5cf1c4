"""The kernel-variant registry (csrc/core/variants.c) through _core and gpucmp.variants.

What it checks, on the CPU (every build has the point cpu.gemm.simd):
- listing: each present point's dict (keys, 'auto' first, available within variants,
  knobs with a range), and cpu_simd_variants() agreeing with it;
- forcing and reset: every available SIMD variant sticks (variant_forced, the active
  micro-kernel), reset_variants() / reset of one point go back to 'auto', the context
  manager restores the previous value, also when its block raises;
- bad input: an unknown point or variant, a knob value outside its range -> ValueError
  naming the point and listing what is valid; a point of a backend this build lacks ->
  NotImplementedError; a non-str point -> TypeError;
- `last`: 'none' after a reset, the forced variant after a CPU GEMM, per thread;
- the environment, in child interpreters: GPUCMP_FORCE entries applied, bad ones skipped
  with one RuntimeWarning at import, the alias GPUCMP_CPU_SIMD (ignored when unknown, as
  before; GPUCMP_FORCE wins over it), and the GPUCMP_CONV_* aliases of the CUDA points.
"""
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from gpucmp import _core, ops, variants

SIMD = "cpu.gemm.simd"


@pytest.fixture(autouse=True)
def clean_registry():
    """Every test starts and ends with nothing forced (what the environment forced is put
    back afterwards, so the other test files see the process as it started)."""
    before = {p: d["forced"] for p, d in _core.variants().items()}
    _core.reset_variants()
    yield
    _core.reset_variants()
    for p, v in before.items():
        if v != "auto":
            _core.force_variant(p, v)


def _gemm():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    return ops.gemm(a, a.T.copy(), backend="cpu")


# ------------------------------------------------------------------ listing
def test_every_present_point_is_described():
    pts = variants.points()
    assert SIMD in pts
    for name, d in pts.items():
        assert set(d) == {"backend", "kind", "help", "variants", "available", "forced", "last", "range"}, name
        assert name.startswith(d["backend"] + "."), name
        assert d["variants"][0] == "auto" and d["available"][0] == "auto", name
        assert set(d["available"]) <= set(d["variants"]), name
        assert d["forced"] == "auto", name  # the fixture reset them
        if d["kind"] == "knob":
            lo, hi = d["range"]
            assert 1 <= lo <= hi and d["variants"] == ["auto"], name
        else:
            assert d["kind"] == "choice" and d["range"] is None and len(d["variants"]) >= 2, name


def test_cpu_simd_variants_are_the_available_ones():
    avail = variants.available(SIMD)
    assert avail and "generic" in avail and "auto" not in avail
    assert sorted(_core.cpu_simd_variants()) == sorted(avail)
    assert variants.available(SIMD, auto=True)[0] == "auto"


def test_cuda_points_exist_exactly_in_cuda_builds():
    pts = variants.points()
    cuda = sorted(p for p in pts if p.startswith("cuda."))
    if _core.built_with_cuda:
        assert {"cuda.gemm.path", "cuda.conv2d.fwd", "cuda.conv2d.bwd_data", "cuda.conv2d.wgrad"} <= set(cuda)
    else:
        assert cuda == []
        assert variants.available("cuda.gemm.path") == []


# ------------------------------------------------------------------ forcing, reset
@pytest.mark.parametrize("simd", variants.available(SIMD))
def test_force_each_available_simd_variant(simd):
    _core.force_variant(SIMD, simd)
    assert _core.variant_forced(SIMD) == simd
    assert variants.points()[SIMD]["forced"] == simd
    assert _core.cpu_simd_variant() == simd  # the micro-kernel the next GEMM runs
    _core.force_variant(SIMD, "auto")
    assert _core.variant_forced(SIMD) == "auto"


def test_reset_all_and_one_point():
    _core.force_variant(SIMD, "generic")
    _core.reset_variants()
    assert _core.variant_forced(SIMD) == "auto"
    _core.force_variant(SIMD, "generic")
    _core.reset_variants(SIMD)
    assert _core.variant_forced(SIMD) == "auto"
    with pytest.raises(ValueError, match="no.such.point"):
        _core.reset_variants("no.such.point")


def test_context_manager_restores_the_previous_value():
    avail = variants.available(SIMD)
    outer, inner = avail[-1], avail[0]
    with variants.forced(SIMD, outer):
        with variants.forced(SIMD, inner):
            assert variants.forced_name(SIMD) == inner
        assert variants.forced_name(SIMD) == outer
        with pytest.raises(KeyError):
            with variants.forced(SIMD, inner):
                raise KeyError("inside")
        assert variants.forced_name(SIMD) == outer
    assert variants.forced_name(SIMD) == "auto"


def test_old_wrappers_use_the_registry():
    _core.cpu_force_simd("generic")
    assert _core.variant_forced(SIMD) == "generic" and _core.cpu_simd_variant() == "generic"
    _core.cpu_force_simd("auto")
    assert _core.variant_forced(SIMD) == "auto"
    with pytest.raises(ValueError, match="sse2"):
        _core.cpu_force_simd("sse2")
    if not _core.built_with_cuda:
        with pytest.raises(RuntimeError, match="no CUDA backend"):
            _core.cuda_gemm_force_path("mma")


# ------------------------------------------------------------------ bad input
def test_unknown_point_names_it_and_lists_the_points():
    with pytest.raises(ValueError) as e:
        _core.force_variant("cpu.gemm.smid", "generic")
    assert "cpu.gemm.smid" in str(e.value) and SIMD in str(e.value) and "cuda.gemm.path" in str(e.value)
    for f in (_core.variant_forced, _core.variant_last):
        with pytest.raises(ValueError, match="cpu.gemm.smid"):
            f("cpu.gemm.smid")
    with pytest.raises(ValueError, match="cpu.gemm.smid"):
        variants.available("cpu.gemm.smid")


def test_unknown_variant_names_the_point_and_lists_the_valid_names():
    with pytest.raises(ValueError) as e:
        _core.force_variant(SIMD, "sse2")
    msg = str(e.value)
    assert SIMD in msg and "'sse2'" in msg
    for name in _core.variants()[SIMD]["variants"]:
        assert name in msg
    assert _core.variant_forced(SIMD) == "auto"  # nothing changed


def test_unavailable_variant_says_why():
    missing = [v for v in _core.variants()[SIMD]["variants"] if v not in variants.available(SIMD, auto=True)]
    if not missing:
        pytest.skip("this CPU runs every micro-kernel")
    with pytest.raises(NotImplementedError, match="not available here"):
        _core.force_variant(SIMD, missing[0])


@pytest.mark.parametrize("value", ["9", "2", "three", "", 100])
def test_knob_values_outside_the_range(value):
    # the range is checked before the backend: the same ValueError in every build
    with pytest.raises(ValueError, match=r"cuda\.conv2d\.mma_stages.*\[3, 7\]"):
        _core.force_variant("cuda.conv2d.mma_stages", value)


def test_points_of_a_missing_backend():
    if _core.built_with_cuda:
        pytest.skip("this build has the CUDA backend")
    with pytest.raises(NotImplementedError, match="no cuda backend"):
        _core.force_variant("cuda.gemm.path", "mma")
    with pytest.raises(NotImplementedError, match="no cuda backend"):
        _core.force_variant("cuda.conv2d.mma_stages", 4)


def test_report_only_names_cannot_be_forced():
    # cuda.gemm.path's 'vendor' is what `last` says after a cuBLASLt call
    with pytest.raises(ValueError, match="reported"):
        _core.force_variant("cuda.gemm.path", "vendor")


def test_argument_types():
    with pytest.raises(TypeError):
        _core.force_variant(3, "generic")
    with pytest.raises(TypeError):
        _core.force_variant(SIMD, 1.5)
    with pytest.raises(TypeError):
        _core.variant_last(None)


# ------------------------------------------------------------------ last
def test_last_reports_the_variant_a_cpu_gemm_ran():
    assert _core.variant_last(SIMD) == "none"  # reset by the fixture
    for simd in variants.available(SIMD):
        with variants.forced(SIMD, simd):
            _gemm()
            assert _core.variant_last(SIMD) == simd
            assert variants.points()[SIMD]["last"] == simd
    _gemm()
    assert _core.variant_last(SIMD) == _core.cpu_simd_variant()  # auto: the one it picked
    _core.reset_variants(SIMD)
    assert _core.variant_last(SIMD) == "none"


def test_last_is_per_thread():
    with variants.forced(SIMD, "generic"):
        _gemm()
        seen = {}

        def other():
            seen["before"] = _core.variant_last(SIMD)
            _gemm()
            seen["after"] = _core.variant_last(SIMD)

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == {"before": "none", "after": "generic"}
    assert _core.variant_last(SIMD) == "generic"


# ------------------------------------------------------------------ the environment
CHILD = r"""
import json, warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    from gpucmp import _core
pts = _core.variants()
print("RESULT " + json.dumps({
    "forced": {p: d["forced"] for p, d in pts.items()},
    "report": _core.variants_env_report(),
    "warnings": [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)],
    "simd": _core.cpu_simd_variant()}))
"""


def run_child(**env_vars):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUCMP_FORCE", "GPUCMP_CONV_", "GPUCMP_CPU_SIMD"))}
    env.update(env_vars)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(_core.__file__)))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300, cwd="/")
    assert p.returncode == 0, f"child failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, p.stdout + p.stderr
    return json.loads(line[-1][len("RESULT "):])


def test_env_nothing_set():
    out = run_child()
    assert set(out["forced"].values()) == {"auto"}
    assert out["report"] == "" and out["warnings"] == []


def test_env_gpucmp_force_applies_good_entries_and_reports_bad_ones():
    out = run_child(GPUCMP_FORCE=" cpu.gemm.simd = generic ; no.such.point=1,cpu.gemm.simd=sse2,garbage, ")
    assert out["forced"][SIMD] == "generic" and out["simd"] == "generic"
    lines = out["report"].strip().splitlines()
    assert len(lines) == 3, out["report"]
    assert "no.such.point" in lines[0] and "'sse2'" in lines[1] and "garbage" in lines[2]
    assert len(out["warnings"]) == 1 and "no.such.point" in out["warnings"][0] and "garbage" in out["warnings"][0]


def test_env_unavailable_simd_is_skipped():
    missing = [v for v in _core.variants()[SIMD]["variants"] if v not in variants.available(SIMD, auto=True)]
    if not missing:
        pytest.skip("this CPU runs every micro-kernel")
    out = run_child(GPUCMP_FORCE=f"{SIMD}={missing[0]}")
    assert out["forced"][SIMD] == "auto"
    assert "not available here" in out["report"] and len(out["warnings"]) == 1


def test_env_cpu_simd_alias():
    assert run_child(GPUCMP_CPU_SIMD="generic")["forced"][SIMD] == "generic"
    quiet = run_child(GPUCMP_CPU_SIMD="no-such-isa")  # ignored silently, as before
    assert quiet["forced"][SIMD] == "auto" and quiet["warnings"] == [] and quiet["report"] == ""
    other = [v for v in variants.available(SIMD) if v != "generic"]
    if other:  # GPUCMP_FORCE is read after the aliases: it wins
        out = run_child(GPUCMP_CPU_SIMD=other[0], GPUCMP_FORCE=f"{SIMD}=generic")
        assert out["forced"][SIMD] == "generic"


def test_env_conv_aliases():
    out = run_child(GPUCMP_CONV_GEMM="conv", GPUCMP_CONV_WGRAD="mma", GPUCMP_CONV_WGRAD_VARIANT="da3")
    assert out["warnings"] == [] and out["report"] == ""
    if not _core.built_with_cuda:  # no CUDA points: the aliases have nothing to set
        assert not any(p.startswith("cuda.") for p in out["forced"])
        return
    f = out["forced"]
    assert (f["cuda.conv2d.fwd"], f["cuda.conv2d.bwd_data"], f["cuda.conv2d.wgrad"]) == ("conv", "conv", "mma")
    assert f["cuda.conv2d.wgrad_wgmma"] == "da3"
    g = run_child(GPUCMP_CONV_GEMM="1", GPUCMP_CONV_WGRAD="wgmma")["forced"]
    assert (g["cuda.conv2d.fwd"], g["cuda.conv2d.bwd_data"], g["cuda.conv2d.wgrad"]) == ("gemm", "gemm", "wgmma")
    h = run_child(GPUCMP_CONV_GEMM="gemm", GPUCMP_FORCE="cuda.conv2d.fwd=simt,cuda.conv2d.mma_stages=4")["forced"]
    assert (h["cuda.conv2d.fwd"], h["cuda.conv2d.bwd_data"], h["cuda.conv2d.mma_stages"]) == ("simt", "gemm", "4")
