"""``use_cudnn`` of LSTM / GRU: which configurations cuDNN's RNN API computes as Keras does.

Keras 3's LSTM and GRU take ``use_cudnn="auto" | True | False``. In gpucmp, ``True`` runs
the layer through cuDNN (csrc/plan/layer_rnn_cudnn.c) on a CUDA device -- the baseline
gpucmp's own recurrence kernels are measured against -- while ``"auto"`` and ``False`` keep
gpucmp's kernels (``"auto"`` never picks cuDNN: it is a baseline, not a fast path). As
Keras, ``use_cudnn=True`` with a configuration cuDNN cannot compute is a ValueError naming
the option: activation other than tanh, recurrent_activation other than sigmoid,
recurrent_dropout, GRU reset_after=False, stateful, unroll (Keras' own check refuses it
too), and -- found when the layer is lowered or called -- go_backwards with a mask and
masks that are not right-padded (a row must be its valid steps, then only padding, with
at least one valid step). ``use_bias=False`` and ``dropout`` are fine. With a mask the
padded steps' outputs are 0, as Keras' cuDNN kernels return them. On the CPU the plan
refuses the layer when it is built (NotImplementedError: cuDNN needs a CUDA device).

SimpleRNN has no ``use_cudnn`` in Keras and gets none here; the variant point
``cuda.rnn.impl`` (``GPUCMP_FORCE=cuda.rnn.impl=cudnn``) runs every recurrent layer of
plans built while it is forced through cuDNN, SimpleRNN (tanh or relu) included.
"""
import numpy as np

USE_CUDNN_VALUES = ("auto", True, False)


def check_value(value, cls_name):
    """``use_cudnn`` as Keras takes it: "auto", True or False."""
    if isinstance(value, str) and value == "auto":
        return "auto"
    if value is True or value is False:
        return value
    raise ValueError(f"{cls_name}: invalid value received for argument `use_cudnn`. Expected one of "
                     f"{{'auto', True, False}}. Received: use_cudnn={value!r}")


def incompatible(layer):
    """The first option of ``layer`` (an LSTM / GRU) cuDNN cannot compute, or None."""
    if getattr(layer, "cell", None) == "gru_reset_before":
        return "reset_after=False (cuDNN's GRU is reset_after=True)"
    if layer.activation != "tanh":
        return f"activation={layer.activation!r} (cuDNN needs 'tanh')"
    if layer.recurrent_activation != "sigmoid":
        return f"recurrent_activation={layer.recurrent_activation!r} (cuDNN needs 'sigmoid')"
    if layer.recurrent_dropout:
        return f"recurrent_dropout={layer.recurrent_dropout} (cuDNN has none)"
    if layer.stateful:
        return "stateful=True"
    if layer.unroll:
        return "unroll=True"
    return None


def refuse(layer, why):
    raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}): use_cudnn=True was specified, but cuDNN "
                     f"is not supported for this layer configuration: {why}. Pass use_cudnn='auto' to use "
                     "gpucmp's own kernels")


def check_layer(layer):
    """ValueError naming the option when use_cudnn=True and cuDNN cannot run ``layer``."""
    if getattr(layer, "use_cudnn", "auto") is True:
        why = incompatible(layer)
        if why:
            refuse(layer, why)


def check_masked(layer):
    """A mask reaches a use_cudnn=True layer: go_backwards would make it left-padded."""
    if getattr(layer, "use_cudnn", "auto") is True and layer.go_backwards:
        refuse(layer, "go_backwards=True with a mask (cuDNN takes right-padded sequences only)")


def check_mask_array(layer, mask):
    """An eager call's (batch, timesteps) mask: right-padded rows with >= 1 valid step."""
    if getattr(layer, "use_cudnn", "auto") is not True:
        return
    m = np.asarray(mask).astype(bool)
    lengths = m.sum(axis=1)
    padded = np.arange(m.shape[1])[None, :] < lengths[:, None]
    bad = np.nonzero((padded != m).any(axis=1) | (lengths == 0))[0]
    if bad.size:
        row = int(bad[0])
        what = "has no valid step" if lengths[row] == 0 else "is not right-padded (a masked step before a valid one)"
        refuse(layer, f"the mask of row {row} {what}; cuDNN takes sequences padded at the end only")
