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


# The seeds' recurrent programs leave vocab_size, sequence_length and num_classes
# undefined; these are the sizes RECURRENT_SPEC.md counts them with (Embedding 10000 x 256).
SEED_VOCAB, SEED_SEQUENCE, SEED_CLASSES = 10000, 100, 10


def _seed_recurrent(keras, rnn_layer, out_units, vocab_size, sequence_length, loss, compile):
    """Embedding(vocab, 256) over sequence_length ids -> rnn_layer -> Dense(out_units, softmax)."""
    model = keras.models.Sequential()
    model.add(keras.layers.Embedding(input_dim=vocab_size, output_dim=256, input_length=sequence_length))
    model.add(rnn_layer)
    model.add(keras.layers.Dense(out_units, activation="softmax"))
    if compile:
        model.compile(optimizer="adam", loss=loss, metrics=["accuracy"])
    return model


def build_seed_rnn(keras, vocab_size=SEED_VOCAB, sequence_length=SEED_SEQUENCE,
                   loss="categorical_crossentropy", compile=True):
    """The seeds' text-generation model (002): Embedding -> SimpleRNN(128) -> Dense(vocab,
    softmax); 3,899,280 parameters at the seed sizes."""
    return _seed_recurrent(keras, keras.layers.SimpleRNN(units=128), vocab_size, vocab_size, sequence_length,
                           loss, compile)


def build_seed_lstm(keras, vocab_size=SEED_VOCAB, sequence_length=SEED_SEQUENCE, num_classes=SEED_CLASSES,
                    loss="categorical_crossentropy", compile=True):
    """The seeds' sequence classifier (002): Embedding -> LSTM(128) -> Dense(classes,
    softmax); 2,758,410 parameters at the seed sizes."""
    return _seed_recurrent(keras, keras.layers.LSTM(units=128), num_classes, vocab_size, sequence_length, loss,
                           compile)


def build_seed_gan(keras, compile=True):
    """The seeds' GAN (002), line for line: a generator Dense(128, relu) -> Dense(784, tanh)
    -> Reshape(28, 28, 1) from 100-d noise, a discriminator Flatten -> Dense(128, relu) ->
    Dense(1, sigmoid), and gan = Sequential([generator, discriminator]) compiled with the
    discriminator frozen (binary cross-entropy, Adam). Returns (generator, discriminator, gan);
    the seed compiles only gan, so a training loop compiles the discriminator itself.
    compile=False stops before the freeze: three uncompiled models, all trainable."""
    Sequential, L = keras.models.Sequential, keras.layers
    generator = Sequential()
    generator.add(L.Dense(128, input_dim=100, activation="relu"))
    generator.add(L.Dense(784, activation="tanh"))
    generator.add(L.Reshape((28, 28, 1)))
    discriminator = Sequential()
    discriminator.add(L.Flatten(input_shape=(28, 28, 1)))
    discriminator.add(L.Dense(128, activation="relu"))
    discriminator.add(L.Dense(1, activation="sigmoid"))
    gan = Sequential()
    gan.add(generator)
    gan.add(discriminator)
    if compile:
        discriminator.trainable = False
        gan.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam())
    return generator, discriminator, gan
