"""Files written by real TensorFlow load in gpucmp and predict what TensorFlow predicted.

The fixtures (tests/data/tf_keras/, see its README.md) were written by TensorFlow 2.15.1
(tf.keras 2.15, in tf2/) and TensorFlow 2.21 (Keras 3.15.1, in tf3/) with
make_fixtures.py; TensorFlow is not needed here. Each model's `.h5`, `.keras` and weights
files are loaded and compared with TensorFlow's stored predictions, the Adam state of the
trained models with TensorFlow's, and gpucmp's own `.h5` with the layout tf.keras 2 wrote.
"""
import gzip
import json
import os
import warnings

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

import gpucmp.keras as gk  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tf_keras")
VERSIONS = ("tf2", "tf3")
MODELS = ("cnn", "lstm", "branchy", "gru", "trained")


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


def fixture(tmp_path, version, filename):
    """The fixture unpacked into tmp_path (the .h5 / .keras files are stored gzipped)."""
    src = os.path.join(DATA, version, filename)
    if os.path.exists(src + ".gz"):
        with gzip.open(src + ".gz", "rb") as fh:
            data = fh.read()
        path = tmp_path / filename
        path.write_bytes(data)
        return path
    assert os.path.exists(src), f"missing fixture {src}"
    return src


def expected(version, name):
    return np.load(os.path.join(DATA, version, f"{name}.npz"))


def load(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # e.g. "the optimizer state is not restored"
        return gk.models.load_model(path, **kwargs)


def test_the_fixtures_are_what_the_readme_says():
    for version, tf, keras in (("tf2", "2.15.1", "2.15.0"), ("tf3", "2.21.0", "3.15.1")):
        with open(os.path.join(DATA, version, "manifest.json")) as fh:
            manifest = json.load(fh)
        assert (manifest["tensorflow"], manifest["keras"]) == (tf, keras)
        for name, files in manifest["files"].items():
            for f in files:
                assert os.path.exists(os.path.join(DATA, version, f)) or \
                    os.path.exists(os.path.join(DATA, version, f + ".gz")), f


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("suffix", [".h5", ".keras"])
def test_a_tensorflow_model_file_predicts_what_tensorflow_predicted(tmp_path, version, name,
                                                                    suffix):
    want = expected(version, name)
    model = load(fixture(tmp_path, version, name + suffix))
    assert model.name == name
    assert rel_err(model.predict(want["x"], verbose=0), want["y"]) < 1e-5


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", MODELS)
def test_tensorflow_weights_files_load_into_the_model(tmp_path, version, name):
    want = expected(version, name)
    model = load(fixture(tmp_path, version, name + ".h5"), compile=False)
    weights = [f for f in (name + ".weights.h5", name + "-weights.h5")
               if os.path.exists(os.path.join(DATA, version, f + ".gz"))]
    assert len(weights) == (2 if version == "tf2" else 1)
    rng = np.random.default_rng(0)
    for f in weights:
        for w in model.weights:                 # the load has to put every weight back
            w.assign(rng.uniform(0.5, 1.5, w.shape).astype("float32"))
        assert rel_err(model.predict(want["x"], verbose=0), want["y"]) > 1e-3
        model.load_weights(fixture(tmp_path, version, f))
        assert rel_err(model.predict(want["x"], verbose=0), want["y"]) < 1e-5, f


def slots(model):
    opt = model.optimizer
    out = []
    for var in model.trainable_weights:
        out.append([b.read()[: var.size].reshape(var.shape) for b in opt._slots[id(var)][1]])
    return out


def weights_after_a_step(model, want):
    model.train_on_batch(want["train_x"], want["train_y"])
    return np.concatenate([w.reshape(-1) for w in model.get_weights()])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("suffix", [".h5", ".keras"])
def test_the_adam_state_tensorflow_saved_is_restored(tmp_path, version, suffix):
    want = expected(version, "trained")
    model = load(fixture(tmp_path, version, "trained" + suffix))
    opt = model.optimizer
    assert isinstance(opt, gk.optimizers.Adam)
    assert opt.iterations == int(want["opt_iterations"]) == 1
    assert opt.learning_rate == pytest.approx(float(want["opt_learning_rate"]))
    assert type(model._loss_obj).__name__ == "CategoricalCrossentropy"
    got = slots(model)
    assert len(got) == 4
    for i, (m, v) in enumerate(got):
        np.testing.assert_allclose(m, want[f"opt_m{i}"], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(v, want[f"opt_v{i}"], rtol=1e-6, atol=1e-12)
    # resuming training takes the step TensorFlow took (a fresh Adam would not)
    assert rel_err(weights_after_a_step(model, want), want["weights_after_step2"]) < 1e-5


def test_a_tf_keras_legacy_optimizer_state_is_restored(tmp_path):
    """tf.keras.optimizers.legacy.Adam stores m, m, ..., v, v, ...; restored in gpucmp's
    m, v order, the next step is TensorFlow's."""
    want = expected("tf2", "legacy_adam")
    path = fixture(tmp_path, "tf2", "legacy_adam.h5")
    with h5py.File(path, "r") as f:
        names = [n.decode() if isinstance(n, bytes) else n
                 for n in f["optimizer_weights"].attrs["weight_names"]]
    assert names[:3] == ["Adam/iter:0", "Adam/dense/kernel/m:0", "Adam/dense/bias/m:0"]
    model = load(path)
    assert rel_err(model.predict(want["x"], verbose=0), want["y"]) < 1e-5
    assert model.optimizer.iterations == 1
    assert rel_err(weights_after_a_step(model, want), want["weights_after_step2"]) < 1e-5


def _v_before_m(names):
    return names[:1] + [names[i + d] for i in range(1, len(names), 2) for d in (1, 0)]


def _weights_reversed(names):                  # (m, v) pairs kept, weights in reverse
    pairs = [names[i:i + 2] for i in range(1, len(names), 2)]
    return names[:1] + [n for pair in pairs[::-1] for n in pair]


@pytest.mark.parametrize("scramble", [_v_before_m, _weights_reversed],
                         ids=["v-before-m", "weights-reversed"])
def test_an_unknown_optimizer_weights_layout_warns_and_starts_fresh(tmp_path, scramble):
    src = fixture(tmp_path, "tf2", "trained.h5")
    with h5py.File(src, "r+") as f:
        g = f["optimizer_weights"]
        g.attrs["weight_names"] = scramble(list(g.attrs["weight_names"]))
    with pytest.warns(UserWarning, match="optimizer state is not restored"):
        model = gk.models.load_model(src)
    assert model.optimizer.iterations == 0
    want = expected("tf2", "trained")
    assert rel_err(model.predict(want["x"], verbose=0), want["y"]) < 1e-5


def h5_config(path):
    with h5py.File(path, "r") as f:
        weights = {n.decode() if isinstance(n, bytes) else n: [
            w.decode() if isinstance(w, bytes) else w
            for w in f["model_weights"][n].attrs["weight_names"]]
            for n in f["model_weights"].attrs["layer_names"]}
        return json.loads(f.attrs["model_config"]), weights, f.attrs["keras_version"]


@pytest.mark.parametrize("name", ["cnn", "lstm", "branchy", "gru"])
def test_gpucmp_writes_h5_in_the_layout_tf_keras_2_wrote(tmp_path, name):
    """tf.keras 2 rejects Keras 3's .h5 configs; gpucmp's .h5 has what tf.keras 2.15 itself
    wrote for the same model: class names, InputLayer batch_input_shape, dtype names,
    nested-list inbound nodes, ':0' weight names."""
    src = fixture(tmp_path, "tf2", name + ".h5")
    model = load(src)
    model.save(tmp_path / "gpucmp.h5")
    tf_cfg, tf_weights, _ = h5_config(src)
    g_cfg, g_weights, version = h5_config(tmp_path / "gpucmp.h5")
    assert version == "2.15.0"
    assert g_cfg["class_name"] == tf_cfg["class_name"]
    assert g_weights == tf_weights
    for tl, gl in zip(tf_cfg["config"]["layers"], g_cfg["config"]["layers"], strict=True):
        assert (gl["class_name"], gl["config"]["name"]) == (tl["class_name"], tl["config"]["name"])
        assert "batch_shape" not in gl["config"] and "optional" not in gl["config"]
        assert gl["config"].get("dtype") == tl["config"].get("dtype")
        if "inbound_nodes" in tl:
            assert gl["inbound_nodes"] == tl["inbound_nodes"]
        if tl["class_name"] == "InputLayer":
            assert gl["config"]["batch_input_shape"] == tl["config"]["batch_input_shape"]
    for key in ("input_layers", "output_layers"):
        assert g_cfg["config"].get(key) == tf_cfg["config"].get(key)
    back = load(tmp_path / "gpucmp.h5")                 # and gpucmp reads its own file
    want = expected("tf2", name)
    assert rel_err(back.predict(want["x"], verbose=0), want["y"]) < 1e-5
