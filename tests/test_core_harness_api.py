"""The core's services for the comparison harness (CORE_API.md, "Device queries"):
gpucmp._core.device_info, memory_stats / reset_peak_memory, bench_copy, and the SM
confinement of the CUDA backend (GPUCMP_CUDA_SMS, CUDA green contexts).

On the CPU every check runs here; the same checks run for every CUDA backend under the
`cuda` marker (skipped without a GPU). The confinement is read once per process, so its
tests run a child interpreter with GPUCMP_CUDA_SMS set and read its JSON report; a bad
value must come back as a Python exception naming the variable, never a crash.
"""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpucmp import _core

CUDA_BACKENDS = [b for b in _core.backends() if b.startswith("cuda")] or ["cuda:0"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CPU_KEYS = {"name": str, "logical_cores": int, "omp_threads": int, "simd": str}
CUDA_KEYS = {"name": str, "compute_capability": str, "sms": int, "sms_physical": int,
             "total_memory_bytes": int, "sm_clock_mhz": int, "memory_clock_mhz": int,
             "memory_bus_width_bits": int, "l2_bytes": int, "smem_per_sm_bytes": int,
             "smem_per_block_optin_bytes": int, "pci_bus_id": str, "runtime_version": int,
             "driver_version": int}
MEM_KEYS = {"allocated_bytes", "peak_bytes", "device_free_bytes", "device_total_bytes"}


def positive_seconds(t):
    return isinstance(t, float) and math.isfinite(t) and t > 0


def check_types(info, keys):
    for k, t in keys.items():
        assert k in info, k
        assert isinstance(info[k], t) and not isinstance(info[k], bool), (k, info[k])


# ------------------------------------------------------------------ device_info

def test_device_info_cpu():
    info = _core.device_info("cpu")
    assert set(info) == set(CPU_KEYS)
    check_types(info, CPU_KEYS)
    assert info["name"]
    assert info["logical_cores"] >= 1 and info["omp_threads"] >= 1
    assert info["simd"] == _core.cpu_simd_variant()
    assert info["simd"] in _core.cpu_simd_variants()


def test_device_info_follows_the_forced_simd_variant():
    try:
        _core.cpu_force_simd("generic")
        assert _core.device_info("cpu")["simd"] == "generic"
    finally:
        _core.cpu_force_simd("auto")


@pytest.mark.parametrize("fn", [_core.device_info, _core.memory_stats, _core.reset_peak_memory])
def test_unknown_backend_is_a_value_error_listing_the_backends(fn):
    with pytest.raises(ValueError) as e:
        fn("tpu:7")
    assert "tpu:7" in str(e.value) and "'cpu'" in str(e.value)
    with pytest.raises(TypeError):
        fn(0)


# ------------------------------------------------------------------ memory accounting

def check_memory_accounting(backend, n=1 << 20):
    _core.reset_peak_memory(backend)
    before = _core.memory_stats(backend)
    assert set(before) == MEM_KEYS
    assert before["peak_bytes"] == before["allocated_bytes"] >= 0
    buf = _core.Buffer(backend, n)                       # n float32 values
    held = _core.memory_stats(backend)
    assert held["allocated_bytes"] >= before["allocated_bytes"] + 4 * n
    assert held["peak_bytes"] >= held["allocated_bytes"]
    del buf
    after = _core.memory_stats(backend)
    assert after["allocated_bytes"] == before["allocated_bytes"]
    assert after["peak_bytes"] >= before["allocated_bytes"] + 4 * n   # the peak stays
    _core.reset_peak_memory(backend)
    reset = _core.memory_stats(backend)
    assert reset["peak_bytes"] == reset["allocated_bytes"] == before["allocated_bytes"]
    return after


def test_memory_stats_cpu():
    after = check_memory_accounting("cpu")
    assert after["device_free_bytes"] is None and after["device_total_bytes"] is None


def test_memory_stats_cpu_counts_ops_temporaries_and_returns_to_zero_growth():
    base = _core.memory_stats("cpu")["allocated_bytes"]
    bufs = [_core.Buffer("cpu", k) for k in (0, 1, 15, 16, 1000)]   # odd sizes, zero size
    assert _core.memory_stats("cpu")["allocated_bytes"] > base
    for b in bufs[1:]:                                               # CPU pointers stay 64-byte aligned
        assert np.frombuffer(b, np.float32).__array_interface__["data"][0] % 64 == 0
    del bufs, b
    assert _core.memory_stats("cpu")["allocated_bytes"] == base


# ------------------------------------------------------------------ bench_copy

def test_bench_copy_cpu():
    assert positive_seconds(_core.bench_copy("cpu", 1 << 16))
    assert positive_seconds(_core.bench_copy("cpu", 3, repeats=3, inner=7))   # not a multiple of 4
    assert positive_seconds(_core.bench_copy(device="cpu", nbytes=4096, repeats=2, inner=None, warmup=0))
    base = _core.memory_stats("cpu")["allocated_bytes"]
    _core.bench_copy("cpu", 1 << 20, repeats=2)
    assert _core.memory_stats("cpu")["allocated_bytes"] == base      # both buffers released


def check_bench_copy_rejects(backend):
    for bad in (0, -1):
        with pytest.raises(ValueError, match="nbytes"):
            _core.bench_copy(backend, bad)
    with pytest.raises(MemoryError):
        _core.bench_copy(backend, 1 << 60)
    with pytest.raises(ValueError, match="repeats"):
        _core.bench_copy(backend, 64, repeats=0)
    with pytest.raises(ValueError, match="inner"):
        _core.bench_copy(backend, 64, inner=0)
    with pytest.raises(TypeError):
        _core.bench_copy(backend, "64")
    with pytest.raises(TypeError):
        _core.bench_copy(backend, 64, inner=2.5)


def test_bench_copy_rejects_bad_arguments():
    check_bench_copy_rejects("cpu")
    with pytest.raises(ValueError, match="no-such"):
        _core.bench_copy("no-such", 64)


# ------------------------------------------------------------------ CUDA backends

@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_device_info_cuda(backend):
    info = _core.device_info(backend)
    assert set(info) == set(CUDA_KEYS) | {"sm_limit"}
    check_types(info, CUDA_KEYS)
    major, minor = (int(x) for x in info["compute_capability"].split("."))
    assert major >= 7 and minor >= 0
    assert 0 < info["sms"] <= info["sms_physical"]
    if os.environ.get("GPUCMP_CUDA_SMS", "").strip():
        assert isinstance(info["sm_limit"], int)
    else:
        assert info["sm_limit"] is None and info["sms"] == info["sms_physical"]
    assert info["total_memory_bytes"] > 1 << 30
    assert info["sm_clock_mhz"] > 100 and info["memory_clock_mhz"] > 100
    assert info["memory_bus_width_bits"] >= 64 and info["l2_bytes"] > 0
    assert info["smem_per_block_optin_bytes"] <= info["smem_per_sm_bytes"]
    assert len(info["pci_bus_id"].split(":")) == 3        # domain:bus:device.function
    assert info["driver_version"] >= 12000 and info["runtime_version"] >= 12000


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_memory_stats_cuda(backend):
    after = check_memory_accounting(backend, n=8 << 20)
    assert 0 < after["device_free_bytes"] <= after["device_total_bytes"]
    assert after["device_total_bytes"] > 1 << 30
    # the backend's own buffers (scratch, error flags) are counted once it is initialised
    assert after["allocated_bytes"] >= 4 << 20


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_bench_copy_cuda(backend):
    small = _core.bench_copy(backend, 4096)
    big = _core.bench_copy(backend, 256 << 20, repeats=5)
    assert positive_seconds(small) and positive_seconds(big)
    assert big > small
    check_bench_copy_rejects(backend)


# ------------------------------------------------------------------ SM confinement

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    out = {}
    try:
        from gpucmp import _core
        import gpucmp.ops as ops
        out["backends"] = _core.backends()
        try:
            out["info"] = _core.device_info("cuda:0")
            rng = np.random.default_rng(0)
            a = rng.standard_normal((300, 200), dtype=np.float32)
            b = rng.standard_normal((200, 260), dtype=np.float32)
            c = ops.matmul(a, b, backend="cuda:0")
            ref = a.astype(np.float64) @ b
            out["gemm_rel_err"] = float(np.linalg.norm(c - ref) / np.linalg.norm(ref))
            a = rng.standard_normal((1024, 1024), dtype=np.float32)
            c = ops.matmul(a, a, backend="cuda:0", dtype="float16")
            ref = a.astype(np.float16).astype(np.float64) @ a.astype(np.float16)
            out["gemm16_rel_err"] = float(np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref))
            out["mem"] = _core.memory_stats("cuda:0")
            out["copy_s"] = _core.bench_copy("cuda:0", 1 << 20, repeats=3)
        except Exception as e:
            out["error"] = type(e).__name__ + ": " + str(e)
        try:   # a second use repeats the first failure (never the whole device)
            _core.Buffer("cuda:0", 16)
            out["second_use"] = "ok"
        except Exception as e:
            out["second_use"] = type(e).__name__ + ": " + str(e)
    except Exception as e:
        out["import_error"] = type(e).__name__ + ": " + str(e)
    print("RESULT " + json.dumps(out))
""")


def run_child(sms):
    env = dict(os.environ)
    env["GPUCMP_CUDA_SMS"] = str(sms)
    # the child imports the same gpucmp as this process
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(_core.__file__)))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300,
                       cwd="/")
    assert p.returncode == 0, f"child crashed (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, p.stdout + p.stderr
    out = json.loads(line[-1][len("RESULT "):])
    assert "import_error" not in out, out
    return out


@pytest.mark.cuda
def test_green_context_confines_the_backend_to_16_sms():
    out = run_child(16)
    assert "error" not in out, out["error"]
    info = out["info"]
    assert info["sm_limit"] == 16
    assert 16 <= info["sms"] <= 24, info        # the split may round up to the granularity
    assert info["sms"] < info["sms_physical"]
    assert out["gemm_rel_err"] < 1e-2            # TF32 by default
    assert out["gemm16_rel_err"] < 1e-2
    assert out["mem"]["allocated_bytes"] >= 0 and out["mem"]["device_total_bytes"] > 0
    assert out["copy_s"] > 0
    assert out["second_use"] == "ok"


@pytest.mark.cuda
@pytest.mark.parametrize("bad", ["100000", "0", "-3", "sixteen"])
def test_bad_green_context_request_fails_first_use_with_a_clear_error(bad):
    out = run_child(bad)
    assert "cuda:0" in out["backends"]              # registration never fails on it
    assert "error" in out, out
    assert "GPUCMP_CUDA_SMS" in out["error"], out["error"]
    assert out["error"].split(":")[0] in ("ValueError", "RuntimeError", "NotImplementedError")
    assert "GPUCMP_CUDA_SMS" in out["second_use"], out["second_use"]


# ------------------------------------------------------------------ launch log, graph timing

def test_launch_log_and_graph_timing_need_a_gpu():
    with pytest.raises(ValueError, match="cpu"):
        _core.launch_log_begin("cpu")
    with pytest.raises(RuntimeError, match="no launch log is open"):
        _core.launch_log_end()
    with pytest.raises(ValueError, match="graph capture"):
        _core.bench_gemm("cpu", 32, 32, 32, "float32", repeats=1, graph=True)
    with pytest.raises(ValueError, match="grids_for needs a CUDA backend"):
        _core.bench_conv("cpu", 2, 8, 8, 4, 4, 3, 3, dtype="float32", repeats=1, grids_for=[16])
    with pytest.raises(ValueError, match="plan_sms needs a CUDA backend"):
        _core.bench_gemm("cpu", 32, 32, 32, "float32", repeats=1, plan_sms=8)
    with pytest.raises(ValueError, match="plan_sms must be"):
        _core.bench_gemm("cpu", 32, 32, 32, "float32", repeats=1, plan_sms=-2)


@pytest.mark.parametrize("bad, exc", [("16", TypeError), (16, TypeError), ([], ValueError), ([0], ValueError),
                                      ([16, -1], ValueError), (list(range(1, 66)), ValueError)])
def test_grids_for_rejects_bad_sm_lists(bad, exc):
    with pytest.raises(exc, match="grids_for"):
        _core.bench_gemm("cpu", 32, 32, 32, "float32", repeats=1, grids_for=bad)


LAUNCH_KEYS = {"name", "grid", "block", "blocks", "threads", "smem_bytes", "blocks_per_sm"}


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_launch_log_records_the_kernels_of_an_op(backend):
    _core.launch_log_begin(backend)
    try:
        _core.bench_gemm(backend, 512, 384, 256, "float16", repeats=1, warmup=1)
    finally:
        launches = _core.launch_log_end()
    assert launches, "a GEMM launched no kernel the log saw"
    for r in launches:
        assert set(r) == LAUNCH_KEYS, r
        assert r["blocks"] == r["grid"][0] * r["grid"][1] * r["grid"][2] >= 1
        assert r["threads"] == r["block"][0] * r["block"][1] * r["block"][2] >= 1
        assert r["smem_bytes"] >= 0 and r["blocks_per_sm"] >= 1, r
        assert r["name"] and r["name"] != "?", r
    with pytest.raises(RuntimeError, match="no launch log is open"):
        _core.launch_log_end()


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_grids_follow_the_sm_count_the_kernels_are_told(backend):
    """The seeds' CNN's first convolution (one input channel) sizes its grid from the SMs it
    sees: fewer SMs, fewer blocks (each doing more); the op still computes the same thing."""
    full = _core.device_info(backend)["sms"]
    r = _core.bench_conv(backend, 128, 28, 28, 1, 32, 3, 3, dtype="float16", which="fwd", repeats=3,
                         graph=True, grids_for=[8, full])
    small = _core.bench_conv(backend, 128, 28, 28, 1, 32, 3, 3, dtype="float16", which="fwd", repeats=3,
                             graph=True, plan_sms=8)
    assert positive_seconds(small)
    assert positive_seconds(r["seconds"])
    assert set(r["grids"]) == {8, full}

    def main_blocks(launches):
        m = max(launches, key=lambda x: (x["smem_bytes"], x["blocks"] * x["threads"]))
        return m["blocks"]
    assert main_blocks(r["grids"][8]) < main_blocks(r["grids"][full]), r["grids"]
    # the answer does not depend on the SM count the kernels were told
    rng = np.random.default_rng()
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((200, 100)).astype(np.float32)
    from gpucmp import ops
    want = a.astype(np.float64) @ b
    for sms in (8, full):
        _core.launch_log_begin(backend, sms=sms)
        try:
            got = np.asarray(ops.matmul(a, b, backend=backend))
        finally:
            _core.launch_log_end()
        assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-2       # TF32 by default


@pytest.mark.cuda
@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_graph_timing_of_an_op(backend):
    eager = _core.bench_gemm(backend, 16, 16, 16, "float32", repeats=5, inner=200)
    graph = _core.bench_gemm(backend, 16, 16, 16, "float32", repeats=5, inner=200, graph=True)
    conv = _core.bench_conv(backend, 8, 14, 14, 32, 32, 3, 3, dtype="bfloat16", which="bwd_data", repeats=3,
                            inner=20, graph=True)
    assert positive_seconds(eager) and positive_seconds(graph) and positive_seconds(conv)
