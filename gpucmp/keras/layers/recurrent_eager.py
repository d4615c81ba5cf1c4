"""Calling a recurrent layer (SimpleRNN / LSTM / GRU, Bidirectional) as Keras 3 does.

On symbolic tensors (functional API) the call is recorded: ``initial_state`` must then be
symbolic tensors too (their gradients flow in the plan), and masks come attached to the
input (Embedding(mask_zero=True), Masking), not through ``mask=``.

On arrays (eager) the layer runs at once in a small inference plan of its own:
``mask=`` (a (batch, timesteps) boolean array, True = use the step) and
``initial_state=`` (a list of (batch, units) arrays, or one array) are plan inputs of
that plan, and with several outputs (return_state, Bidirectional's merge_mode=None) the
result is a tuple of arrays, as Keras returns them. Bad shapes are ValueErrors naming the
argument. The plans are cached on the layer per argument pattern and shapes.
"""
import numpy as np

from ..keras_tensor import KerasTensor, is_symbolic
from . import cudnn_checks


def _as_list(states):
    return list(states) if isinstance(states, (list, tuple)) else [states]


def call(layer, inputs, initial_state, training, mask, kwargs, base_call):
    """The body of ``layer.__call__``; ``base_call`` is Layer.__call__ bound to it."""
    if kwargs:
        raise TypeError(f"{type(layer).__name__}.__call__ got unexpected arguments {sorted(kwargs)}")
    if isinstance(inputs, KerasTensor) or is_symbolic(inputs):
        if mask is not None:
            raise NotImplementedError(
                f"Layer '{layer.name}': an explicit `mask=` on symbolic tensors is not supported; attach "
                "the mask with Embedding(mask_zero=True) or a Masking layer before this layer (on "
                "arrays, `mask=` works)")
        if initial_state is None:
            return base_call(inputs, training=training)
        states = _as_list(initial_state)
        if not is_symbolic(states):
            raise ValueError(
                f"Layer '{layer.name}': `initial_state` must be symbolic tensors (keras.Input or "
                "another layer's outputs) when the layer is called on a symbolic input; call the "
                "layer on arrays to pass array states")
        if training is not None and layer._training_matters:
            return base_call(inputs, training=training)    # the base class's clear error
        return layer._call_symbolic([inputs] + states)
    states = [] if initial_state is None else _as_list(initial_state)
    if not states and mask is None and not _several_outputs(layer):
        return base_call(inputs, training=training)
    return run(layer, inputs, states, mask)


def _several_outputs(layer):
    return bool(getattr(layer, "return_state", False)) or getattr(layer, "merge_mode", "concat") is None


def _array(value, what, layer):
    try:
        return np.ascontiguousarray(np.asarray(value, dtype=np.float32))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Layer '{layer.name}': `{what}` must be an array of numbers ({exc})") from None


def run(layer, inputs, states, mask):
    """One eager call with array states and / or a mask; an array or a tuple of arrays."""
    from ..models import lowering
    x = _array(inputs, "inputs", layer)
    if x.ndim != 3 or x.shape[0] == 0:
        raise ValueError(f"Layer '{layer.name}': expected inputs of shape (batch, timesteps, features), "
                         f"received shape {x.shape}")
    B, T = x.shape[:2]
    arrays = [_array(s, f"initial_state[{k}]", layer) for k, s in enumerate(states)]
    for k, s in enumerate(arrays):
        if s.ndim != 2 or s.shape[0] != B:
            raise ValueError(f"Layer '{layer.name}': initial_state[{k}] must have shape (batch, units) with "
                             f"the inputs' batch {B}, received shape {s.shape}")
    shapes = [(None,) + x.shape[1:]] + [(None,) + s.shape[1:] for s in arrays]
    in_shape = shapes if arrays else shapes[0]
    out_shape = layer.build_for(in_shape)      # checks the states against the layer's units
    feeds = [x] + arrays
    plan_shapes = list(shapes)
    if mask is not None:
        m = np.asarray(mask)
        if m.shape != (B, T):
            raise ValueError(f"Layer '{layer.name}': `mask` must have shape (batch, timesteps) = ({B}, {T}), "
                             f"received shape {m.shape}")
        for sub in getattr(layer, "layers", [layer]):    # Bidirectional: both directions
            cudnn_checks.check_mask_array(sub, m)
        feeds.append(np.ascontiguousarray(m.astype(bool).astype(np.float32)))
        plan_shapes.append((None, T))
    flat = lowering.FlatGraph(plan_shapes)
    if mask is not None:
        flat.masks[0] = len(feeds) - 1
    flat.add(layer, list(range(1 + len(arrays))), bool(arrays))
    flat.output = flat.steps[-1].out           # the packed sample when there are several outputs
    nodes = lowering.as_plan_list(lowering.describe(flat, lambda l: False))
    cache = layer._inference_plans.setdefault(("eager", len(arrays), mask is not None), {})
    packed = lowering.run_inference(cache, nodes, feeds)
    if not isinstance(out_shape, list):
        return packed.reshape((B,) + tuple(out_shape[1:]))
    outs, off = [], 0
    packed = packed.reshape(B, -1)
    for s in out_shape:
        n = int(np.prod(s[1:]))
        outs.append(packed[:, off:off + n].reshape((B,) + tuple(s[1:])))
        off += n
    return tuple(outs)
