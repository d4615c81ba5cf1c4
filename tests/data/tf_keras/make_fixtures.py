"""Writes the real-TensorFlow fixtures of tests/test_keras_tf_files.py: small tf.keras
models with fresh random weights, saved the ways TensorFlow users save them, with a fixed
input batch and TensorFlow's predictions for it.

NOT run by the test suite (it needs TensorFlow, which gpucmp does not depend on). Run it
by hand, in a venv of its own, from this folder's parent's parent (the repository root):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install "tensorflow-cpu==2.15.*"
    /tmp/tfvenv/bin/python tests/data/tf_keras/make_fixtures.py [OUT_DIR]

For every model NAME it writes, in OUT_DIR (default: this folder, under tf2/ for
tf.keras 2 or tf3/ for Keras 3 inside TensorFlow 2.16+):
- NAME.h5          model.save("NAME.h5")           (legacy HDF5 whole-model file)
- NAME.keras       model.save("NAME.keras")        (the zip of tf.keras 2.13+ / Keras 3)
- NAME.weights.h5  model.save_weights("NAME.weights.h5")  (Keras 3's weights layout; tf.keras
                   2.13+ writes that layout too for this suffix)
- NAME-weights.h5  model.save_weights("NAME-weights.h5")  (tf.keras 2 only: the legacy HDF5
                   weights layout, layer_names / weight_names)
- legacy_adam.h5   (tf.keras 2 only) the 'trained' model compiled with
                   tf.keras.optimizers.legacy.Adam, trained one step: its other slot order
                   (its npz: x, y, the training batch and the weights after a 2nd step)
- NAME.npz         x (the input batch), y (TensorFlow's predictions, training=False) and,
                   for a trained model, the optimizer's state after the training step
and a manifest.json naming the versions that wrote them. The committed copies were then
compressed, byte for byte, with ``gzip -9n tf2/*.h5 tf2/*.keras tf3/*.h5 tf3/*.keras``
(the tests unpack them into a temporary folder).
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

keras = tf.keras
KERAS3 = int(keras.__version__.split(".")[0]) >= 3 if hasattr(keras, "__version__") else False
if not KERAS3:
    import keras as _keras_pkg                       # tf.keras 2 is the keras 2.x package
    KERAS_VERSION = _keras_pkg.__version__
else:
    KERAS_VERSION = keras.__version__


def randomize(model, rng):
    """Fresh random weights everywhere (BatchNormalization's variance kept positive), so a
    weight loaded into the wrong place changes the predictions."""
    for w in model.weights:
        name = w.name.split("/")[-1].split(":")[0]
        if name == "moving_variance":
            value = rng.uniform(0.5, 1.5, w.shape)
        elif name == "embeddings":
            value = rng.normal(0, 1.0, w.shape)
        else:
            value = rng.normal(0, 0.4, w.shape)
        w.assign(value.astype(w.dtype.name if hasattr(w.dtype, "name") else w.dtype))


def cnn():
    # tf.keras 2 style: input_shape on the first layer (no explicit Input)
    return keras.Sequential([
        keras.layers.Conv2D(3, 3, padding="same", activation="relu", input_shape=(6, 6, 2)),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(4, 2, activation="tanh"),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.25),
        keras.layers.Dense(5, activation="relu"),
        keras.layers.Dense(3, activation="softmax"),
    ], name="cnn")


def lstm():
    # the seeds' text classifier shape, tiny: Embedding -> LSTM -> Dense
    return keras.Sequential([
        keras.Input((7,), dtype="int32"),
        keras.layers.Embedding(20, 6),
        keras.layers.LSTM(5),
        keras.layers.Dense(1, activation="sigmoid"),
    ], name="lstm")


def branchy():
    i = keras.Input((5, 5, 2))
    a = keras.layers.Conv2D(3, 3, padding="same", activation="relu")(i)
    b = keras.layers.Conv2D(3, 1)(i)
    s = keras.layers.Add()([keras.layers.BatchNormalization()(a), b])
    c = keras.layers.Concatenate()([s, b])
    p = keras.layers.GlobalAveragePooling2D()(c)
    d = keras.layers.Dense(4, activation="relu")(p)
    return keras.Model(i, keras.layers.Dense(2)(d), name="branchy")


def gru():
    i = keras.Input((6, 3))
    h = keras.layers.GRU(4, return_sequences=True, reset_after=True)(i)
    g = keras.layers.GRU(3, reset_after=False)(h)
    return keras.Model(i, keras.layers.Dense(2)(g), name="gru")


def trained():
    """Compiled with Adam and trained one step, so optimizer state exists."""
    m = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(5, activation="relu"),
        keras.layers.Dense(3, activation="softmax"),
    ], name="trained")
    return m


def inputs(name, rng):
    if name == "cnn":
        return rng.normal(size=(4, 6, 6, 2)).astype("float32")
    if name == "lstm":
        return rng.integers(0, 20, (4, 7)).astype("int32")
    if name == "branchy":
        return rng.normal(size=(4, 5, 5, 2)).astype("float32")
    if name == "gru":
        return rng.normal(size=(4, 6, 3)).astype("float32")
    return rng.normal(size=(4, 4)).astype("float32")


def optimizer_state(opt):
    """iterations, learning rate and Adam's slots (m, v per trainable weight, in the
    model's trainable_weights order), whatever the Keras version keeps them as."""
    out = {"opt_iterations": np.array(int(opt.iterations.numpy()), np.int64),
           "opt_learning_rate": np.array(float(np.asarray(opt.learning_rate)), np.float32)}
    ms = [np.asarray(v) for v in opt._momentums]
    vs = [np.asarray(v) for v in opt._velocities]
    for i, (m, v) in enumerate(zip(ms, vs)):
        out[f"opt_m{i}"] = m
        out[f"opt_v{i}"] = v
    return out


def main(out):
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(2024)
    files = {}
    for name, build in [("cnn", cnn), ("lstm", lstm), ("branchy", branchy), ("gru", gru),
                        ("trained", trained)]:
        keras.backend.clear_session()         # layer names as in a fresh program
        model = build()
        randomize(model, rng)
        x = inputs(name, rng)
        extra = {}
        if name == "trained":
            model.compile(keras.optimizers.Adam(0.01), "categorical_crossentropy",
                          metrics=["accuracy"])
            xt = rng.normal(size=(8, 4)).astype("float32")
            yt = np.eye(3, dtype="float32")[rng.integers(0, 3, 8)]
            model.train_on_batch(xt, yt)
            extra = optimizer_state(model.optimizer)
            extra.update(train_x=xt, train_y=yt)
        y = np.asarray(model(x, training=False))
        paths = [f"{name}.h5", f"{name}.keras", f"{name}.weights.h5"]
        # .keras before .h5: Keras 3's .h5 writer pops the optimizer out of the model's
        # compile config, so a .keras file saved after it has none
        model.save(os.path.join(out, paths[1]))
        model.save(os.path.join(out, paths[0]))
        model.save_weights(os.path.join(out, paths[2]))
        if not KERAS3:                            # Keras 3 writes only *.weights.h5
            paths.append(f"{name}-weights.h5")
            model.save_weights(os.path.join(out, paths[3]))
        if name == "trained":
            model.train_on_batch(xt, yt)
            extra["weights_after_step2"] = np.concatenate(
                [np.asarray(w).reshape(-1) for w in model.get_weights()])
        np.savez(os.path.join(out, f"{name}.npz"), x=x, y=y, **extra)
        files[name] = paths + [f"{name}.npz"]
    if not KERAS3:
        # a pre-2.11 optimizer (tf.keras.optimizers.legacy): its slots are stored m, m, ...,
        # v, v, ... instead of m, v, m, v, ...
        keras.backend.clear_session()
        model = trained()
        randomize(model, rng)
        model.compile(keras.optimizers.legacy.Adam(0.01), "categorical_crossentropy")
        model.train_on_batch(xt, yt)
        x = inputs("trained", rng)
        y = np.asarray(model(x, training=False))
        model.save(os.path.join(out, "legacy_adam.h5"))
        model.train_on_batch(xt, yt)
        after = np.concatenate([np.asarray(w).reshape(-1) for w in model.get_weights()])
        np.savez(os.path.join(out, "legacy_adam.npz"), x=x, y=y, train_x=xt, train_y=yt,
                 weights_after_step2=after)
        files["legacy_adam"] = ["legacy_adam.h5", "legacy_adam.npz"]
    manifest = {"tensorflow": tf.__version__, "keras": KERAS_VERSION,
                "python": sys.version.split()[0], "h5py": __import__("h5py").__version__,
                "numpy": np.__version__, "files": files}
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "tf3" if KERAS3 else "tf2"))
