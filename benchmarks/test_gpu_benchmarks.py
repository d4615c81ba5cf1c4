"""The project's own pytest benchmark suite, on the gpu_benchmark fixture of gpucmp's plugin.

    pytest benchmarks/test_gpu_benchmarks.py --gpucmp-devices all [--benchmark-json out.json]

Each test measures one unit (a matmul, a convolution, the seeds' CNN training step and its
inference) on every device given, checks the result against NumPy, and leaves its figures
(seconds, peak memory, energy) in the JUnit properties and pytest-benchmark's extra_info.
"""
import numpy as np
import pytest

import gpucmp
from gpucmp import keras
from gpucmp.harness.workloads.seeds import build_seed_cnn


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.mark.parametrize("n", [256, 1024])
def test_matmul(gpu_benchmark, rng, n):
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = gpu_benchmark(gpucmp.ops.matmul, a, b)
    ref = a.astype(np.float64) @ b
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 1e-3


def test_conv3x3(gpu_benchmark, rng):
    x = rng.standard_normal((4, 56, 56, 64)).astype(np.float32)
    w = rng.standard_normal((3, 3, 64, 64)).astype(np.float32) * 0.05
    y = gpu_benchmark(gpucmp.ops.conv2d, x, w, padding="same")
    assert y.shape == (4, 56, 56, 64) and np.isfinite(y).all()


def test_seed_cnn_fit_epoch(gpu_benchmark, gpucmp_device, rng):
    gpucmp.set_device(gpucmp_device)
    model = build_seed_cnn(keras)
    x = rng.random((2048, 28, 28, 1), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 2048)]
    hist = gpu_benchmark(model.fit, x, y, batch_size=128, epochs=1, verbose=0)
    assert np.isfinite(hist.history["loss"]).all()
    assert gpu_benchmark.stats["seconds"] > 0
