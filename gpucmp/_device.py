"""The current device: where new weights live and where models train.

`set_device("cpu")` or `set_device("cuda:0")`; the default is the first CUDA device when
the core was built with CUDA and a GPU answers, else "cpu" (DESIGN.md). Kept in one
tiny module so gpucmp.ops and gpucmp.keras read the same setting without import cycles.
"""
from . import _core

_current = None


def available_devices():
    """Backends the core can run on, e.g. ['cpu'] or ['cpu', 'cuda:0']."""
    return list(_core.backends())


def get_device():
    """The device new weights and plans are placed on."""
    global _current
    if _current is None:
        gpus = [d for d in available_devices() if d.startswith("cuda")]
        _current = gpus[0] if gpus else "cpu"
    return _current


def canonical_device(name, what=""):
    """The present device `name` names ('cuda' -> 'cuda:0'); TypeError for a non-string,
    ValueError listing the present devices for anything else. `what` (the caller) prefixes
    the message."""
    prefix = f"{what}: " if what else ""
    if not isinstance(name, str):
        raise TypeError(f"{prefix}expected a device name such as 'cpu' or 'cuda:0', got {name!r}")
    wanted = "cuda:0" if name == "cuda" else name
    devices = available_devices()
    if wanted not in devices:
        raise ValueError(f"{prefix}device {name!r} is not present (present: {', '.join(devices)})")
    return wanted


def set_device(name):
    """Select the device ("cpu", "cuda", "cuda:N") for models built afterwards."""
    global _current
    _current = canonical_device(name, "set_device")
    return _current
