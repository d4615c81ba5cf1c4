"""Measured runs: benchmark() rows on the CPU (tiny sizes, in CI) and on every GPU (energy
measured there), their memory against the memory model, measure_callable, and bad inputs."""
import math

import numpy as np
import pytest

import gpucmp
from gpucmp import keras
from gpucmp.harness import runner


def _check_rows(df, device):
    assert len(df) and (df["device"] == device).all() and (df["source"] == "measured").all()
    assert (df["step_time_s"] > 0).all() and (df["throughput"] > 0).all()
    assert (df["step_time_min_s"] <= df["step_time_s"]).all() and (df["step_time_s"] <= df["step_time_max_s"]).all()
    assert (df["peak_memory_bytes"] > 0).all()


def test_benchmark_on_the_cpu_tiny():
    df = gpucmp.benchmark(["cnn", "gemm:128", "conv", "bandwidth"], devices=["cpu"], batch_sizes=[16],
                          repeats=2, min_sample_s=0.05)
    _check_rows(df, "cpu")
    assert list(df["workload"]) == ["cnn", "gemm", "conv", "bandwidth"]
    gemm = df[df["workload"] == "gemm"].iloc[0]
    assert gemm["throughput"] == pytest.approx(2 * 128 ** 3 / gemm["step_time_s"] / 1e12)
    cnn = df[df["workload"] == "cnn"].iloc[0]
    assert cnn["throughput"] == pytest.approx(16 / cnn["step_time_s"])
    # the plan's buffers as modelled against the backend's own high-water mark
    assert cnn["modeled_memory_bytes"] == pytest.approx(cnn["peak_memory_bytes"], rel=0.25)


def test_a_users_model_is_measured_on_a_copy():
    m = keras.models.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(12,)),
                                 keras.layers.Dense(3, activation="softmax")])
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    before = [w.copy() for w in m.get_weights()]
    df = gpucmp.benchmark([m], devices=["cpu"], batch_sizes=[8], repeats=2, min_sample_s=0.02)
    _check_rows(df, "cpu")
    assert df["workload"][0] == m.name
    for a, b in zip(before, m.get_weights()):
        np.testing.assert_array_equal(a, b)             # the user's weights are untouched
    assert m.optimizer.iterations == 0


def test_measure_callable_returns_the_result():
    rng = np.random.default_rng()
    a = rng.standard_normal((32, 16)).astype(np.float32)
    out, stats = runner.measure_callable(gpucmp.ops.matmul, (a, a.T), device="cpu", repeats=3)
    np.testing.assert_allclose(out, a.astype(np.float64) @ a.T, rtol=1e-4, atol=1e-4)
    assert stats["repeats"] == 3 and stats["seconds"] > 0 and stats["min_seconds"] <= stats["seconds"]


@pytest.mark.parametrize("kwargs, exc, needle", [
    ({"workloads": ["nope"]}, ValueError, "unknown workload"),
    ({"workloads": []}, ValueError, "empty"),
    ({"devices": ["cuda:77"]}, ValueError, "not present"),
    ({"devices": []}, ValueError, "empty"),
    ({"precisions": ["float8"]}, ValueError, "unknown precision"),
    ({"batch_sizes": [0]}, ValueError, "positive"),
    ({"batch_sizes": [2.5]}, TypeError, "positive integers"),
    ({"repeats": 0}, ValueError, "repeats"),
    ({"workloads": ["cnn"], "devices": ["cpu"], "batch_sizes": [10 ** 9]}, ValueError, "does not fit"),
])
def test_bad_inputs_are_clear_exceptions(kwargs, exc, needle):
    with pytest.raises(exc, match=needle):
        gpucmp.benchmark(**kwargs)


@pytest.mark.cuda
def test_benchmark_on_each_gpu_measures_energy():
    for dev in [d for d in gpucmp.available_devices() if d.startswith("cuda")]:
        df = gpucmp.benchmark(["cnn", "gemm:4096", "bandwidth"], devices=[dev], precisions=["float32", "float16"],
                              batch_sizes=[128], repeats=3)
        _check_rows(df, dev)
        assert df["gpu"].notna().all()
        assert (df["energy_per_step_j"] > 0).all() and (df["avg_power_w"] > 50).all()
        assert df["sm_clock_mhz"].notna().all()
        cnn = df[df["workload"] == "cnn"]
        assert np.allclose(cnn["modeled_memory_bytes"], cnn["peak_memory_bytes"], rtol=0.25)
        assert not math.isnan(df["energy_per_step_j"].sum())
