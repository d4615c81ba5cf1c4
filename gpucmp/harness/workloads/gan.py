"""The seeds' GAN as a workload: one iteration of its training loop.

What it provides: `GanWorkload` ("gan"): per iteration, the generator makes a batch from
noise (inference), the discriminator takes one training step on a real batch and one on
the generated batch, and the combined model one step that trains the generator through
the frozen discriminator -- the loop of examples/gan_mnist.py on the models of
seeds.build_seed_gan, at the seed's sizes (100-d noise, 28x28x1 images). Throughput is
generated samples per second (one batch per iteration).

Why it is built this way: the three models are separate plans, called four times per
iteration as a Keras program calls them (predict, train_on_batch x 3), so the measured
iteration includes the host work between the calls that a fused step would not have;
its op list is the sum of the four calls' op lists (describe.plan_ops: the combined
model's ops leave out the frozen discriminator's weight gradients and updates, as its
plan does), and its memory the sum of the three plans' (their buffers are not shared).
"""
import numpy as np

from .. import describe, memory
from .base import Config, Run, Workload
from .models import COMPUTE_DTYPE, POLICY_OF, _on_device

NOISE_DIM = 100
HOST_CALLS = 4          # predict + three train_on_batch calls per iteration


def _build(keras):
    from .seeds import build_seed_gan
    generator, discriminator, gan = build_seed_gan(keras)
    discriminator.trainable = True          # the loop's own discriminator compile (tf.keras 2 snapshot)
    discriminator.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam(2e-4, beta_1=0.5))
    return generator, discriminator, gan


class GanRun(Run):
    """Iterations of the GAN loop on one device, on random "real" images in [-1, 1]."""

    def __init__(self, models, batch, seed=0):
        self.generator, self.discriminator, self.gan = models
        self.batch = batch
        self.work_per_step = float(batch)
        rng = np.random.default_rng(seed)
        self.real = rng.uniform(-1.0, 1.0, (8 * batch, 28, 28, 1)).astype(np.float32)
        self.noise = rng.standard_normal((8, 2, batch, NOISE_DIM)).astype(np.float32)
        self.ones, self.zeros = np.ones((batch, 1), np.float32), np.zeros((batch, 1), np.float32)
        self.k = 0

    def run(self, n_steps):
        b = self.batch
        for _ in range(int(n_steps)):
            i = self.k % 8
            self.k += 1
            fake = self.generator.predict(self.noise[i, 0], batch_size=b, verbose=0)
            self.discriminator.train_on_batch(self.real[i * b:(i + 1) * b], self.ones)
            self.discriminator.train_on_batch(fake, self.zeros)
            self.gan.train_on_batch(self.noise[i, 1], self.ones)   # returns the loss: the device is done

    def close(self):
        self.generator = self.discriminator = self.gan = self.real = None


class GanWorkload(Workload):
    name = "gan"
    description = ("the seeds' GAN (generator Dense 128-784 from 100-d noise, discriminator Dense 128-1 on "
                   "28x28x1 images): one iteration of its loop -- generate a batch, a discriminator step on "
                   "a real and on the generated batch, a generator step through the frozen discriminator "
                   "(Adam, binary cross-entropy)")
    kind = "model"
    unit = "samples/s"
    precisions = ("float32", "float16", "bfloat16")
    host_calls = HOST_CALLS

    def __init__(self):
        self._models = None

    def template(self):
        if self._models is None:
            from ... import keras
            self._models = _on_device("cpu", lambda: _build(keras))
        return self._models

    def configs(self, device_kind, batch_sizes=None):
        return [Config(int(b), f"batch {b}") for b in (batch_sizes or [128])]

    def _descs(self, precision):
        dt = COMPUTE_DTYPE[precision]
        return [[dict(d, dtype=dt) for d in describe.model_descs(m)] for m in self.template()]

    def ops(self, config, precision, tf32=True):
        g, d, gan = self._descs(precision)
        _, dm, ganm = self.template()
        b = config.batch_size
        loss = "binary_crossentropy"
        out = describe.plan_ops(g, b, train=False, tf32=tf32)
        for k in range(2):
            out += describe.plan_ops(d, b, loss, describe.optimizer_kind(dm), tf32)
        return out + describe.plan_ops(gan, b, loss, describe.optimizer_kind(ganm), tf32)

    def work_per_step(self, config, precision):
        return float(config.batch_size)

    def memory(self, config, precision, dataset_rows=0, backend="cuda"):
        parts = {}
        _, dm, ganm = self.template()
        for descs, opt in zip(self._descs(precision)[1:], (describe.optimizer_kind(dm), describe.optimizer_kind(ganm))):
            for k, v in memory.plan_memory(descs, config.batch_size, opt, backend=backend).items():
                parts[k] = parts.get(k, 0) + v
        return parts

    def max_batch(self, capacity_bytes, precision):
        """The largest batch whose two training plans fit together."""
        _, dm, ganm = self.template()
        plans = list(zip(self._descs(precision)[1:], (describe.optimizer_kind(dm), describe.optimizer_kind(ganm))))

        def total(b):
            return sum(memory.plan_memory(d, b, o)["total"] for d, o in plans)
        return memory.largest_batch(total, capacity_bytes)

    def prepare(self, device, config, precision):
        from ... import keras

        def build():
            before = keras.mixed_precision.global_policy().name
            keras.mixed_precision.set_global_policy(POLICY_OF[precision])
            try:
                return _build(keras)
            finally:
                keras.mixed_precision.set_global_policy(before)
        return GanRun(_on_device(device, build), config.batch_size)
