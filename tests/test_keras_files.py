"""Keras' file formats both ways, against real Keras 3 (JAX backend): `.keras`, legacy
`.h5` and `.weights.h5` written by Keras load in gpucmp and predict the same, files written
by gpucmp load in Keras and predict the same; bad and crafted files give clear errors and
leave nothing behind (gpucmp/keras/saving/)."""
import io
import json
import os
import zipfile

import numpy as np
import pytest

from keras_reference import fresh_sessions, keras3, randomize_bn_statistics, rel_err  # noqa: F401

keras = keras3()
import h5py  # noqa: E402

import gpucmp.keras as gk  # noqa: E402
from gpucmp.keras import saving  # noqa: E402


def kpredict(model, x):
    return np.asarray(model(x, training=False))


def randomize(model, rng):
    for w in model.weights:
        w.assign(rng.normal(0, 0.3, w.shape).astype("float32"))
    randomize_bn_statistics(model, rng)


def keras_cnn():
    return keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(5, 2, strides=2, activation="tanh"),
        keras.layers.AveragePooling2D(pool_size=(2, 2), padding="same"),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(6, activation="softmax"),
    ])


def keras_text_model():
    i = keras.Input((7,), dtype="int32")
    e = keras.layers.Embedding(20, 6)(i)
    h = keras.layers.LSTM(5, return_sequences=True)(e)
    g = keras.layers.GRU(4)(h)
    return keras.Model(i, keras.layers.Dense(3, activation="sigmoid")(g))


def keras_branchy():
    i = keras.Input((6, 6, 2))
    a = keras.layers.Conv2D(3, 3, padding="same")(i)
    b = keras.layers.Conv2D(3, 1)(i)
    s = keras.layers.Add()(
        [keras.layers.Activation("relu")(keras.layers.BatchNormalization()(a)), b])
    c = keras.layers.Concatenate()([s, keras.layers.ZeroPadding2D(0)(b)])
    p = keras.layers.GlobalAveragePooling2D()(c)
    return keras.Model(i, keras.layers.Dense(2)(p), name="branchy")


def image_batch(rng, shape=(5, 8, 8, 3)):
    return rng.normal(size=shape).astype("float32")


# ---------------------------------------------------------------- Keras -> gpucmp
@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_keras_sequential_cnn_loads_and_predicts_the_same(tmp_path, suffix):
    rng = np.random.default_rng(1)
    km = keras_cnn()
    randomize(km, rng)
    path = tmp_path / f"cnn{suffix}"
    km.save(path)
    gm = gk.models.load_model(path)
    assert type(gm).__name__ == "Sequential"
    assert [type(l).__name__ for l in gm.layers] == [type(l).__name__ for l in km.layers]
    x = image_batch(rng)
    assert rel_err(gm.predict(x, verbose=0), kpredict(km, x)) < 1e-5
    for a, b in zip(gm.get_weights(), km.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
@pytest.mark.parametrize("build", [keras_text_model, keras_branchy])
def test_keras_functional_models_load_and_predict_the_same(tmp_path, suffix, build):
    rng = np.random.default_rng(2)
    km = build()
    randomize(km, rng)
    path = tmp_path / f"f{suffix}"
    km.save(path)
    gm = gk.models.load_model(path)
    assert type(gm).__name__ == "Functional" and gm.name == km.name
    assert [l.name for l in gm.layers] == [l.name for l in km.layers]
    x = rng.integers(0, 20, (4, 7)).astype("int32") if build is keras_text_model \
        else rng.normal(size=(4, 6, 6, 2)).astype("float32")
    assert rel_err(gm.predict(x, verbose=0), kpredict(km, x)) < 1e-5


def test_keras_compile_config_and_adam_state_are_restored(tmp_path):
    rng = np.random.default_rng(3)
    km = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="relu"),
                           keras.layers.Dense(3, activation="softmax")])
    km.compile(keras.optimizers.Adam(0.01), "categorical_crossentropy", metrics=["accuracy"])
    x = rng.normal(size=(16, 4)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, 16)]
    km.fit(x, y, batch_size=8, epochs=1, verbose=0)
    km.save(tmp_path / "adam.keras")
    gm = gk.models.load_model(tmp_path / "adam.keras")
    opt = gm.optimizer
    assert isinstance(opt, gk.optimizers.Adam) and opt.iterations == 2
    assert opt.learning_rate == pytest.approx(0.01)
    assert type(gm._loss_obj).__name__ == "CategoricalCrossentropy"
    # the slots are Keras' m and v, variable by variable
    kvars = [np.asarray(v) for v in km.optimizer.variables[2:]]
    gslots = []
    for var in gm.trainable_weights:
        gslots.extend(b.read()[: var.size].reshape(var.shape) for b in opt._slots[id(var)][1])
    assert len(gslots) == len(kvars) == 8
    for a, b in zip(gslots, kvars):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    # one more step on both sides lands on the same weights
    km.train_on_batch(x[:8], y[:8])
    gm.train_on_batch(x[:8], y[:8])
    for a, b in zip(gm.get_weights(), km.get_weights()):
        assert rel_err(a, b) < 1e-5
    assert gk.models.load_model(tmp_path / "adam.keras", compile=False).compiled is False


def test_keras_weights_h5_loads_into_a_gpucmp_model(tmp_path):
    rng = np.random.default_rng(4)
    km = keras_text_model()
    randomize(km, rng)
    km.save_weights(tmp_path / "t.weights.h5")
    i = gk.Input((7,), dtype="int32")
    h = gk.layers.LSTM(5, return_sequences=True)(gk.layers.Embedding(20, 6)(i))
    gm = gk.Model(i, gk.layers.Dense(3, activation="sigmoid")(gk.layers.GRU(4)(h)))
    gm.load_weights(tmp_path / "t.weights.h5")
    x = rng.integers(0, 20, (3, 7)).astype("int32")
    assert rel_err(gm.predict(x, verbose=0), kpredict(km, x)) < 1e-5


# ---------------------------------------------------------------- gpucmp -> Keras
def gpucmp_cnn():
    return gk.Sequential([
        gk.layers.Conv2D(4, 3, padding="same", activation="relu", input_shape=(8, 8, 3)),
        gk.layers.BatchNormalization(),
        gk.layers.MaxPooling2D(),
        gk.layers.Flatten(),
        gk.layers.Dense(6, activation="softmax"),
    ])


def randomize_gpucmp(model, rng):
    for w in model.weights:
        value = rng.normal(0, 0.3, w.shape)
        if w.name == "moving_variance":
            value = rng.uniform(0.5, 1.5, w.shape)
        w.assign(value.astype("float32"))


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_gpucmp_sequential_opens_in_keras_and_predicts_the_same(tmp_path, suffix):
    rng = np.random.default_rng(5)
    gm = gpucmp_cnn()
    randomize_gpucmp(gm, rng)
    gm.compile(gk.optimizers.Adam(0.005), "categorical_crossentropy", metrics=["accuracy"])
    x = image_batch(rng, (8, 8, 8, 3))
    y = np.eye(6, dtype="float32")[rng.integers(0, 6, 8)]
    gm.fit(x, y, batch_size=4, epochs=1, verbose=0)
    path = tmp_path / f"g{suffix}"
    gm.save(path)
    km = keras.models.load_model(path)
    assert [l.name for l in km.layers] == [l.name for l in gm.layers]
    assert rel_err(kpredict(km, x), gm.predict(x, verbose=0)) < 1e-5
    if suffix == ".keras":
        assert int(km.optimizer.iterations) == 2
        kslots = [np.asarray(v) for v in km.optimizer.variables[2:]]
        assert len(kslots) == 2 * len(gm.trainable_weights)
        m0 = gm.optimizer._slots[id(gm.trainable_weights[0])][1][0].read()
        np.testing.assert_allclose(kslots[0].reshape(-1), m0[: kslots[0].size], rtol=1e-6)
    back = gk.models.load_model(path)                       # and back into gpucmp
    np.testing.assert_array_equal(back.predict(x, verbose=0), gm.predict(x, verbose=0))


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_gpucmp_functional_opens_in_keras_and_predicts_the_same(tmp_path, suffix):
    rng = np.random.default_rng(6)
    i = gk.Input((7,), dtype="int32")
    h = gk.layers.LSTM(5)(gk.layers.Embedding(20, 6)(i))
    a = gk.layers.Dense(4, activation="tanh")(h)
    b = gk.layers.Dense(4)(h)
    gm = gk.Model(i, gk.layers.Dense(2)(gk.layers.Concatenate()([a, gk.layers.Add()([a, b])])))
    randomize_gpucmp(gm, rng)
    path = tmp_path / f"gf{suffix}"
    gm.save(path)
    km = keras.models.load_model(path)
    x = rng.integers(0, 20, (4, 7)).astype("int32")
    assert rel_err(kpredict(km, x), gm.predict(x, verbose=0)) < 1e-5


def test_gpucmp_weights_files_load_in_keras(tmp_path):
    rng = np.random.default_rng(7)
    gm = gpucmp_cnn()
    randomize_gpucmp(gm, rng)
    km = keras.Sequential([keras.Input((8, 8, 3)),
                           keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
                           keras.layers.BatchNormalization(), keras.layers.MaxPooling2D(),
                           keras.layers.Flatten(), keras.layers.Dense(6, activation="softmax")])
    x = image_batch(rng)
    gm.save_weights(tmp_path / "g.weights.h5")               # Keras 3 layout
    km.load_weights(tmp_path / "g.weights.h5")
    assert rel_err(kpredict(km, x), gm.predict(x, verbose=0)) < 1e-5
    randomize_gpucmp(gm, rng)
    gm.save_weights(tmp_path / "g.h5")                       # tf.keras 2 layout
    km.load_weights(tmp_path / "g.h5")
    assert rel_err(kpredict(km, x), gm.predict(x, verbose=0)) < 1e-5


def test_gpucmp_own_format_stays_readable(tmp_path):
    gm = gpucmp_cnn()
    gm.save(tmp_path / "old.bin", save_format="gpucmp")
    with zipfile.ZipFile(tmp_path / "old.bin") as zf:
        assert "weights.npz" in zf.namelist()
    back = gk.models.load_model(tmp_path / "old.bin")
    x = image_batch(np.random.default_rng(8))
    np.testing.assert_array_equal(back.predict(x, verbose=0), gm.predict(x, verbose=0))
    with pytest.raises(ValueError, match="extension"):
        gm.save(tmp_path / "model.bin")


# ---------------------------------------------------------------- what gpucmp lacks
def test_a_layer_or_option_gpucmp_lacks_is_named(tmp_path):
    km = keras.Sequential([keras.Input((4,)), keras.layers.LayerNormalization(),
                           keras.layers.Dense(2)])
    km.save(tmp_path / "ln.keras")
    with pytest.raises(NotImplementedError, match="LayerNormalization"):
        gk.models.load_model(tmp_path / "ln.keras")
    km = keras.Sequential([keras.Input((4,)),
                           keras.layers.Dense(2, kernel_regularizer=keras.regularizers.L2(0.1))])
    km.save(tmp_path / "reg.h5")
    with pytest.raises(NotImplementedError, match="kernel_regularizer"):
        gk.models.load_model(tmp_path / "reg.h5")


# ---------------------------------------------------------------- bad and crafted files
def listing(path):
    return sorted(os.listdir(path))


def test_lambda_layers_and_custom_objects_are_refused(tmp_path):
    km = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda t: t * 2.0),
                           keras.layers.Dense(2)])
    km.save(tmp_path / "lambda.keras")
    km.save(tmp_path / "lambda.h5")
    before = listing(tmp_path)
    for name in ("lambda.keras", "lambda.h5"):
        with pytest.raises(ValueError, match="Lambda.*safe_mode"):
            gk.models.load_model(tmp_path / name)
        with pytest.raises(NotImplementedError, match="Lambda"):
            gk.models.load_model(tmp_path / name, safe_mode=False)
    # a registered custom layer: the file names code to import
    with zipfile.ZipFile(tmp_path / "lambda.keras") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    config = json.loads(members["config.json"])
    dense = config["config"]["layers"][2]
    dense.update(module="my_package.layers", class_name="MyDense", registered_name="MyPkg>MyDense")
    del config["config"]["layers"][1]
    members["config.json"] = json.dumps(config).encode()
    write_zip(tmp_path / "custom.keras", members)
    with pytest.raises(ValueError, match="MyPkg>MyDense"):
        gk.models.load_model(tmp_path / "custom.keras")
    assert listing(tmp_path) == sorted(before + ["custom.keras"])


def write_zip(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def keras_members(tmp_path):
    km = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    km.save(tmp_path / "base.keras")
    with zipfile.ZipFile(tmp_path / "base.keras") as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_a_member_named_dot_dot_is_refused_without_side_effects(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    members = keras_members(work)
    members["../x"] = b"escaped"
    write_zip(work / "evil.keras", members)
    before = listing(tmp_path), listing(work)
    with pytest.raises(ValueError, match=r"'\.\./x'.*traversal"):
        gk.models.load_model(work / "evil.keras")
    with pytest.raises(ValueError, match="traversal"):
        gk.Sequential([gk.layers.Dense(3, input_shape=(4,))]).load_weights(work / "evil.keras")
    assert (listing(tmp_path), listing(work)) == before
    assert not (tmp_path / "x").exists()


def h5_bytes(fill):
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        fill(f)
    return buf.getvalue()


@pytest.mark.parametrize("chunks", [None, True])
def test_an_absurd_declared_hdf5_shape_is_refused_before_reading(tmp_path, chunks):
    members = keras_members(tmp_path)

    def fill(f):
        f.create_group("vars").attrs["name"] = "sequential"
        g = f.create_group("layers/dense/vars")
        g.attrs["name"] = "dense"
        g.create_dataset("0", shape=(10 ** 6, 10 ** 6), dtype="float32", chunks=chunks)
        g.create_dataset("1", data=np.zeros(3, "float32"))
    members["model.weights.h5"] = h5_bytes(fill)
    write_zip(tmp_path / "absurd.keras", members)
    assert os.path.getsize(tmp_path / "absurd.keras") < 100_000
    with pytest.raises(ValueError, match=r"\(1000000, 1000000\).*refusing"):
        gk.models.load_model(tmp_path / "absurd.keras")


def test_an_absurd_size_in_the_config_is_refused_before_allocating(tmp_path):
    members = keras_members(tmp_path)
    config = json.loads(members["config.json"])
    config["config"]["layers"][1]["config"]["units"] = 10 ** 9
    members["config.json"] = json.dumps(config).encode()
    write_zip(tmp_path / "huge.keras", members)
    with pytest.raises(ValueError, match="refusing to allocate"):
        gk.models.load_model(tmp_path / "huge.keras")


def test_corrupt_truncated_and_mismatched_files_raise_value_error(tmp_path):
    km = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    km.save(tmp_path / "m.keras")
    km.save(tmp_path / "m.h5")
    km.save_weights(tmp_path / "m.weights.h5")
    for name in ("m.keras", "m.h5", "m.weights.h5"):
        blob = (tmp_path / name).read_bytes()
        (tmp_path / f"cut-{name}").write_bytes(blob[: len(blob) // 2])
        with pytest.raises(ValueError):
            gk.models.load_model(tmp_path / f"cut-{name}")
    (tmp_path / "junk.keras").write_bytes(b"definitely not a model" * 5)
    with pytest.raises(ValueError, match="neither"):
        gk.models.load_model(tmp_path / "junk.keras")
    with pytest.raises(ValueError, match="not found"):
        gk.models.load_model(tmp_path / "missing.keras")
    with pytest.raises(ValueError, match="weights only"):
        gk.models.load_model(tmp_path / "m.weights.h5")
    members = keras_members(tmp_path)
    del members["model.weights.h5"]
    write_zip(tmp_path / "noweights.keras", members)
    with pytest.raises(ValueError, match="model.weights.h5"):
        gk.models.load_model(tmp_path / "noweights.keras")
    # wrong shapes: nothing is assigned, the layer and both shapes are named
    other = gk.Sequential([gk.layers.Dense(5, input_shape=(4,), name="wide")])
    before = other.get_weights()
    for name in ("m.keras", "m.h5", "m.weights.h5"):
        with pytest.raises(ValueError, match=r"wide.*\(4, 3\).*\(4, 5\)|wide.*\(4, 5\).*\(4, 3\)"):
            other.load_weights(tmp_path / name)
    for a, b in zip(before, other.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_failed_keras_save_leaves_the_old_file(tmp_path, monkeypatch):
    gm = gpucmp_cnn()
    path = tmp_path / "m.keras"
    gm.save(path)
    old = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full (simulated)")
    monkeypatch.setattr(saving.keras_zip.archive, "write_zip", broken)
    with pytest.raises(OSError, match="disk full"):
        gm.save(path)
    assert path.read_bytes() == old and listing(tmp_path) == ["m.keras"]
    with pytest.raises(FileExistsError):
        gm.save(path, overwrite=False)


def dense_config(name, activation):
    return {"class_name": "Dense", "name": name, "config": {
        "name": name, "trainable": True, "dtype": "float32", "units": 3, "activation": activation,
        "use_bias": True, "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}},
        "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": None,
        "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None,
        "bias_constraint": None}, "inbound_nodes": [[["input_1", 0, 0, {}]]]}


def test_a_tf_keras_2_h5_file_loads(tmp_path):
    """The layout tf.keras 2.15 writes (no TensorFlow here: written by hand): nested-list
    inbound nodes, batch_input_shape, ':0' weight names, 'Custom>Adam', MeanMetricWrapper."""
    layers_cfg = [{"class_name": "InputLayer", "name": "input_1", "inbound_nodes": [], "config": {
        "batch_input_shape": [None, 4], "dtype": "float32", "sparse": False, "ragged": False,
        "name": "input_1"}}, dense_config("dense", "relu"), dense_config("dense_1", "linear"),
        {"class_name": "Add", "name": "add", "config": {"name": "add", "trainable": True,
                                                         "dtype": "float32"},
         "inbound_nodes": [[["dense", 0, 0, {}], ["dense_1", 0, 0, {}]]]}]
    config = {"class_name": "Functional", "config": {
        "name": "model", "layers": layers_cfg, "input_layers": [["input_1", 0, 0]],
        "output_layers": [["add", 0, 0]]}}
    training = {"loss": "mse", "loss_weights": None, "weighted_metrics": None, "metrics": [[
        {"class_name": "MeanMetricWrapper", "config": {"name": "mae", "fn": "mean_absolute_error"}}]],
        "optimizer_config": {"class_name": "Custom>Adam", "config": {
            "name": "Adam", "jit_compile": True, "is_legacy_optimizer": False,
            "learning_rate": 0.002, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-07,
            "amsgrad": False}}}
    rng = np.random.default_rng(9)
    weights = {n: (rng.normal(size=(4, 3)).astype("f4"), rng.normal(size=3).astype("f4"))
               for n in ("dense", "dense_1")}
    with h5py.File(tmp_path / "tf2.h5", "w") as f:
        f.attrs.update(keras_version="2.15.0", backend="tensorflow",
                       model_config=json.dumps(config), training_config=json.dumps(training))
        g = f.create_group("model_weights")
        g.attrs["layer_names"] = [b"input_1", b"dense", b"dense_1", b"add"]
        for n in ("input_1", "add"):
            g.create_group(n).attrs["weight_names"] = np.array([], dtype="S")
        for n, (k, b) in weights.items():
            lg = g.create_group(n)
            lg.attrs["weight_names"] = [f"{n}/kernel:0".encode(), f"{n}/bias:0".encode()]
            lg.create_dataset(f"{n}/kernel:0", data=k)
            lg.create_dataset(f"{n}/bias:0", data=b)
    x = rng.normal(size=(3, 4)).astype("float32")
    want = np.maximum(x @ weights["dense"][0] + weights["dense"][1], 0) + \
        x @ weights["dense_1"][0] + weights["dense_1"][1]
    gm = gk.models.load_model(tmp_path / "tf2.h5")
    assert rel_err(gm.predict(x, verbose=0), want) < 1e-6
    assert isinstance(gm.optimizer, gk.optimizers.Adam) and gm.optimizer.learning_rate == 0.002
    assert [type(m).__name__ for m in gm._compiled_metrics] == ["MeanAbsoluteError"]
    km = keras.models.load_model(tmp_path / "tf2.h5", compile=False)     # Keras 3 agrees
    assert rel_err(kpredict(km, x), want) < 1e-6
