"""Workloads by name: `get(name_or_model)`, `names()`, `register(factory)`.

Built in: cnn (the seeds' CNN), gemm, conv, bandwidth, resnet50, rnn, lstm and gan (the
seeds' other programs), all in DEFAULT: the shipped calibration measures every one of
them (a test checks it), so none of the default rows is a rough figure. A compiled
gpucmp.keras model is a workload too (its name is the model's). Adding one is a small
file with a Workload subclass and one `register` line here. Names may carry a size:
'gemm:4096' is a 4096^3 GEMM.
"""
import difflib

from .base import Config, NotMeasurable, Run, Workload, canonical_precision, PRECISIONS
from .kernels import BandwidthWorkload, ConvWorkload, GemmWorkload
from .models import ModelWorkload, seed_cnn_workload, seed_lstm_workload, seed_rnn_workload, user_model_workload
from .gan import GanWorkload
from .resnet50 import ResNet50Workload, resnet50_workload

_FACTORIES = {}
_CACHE = {}


def register(name, factory):
    """Make `factory(arg)` available as workload `name` (arg: the text after ':' or None)."""
    _FACTORIES[name] = factory
    _CACHE.pop(name, None)


def names():
    return list(_FACTORIES)


def _size(arg, name):
    try:
        v = int(arg)
    except (TypeError, ValueError):
        raise ValueError(f"workload '{name}:{arg}': the size after ':' must be a positive integer") from None
    if v < 1:
        raise ValueError(f"workload '{name}:{arg}': the size after ':' must be a positive integer")
    return v


register("cnn", lambda arg: seed_cnn_workload())
register("gemm", lambda arg: GemmWorkload(_size(arg, "gemm") if arg else None))
register("conv", lambda arg: ConvWorkload())
register("bandwidth", lambda arg: BandwidthWorkload())
register("resnet50", lambda arg: resnet50_workload())
register("rnn", lambda arg: seed_rnn_workload())
register("lstm", lambda arg: seed_lstm_workload())
register("gan", lambda arg: GanWorkload())

DEFAULT = ("cnn", "gemm", "conv", "bandwidth", "resnet50", "rnn", "lstm", "gan")


def get(spec):
    """A Workload from a name ('cnn', 'gemm:4096'), a Workload, or a compiled gpucmp.keras model."""
    if isinstance(spec, Workload):
        return spec
    if isinstance(spec, str):
        base, _, arg = spec.strip().partition(":")
        base = base.lower()
        if base not in _FACTORIES:
            close = difflib.get_close_matches(base, names(), n=3, cutoff=0.4)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise ValueError(f"unknown workload {spec!r}{hint}; known workloads: {', '.join(names())}")
        key = f"{base}:{arg}"
        if key not in _CACHE:
            _CACHE[key] = _FACTORIES[base](arg or None)
        return _CACHE[key]
    from ...keras.models.model import Model
    if isinstance(spec, Model):
        return user_model_workload(spec)
    raise TypeError(f"a workload is a name (one of {', '.join(names())}), a Workload or a compiled "
                    f"gpucmp.keras model, got {type(spec).__name__}")


def resolve_list(workloads):
    """A list of Workloads from None (the defaults), one spec, or a list of specs."""
    if workloads is None:
        return [get(n) for n in DEFAULT]
    if isinstance(workloads, (str, Workload)) or not isinstance(workloads, (list, tuple)):
        workloads = [workloads]
    if not workloads:
        raise ValueError("workloads is empty: give at least one workload name or model")
    return [get(w) for w in workloads]


__all__ = ["Config", "NotMeasurable", "Run", "Workload", "ModelWorkload", "GemmWorkload", "ConvWorkload",
           "BandwidthWorkload", "ResNet50Workload", "get", "names", "register", "resolve_list",
           "canonical_precision", "PRECISIONS", "DEFAULT"]
