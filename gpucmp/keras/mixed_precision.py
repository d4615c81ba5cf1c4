"""Keras' dtype-policy API: ``set_global_policy``, ``global_policy``, ``Policy``,
``LossScaleOptimizer``.

'float32' is the default. Under 'mixed_float16' / 'mixed_bfloat16' layers keep float32
variables and compute in float16 / bfloat16: the execution plan stores their
activations and gradients in that dtype and casts the float32 weights to it each pass
(on GPUs the kernels run on it, Tensor Cores for GEMM and convolution; on the CPU,
which has no half-precision arithmetic, each op widens to float32 and rounds its
results back, so storage precision is the policy's and arithmetic float32). The loss is
computed in float32. Under 'mixed_float16', ``compile()`` wraps the optimizer in a
``LossScaleOptimizer`` (dynamic loss scaling), as Keras 3 does.
"""
from .optimizers import LossScaleOptimizer  # noqa: F401  (Keras exports it here too)

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
    """Sets the policy used by layers (and models) created afterwards: a name or a Policy."""
    global _global
    _global = Policy(policy if policy is not None else "float32")


def global_policy():
    return _global

