"""gpucmp.keras layers: weight shapes and layouts, initializers, output shapes, names,
summary text and parameter counts, argument checks, get/set_weights, configs, and
layers called on NumPy arrays (against the float64 oracle in tests/reference.py).
"""
import io
import math
import re

import warnings

import numpy as np
import pytest

import gpucmp as tf
import reference as ref
from gpucmp import keras
from gpucmp.keras import backend, initializers, layers
from gpucmp.keras.models import Sequential
from gpucmp.keras.utils.progbar import Progbar
from gpucmp.harness.workloads.seeds import build_seed_cnn, build_seed_gan


@pytest.fixture(autouse=True)
def _fresh_names():
    backend.clear_session()
    yield
    keras.mixed_precision.set_global_policy("float32")


def seeds_cnn():
    """The CNN of the seed article, uncompiled (the package's one definition of it)."""
    return build_seed_cnn(keras, compile=False)


def seeds_gan():
    """The seed article's GAN, uncompiled (the package's one definition of it)."""
    return build_seed_gan(keras, compile=False)


# ------------------------------------------------------------------ import surface
def test_tensorflow_style_import_surface(tmp_path, monkeypatch):
    assert tf.keras.layers.Dense is layers.Dense
    for name in ("models", "layers", "optimizers", "losses", "metrics", "callbacks",
                 "initializers", "utils", "Sequential", "Model", "Input", "mixed_precision"):
        assert hasattr(tf.keras, name), name
    from gpucmp.keras.models import Model, Sequential as S  # noqa: F401  (the GAN seed's import)
    from gpucmp.keras.optimizers import Adam  # noqa: F401
    from gpucmp.keras.datasets import _fetch
    from gpucmp.keras.utils.file_utils import DownloadError
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))             # nothing cached, and offline:
    monkeypatch.setattr(_fetch, "TF_KERAS_DATASETS", "http://127.0.0.1:9/")
    with pytest.raises(DownloadError, match="load_digits_mnist"):
        tf.keras.datasets.mnist.load_data()       # a pointer to the real digits


# ------------------------------------------------------------------ weights and shapes
def test_conv2d_and_dense_weight_layouts():
    conv = layers.Conv2D(8, (3, 5))
    conv.build((None, 10, 12, 3))
    assert [w.shape for w in conv.weights] == [(3, 5, 3, 8), (8,)]
    assert [w.name for w in conv.weights] == ["kernel", "bias"]
    dense = layers.Dense(4, use_bias=False)
    dense.build((None, 7))
    assert [w.shape for w in dense.get_weights()] == [(7, 4)]
    assert dense.count_params() == 28
    assert conv.count_params() == 3 * 5 * 3 * 8 + 8


@pytest.mark.parametrize("hw,k,s,d,pad", [
    ((28, 28), (3, 3), (1, 1), (1, 1), "valid"),
    ((28, 27), (3, 3), (2, 2), (1, 1), "same"),
    ((13, 9), (5, 3), (3, 2), (1, 1), "valid"),
    ((12, 12), (3, 3), (1, 1), (2, 2), "valid"),
    ((7, 8), (4, 4), (3, 3), (1, 1), "same"),
])
def test_conv_output_shapes_follow_keras_rules(hw, k, s, d, pad):
    layer = layers.Conv2D(5, k, strides=s, dilation_rate=d, padding=pad.upper())
    out = layer.compute_output_shape((None,) + hw + (2,))
    expect = ref.conv2d_output_shape((1,) + hw + (2,), k + (2, 5), s, pad, d)
    assert out == (None,) + tuple(expect[1:])


@pytest.mark.parametrize("cls", [layers.MaxPooling2D, layers.AveragePooling2D])
@pytest.mark.parametrize("hw,p,s,pad", [((28, 28), (2, 2), None, "valid"),
                                         ((7, 9), (2, 2), None, "same"),
                                         ((10, 11), (3, 3), (2, 2), "valid"),
                                         ((10, 11), (3, 2), (1, 2), "same")])
def test_pool_output_shapes(cls, hw, p, s, pad):
    out = cls(p, strides=s, padding=pad).compute_output_shape((None,) + hw + (4,))
    expect = ref.pool2d_output_shape((1,) + hw + (4,), p, s, pad)
    assert out == (None,) + tuple(expect[1:])


def test_pool_strides_default_to_pool_size():
    assert layers.MaxPooling2D((3, 2)).strides == (3, 2)
    assert layers.AveragePooling2D(pool_size=4).strides == (4, 4)


# ------------------------------------------------------------------ initializers
def test_glorot_uniform_uses_conv_fans_and_bias_zeros():
    keras.utils.set_random_seed(1)
    conv = layers.Conv2D(64, (3, 3))
    conv.build((None, 11, 11, 64))
    kernel, bias = conv.get_weights()
    limit = math.sqrt(6.0 / (3 * 3 * 64 + 3 * 3 * 64))
    assert np.abs(kernel).max() <= limit
    assert np.abs(kernel).max() > 0.99 * limit
    # uniform(-l, l) has variance l^2 / 3
    assert abs(kernel.var() / (limit ** 2 / 3) - 1) < 0.03
    assert abs(kernel.mean()) < 0.01 * limit
    assert not bias.any()


def test_dense_glorot_limit_uses_in_and_out():
    keras.utils.set_random_seed(2)
    dense = layers.Dense(300)
    dense.build((None, 500))
    kernel = dense.get_weights()[0]
    limit = math.sqrt(6.0 / 800)
    assert limit * 0.99 < np.abs(kernel).max() <= limit


def test_he_normal_and_random_normal_statistics():
    keras.utils.set_random_seed(3)
    w = initializers.get("he_normal")((3, 3, 32, 64))
    assert abs(w.std() / math.sqrt(2.0 / (9 * 32)) - 1) < 0.03
    assert np.abs(w).max() <= 2 * math.sqrt(2.0 / (9 * 32)) / 0.87962566103423978 + 1e-6
    w = initializers.RandomNormal()((400, 400))
    assert abs(w.std() - 0.05) < 0.002
    w = initializers.get("he_uniform")((1000, 50))
    assert np.abs(w).max() <= math.sqrt(6.0 / 1000)


@pytest.mark.parametrize("shape", [(16, 64), (64, 16), (3, 3, 8, 8)])
def test_orthogonal_is_orthonormal(shape):
    w = initializers.Orthogonal()(shape).astype(np.float64)
    flat = w.reshape(-1, shape[-1])
    if flat.shape[0] >= flat.shape[1]:
        np.testing.assert_allclose(flat.T @ flat, np.eye(flat.shape[1]), atol=1e-5)
    else:
        np.testing.assert_allclose(flat @ flat.T, np.eye(flat.shape[0]), atol=1e-5)


def test_initializers_by_name_object_and_seed():
    assert isinstance(initializers.get("glorot_uniform"), initializers.GlorotUniform)
    assert isinstance(initializers.get("Zeros"), initializers.Zeros)
    init = initializers.GlorotUniform(seed=7)
    np.testing.assert_array_equal(init((4, 5)), init((4, 5)))
    layer = layers.Dense(3, kernel_initializer=initializers.Constant(0.5), bias_initializer="ones")
    layer.build((None, 2))
    np.testing.assert_array_equal(layer.get_weights()[0], np.full((2, 3), 0.5, np.float32))
    np.testing.assert_array_equal(layer.get_weights()[1], np.ones(3, np.float32))
    with pytest.raises(ValueError, match="kernel_initializer"):
        layers.Dense(3, kernel_initializer="no_such_init")


def test_set_random_seed_makes_initial_weights_reproducible():
    keras.utils.set_random_seed(42)
    a = seeds_cnn().get_weights()
    keras.utils.set_random_seed(42)
    b = seeds_cnn().get_weights()
    keras.utils.set_random_seed(43)
    c = seeds_cnn().get_weights()
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


# ------------------------------------------------------------------ names
def test_names_are_numbered_per_class():
    names = [layers.Conv2D(1, 1).name, layers.Conv2D(1, 1).name, layers.Dense(1).name,
             layers.Conv2D(1, 1).name, layers.Dense(1).name, layers.MaxPooling2D().name,
             layers.Dense(2, name="head").name, layers.Dense(1).name]
    assert names == ["conv2d", "conv2d_1", "dense", "conv2d_2", "dense_1", "max_pooling2d",
                     "head", "dense_2"]
    assert [Sequential().name, Sequential().name] == ["sequential", "sequential_1"]
    assert layers.AveragePooling2D().name == "average_pooling2d"


# ------------------------------------------------------------------ summary
SEEDS_CNN_SUMMARY = """\
Model: "sequential"
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┓
┃ Layer (type)                    ┃ Output Shape           ┃       Param # ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━┩
│ conv2d (Conv2D)                 │ (None, 26, 26, 32)     │           320 │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ max_pooling2d (MaxPooling2D)    │ (None, 13, 13, 32)     │             0 │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ conv2d_1 (Conv2D)               │ (None, 11, 11, 64)     │        18,496 │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ max_pooling2d_1 (MaxPooling2D)  │ (None, 5, 5, 64)       │             0 │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ conv2d_2 (Conv2D)               │ (None, 3, 3, 64)       │        36,928 │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ flatten (Flatten)               │ (None, 576)            │             0 │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ dense (Dense)                   │ (None, 64)             │        36,928 │
├─────────────────────────────────┼────────────────────────┼───────────────┤
│ dense_1 (Dense)                 │ (None, 10)             │           650 │
└─────────────────────────────────┴────────────────────────┴───────────────┘
 Total params: 93,322 (364.54 KB)
 Trainable params: 93,322 (364.54 KB)
 Non-trainable params: 0 (0.00 B)
"""


def test_seeds_cnn_summary_is_keras_3_text(monkeypatch, capsys):
    # Keras 3 sizes the table from the terminal: min(88, columns - 4); 80 columns here,
    # the text below is what Keras 3.x printed for the same model in an 80-column terminal.
    monkeypatch.setenv("COLUMNS", "80")
    model = seeds_cnn()
    model.summary()
    assert capsys.readouterr().out == SEEDS_CNN_SUMMARY
    assert model.count_params() == 93322
    lines = []
    model.summary(print_fn=lines.append)
    assert lines == [SEEDS_CNN_SUMMARY]


def test_summary_wide_terminal_show_trainable_and_optimizer_line(monkeypatch, capsys):
    # Expected lines: Keras 3.x with COLUMNS=200 (line_length 88, and 100 with show_trainable).
    monkeypatch.setenv("COLUMNS", "200")
    model = Sequential([layers.Conv2D(32, (3, 3), activation="relu", input_shape=(28, 28, 1)),
                        layers.Flatten(), layers.Dense(10, activation="softmax")])
    model.summary()
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "┏" + "━" * 38 + "┳" + "━" * 29 + "┳" + "━" * 17 + "┓"
    assert out[2] == "┃ Layer (type)" + " " * 25 + "┃ Output Shape" + " " * 16 + "┃" + " " * 9 + "Param # ┃"
    assert out[4] == "│ conv2d (Conv2D)" + " " * 22 + "│ (None, 26, 26, 32)" + " " * 10 + "│" + \
        " " * 13 + "320 │"
    model.summary(show_trainable=True)
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "┃ Layer (type)" + " " * 26 + "┃ Output Shape" + " " * 18 + "┃" + " " * 8 + \
        "Param # ┃ Traina… ┃"
    assert out[4].endswith("│            320 │    Y    │")
    model.compile("adam", "categorical_crossentropy")
    model.summary()
    assert "Optimizer params" not in capsys.readouterr().out     # not built before a step
    model.train_on_batch(np.zeros((2, 28, 28, 1), np.float32), np.eye(10, dtype=np.float32)[:2])
    model.summary()
    text = capsys.readouterr().out
    n = model.count_params()
    assert f" Total params: {3 * n + 2:,} (" in text
    assert f" Optimizer params: {2 * n + 2:,} (" in text


def test_gan_summaries_and_counts(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    generator, discriminator, gan = seeds_gan()
    assert generator.count_params() == 114064
    assert discriminator.count_params() == 100609
    discriminator.trainable = False
    gan.summary()
    text = capsys.readouterr().out
    assert "│ sequential (Sequential)         │ (None, 28, 28, 1)      │       114,064 │" in text
    assert "│ sequential_1 (Sequential)       │ (None, 1)              │       100,609 │" in text
    assert " Total params: 214,673 (838.57 KB)\n" in text
    assert " Trainable params: 114,064 (445.56 KB)\n" in text
    assert " Non-trainable params: 100,609 (393.00 KB)\n" in text
    assert gan.input_shape == (None, 100) and gan.output_shape == (None, 1)


def test_summary_of_unbuilt_model(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    model = Sequential([layers.Dense(4), layers.Dense(2)])
    model.summary()
    out = capsys.readouterr().out
    assert "│ dense (Dense)                   │ ?                      │   0 (unbuilt) │" in out
    with pytest.raises(ValueError, match="not yet been built"):
        model.count_params()


# ------------------------------------------------------------------ argument checks
@pytest.mark.parametrize("make,arg", [
    (lambda: layers.Conv2D(0, 3), "filters"),
    (lambda: layers.Conv2D(-4, 3), "filters"),
    (lambda: layers.Conv2D(2.5, 3), "filters"),
    (lambda: layers.Conv2D(4, 0), "kernel_size"),
    (lambda: layers.Conv2D(4, (3, 0)), "kernel_size"),
    (lambda: layers.Conv2D(4, (3, 3, 3)), "kernel_size"),
    (lambda: layers.Conv2D(4, 3, strides=0), "strides"),
    (lambda: layers.Conv2D(4, 3, padding="full"), "padding"),
    (lambda: layers.Conv2D(4, 3, activation="swishy"), "activation"),
    (lambda: layers.Conv2D(4, 3, dilation_rate=0), "dilation_rate"),
    (lambda: layers.Conv2D(4, 3, strides=2, dilation_rate=2), "dilation_rate"),
    (lambda: layers.Conv2D(4, 3, data_format="channels_first"), "data_format"),
    (lambda: layers.Conv2D(4, 3, data_format="NCHW"), "data_format"),
    (lambda: layers.MaxPooling2D(0), "pool_size"),
    (lambda: layers.MaxPooling2D(2, strides=-1), "strides"),
    (lambda: layers.AveragePooling2D(2, padding="causal"), "padding"),
    (lambda: layers.Dense(0), "units"),
    (lambda: layers.Dense(-3), "units"),
    (lambda: layers.Dense(None), "units"),
    (lambda: layers.Dense(4, activation="nope"), "activation"),
    (lambda: layers.Dropout(1.0), "rate"),
    (lambda: layers.Dropout(-0.1), "rate"),
    (lambda: layers.Dropout("half"), "rate"),
    (lambda: layers.Activation("bogus"), "activation"),
    (lambda: layers.Reshape((0, 4)), "target_shape"),
    (lambda: layers.Reshape((-1, -1)), "target_shape"),
    (lambda: layers.Dense(4, input_dim=0), "input_dim"),
    (lambda: layers.Dense(4, bogus_argument=1), "bogus_argument"),
])
def test_invalid_arguments_raise_value_error_naming_the_argument(make, arg):
    with pytest.raises(ValueError, match=arg):
        make()


def test_padding_is_case_insensitive():
    assert layers.Conv2D(1, 3, padding="SAME").padding == "same"
    assert layers.MaxPooling2D(padding="Valid").padding == "valid"


def test_known_but_unsupported_keras_activation_is_not_implemented():
    with pytest.raises(NotImplementedError, match="elu"):
        layers.Dense(3, activation="elu")


def test_kernel_larger_than_input_raises_at_build_with_shapes():
    model = Sequential([layers.Input(shape=(6, 6, 1)), layers.Conv2D(2, (3, 3)),
                        layers.MaxPooling2D((2, 2))])
    with pytest.raises(ValueError, match=r"\(5, 5\).*\(None, 2, 2, 2\)|\(None, 2, 2, 2\).*\(5, 5\)"):
        model.add(layers.Conv2D(4, (5, 5)))
    assert len(model.layers) == 2          # the failed layer was not kept
    with pytest.raises(ValueError, match="pool"):
        Sequential([layers.Input(shape=(1, 1, 3)), layers.MaxPooling2D((2, 2))])


def test_wrong_rank_inputs_raise_with_shapes():
    with pytest.raises(ValueError, match=r"ndim=4.*\(None, 784\)"):
        Sequential([layers.Input(shape=(784,)), layers.Conv2D(2, 3)])
    with pytest.raises(NotImplementedError, match="Flatten"):
        Sequential([layers.Input(shape=(5, 4)), layers.Dense(3)])
    with pytest.raises(ValueError, match="total size"):
        Sequential([layers.Input(shape=(12,)), layers.Reshape((5, 2))])


# ------------------------------------------------------------------ get/set weights
def test_get_set_weights_round_trip_and_mismatch_errors():
    model = seeds_cnn()
    weights = model.get_weights()
    assert [w.shape for w in weights] == [(3, 3, 1, 32), (32,), (3, 3, 32, 64), (64,),
                                          (3, 3, 64, 64), (64,), (576, 64), (64,), (64, 10), (10,)]
    new = [np.random.default_rng(0).normal(size=w.shape).astype(np.float32) for w in weights]
    model.set_weights(new)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), new))

    dense = model.layers[-1]
    with pytest.raises(ValueError, match=r"dense_1.*\(64, 10\).*\(64, 9\)"):
        dense.set_weights([np.zeros((64, 9)), np.zeros(10)])
    with pytest.raises(ValueError, match=r"expects 2 weight arrays.*has 1"):
        dense.set_weights([np.zeros((64, 10))])
    bad = list(new)
    bad[4] = np.zeros((3, 3, 64, 32), np.float32)
    with pytest.raises(ValueError, match=r"conv2d_2.*\(3, 3, 64, 64\).*\(3, 3, 64, 32\)"):
        model.set_weights(bad)
    # nothing was written by the failed calls
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), new))
    with pytest.raises(ValueError, match="NaN"):
        dense.set_weights([np.full((64, 10), np.nan), np.zeros(10)])


def test_trainable_flags_and_weight_lists():
    generator, discriminator, gan = seeds_gan()
    assert len(gan.trainable_weights) == 8 and not gan.non_trainable_weights
    discriminator.trainable = False
    assert all(not l.trainable for l in discriminator.layers)
    assert len(gan.trainable_weights) == 4 and len(gan.non_trainable_weights) == 4
    assert len(discriminator.non_trainable_weights) == 4
    discriminator.trainable = True
    assert len(gan.trainable_weights) == 8


# ------------------------------------------------------------------ configs
def test_layer_configs_round_trip():
    for layer in [layers.Conv2D(3, (2, 4), strides=2, padding="same", activation="tanh",
                                use_bias=False, kernel_initializer="he_normal"),
                  layers.Dense(7, activation="sigmoid", input_dim=5), layers.Dropout(0.25, seed=3),
                  layers.MaxPooling2D((3, 3), strides=(1, 2)), layers.AveragePooling2D(),
                  layers.Reshape((2, -1)), layers.Flatten(), layers.Activation("softmax")]:
        config = layer.get_config()
        clone = layers.deserialize(layers.serialize(layer))
        assert type(clone) is type(layer)
        clone_config = clone.get_config()
        config.pop("name"), clone_config.pop("name")
        assert clone_config == config


# ------------------------------------------------------------------ calling layers on arrays
def test_layer_call_on_numpy_matches_reference():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 9, 8, 2)).astype(np.float32)
    conv = layers.Conv2D(4, (3, 2), strides=(2, 1), padding="same", activation="relu")
    y = conv(x)
    k, b = conv.get_weights()
    expect = ref.conv2d(x, k, b, strides=(2, 1), padding="same", activation="relu")
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-5)

    dense = layers.Dense(5, activation="tanh", bias_initializer="random_normal")
    v = rng.normal(size=(4, 6)).astype(np.float32)
    out = dense(v)                                   # builds the layer on first call
    k, b = dense.get_weights()
    np.testing.assert_allclose(out, np.tanh(v.astype(np.float64) @ k + b), rtol=1e-5, atol=1e-6)

    pool = layers.MaxPooling2D((2, 2), padding="same")
    np.testing.assert_allclose(pool(x), ref.max_pool2d(x, (2, 2), None, "same"), rtol=0, atol=0)
    avg = layers.AveragePooling2D((3, 3), strides=2, padding="same")
    np.testing.assert_allclose(avg(x), ref.avg_pool2d(x, (3, 3), (2, 2), "same"), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(layers.Flatten()(x), x.reshape(3, -1))
    np.testing.assert_array_equal(layers.Dropout(0.5)(x), x)   # inference: identity
    np.testing.assert_allclose(layers.Activation("softmax")(v), ref.activation(v, "softmax"),
                               rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------ misc API
def test_mixed_precision_policy_api():
    mp = keras.mixed_precision
    assert mp.global_policy().name == "float32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # the policy is real now: no warning
        mp.set_global_policy("mixed_float16")
    policy = mp.global_policy()
    assert (policy.compute_dtype, policy.variable_dtype) == ("float16", "float32")
    layer = layers.Dense(2)
    assert layer.dtype_policy.name == "mixed_float16" and layer.compute_dtype == "float16"
    assert mp.Policy("mixed_bfloat16").compute_dtype == "bfloat16"
    with pytest.raises(ValueError, match="policy"):
        mp.set_global_policy("float8")
    mp.set_global_policy("float32")
    assert layers.Dense(2).compute_dtype == "float32"


def test_to_categorical():
    out = keras.utils.to_categorical([0, 2, 1], 4)
    np.testing.assert_array_equal(out, np.eye(4, dtype=np.float32)[[0, 2, 1]])
    assert keras.utils.to_categorical(np.array([[3], [1]])).shape == (2, 4)
    with pytest.raises(ValueError):
        keras.utils.to_categorical([0, 5], 3)


# ------------------------------------------------------------------ progress bar
def _plain(text):
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_progbar_keras_3_format():
    stream = io.StringIO()
    bar = Progbar(469, stream=stream, all_stateful=True)
    bar.update(469, [("accuracy", 0.9), ("loss", 0.3)], finalize=True)
    line = _plain(stream.getvalue()).strip("\r\n")
    assert re.fullmatch(r"469/469 ━{20} \d+s \d+(us|ms|s)/step - accuracy: 0\.9000 - loss: 0\.3000",
                        line), line
    assert "\x1b[32m" in stream.getvalue()            # Keras' green done part
    stream = io.StringIO()
    bar = Progbar(10, stream=stream, all_stateful=True, ansi=False)
    bar.update(5, [("loss", 0.0005)], finalize=False)
    line = stream.getvalue()
    assert line.startswith("\r 5/10 " + "━" * 10 + "━" * 10 + " ")
    assert line.endswith("step - loss: 5.0000e-04")


def test_progbar_verbose_2_prints_one_line_and_throttles_updates():
    stream = io.StringIO()
    bar = Progbar(3, verbose=2, stream=stream, all_stateful=True)
    for i in range(1, 4):
        bar.update(i, [("loss", 1.25)], finalize=i == 3)
    assert re.fullmatch(r"3/3 - \d+s - \d+(us|ms|s)/step - loss: 1\.2500\n", stream.getvalue())
    stream = io.StringIO()
    bar = Progbar(100000, stream=stream, all_stateful=True, interval=0.05)
    for i in range(1, 100001):
        bar.update(i, [("loss", 1.0)], finalize=i == 100000)
    writes = stream.getvalue().count("\r")
    assert 1 <= writes < 100                   # 100000 updates, a handful of redraws
