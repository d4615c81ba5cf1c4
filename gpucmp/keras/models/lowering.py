"""Lowering: a model's graph -> the node dicts of ``gpucmp._core.Plan``, and plan caches.

Every model lowers the same way. ``flatten(model, input_shapes)`` inlines nested models
(a GAN's ``Sequential([generator, discriminator])``, a model called on a KerasTensor)
into one flat graph of leaf-layer calls -- a Sequential model is a chain, a functional
model its graph -- and ``describe`` turns each call into the layer's plan dicts
(``Layer.plan_layers``). The contract with the C plan (csrc/python/CORE_API.md):

- one ``{"kind": "input", "out_shape": per-sample shape}`` node per model input, in
  ``model.inputs`` order, first;
- then the computing nodes in a topological order, each with ``"inputs"`` (indices of
  earlier nodes, in the layer's argument order), ``"in_shape"`` (per-sample shape of its
  first input), ``"out_shape"``, ``"trainable"``, ``"dtype"`` and its per-kind keys; the
  last node is the model output;
- the plan's trainable weights are, node by node, that node's trainable weights in Keras
  order (dense / conv2d: kernel, bias; batchnorm: gamma, beta) -- see
  ``trainable_variables_in_plan_order``; the optimizer state follows that order.

A graph that is a chain of the kinds every plan has taken from the start (dense, conv2d,
pools, reshape, dropout, activation) is passed in the older chain form -- the same list
without the input node and the ``inputs`` keys -- which the plan reads as a Sequential
chain; everything else in the explicit form.

Each leaf layer's ``trainable`` flag in the plan is the snapshot taken at ``compile()``
(see Model.compile), ANDed over its enclosing models; a BatchNormalization node that is
not trainable runs in inference mode.

Plans are cached per (training configuration, input shapes, max_batch): a plan built for
128 rows serves every call of <= 128 rows; a larger batch builds a larger plan.

Keras masks (Embedding(mask_zero=True), Masking; RECURRENT_SPEC 1.8) are values of the
flat graph too: a layer that makes one adds a mask step (``MaskStep``: a "seq_mask" plan
node, made when a layer first reads the mask) on the same input, and each value ref carries the ref of its mask
(``FlatGraph.masks``), propagated as Keras does -- a layer with ``supports_masking``
passes it on (``Layer.output_mask``), a recurrent layer takes it as a plan input and
passes it on only with return_sequences, any other layer drops it with Keras' warning.
A layer call with several outputs (return_state) is one packed plan node; each output
is a ref whose plan node -- a "select" of the packed sample -- is made when a later step
(or the model output) first reads it. The mask goes to the first output, or to the first
``layer.masked_outputs`` ones (Bidirectional with merge_mode=None: both sequences).
Merge layers (Add, Multiply, Concatenate) combine their inputs' masks by Keras' rule
(``layer.merge_mask``): a "mask_or" plan node of the masks, made on first use too.

A training plan of a model whose output carries a mask gets that mask as a node too
(``describe(..., loss_mask=True)``), which the plan's loss reads (Keras' masked loss).
"""
import warnings

import numpy as np

from .. import backend
from ..layers.layer import per_sample

# the kinds a chain-form plan list may hold (everything the Sequential plan has always taken)
CHAIN_KINDS = frozenset(("dense", "conv2d", "maxpool2d", "avgpool2d", "reshape", "dropout",
                         "activation"))


def _is_model(layer):
    from .model import Model
    return isinstance(layer, Model)


def has_weights(layer):
    return bool(layer.weights)


def leaf_layers(layers, trainable=True):
    """[(leaf_layer, effective_trainable)] for a list of layers, nested models expanded."""
    out = []
    for layer in layers:
        eff = trainable and layer.trainable
        if _is_model(layer):
            out.extend(leaf_layers(layer._chain(), eff))
        else:
            out.append((layer, eff))
    return out


# ---------------------------------------------------------------- the flat graph
class Step:
    """One call of a leaf layer: ``inputs`` are value references (0..n_inputs-1: the
    model inputs, then one per earlier step), ``input_shape`` the batch shape it is
    called on (a list of shapes for several inputs), ``out`` its own reference (the
    packed one for several outputs), ``mask`` the ref of the mask it takes (or None)."""

    def __init__(self, layer, inputs, input_shape, out, mask=None):
        self.layer, self.inputs, self.input_shape, self.out = layer, inputs, input_shape, out
        self.mask = mask

    def __repr__(self):
        return f"<Step {self.layer.name} {self.inputs} -> {self.out}>"


class MaskStep:
    """The pseudo-layer of a mask step: Keras' step mask any(x != value) over the last
    axis of a (T, F) input, or x != value of a (T,) one (ids), as float32 (T,)."""
    _pseudo = True
    weights = []
    compute_dtype = "float32"

    def __init__(self, owner, value, over_features):
        self.name = f"{owner.name}/mask"
        self.value, self.over_features = float(value), bool(over_features)

    def compute_output_shape(self, shape):
        return tuple(shape[:-1]) if self.over_features else tuple(shape)

    def plan_layers(self, shape):
        return [{"kind": "seq_mask", "in_shape": tuple(shape[1:]),
                 "out_shape": tuple(self.compute_output_shape(shape)[1:]), "mask_value": self.value,
                 "dtype": "float32"}]


class MaskOrStep:
    """The pseudo-layer of a merged mask: the logical OR of the input masks (T,)."""
    _pseudo = True
    weights = []
    compute_dtype = "float32"

    def __init__(self, owner):
        self.name = f"{owner.name}/mask"

    def plan_layers(self, shapes):
        shape = tuple(shapes[0][1:])
        return [{"kind": "mask_or", "in_shape": shape, "out_shape": shape, "dtype": "float32"}]


class FlatGraph:
    def __init__(self, input_shapes):
        self.input_shapes = [tuple(s) for s in input_shapes]
        self.shapes = {i: s for i, s in enumerate(self.input_shapes)}
        self.steps = []
        self.output = None
        self.masks = {}        # value ref -> the ref of its mask
        self.selects = {}      # output ref of a multi-output step -> (packed ref, offset)
        self.lazy_masks = {}   # mask ref -> its mask step
        self._next = len(self.input_shapes)

    def _new_ref(self, shape):
        ref = self._next
        self._next += 1
        self.shapes[ref] = tuple(shape)
        return ref

    def add_mask(self, layer, ref, value, over_features):
        """A mask of value ``ref``; returns the mask's ref (its plan node is made when a
        layer first reads it: an unused mask costs nothing)."""
        ms = MaskStep(layer, value, over_features)
        mref = self._new_ref(ms.compute_output_shape(self.shapes[ref]))
        self.lazy_masks[mref] = Step(ms, [ref], self.shapes[ref], mref)
        return mref

    def add_mask_or(self, layer, mask_refs):
        """The OR of several masks (one ref when they are all the same mask)."""
        refs = list(dict.fromkeys(mask_refs))
        if len(refs) == 1:
            return refs[0]
        mref = self._new_ref(self.shapes[refs[0]])
        self.lazy_masks[mref] = Step(MaskOrStep(layer), refs, [self.shapes[r] for r in refs], mref)
        return mref

    def add(self, layer, refs, as_list):
        """Adds a call of ``layer`` on value refs; returns its output ref, or a list of refs
        for a layer with several outputs."""
        shape_in = [self.shapes[r] for r in refs] if as_list else self.shapes[refs[0]]
        in_masks = [self.masks.get(r) for r in refs]
        made = layer.makes_mask(shape_in) if hasattr(layer, "makes_mask") else None
        made_ref = self.add_mask(layer, refs[0], *made) if made is not None else None
        takes = getattr(layer, "takes_mask", False)
        mask = made_ref if made_ref is not None and takes else (in_masks[0] if takes else None)
        out_shape = layer.compute_output_shape(shape_in)
        outs = [tuple(s) for s in out_shape] if isinstance(out_shape, list) else None
        if outs is None:
            ref = self._new_ref(out_shape)
        else:                                  # several outputs: one packed sample
            ref = self._new_ref((None, sum(int(np.prod(s[1:])) for s in outs)))
        self.steps.append(Step(layer, list(refs), shape_in, ref, mask))
        out_mask = made_ref if made_ref is not None else _output_mask(self, layer, in_masks, as_list)
        if outs is None:
            if out_mask is not None:
                self.masks[ref] = out_mask
            return ref
        result, off = [], 0
        for k, s in enumerate(outs):
            r = self._new_ref(s)
            self.selects[r] = (ref, off)
            off += int(np.prod(s[1:]))
            if k < getattr(layer, "masked_outputs", 1) and out_mask is not None:
                self.masks[r] = out_mask
            result.append(r)
        return result

    @property
    def output_shape(self):
        return self.shapes[self.output]


def _output_mask(flat, layer, in_masks, as_list):
    """The mask of a layer's (first) output, Keras' propagation (layers/layer.py
    _set_mask_metadata): a layer that supports masking passes the mask of its first input
    on (``output_mask`` may change it), a merge layer combines its inputs' masks
    (``merge_mask``), one that does not support masking drops it with Keras' warning."""
    if all(m is None for m in in_masks):
        return None
    if as_list and hasattr(layer, "merge_mask"):
        return layer.merge_mask(flat, in_masks)
    if as_list and getattr(layer, "supports_masking", False) and not getattr(layer, "takes_mask", False):
        raise NotImplementedError(
            f"Layer '{layer.name}': masks reaching a layer with several inputs are not supported "
            "by gpucmp's plan yet")
    if not getattr(layer, "supports_masking", False):
        warnings.warn(f"Layer '{layer.name}' (of type {type(layer).__name__}) was passed an input "
                      "with a mask attached to it. However, this layer does not support masking and "
                      "will therefore destroy the mask information. Downstream layers will not see "
                      "the mask.")
        return None
    out = getattr(layer, "output_mask", None)
    return out(in_masks[0]) if out is not None else in_masks[0]


def flatten(model, input_shapes=None):
    """The leaf-layer calls of ``model`` fed inputs of ``input_shapes`` (batch shapes, one
    per model input; default: the model's own, which may hold None for sizes taken from
    the data)."""
    shapes = model._input_shapes if input_shapes is None else list(input_shapes)
    g = FlatGraph(shapes)
    g.output = _inline(model, list(range(len(shapes))), g)
    return g


def _inline(model, in_refs, g):
    graph = getattr(model, "_graph", None)
    if graph is None:                       # a chain (Sequential)
        if len(in_refs) != 1:
            raise ValueError(f"Model '{model.name}' takes one input, received {len(in_refs)}")
        ref = in_refs[0]
        for layer in model._chain():
            ref = _inline(layer, [ref], g) if _is_model(layer) else g.add(layer, [ref], False)
        return ref
    if len(in_refs) != len(graph.inputs):
        raise ValueError(f"Model '{model.name}' takes {len(graph.inputs)} inputs, received "
                         f"{len(in_refs)}")
    refs = {id(t): r for t, r in zip(graph.inputs, in_refs)}
    for node in graph.nodes:
        if node.is_input:
            continue
        args = [refs[id(t)] for t in node.input_tensors]
        layer = node.operation
        if _is_model(layer):
            out = _inline(layer, args, g)
        else:
            out = g.add(layer, args, isinstance(node.arguments, (list, tuple)))
        for t, r in zip(node.outputs, out if isinstance(out, list) else [out]):
            refs[id(t)] = r
    return refs[id(graph.outputs[0])]


# ---------------------------------------------------------------- plan node dicts
def describe(flat, trainable_of, loss_mask=False):
    """The plan node dicts of ``flat`` (explicit form: input nodes first).

    ``trainable_of(layer)`` gives the flag to record (the compile-time snapshot). With
    ``loss_mask``, returns ``(nodes, k)``: k the index of the node holding the output's
    mask (made if nothing else read it), or None for an unmasked output."""
    nodes = [{"kind": "input", "out_shape": tuple(s[1:])} for s in flat.input_shapes]
    index = {r: r for r in range(len(flat.input_shapes))}
    seen = set()

    def node_of(r):
        """The plan node of value ref r (a select or mask node made on first use)."""
        if r not in index and r in flat.lazy_masks:
            step = flat.lazy_masks[r]
            d = step.layer.plan_layers(step.input_shape)[0]
            d["inputs"], d["trainable"] = [node_of(i) for i in step.inputs], False
            nodes.append(d)
            index[r] = len(nodes) - 1
        if r not in index:
            src, off = flat.selects[r]
            shape = tuple(flat.shapes[r][1:])
            nodes.append({"kind": "select", "inputs": [node_of(src)], "in_shape": tuple(flat.shapes[src][1:]),
                          "out_shape": shape, "offset": off, "trainable": False,
                          "dtype": nodes[index[src]]["dtype"]})
            index[r] = len(nodes) - 1
        return index[r]

    for step in flat.steps:
        layer = step.layer
        if id(layer) in seen and has_weights(layer):
            raise NotImplementedError(
                f"Layer '{layer.name}' appears twice in the model: a layer with weights shared "
                "within one model is not supported by the plan yet")
        seen.add(id(layer))
        descs = layer.plan_layers(step.input_shape, mask=True) if step.mask is not None \
            else layer.plan_layers(step.input_shape)
        args = [node_of(r) for r in step.inputs]
        if step.mask is not None:           # a layer that takes the mask: its last input
            args.append(node_of(step.mask))
        if not descs:                       # the identity (e.g. a one-input merge)
            index[step.out] = args[0]
            continue
        prev, made = None, []
        for d in descs:
            # the first dict takes the layer's arguments, each later one the dict before it;
            # "_args" (argument positions) picks the arguments a dict takes (besides that);
            # "_inputs" names them all: ("arg", i) the layer's argument i (the mask is the
            # last argument of a layer that takes one), ("desc", j) the node of dict j
            picked = [args[i] for i in d.pop("_args")] if "_args" in d else None
            if "_inputs" in d:
                d["inputs"] = [args[i] if kind == "arg" else made[i] for kind, i in d.pop("_inputs")]
            elif prev is None:
                d["inputs"] = args if picked is None else picked
            else:
                d["inputs"] = prev + (picked or [])
            d["trainable"] = bool(trainable_of(layer))
            d.setdefault("dtype", layer.compute_dtype)   # the layer's dtype policy
            nodes.append(d)
            prev = [len(nodes) - 1]
            made.append(prev[0])
        index[step.out] = prev[0]
    out = node_of(flat.output)
    mask_node = None
    if loss_mask and flat.masks.get(flat.output) is not None:
        mask_node = node_of(flat.masks[flat.output])
    if out != len(nodes) - 1 or len(nodes) == len(flat.input_shapes):
        # the output is not the last node (an identity at the end, or no computing layer at
        # all): a same-shape reshape makes it so
        shape = tuple(flat.output_shape[1:])
        nodes.append({"kind": "reshape", "inputs": [out], "in_shape": shape,
                      "out_shape": shape, "trainable": False, "dtype": "float32"})
    return (nodes, mask_node) if loss_mask else nodes


def as_plan_list(nodes):
    """The list handed to Plan: the chain form when the graph is a plain chain of
    CHAIN_KINDS (see the module docstring), else ``nodes`` as they are."""
    n_in = sum(1 for d in nodes if d["kind"] == "input")
    if n_in != 1 or nodes[0]["kind"] != "input":
        return nodes
    body = nodes[1:]
    for i, d in enumerate(body):
        if d["kind"] not in CHAIN_KINDS or d["inputs"] != [i]:
            return nodes
    return [{k: v for k, v in d.items() if k != "inputs"} for d in body]


def model_nodes(model, trainable_of, input_shapes=None):
    """What ``Plan`` is given for ``model`` (see as_plan_list)."""
    return as_plan_list(describe(flatten(model, input_shapes), trainable_of))


def layer_nodes(layer, input_shapes):
    """The plan list of one layer called on ``input_shapes`` (batch shapes, one per input)
    for inference (Layer._forward_numpy)."""
    flat = FlatGraph(input_shapes)
    flat.output = flat.add(layer, list(range(len(input_shapes))), len(input_shapes) > 1)
    return as_plan_list(describe(flat, lambda l: False))


def trainable_variables_in_plan_order(flat, trainable_of):
    """The Variables the plan updates, in its order: node by node, each trainable node's
    trainable weights in Keras order (Dense / Conv2D: kernel, bias; BatchNormalization:
    gamma, beta -- its moving statistics are node buffers, never trained; later layers
    such as LSTM: kernel, recurrent_kernel, bias)."""
    out, seen = [], set()
    for step in flat.steps:
        layer = step.layer
        if id(layer) in seen or not trainable_of(layer):
            continue
        seen.add(id(layer))
        out.extend(w for w in layer.weights if not w.always_non_trainable)
    return out


# ---------------------------------------------------------------- plans
class PlanCache:
    """Plans keyed by a configuration key and max_batch."""

    def __init__(self):
        self._plans = {}

    def clear(self):
        self._plans.clear()

    def get(self, key, rows, make):
        """A plan for ``key`` with max_batch >= rows; ``make(max_batch)`` builds a missing one."""
        by_size = self._plans.setdefault(key, {})
        fits = [mb for mb in by_size if mb >= rows]
        if fits:
            return by_size[min(fits)]
        plan = make(rows)
        by_size[rows] = plan
        return plan


def make_plan(nodes, max_batch, train=None):
    core = backend.core()
    return core.Plan(backend.device(), nodes, int(max_batch), train)


def plan_x(x):
    """x as a plan takes it: one array for one input, a list for several."""
    if isinstance(x, (list, tuple)):
        return x[0] if len(x) == 1 else list(x)
    return x


def run_inference(cache_dict, nodes, x):
    """Forward pass of ``nodes`` on the float32 batch ``x`` (a list for several inputs)
    with a cached inference plan (keyed by max_batch and the per-sample input shapes)."""
    xs = x if isinstance(x, (list, tuple)) else [x]
    rows = xs[0].shape[0]
    key = tuple(per_sample(tuple(a.shape)) for a in xs)
    by_size = cache_dict.setdefault(key, {})
    fits = [mb for mb in by_size if mb >= rows]
    if fits:
        plan = by_size[min(fits)]
    else:
        plan = make_plan(nodes, rows)
        by_size[rows] = plan
    return np.asarray(plan.predict(plan_x(xs)))
