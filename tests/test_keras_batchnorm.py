"""BatchNormalization, the global pools and ZeroPadding2D against Keras 3: arguments,
defaults, configs, weights and their trainable flags, shapes, errors, and -- through the
graph plan -- inference, a training step and frozen (trainable=False) inference mode.
"""
import numpy as np
import pytest

from keras_reference import fresh_sessions  # noqa: F401 (an autouse fixture)
from keras_reference import keras3, rel_err, weights_close

keras = keras3()

import gpucmp.keras as gk  # noqa: E402
from gpucmp.keras.models import lowering  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


SIMPLE_KEYS = ("axis", "momentum", "epsilon", "center", "scale", "synchronized", "renorm",
               "renorm_clipping", "renorm_momentum", "beta_regularizer", "gamma_regularizer",
               "beta_constraint", "gamma_constraint", "name", "trainable")


@pytest.mark.parametrize("kwargs", [{}, {"axis": 3, "momentum": 0.9, "epsilon": 1.001e-5},
                                    {"center": False}, {"scale": False, "trainable": False}])
def test_batchnorm_config_weights_and_flags_match_keras(kwargs):
    shape = (None, 5, 5, 3)
    kb = keras.layers.BatchNormalization(name="bn", **kwargs)
    gb = gk.layers.BatchNormalization(name="bn", **kwargs)
    kb.build(shape)
    gb.build(shape)
    kc, gc = kb.get_config(), gb.get_config()
    for key in SIMPLE_KEYS:
        assert gc[key] == kc[key], key
    for key in ("beta_initializer", "gamma_initializer", "moving_mean_initializer",
                "moving_variance_initializer"):
        assert gc[key]["class_name"] == kc[key]["class_name"]
    assert [w.name for w in gb.weights] == [w.name for w in kb.weights]
    assert [w.shape for w in gb.weights] == [tuple(w.shape) for w in kb.weights]
    assert [w.name for w in gb.trainable_weights] == [w.name for w in kb.trainable_weights]
    assert [w.name for w in gb.non_trainable_weights] == [w.name for w in kb.non_trainable_weights]
    for a, b in zip(gb.get_weights(), kb.get_weights()):
        np.testing.assert_array_equal(a, b)                       # ones / zeros as Keras
    again = gk.layers.BatchNormalization.from_config(gc)
    again.build(shape)
    assert again.get_config() == gc


def test_batchnorm_axis_rules():
    for axis in (-1, 3):
        assert gk.layers.BatchNormalization(axis=axis).compute_output_shape((None, 4, 4, 2)) == \
            (None, 4, 4, 2)
    bn2d = gk.layers.BatchNormalization()
    bn2d.build((None, 6))
    assert [w.shape for w in bn2d.weights] == [(6,)] * 4
    with pytest.raises(NotImplementedError, match="last axis only"):
        gk.layers.BatchNormalization(axis=1).build((None, 4, 4, 2))
    with pytest.raises(NotImplementedError, match="several axes"):
        gk.layers.BatchNormalization(axis=[1, 2])
    for K, exc in ((keras, ValueError), (gk, ValueError)):
        with pytest.raises(exc, match="out of bounds"):
            K.layers.BatchNormalization(axis=5).compute_output_shape((None, 4, 4, 2))
    with pytest.raises(NotImplementedError, match="renorm"):
        gk.layers.BatchNormalization(renorm=True)
    with pytest.raises(NotImplementedError, match="gamma_regularizer"):
        gk.layers.BatchNormalization(gamma_regularizer="l2")


def test_statistics_stay_non_trainable_whatever_the_layer_flag():
    bn = gk.layers.BatchNormalization()
    bn.build((None, 3))
    bn.trainable = False
    assert bn.trainable_weights == [] and len(bn.non_trainable_weights) == 4
    bn.trainable = True
    assert [w.name for w in bn.trainable_weights] == ["gamma", "beta"]
    assert [w.trainable for w in bn.weights] == [True, True, False, False]


def test_batchnorm_plan_node():
    bn = gk.layers.BatchNormalization(epsilon=0.01, momentum=0.8, center=False)
    bn.build((None, 4, 4, 2))
    (node,) = bn.plan_layers((None, 4, 4, 2))
    assert node["kind"] == "batchnorm" and node["in_shape"] == node["out_shape"] == (4, 4, 2)
    assert node["epsilon"] == pytest.approx(0.01) and node["momentum"] == pytest.approx(0.8)
    assert node["beta"] is None and node["gamma"] is bn.gamma.buffer
    assert node["moving_mean"] is bn.moving_mean.buffer
    assert node["moving_variance"] is bn.moving_variance.buffer


@pytest.mark.parametrize("cls", ["GlobalAveragePooling2D", "GlobalMaxPooling2D"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_global_pools_shapes_config_and_plan(cls, keepdims):
    kl, gl = getattr(keras.layers, cls)(keepdims=keepdims), getattr(gk.layers, cls)(keepdims=keepdims)
    assert gl.compute_output_shape((None, 5, 7, 3)) == kl.compute_output_shape((None, 5, 7, 3))
    assert gl.get_config()["keepdims"] == kl.get_config()["keepdims"]
    assert gl.get_config()["data_format"] == kl.get_config()["data_format"]
    descs = gl.plan_layers((None, 5, 7, 3))
    assert descs[0]["kind"] == ("avgpool2d" if "Average" in cls else "maxpool2d")
    assert descs[0]["pool_size"] == (5, 7) and descs[0]["out_shape"] == (1, 1, 3)
    assert [d["kind"] for d in descs[1:]] == ([] if keepdims else ["reshape"])
    with pytest.raises(ValueError, match="expected ndim=4"):
        gl.compute_output_shape((None, 3))


@pytest.mark.parametrize("padding", [1, (2, 1), ((1, 0), (0, 3))])
def test_zero_padding_matches_keras(padding):
    kl, gl = keras.layers.ZeroPadding2D(padding), gk.layers.ZeroPadding2D(padding)
    assert gl.padding == tuple(tuple(p) for p in kl.padding)
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 2)).astype(np.float32)
    np.testing.assert_array_equal(gl(x), np.asarray(kl(x)))
    assert gl.compute_output_shape((None, 3, 4, 2)) == kl.compute_output_shape((None, 3, 4, 2))
    again = gk.layers.ZeroPadding2D.from_config(gl.get_config())
    assert again.padding == gl.padding
    (node,) = gl.plan_layers((None, 3, 4, 2))
    assert node == {"kind": "pad2d", "in_shape": (3, 4, 2),
                    "out_shape": tuple(kl.compute_output_shape((None, 3, 4, 2))[1:]),
                    "padding": gl.padding}


@pytest.mark.parametrize("padding", [(1, 2, 3), ((1, 2, 3), (1, 1)), "same", -1, ((1, -1), (0, 0))])
def test_zero_padding_rejects_bad_padding(padding):
    with pytest.raises(ValueError, match="padding"):
        gk.layers.ZeroPadding2D(padding)


# ------------------------------------------------------------------ numerics (graph plan)
def randomize_statistics(model, rng):
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(rng.normal(size=layer.moving_mean.shape).astype("float32"))
            layer.moving_variance.assign(
                rng.uniform(0.5, 2.0, size=layer.moving_variance.shape).astype("float32"))
            layer.gamma.assign(rng.uniform(0.5, 1.5, size=layer.gamma.shape).astype("float32"))
            layer.beta.assign(rng.normal(size=layer.beta.shape).astype("float32"))


def conv_bn(K, trainable=True, momentum=0.99):
    return K.Sequential([K.Input((6, 6, 3)), K.layers.Conv2D(4, 3, padding="same"),
                         K.layers.BatchNormalization(momentum=momentum, trainable=trainable),
                         K.layers.Activation("relu"), K.layers.GlobalAveragePooling2D(),
                         K.layers.Dense(3, activation="softmax")])


def test_batchnorm_layer_call_is_inference_with_moving_statistics():
    rng = np.random.default_rng(1)
    kb, gb = keras.layers.BatchNormalization(epsilon=0.01), gk.layers.BatchNormalization(epsilon=0.01)
    kb.build((None, 4, 4, 5))
    gb.build((None, 4, 4, 5))
    values = [rng.uniform(0.5, 2.0, size=5).astype(np.float32) for _ in range(4)]
    kb.set_weights(values)
    gb.set_weights(values)
    x = rng.normal(size=(3, 4, 4, 5)).astype(np.float32)
    assert rel_err(gb(x), np.asarray(kb(x, training=False))) < 1e-6


@pytest.mark.parametrize("momentum", [0.99, 0.5])
def test_sgd_steps_update_weights_and_moving_statistics_like_keras(momentum):
    rng = np.random.default_rng(2)
    km, gm = conv_bn(keras, momentum=momentum), conv_bn(gk, momentum=momentum)
    randomize_statistics(km, rng)
    gm.set_weights(km.get_weights())
    x = rng.normal(size=(8, 6, 6, 3)).astype(np.float32) * 2 + 1
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 8)]
    km.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy")
    gm.compile(optimizer=gk.optimizers.SGD(0.1), loss="categorical_crossentropy")
    for _ in range(2):
        kl, gl = km.train_on_batch(x, y), gm.train_on_batch(x, y)
        assert float(gl) == pytest.approx(float(kl), rel=1e-5)
    for kw, gw, w in zip(km.get_weights(), gm.get_weights(), gm.weights):
        assert weights_close(gw, kw), w.path
    assert km.evaluate(x, y, verbose=0) == pytest.approx(gm.evaluate(x, y, verbose=0), rel=1e-5)


def test_frozen_batchnorm_trains_in_inference_mode_like_keras():
    rng = np.random.default_rng(3)
    km, gm = conv_bn(keras, trainable=False), conv_bn(gk, trainable=False)
    randomize_statistics(km, rng)
    gm.set_weights(km.get_weights())
    bn_before = [w.numpy() for w in gm.layers[1].weights]
    x = rng.normal(size=(8, 6, 6, 3)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 8)]
    km.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy")
    gm.compile(optimizer=gk.optimizers.SGD(0.1), loss="categorical_crossentropy")
    kl, gl = km.train_on_batch(x, y), gm.train_on_batch(x, y)
    assert float(gl) == pytest.approx(float(kl), rel=1e-5)
    for a, b in zip(bn_before, gm.layers[1].get_weights()):
        np.testing.assert_array_equal(a, b)                  # gamma, beta and statistics frozen
    for kw, gw in zip(km.get_weights(), gm.get_weights()):
        assert weights_close(gw, kw)


def test_batchnorm_on_dense_features_in_a_fit_matches_keras():
    def build(K):
        return K.Sequential([K.Input((5,)), K.layers.Dense(6), K.layers.BatchNormalization(),
                             K.layers.Activation("tanh"), K.layers.Dense(2, activation="softmax")])
    rng = np.random.default_rng(4)
    km, gm = build(keras), build(gk)
    gm.set_weights(km.get_weights())
    x = rng.normal(size=(24, 5)).astype(np.float32)
    y = rng.integers(0, 2, 24)
    for m, K in ((km, keras), (gm, gk)):
        m.compile(optimizer=K.optimizers.SGD(0.05, momentum=0.9),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    kh = km.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    gh = gm.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for key in kh.history:
        np.testing.assert_allclose(gh.history[key], kh.history[key], rtol=1e-5)
    for kw, gw in zip(km.get_weights(), gm.get_weights()):
        assert weights_close(gw, kw)
    assert lowering.model_nodes(gm, gm._trainable_of)[2]["kind"] == "batchnorm"
