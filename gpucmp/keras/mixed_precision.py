"""Keras' dtype-policy API: ``set_global_policy``, ``global_policy``, ``Policy``.

'float32' is the default. 'mixed_float16' and 'mixed_bfloat16' are accepted and
recorded (variables float32, compute float16/bfloat16, as in Keras), and layers built
under them report it through ``layer.dtype_policy`` / ``compute_dtype``. On this
release the execution plan computes in float32 whatever the policy says; half-precision
compute and loss scaling on the GPU come with the mixed-precision issue.
"""
import warnings

_POLICIES = {
    "float32": ("float32", "float32"),
    "float16": ("float16", "float16"),
    "bfloat16": ("bfloat16", "bfloat16"),
    "mixed_float16": ("float16", "float32"),
    "mixed_bfloat16": ("bfloat16", "float32"),
}


class Policy:
    """A named pair (compute_dtype, variable_dtype)."""

    def __init__(self, name):
        if isinstance(name, Policy):
            name = name.name
        if name not in _POLICIES:
            raise ValueError(f"Policy: unknown dtype policy {name!r}; expected one of "
                             f"{', '.join(_POLICIES)}")
        self.name = name
        self.compute_dtype, self.variable_dtype = _POLICIES[name]

    def __eq__(self, other):
        return isinstance(other, Policy) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def get_config(self):
        return {"name": self.name}

    def __repr__(self):
        return f'<DTypePolicy "{self.name}">'


DTypePolicy = Policy
_global = Policy("float32")


def set_global_policy(policy):
    """Sets the policy used by layers created afterwards (a name or a Policy). A policy
    other than float32 is recorded, with a warning that this release still computes in
    float32 (so nobody measures a "mixed precision" run that is not one)."""
    global _global
    _global = Policy(policy if policy is not None else "float32")
    if _global.compute_dtype != "float32":
        warnings.warn(f"gpucmp: dtype policy {_global.name!r} is recorded, but this release of "
                      "gpucmp computes in float32 (half-precision compute comes with the "
                      "mixed-precision work of the CUDA backend)", UserWarning, stacklevel=2)


def global_policy():
    return _global


class LossScaleOptimizer:
    """Accepted for source compatibility: wraps an optimizer and forwards to it (the
    plan computes in float32 on this release, so no loss scaling is needed)."""

    def __new__(cls, inner_optimizer, *args, **kwargs):
        return inner_optimizer
