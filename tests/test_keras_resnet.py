"""gpucmp.keras.applications.ResNet50 against keras.applications.ResNet50: the same
layers (names, types, output shapes, parameter counts, weight order) for a few input
shapes and pooling options, Keras' argument checks, weights from a Keras file, and --
through the graph plan -- Keras' predictions from Keras' weights.

Keras' own ResNet50 takes ~10 s to build on two cores: each Keras configuration is
built once per module.
"""
import numpy as np
import pytest

from keras_reference import keras3, randomize_bn_statistics, rel_err

keras = keras3()

import gpucmp.keras as gk  # noqa: E402
from gpucmp.keras.applications import resnet50 as gk_resnet50  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

CONFIGS = {
    "top64": dict(input_shape=(64, 64, 3), classes=10),
    "avg32": dict(include_top=False, input_shape=(32, 32, 3), pooling="avg"),
    "max40": dict(include_top=False, input_shape=(40, 48, 3), pooling="max"),
}
_KERAS = {}


def keras_resnet(config):
    if config not in _KERAS:
        keras.utils.set_random_seed(7)
        _KERAS[config] = keras.applications.ResNet50(weights=None, **CONFIGS[config])
    return _KERAS[config]


def rows(model):
    out = []
    for layer in model.layers:
        shape = layer.output.shape if hasattr(layer, "output") else layer.output_shape
        name = None if type(layer).__name__ == "InputLayer" else layer.name   # session-numbered
        out.append((name, type(layer).__name__, tuple(shape), layer.count_params()))
    return out


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_layers_names_shapes_and_counts_match_keras(config):
    km = keras_resnet(config)
    gm = gk.applications.ResNet50(weights=None, **CONFIGS[config])
    assert gm.name == km.name == "resnet50"
    assert rows(gm) == rows(km)
    assert [w.path for w in gm.weights] == [w.path for w in km.weights]
    assert [w.shape for w in gm.weights] == [tuple(w.shape) for w in km.weights]
    assert gm.count_params() == km.count_params()
    assert sum(w.size for w in gm.non_trainable_weights) == \
        sum(int(np.prod(w.shape)) for w in km.non_trainable_weights)
    assert gm.output_shape == tuple(km.output_shape)


def test_full_size_counts_and_module_paths():
    m = gk_resnet50.ResNet50()
    assert m.input_shape == (None, 224, 224, 3) and m.output_shape == (None, 1000)
    assert m.count_params() == 25_636_712
    assert sum(w.size for w in m.non_trainable_weights) == 53_120
    assert len(m.layers) == 177 and m.layers[-1].name == "predictions"
    assert m.get_layer("predictions").activation == "softmax"
    assert gk.applications.resnet50.ResNet50 is gk.applications.ResNet50
    free = gk.applications.ResNet50(include_top=False)
    assert free.input_shape == (None, None, None, 3)
    assert free.output_shape == (None, None, None, 2048)
    logits = gk.applications.ResNet50(input_shape=(32, 32, 3), classes=3, classifier_activation=None)
    assert logits.get_layer("predictions").activation == "linear"


@pytest.mark.parametrize("kwargs,match", [
    (dict(weights="imagenet"), "cannot download"),
    (dict(weights="/no/such/file.h5"), "path to the weights file"),
    (dict(input_shape=(31, 64, 3)), "at least 32x32"),
    (dict(input_shape=(64, 64)), "three integers"),
    (dict(input_shape=(None, None, 3)), "static `input_shape`"),
    (dict(include_top=False, pooling="sum"), "pooling"),
    (dict(classifier_activation="nonsense"), "nonsense"),
])
def test_bad_arguments_raise_like_keras(kwargs, match):
    with pytest.raises((ValueError, NotImplementedError), match=match):
        gk.applications.ResNet50(**kwargs)


def test_input_tensor_and_unusual_channels():
    inp = gk.Input((48, 48, 3), name="pixels")
    m = gk.applications.ResNet50(input_tensor=inp, include_top=False, pooling="avg")
    assert m.layers[0].name == "pixels" and m.output_shape == (None, 2048)
    with pytest.warns(UserWarning, match="1 or 3 input channels"):
        gk.applications.ResNet50(include_top=False, input_shape=(32, 32, 4))


def test_weights_file_from_keras_loads_by_name(tmp_path):
    km = keras_resnet("top64")
    path = tmp_path / "resnet50_small.weights.h5"
    km.save_weights(path)
    gm = gk.applications.ResNet50(weights=str(path), **CONFIGS["top64"])
    for a, b in zip(gm.get_weights(), km.get_weights()):
        np.testing.assert_array_equal(a, b)


def copy_layer_by_layer(km, gm, rng):
    """Keras' weights into gpucmp, layer by layer by name, BN statistics made non-trivial
    first (on the Keras side) so inference does not reduce BN to the identity."""
    randomize_bn_statistics(km, rng)
    for layer in km.layers:
        if layer.weights:
            gm.get_layer(layer.name).set_weights(layer.get_weights())


@pytest.mark.parametrize("config", ["top64", "avg32"])
def test_predictions_from_keras_weights_match_keras(config):
    km = keras_resnet(config)
    gm = gk.applications.ResNet50(weights=None, **CONFIGS[config])
    rng = np.random.default_rng(11)
    copy_layer_by_layer(km, gm, rng)
    size = CONFIGS[config]["input_shape"]
    x = rng.uniform(0, 1, size=(3,) + size).astype(np.float32)
    assert rel_err(gm.predict(x, verbose=0), km.predict(x, verbose=0)) < 1e-5
