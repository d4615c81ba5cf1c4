"""Session state of gpucmp.keras: the compiled core, the device, the random stream, names.

Keras keeps a little global state per Python session: the per-class name counters
(``dense``, ``dense_1`` ...), the seed set by ``keras.utils.set_random_seed`` and a few
constants (``floatx``, ``epsilon``, ``image_data_format``). They live here, together with
the access to ``gpucmp._core`` (imported lazily so that ``import gpucmp.keras`` never
fails for want of the compiled extension: the error comes, with a clear message, when
a weight is first allocated) and to the current device.
"""
import re

import numpy as np

_name_counts = {}
_rng = None          # numpy Generator behind initializers, shuffling and dropout seeds
_EPSILON = 1e-7


def core():
    """The compiled extension ``gpucmp._core`` (ImportError with a hint when not built)."""
    try:
        from gpucmp import _core
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise ImportError(
            "gpucmp.keras needs the compiled core gpucmp._core, which is not built or not "
            "importable. Build it with `pip install --no-build-isolation -e .` in the "
            f"repository root. ({exc})") from exc
    return _core


def device():
    """The backend name weights and plans are created on: 'cpu' or 'cuda:N'."""
    try:
        from gpucmp._device import get_device
    except ImportError:
        return "cpu"
    return get_device()


# ---------------------------------------------------------------- random numbers
def rng():
    """The session's numpy Generator (fresh entropy unless set_random_seed was called)."""
    global _rng
    if _rng is None:
        _rng = np.random.default_rng()
    return _rng


def set_random_seed(seed):
    """Seeds gpucmp.keras (initializers, shuffling, dropout) and numpy's global RNG,
    like ``keras.utils.set_random_seed``; Python's ``random`` is seeded too."""
    import random
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"set_random_seed: seed must be a non-negative int, got {seed!r}")
    global _rng
    _rng = np.random.default_rng(int(seed))
    np.random.seed(int(seed) % (2 ** 32))
    random.seed(int(seed))


def next_seed():
    """A 63-bit seed drawn from the session stream (used for dropout masks)."""
    return int(rng().integers(0, 2 ** 63 - 1))


# ---------------------------------------------------------------- names
def to_snake_case(name):
    """Keras' class-name -> layer-name rule: Conv2D -> conv2d, MaxPooling2D -> max_pooling2d."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    name = re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
    return name


def unique_name(prefix):
    """``prefix`` the first time, then ``prefix_1``, ``prefix_2`` ... for the session."""
    n = _name_counts.get(prefix, 0)
    _name_counts[prefix] = n + 1
    return prefix if n == 0 else f"{prefix}_{n}"


def clear_session():
    """Resets the name counters (``keras.backend.clear_session``)."""
    _name_counts.clear()


# ---------------------------------------------------------------- Keras constants
def floatx():
    return "float32"


def epsilon():
    return _EPSILON


def image_data_format():
    return "channels_last"
