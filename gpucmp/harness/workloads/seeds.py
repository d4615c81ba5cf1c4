"""The seeds' models, defined once: used by the CLI (`gpucmp cnn`), the workloads, the
notebooks, the benchmarks and the tests.

`build_seed_cnn(keras)` takes the keras module to build with -- gpucmp.keras, or real
Keras in the parity tests -- so both sides are built from the same lines.
"""


def build_seed_cnn(keras, loss="categorical_crossentropy", compile=True):
    """The CNN of ../shared/seeds (002), layer for layer: 93,322 parameters."""
    model = keras.models.Sequential()
    model.add(keras.layers.Conv2D(32, (3, 3), activation="relu", input_shape=(28, 28, 1)))
    model.add(keras.layers.MaxPooling2D((2, 2)))
    model.add(keras.layers.Conv2D(64, (3, 3), activation="relu"))
    model.add(keras.layers.MaxPooling2D((2, 2)))
    model.add(keras.layers.Conv2D(64, (3, 3), activation="relu"))
    model.add(keras.layers.Flatten())
    model.add(keras.layers.Dense(64, activation="relu"))
    model.add(keras.layers.Dense(10, activation="softmax"))
    if compile:
        model.compile(optimizer="adam", loss=loss, metrics=["accuracy"])
    return model
