"""The seeds' GAN (002) on gpucmp.keras: the program runs with only its imports changed,
trainable follows tf.keras 2's snapshot-at-compile semantics (a model compiled with the
discriminator frozen never updates it, the discriminator compiled afterwards does), and
the complete example (examples/gan_mnist.py) trained on the real MNIST digits makes
digits a classifier of the real ones reads with confidence, across several classes."""
import importlib.util
import os

import numpy as np

from gpucmp import keras
from gpucmp.harness.workloads.seeds import build_seed_gan

SEED_PROGRAM = '''
from gpucmp.keras.models import Sequential, Model
from gpucmp.keras.layers import Dense, Reshape, Flatten
from gpucmp.keras.optimizers import Adam

generator = Sequential()
generator.add(Dense(128, input_dim=100, activation='relu'))
generator.add(Dense(784, activation='tanh'))
generator.add(Reshape((28, 28, 1)))

discriminator = Sequential()
discriminator.add(Flatten(input_shape=(28, 28, 1)))
discriminator.add(Dense(128, activation='relu'))
discriminator.add(Dense(1, activation='sigmoid'))

gan = Sequential()
gan.add(generator)
gan.add(discriminator)
discriminator.trainable = False
gan.compile(loss='binary_crossentropy', optimizer=Adam())
'''


def test_the_seed_program_runs_with_only_its_imports_changed():
    ns = {}
    exec(compile(SEED_PROGRAM, "seed_gan", "exec"), ns)
    gan = ns["gan"]
    assert gan.count_params() == 100 * 128 + 128 + 128 * 784 + 784 + 784 * 128 + 128 + 129
    rng = np.random.default_rng()
    out = gan.predict(rng.standard_normal((5, 100)).astype(np.float32), verbose=0)
    assert out.shape == (5, 1) and np.all((out > 0) & (out < 1))
    assert ns["generator"].output_shape == (None, 28, 28, 1)


def test_trainable_is_the_snapshot_taken_at_compile():
    generator, discriminator, gan = build_seed_gan(keras)
    discriminator.trainable = True
    discriminator.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam())
    rng = np.random.default_rng()
    z = rng.standard_normal((16, 100)).astype(np.float32)
    d0, g0 = [w.copy() for w in discriminator.get_weights()], [w.copy() for w in generator.get_weights()]
    gan.train_on_batch(z, np.ones((16, 1), np.float32))
    assert all(np.array_equal(a, b) for a, b in zip(d0, discriminator.get_weights())), "gan moved D"
    assert all(not np.array_equal(a, b) for a, b in zip(g0, generator.get_weights())), "gan left G"
    imgs = rng.uniform(-1, 1, (16, 28, 28, 1)).astype(np.float32)
    discriminator.train_on_batch(imgs, np.ones((16, 1), np.float32))
    assert all(not np.array_equal(a, b) for a, b in zip(d0, discriminator.get_weights())), "D did not train"


def _example():
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "gan_mnist.py")
    spec = importlib.util.spec_from_file_location("gan_mnist", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_example_learns_recognisable_digits():
    """A convergence test, so one seeded run (keras.utils.set_random_seed in the example): at
    4,000 steps it reads at ~0.64 against ~0.31 for noise, over all 10 classes; unseeded
    3,000-step runs scatter from 0.41 to 0.59, which no honest threshold separates from a
    regression."""
    ex = _example()
    try:
        generator, x = ex.train(steps=4000, batch=64, seed=0, log_every=0)
        conf, noise, classes, acc = ex.digit_quality(generator, x)
    finally:      # the tests after this one draw fresh numbers again
        keras.utils.set_random_seed(int.from_bytes(os.urandom(4), "little"))
    assert acc > 0.9, acc                    # the judge reads real digits
    assert conf > noise + 0.15, (conf, noise)
    assert classes >= 6, classes             # not one digit over and over
