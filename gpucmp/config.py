"""Run-time settings of the core, in the spirit of tf.config / torch.backends.

set_tf32(True|False): float32 GEMM and convolution on GPUs may run as TF32 on Tensor Cores
(10-bit mantissa operands, float32 accumulation). On by default on Ampere and newer, as
TensorFlow does; False gives exact float32 (slower). No effect on the CPU, which always
computes in float32.
"""
from . import _core


def set_tf32(enabled):
    """Allow (True, the default) or forbid (False) TF32 for float32 GEMM/conv on GPUs."""
    if not isinstance(enabled, (bool, int)):
        raise TypeError(f"set_tf32: expected True or False, got {enabled!r}")
    _core.set_allow_tf32(bool(enabled))


def get_tf32():
    """Whether float32 GEMM/conv on GPUs may use TF32."""
    return bool(_core.get_allow_tf32())
