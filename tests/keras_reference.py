"""What the tests against real Keras share: Keras 3 on the JAX backend as the reference
(`keras3()` skips the calling test module without it), a fixture giving both Keras and
gpucmp.keras fresh sessions and seeds, and the comparisons they use.

Import the fixture into a test module (`from keras_reference import fresh_sessions`) and
pytest applies it to every test there (autouse).
"""
import os

import numpy as np
import pytest


def keras3():
    """Real Keras 3 with the JAX backend (KERAS_BACKEND=jax when unset), or a module skip."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    keras = pytest.importorskip("keras")
    if not keras.__version__.startswith("3."):
        pytest.skip(f"needs Keras 3, found {keras.__version__}", allow_module_level=True)
    return keras


@pytest.fixture(autouse=True)
def fresh_sessions():
    import keras

    import gpucmp.keras as gk
    keras.backend.clear_session()
    gk.backend.clear_session()
    keras.utils.set_random_seed(0)
    gk.utils.set_random_seed(0)


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def weights_close(got, want):
    """fp32 agreement of an updated weight: 1e-5 relative, or -- for the bias of a layer
    feeding a training-mode BatchNormalization, whose gradient is exactly zero and
    computes to rounding noise (~1e-9) on both sides -- 1e-7 absolute."""
    return rel_err(got, want) < 1e-5 or float(np.max(np.abs(np.asarray(got, np.float64) -
                                                           np.asarray(want, np.float64)))) < 1e-7


def randomize_bn_statistics(model, rng):
    """Non-trivial gamma, beta and moving statistics in every BatchNormalization of a
    Keras model, so that inference does not reduce BN to the identity."""
    import keras
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            c = layer.moving_mean.shape[0]
            layer.set_weights([rng.uniform(0.8, 1.2, c).astype("float32"),
                               rng.normal(0, 0.1, c).astype("float32"),
                               rng.normal(0, 0.1, c).astype("float32"),
                               rng.uniform(0.8, 1.5, c).astype("float32")])
