"""The pytest plugin in a scratch test directory: the gpu_benchmark fixture runs and measures
a callable on each device given, returns its result, and fills pytest-benchmark's JSON."""
import json
import textwrap

import pytest

pytest_plugins = ["pytester"]


def _plugin_args():
    """-p for the plugin unless pytest already loads it through gpucmp's pytest11 entry point."""
    from importlib.metadata import entry_points
    eps = entry_points(group="pytest11")
    return [] if any(ep.value == "gpucmp.harness.pytest_plugin" for ep in eps) else \
        ["-p", "gpucmp.harness.pytest_plugin"]

SCRATCH = textwrap.dedent("""
    import numpy as np
    import gpucmp

    def test_matmul(gpu_benchmark, gpucmp_device):
        rng = np.random.default_rng()
        a = rng.standard_normal((64, 48)).astype(np.float32)
        b = rng.standard_normal((48, 32)).astype(np.float32)
        c = gpu_benchmark(gpucmp.ops.matmul, a, b)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=2e-3, atol=2e-3)
        s = gpu_benchmark.stats
        assert s["device"] == gpucmp_device and s["seconds"] > 0 and s["repeats"] == 3
        assert s["peak_memory_bytes"] >= 0
""")


def test_gpu_benchmark_fixture_measures_and_returns(pytester):
    pytester.makepyfile(test_scratch=SCRATCH)
    res = pytester.runpytest_subprocess(*_plugin_args(), "--gpucmp-devices", "cpu",
                                        "--gpucmp-repeats", "3", "-v")
    res.assert_outcomes(passed=1)
    assert "test_matmul[cpu]" in res.stdout.str()


def test_unknown_device_is_a_usage_error(pytester):
    pytester.makepyfile(test_scratch=SCRATCH)
    res = pytester.runpytest_subprocess(*_plugin_args(), "--gpucmp-devices", "cuda:77")
    assert res.ret != 0
    assert "not present" in res.stderr.str() + res.stdout.str()


def test_figures_go_into_pytest_benchmark_json(pytester, tmp_path):
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile(test_scratch=SCRATCH)
    out = tmp_path / "bench.json"
    res = pytester.runpytest_subprocess(*_plugin_args(), "--gpucmp-devices", "cpu",
                                        "--gpucmp-repeats", "3", f"--benchmark-json={out}")
    res.assert_outcomes(passed=1)
    data = json.loads(out.read_text())
    extra = data["benchmarks"][0]["extra_info"]
    assert extra["gpucmp_device"] == "cpu" and extra["gpucmp_seconds"] > 0
