"""Weight initializers with Keras' formulas, drawn from the session's numpy Generator.

An initializer is called as ``init(shape)`` and returns a float32 array. Fans follow
Keras' ``compute_fans``: for a conv kernel (kh, kw, in, out) fan_in = kh*kw*in and
fan_out = kh*kw*out; for a matrix (in, out) the two dimensions. Without a ``seed``
the values come from ``gpucmp.keras.backend.rng()`` (seeded by
``keras.utils.set_random_seed``, fresh entropy otherwise); with a seed, every call of
that initializer gives the same values, as in Keras.
"""
import math

import numpy as np

from . import backend


def compute_fans(shape):
    shape = tuple(shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


class Initializer:
    """Base class: subclasses implement ``_sample(shape, rng)``."""

    def __init__(self, seed=None):
        if seed is not None and (not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"{type(self).__name__}: seed must be a non-negative int or None, got {seed!r}")
        self.seed = seed

    def _generator(self):
        return np.random.default_rng(self.seed) if self.seed is not None else backend.rng()

    def __call__(self, shape, dtype=None):
        shape = tuple(int(d) for d in shape)
        return np.asarray(self._sample(shape, self._generator()), dtype=np.float32).reshape(shape)

    def get_config(self):
        return {"seed": self.seed}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class Zeros(Initializer):
    def __init__(self):
        super().__init__(None)

    def _sample(self, shape, rng):
        return np.zeros(shape)

    def get_config(self):
        return {}


class Ones(Zeros):
    def _sample(self, shape, rng):
        return np.ones(shape)


class Constant(Initializer):
    def __init__(self, value=0.0):
        super().__init__(None)
        self.value = float(value)

    def _sample(self, shape, rng):
        return np.full(shape, self.value)

    def get_config(self):
        return {"value": self.value}


class RandomNormal(Initializer):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def _sample(self, shape, rng):
        return rng.normal(self.mean, self.stddev, shape)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class RandomUniform(Initializer):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        super().__init__(seed)
        self.minval, self.maxval = float(minval), float(maxval)

    def _sample(self, shape, rng):
        return rng.uniform(self.minval, self.maxval, shape)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


def _truncated_normal(rng, shape, stddev):
    """Normal(0, stddev) resampled outside two standard deviations (Keras' truncation)."""
    out = rng.normal(0.0, 1.0, shape)
    bad = np.abs(out) > 2.0
    while bad.any():
        out[bad] = rng.normal(0.0, 1.0, int(bad.sum()))
        bad = np.abs(out) > 2.0
    return out * stddev


class TruncatedNormal(Initializer):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def _sample(self, shape, rng):
        return self.mean + _truncated_normal(rng, shape, self.stddev)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class VarianceScaling(Initializer):
    """scale / fan (fan_in, fan_out or their mean), uniform or truncated/untruncated normal."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None):
        super().__init__(seed)
        if scale <= 0:
            raise ValueError(f"VarianceScaling: scale must be > 0, got {scale}")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"VarianceScaling: unknown mode {mode!r}")
        distribution = distribution.lower()
        if distribution == "normal":
            distribution = "truncated_normal"
        if distribution not in ("uniform", "truncated_normal", "untruncated_normal"):
            raise ValueError(f"VarianceScaling: unknown distribution {distribution!r}")
        self.scale, self.mode, self.distribution = float(scale), mode, distribution

    def _sample(self, shape, rng):
        fan_in, fan_out = compute_fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        var = self.scale / max(1.0, n)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * var)
            return rng.uniform(-limit, limit, shape)
        if self.distribution == "untruncated_normal":
            return rng.normal(0.0, math.sqrt(var), shape)
        # stddev of a unit normal truncated at +-2 is 0.87962566103423978
        return _truncated_normal(rng, shape, math.sqrt(var) / 0.87962566103423978)

    def get_config(self):
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution,
                "seed": self.seed}


def _preset(name, scale, mode, distribution):
    class Preset(VarianceScaling):
        def __init__(self, seed=None):
            super().__init__(scale, mode, distribution, seed)

        def get_config(self):
            return {"seed": self.seed}
    Preset.__name__ = Preset.__qualname__ = name
    return Preset


GlorotUniform = _preset("GlorotUniform", 1.0, "fan_avg", "uniform")
GlorotNormal = _preset("GlorotNormal", 1.0, "fan_avg", "truncated_normal")
HeUniform = _preset("HeUniform", 2.0, "fan_in", "uniform")
HeNormal = _preset("HeNormal", 2.0, "fan_in", "truncated_normal")
LecunUniform = _preset("LecunUniform", 1.0, "fan_in", "uniform")
LecunNormal = _preset("LecunNormal", 1.0, "fan_in", "truncated_normal")


class Orthogonal(Initializer):
    """QR of a normal matrix of the flattened shape, columns times sign(diag(R)), times gain."""

    def __init__(self, gain=1.0, seed=None):
        super().__init__(seed)
        self.gain = float(gain)

    def _sample(self, shape, rng):
        if len(shape) < 2:
            raise ValueError(f"Orthogonal: the shape must have rank >= 2, got {shape}")
        rows, cols = math.prod(shape[:-1]), shape[-1]
        a = rng.normal(0.0, 1.0, (max(rows, cols), min(rows, cols)))
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return self.gain * q.reshape(shape)

    def get_config(self):
        return {"gain": self.gain, "seed": self.seed}


class Identity(Initializer):
    def __init__(self, gain=1.0):
        super().__init__(None)
        self.gain = float(gain)

    def _sample(self, shape, rng):
        if len(shape) != 2:
            raise ValueError(f"Identity: the shape must have rank 2, got {shape}")
        return self.gain * np.eye(*shape)

    def get_config(self):
        return {"gain": self.gain}


_ALIASES = {
    "zeros": Zeros, "zero": Zeros, "ones": Ones, "one": Ones, "constant": Constant,
    "random_normal": RandomNormal, "randomnormal": RandomNormal, "normal": RandomNormal,
    "random_uniform": RandomUniform, "randomuniform": RandomUniform, "uniform": RandomUniform,
    "truncated_normal": TruncatedNormal, "truncatednormal": TruncatedNormal,
    "variance_scaling": VarianceScaling, "variancescaling": VarianceScaling,
    "glorot_uniform": GlorotUniform, "glorotuniform": GlorotUniform,
    "glorot_normal": GlorotNormal, "glorotnormal": GlorotNormal,
    "he_uniform": HeUniform, "heuniform": HeUniform, "he_normal": HeNormal, "henormal": HeNormal,
    "lecun_uniform": LecunUniform, "lecununiform": LecunUniform,
    "lecun_normal": LecunNormal, "lecunnormal": LecunNormal,
    "orthogonal": Orthogonal, "identity": Identity,
}

# Keras' function-style aliases: keras.initializers.glorot_uniform(seed=None) etc.
zeros, ones, constant = Zeros, Ones, Constant
random_normal, random_uniform, truncated_normal = RandomNormal, RandomUniform, TruncatedNormal
glorot_uniform, glorot_normal, he_uniform, he_normal = GlorotUniform, GlorotNormal, HeUniform, HeNormal
lecun_uniform, lecun_normal, orthogonal, identity = LecunUniform, LecunNormal, Orthogonal, Identity


def get(identifier, argument="initializer"):
    """An Initializer from a name (any case), an instance, a class, a config dict or a callable."""
    if isinstance(identifier, Initializer):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, Initializer):
        return identifier()
    if isinstance(identifier, str):
        cls = _ALIASES.get(identifier.strip().lower())
        if cls is None:
            raise ValueError(f"Unknown {argument}: {identifier!r}")
        return cls()
    if isinstance(identifier, dict) and "class_name" in identifier:
        return deserialize(identifier)
    if callable(identifier):
        return identifier
    raise ValueError(f"Could not interpret {argument}: {identifier!r}")


def serialize(init):
    if isinstance(init, Initializer):
        return {"class_name": type(init).__name__, "config": init.get_config()}
    raise ValueError(f"Cannot serialize the initializer {init!r} (a plain callable)")


def deserialize(config):
    cls = _ALIASES.get(str(config.get("class_name", "")).lower())
    if cls is None:
        raise ValueError(f"Unknown initializer in config: {config!r}")
    return cls.from_config(config.get("config", {}))
