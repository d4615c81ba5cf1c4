"""The execution plan as a graph (csrc/plan/), driven through gpucmp._core.Plan directly.

Every test builds a graph of nodes -- fan-out, residual Add, Concatenate, BatchNormalization,
ZeroPadding2D, several model inputs -- and checks it against a float64 evaluation of the
same graph made of the NumPy oracle's op functions (tests/reference.py, each proven by
finite differences in test_reference.py): predictions, the loss, one SGD step (lr 1, so the
weight change is the gradient: gradient accumulation at fan-out is checked through it) and
the moving statistics of BatchNormalization. Each graph runs with the plan's node fusions
(BN + ReLU, BN + residual Add + ReLU) on and off (GPUCMP_PLAN_FUSE=0), on every backend.
Bad graphs (a cycle, a node feeding nothing, shape mismatches) must give clear errors.
"""
import os

import numpy as np
import pytest

import reference as ref
from gpucmp import _core

BACKENDS = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]


def buffer(device, a):
    a = np.ascontiguousarray(a, np.float32).ravel()
    b = _core.Buffer(device, max(a.size, 1))
    b.write(a)
    return b


# ------------------------------------------------------------------ the float64 twin
class Graph:
    """Nodes as the plan takes them (with weights as NumPy arrays), evaluated in float64."""

    def __init__(self, in_shapes):
        self.nodes = [{"kind": "input", "out_shape": tuple(s)} for s in in_shapes]
        self.w = {}   # (node, name) -> array

    def shape(self, i):
        return self.nodes[i]["out_shape"]

    def add(self, kind, inputs, out_shape, weights=None, **kw):
        i = len(self.nodes)
        self.nodes.append({"kind": kind, "inputs": list(inputs), "in_shape": self.shape(inputs[0]),
                           "out_shape": tuple(out_shape), **kw})
        for name, v in (weights or {}).items():
            self.w[(i, name)] = np.asarray(v, np.float64)
        return i

    # forward in float64; training: batch statistics for BN
    def forward(self, xs, w, training):
        vals, saves, stats = {}, {}, {}
        for i, n in enumerate(self.nodes):
            k = n["kind"]
            ins = [vals[j] for j in n.get("inputs", [])]
            if k == "input":
                v = np.asarray(xs[i], np.float64)
            elif k == "conv2d":
                v = ref.conv2d(ins[0], w[(i, "kernel")], w.get((i, "bias")), padding=n.get("padding", "valid"),
                               strides=n.get("strides", (1, 1)))
                v = ref.activation(v, n.get("activation", "linear"))
            elif k == "dense":
                v = ref.matmul(ins[0], w[(i, "kernel")], w.get((i, "bias")))
                v = ref.activation(v, n.get("activation", "linear"))
            elif k == "batchnorm":
                v, mm, mv, save = ref.batchnorm_forward(ins[0], w[(i, "moving_mean")], w[(i, "moving_variance")],
                                                        w.get((i, "gamma")), w.get((i, "beta")), training=training,
                                                        epsilon=n.get("epsilon", 1e-3), momentum=n.get("momentum", 0.99))
                saves[i], stats[i] = save, (mm, mv)
            elif k == "activation":
                v = ref.activation(ins[0], n["activation"])
            elif k == "add":
                v = ref.add(*ins)
            elif k == "multiply":
                v = ref.mul(*ins)
            elif k == "concat":
                v = ref.concat(ins, axis=n["axis"] + 1)
            elif k == "pad2d":
                v = ref.pad2d(ins[0], n["padding"])
            elif k == "maxpool2d":
                v = ref.max_pool2d(ins[0], n["pool_size"])
            elif k == "reshape":
                v = ins[0].reshape((ins[0].shape[0],) + n["out_shape"])
            else:
                raise AssertionError(k)
            vals[i] = v
        return vals, saves, stats

    def loss_and_grads(self, xs, labels, w):
        """Mean sparse cross-entropy of the softmax output and d loss / d weight."""
        vals, saves, _ = self.forward(xs, w, training=True)
        last = len(self.nodes) - 1
        rows = labels.shape[0]
        probs = vals[last]
        loss = -np.mean(np.log(probs[np.arange(rows), labels]))
        onehot = np.eye(probs.shape[1])[labels]
        g = {last: "logits", "logits": (probs - onehot) / rows}   # softmax folded into the loss
        grads = {i: np.zeros_like(vals[i]) for i in vals}
        grads[last] = None
        wg = {}

        def give(j, v):
            grads[j] = grads[j] + v.reshape(grads[j].shape)

        for i in range(last, -1, -1):
            n = self.nodes[i]
            k = n["kind"]
            gy = g["logits"] if i == last else grads[i]
            ins = [vals[j] for j in n.get("inputs", [])]
            act = n.get("activation", "linear")
            if k in ("conv2d", "dense") and i != last:
                gy = ref.activation_backward(vals[i], gy, act)
            if k == "conv2d":
                kern = w[(i, "kernel")]
                opts = dict(padding=n.get("padding", "valid"), strides=n.get("strides", (1, 1)))
                wg[(i, "kernel")], db = ref.conv2d_backward_filter(ins[0], gy, kern.shape[:2], **opts)
                if (i, "bias") in w:
                    wg[(i, "bias")] = db
                give(n["inputs"][0], ref.conv2d_backward_data(gy, kern, ins[0].shape, **opts))
            elif k == "dense":
                wg[(i, "kernel")] = ins[0].T @ gy
                if (i, "bias") in w:
                    wg[(i, "bias")] = gy.sum(axis=0)
                give(n["inputs"][0], gy @ w[(i, "kernel")].T)
            elif k == "batchnorm":
                dx, dg, db, _ = ref.batchnorm_backward(ins[0], gy, saves[i], w.get((i, "gamma")))
                wg[(i, "gamma")], wg[(i, "beta")] = dg, db
                give(n["inputs"][0], dx)
            elif k == "activation":
                give(n["inputs"][0], ref.activation_backward(vals[i], gy, act))
            elif k == "add":
                for j in n["inputs"]:
                    give(j, gy)
            elif k == "multiply":
                a, b = n["inputs"]
                give(a, gy * vals[b])
                give(b, gy * vals[a])
            elif k == "concat":
                off = 0
                for j in n["inputs"]:
                    wdt = vals[j].shape[n["axis"] + 1]
                    give(j, np.take(gy, np.arange(off, off + wdt), axis=n["axis"] + 1))
                    off += wdt
            elif k == "pad2d":
                give(n["inputs"][0], ref.pad2d_backward(gy, n["padding"]))
            elif k == "maxpool2d":
                give(n["inputs"][0], ref.max_pool2d_backward(ins[0], gy, n["pool_size"]))
            elif k == "reshape":
                give(n["inputs"][0], gy)
        return loss, wg

    # ------------------------------------------------------------ the plan
    def plan(self, device, max_batch, train, fuse=True):
        bufs, nodes = {}, []
        for i, n in enumerate(self.nodes):
            d = dict(n)
            for (j, name), v in self.w.items():
                if j == i:
                    bufs[(j, name)] = d[name] = buffer(device, v)
            nodes.append(d)
        old = os.environ.get("GPUCMP_PLAN_FUSE")
        os.environ["GPUCMP_PLAN_FUSE"] = "1" if fuse else "0"
        try:
            plan = _core.Plan(device, nodes, max_batch, train)
        finally:
            if old is None:
                del os.environ["GPUCMP_PLAN_FUSE"]
            else:
                os.environ["GPUCMP_PLAN_FUSE"] = old
        return plan, bufs


def residual_graph(rng, C=4):
    """conv -> BN -> ReLU -> [fan-out] -> 1x1 conv -> BN -> Add(shortcut) -> ReLU -> pad ->
    max pool, Concatenate with a second branch, Flatten, Dense softmax."""
    g = Graph([(6, 6, 3)])
    r = lambda *s: rng.normal(size=s) * 0.5  # noqa: E731
    bn_w = lambda: {"gamma": 1 + r(C) * 0.2, "beta": r(C) * 0.2, "moving_mean": r(C) * 0.1,  # noqa: E731
                    "moving_variance": 1 + np.abs(r(C))}
    c1 = g.add("conv2d", [0], (6, 6, C), {"kernel": r(3, 3, 3, C), "bias": r(C)}, kernel_size=(3, 3),
               padding="same")
    b1 = g.add("batchnorm", [c1], (6, 6, C), bn_w())
    a1 = g.add("activation", [b1], (6, 6, C), activation="relu")
    c2 = g.add("conv2d", [a1], (6, 6, C), {"kernel": r(1, 1, C, C)}, kernel_size=(1, 1))
    b2 = g.add("batchnorm", [c2], (6, 6, C), bn_w(), epsilon=1.001e-5)
    s = g.add("add", [a1, b2], (6, 6, C))                   # shortcut first, as Keras' ResNet
    a2 = g.add("activation", [s], (6, 6, C), activation="relu")
    p = g.add("pad2d", [a2], (8, 8, C), padding=((1, 1), (1, 1)))
    m = g.add("maxpool2d", [p], (4, 4, C), pool_size=(2, 2), strides=(2, 2))
    c3 = g.add("conv2d", [p], (4, 4, 2), {"kernel": r(3, 3, C, 2), "bias": r(2)}, kernel_size=(3, 3),
               strides=(2, 2), padding="same", activation="tanh")
    cat = g.add("concat", [m, c3], (4, 4, C + 2), axis=2)
    f = g.add("reshape", [cat], (16 * (C + 2),))
    g.add("dense", [f], (5,), {"kernel": r(16 * (C + 2), 5), "bias": r(5)}, activation="softmax")
    return g


def check_step(g, device, xs, labels, fuse, lr=1.0, atol=2e-4):
    """One SGD step of the plan against the float64 twin: loss, weight deltas, moving stats."""
    plan, bufs = g.plan(device, labels.shape[0] + 3, {"loss": "sparse_categorical_crossentropy",
                                                      "optimizer": "sgd"}, fuse=fuse)
    w0 = {k: v.copy() for k, v in g.w.items()}
    # predictions use the moving statistics
    vals, _, _ = g.forward(xs, w0, training=False)
    got = plan.predict(xs if len(xs) > 1 else xs[0])
    np.testing.assert_allclose(got, vals[len(g.nodes) - 1], rtol=1e-4, atol=1e-5)
    loss, wg = g.loss_and_grads(xs, labels, w0)
    _, _, stats = g.forward(xs, w0, training=True)
    st = plan.train_step(xs if len(xs) > 1 else xs[0], labels, {"lr": lr})
    assert abs(st["loss"] / labels.shape[0] - loss) <= 1e-4 * max(1.0, loss)
    for key, b in bufs.items():
        now = np.asarray(b.read(), np.float64).reshape(w0[key].shape)
        if key in wg:                       # trained: w1 = w0 - lr * grad
            np.testing.assert_allclose((w0[key] - now) / lr, wg[key], rtol=2e-3, atol=atol,
                                       err_msg=f"gradient of node {key}")
        else:                               # BN moving statistics
            mm, mv = stats[key[0]]
            want = mm if key[1] == "moving_mean" else mv
            np.testing.assert_allclose(now, want, rtol=1e-4, atol=1e-6, err_msg=f"statistic {key}")


@pytest.mark.parametrize("device", BACKENDS)
@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_residual_graph_matches_float64(device, fuse):
    rng = np.random.default_rng(11)
    g = residual_graph(rng)
    x = rng.normal(size=(7, 6, 6, 3))
    labels = rng.integers(0, 5, 7).astype(np.int32)
    check_step(g, device, [x], labels, fuse)


@pytest.mark.parametrize("device", BACKENDS)
def test_fan_out_gradients_accumulate(device):
    """One node read by three consumers, twice by one of them (Add(d, d)) and by Multiply."""
    rng = np.random.default_rng(12)
    g = Graph([(5,)])
    d = g.add("dense", [0], (6,), {"kernel": rng.normal(size=(5, 6)), "bias": rng.normal(size=6)},
              activation="tanh")
    s = g.add("add", [d, d], (6,))
    m = g.add("multiply", [s, d], (6,))
    t = g.add("add", [m, d, s], (6,))
    g.add("dense", [t], (3,), {"kernel": rng.normal(size=(6, 3))}, activation="softmax")
    x = rng.normal(size=(4, 5))
    check_step(g, device, [x], rng.integers(0, 3, 4).astype(np.int32), fuse=True)


@pytest.mark.parametrize("device", BACKENDS)
def test_several_model_inputs(device):
    rng = np.random.default_rng(13)
    g = Graph([(4,), (3,)])
    a = g.add("dense", [0], (5,), {"kernel": rng.normal(size=(4, 5))}, activation="relu")
    b = g.add("dense", [1], (5,), {"kernel": rng.normal(size=(3, 5)), "bias": rng.normal(size=5)})
    c = g.add("concat", [a, b, 1], (13,), axis=0)      # an input feeds a merge directly too
    g.add("dense", [c], (2,), {"kernel": rng.normal(size=(13, 2))}, activation="softmax")
    xs = [rng.normal(size=(6, 4)), rng.normal(size=(6, 3))]
    check_step(g, device, xs, rng.integers(0, 2, 6).astype(np.int32), fuse=True)
    plan, _ = g.plan(device, 8, None)
    with pytest.raises(ValueError, match="2 inputs"):
        plan.predict(xs[0])
    with pytest.raises(ValueError, match="rows"):
        plan.predict([xs[0], xs[1][:3]])


@pytest.mark.parametrize("device", BACKENDS)
def test_frozen_batchnorm_uses_moving_statistics(device):
    """trainable=False: inference-mode BN in training steps, statistics untouched (Keras)."""
    rng = np.random.default_rng(14)
    g = Graph([(3, 3, 4)])
    b = g.add("batchnorm", [0], (3, 3, 4), {"gamma": 1 + rng.normal(size=4) * .1, "beta": rng.normal(size=4),
                                            "moving_mean": rng.normal(size=4),
                                            "moving_variance": 1 + rng.random(4)}, trainable=False)
    f = g.add("reshape", [b], (36,))
    g.add("dense", [f], (3,), {"kernel": rng.normal(size=(36, 3)) * 0.3}, activation="softmax")
    plan, bufs = g.plan(device, 8, {"loss": "sparse_categorical_crossentropy", "optimizer": "sgd"})
    x = rng.normal(size=(5, 3, 3, 4))
    before = {k: np.asarray(v.read()).copy() for k, v in bufs.items()}
    plan.train_step(x, rng.integers(0, 3, 5).astype(np.int32), {"lr": 0.5})
    for key in [(1, "gamma"), (1, "beta"), (1, "moving_mean"), (1, "moving_variance")]:
        np.testing.assert_array_equal(np.asarray(bufs[key].read()), before[key], err_msg=str(key))
    assert not np.array_equal(np.asarray(bufs[(3, "kernel")].read()), before[(3, "kernel")])


def test_inference_plans_reuse_activation_buffers():
    """A deep chain: an inference plan holds far less than one buffer per node."""
    rng = np.random.default_rng(15)
    g = Graph([(64,)])
    i = 0
    for _ in range(12):
        i = g.add("dense", [i], (64,), {"kernel": rng.normal(size=(64, 64)) * 0.1}, activation="relu")
    g.add("dense", [i], (4,), {"kernel": rng.normal(size=(64, 4))}, activation="softmax")
    plan, _ = g.plan("cpu", 256, None)
    one = 256 * 64 * 4
    assert plan.bytes < 5 * one, plan.bytes       # input, output and a couple of reused buffers
    vals, _, _ = g.forward([x := rng.normal(size=(9, 64))], g.w, training=False)
    np.testing.assert_allclose(plan.predict(x), vals[len(g.nodes) - 1], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ bad graphs
def small(device="cpu"):
    k = buffer(device, np.ones((4, 2)))
    return [{"kind": "input", "out_shape": (4,)},
            {"kind": "dense", "inputs": [0], "in_shape": (4,), "out_shape": (2,), "kernel": k}]


def test_a_cycle_or_forward_reference_is_an_error():
    nodes = small()
    nodes[1]["inputs"] = [1]
    with pytest.raises(ValueError, match="earlier nodes"):
        _core.Plan("cpu", nodes, 4)


def test_a_node_feeding_nothing_is_an_error():
    nodes = small() + [{"kind": "activation", "inputs": [0], "in_shape": (4,), "out_shape": (4,),
                        "activation": "relu"}]
    with pytest.raises(ValueError, match="feeds no other node"):
        _core.Plan("cpu", nodes, 4)


def test_merge_shape_mismatches_are_errors():
    nodes = small() + [{"kind": "add", "inputs": [0, 1], "in_shape": (4,), "out_shape": (4,)}]
    with pytest.raises(ValueError, match="add node 2: input 1"):
        _core.Plan("cpu", nodes, 4)
    nodes[2] = {"kind": "concat", "inputs": [0, 1], "in_shape": (4,), "out_shape": (7,), "axis": 0}
    with pytest.raises(ValueError, match="add up to 6"):
        _core.Plan("cpu", nodes, 4)
    nodes[2] = {"kind": "add", "inputs": [0], "in_shape": (4,), "out_shape": (4,)}
    with pytest.raises(ValueError, match="takes 2..8 inputs"):
        _core.Plan("cpu", nodes, 4)


def test_batchnorm_needs_its_statistics():
    nodes = [{"kind": "input", "out_shape": (3,)},
             {"kind": "batchnorm", "inputs": [0], "in_shape": (3,), "out_shape": (3,)}]
    with pytest.raises(ValueError, match="moving_mean and moving_variance"):
        _core.Plan("cpu", nodes, 4)


def test_fusion_folds_the_residual_tail_into_batchnorm():
    """With fusion the BN -> Add -> ReLU tail and BN -> ReLU keep no buffers of their own."""
    g = residual_graph(np.random.default_rng(16))
    train = {"loss": "sparse_categorical_crossentropy", "optimizer": "sgd"}
    fused, _ = g.plan("cpu", 32, train, fuse=True)
    plain, _ = g.plan("cpu", 32, train, fuse=False)
    absorbed = {3, 6, 7}        # the ReLU after BN, the Add and its ReLU

    def owners(plan):
        return {e["node"] for e in plan.memory() if e["what"].startswith("activation")}
    assert not owners(fused) & absorbed, owners(fused)
    assert owners(plain) >= absorbed, owners(plain)
    assert fused.bytes < plain.bytes, (plain.bytes, fused.bytes)


def _reuse(on):
    """GPUCMP_PLAN_REUSE for the plans made inside (0: every buffer its own memory, no refills)."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
        old = os.environ.get("GPUCMP_PLAN_REUSE")
        os.environ["GPUCMP_PLAN_REUSE"] = "1" if on else "0"
        try:
            yield
        finally:
            if old is None:
                del os.environ["GPUCMP_PLAN_REUSE"]
            else:
                os.environ["GPUCMP_PLAN_REUSE"] = old
    return ctx()


def _train_weights(g, device, x, labels, steps, dtype):
    nodes = [dict(n, dtype=dtype) if n["kind"] != "input" else n for n in g.nodes]
    g2 = Graph.__new__(Graph)
    g2.__dict__.update(g.__dict__, nodes=nodes)
    plan, bufs = g2.plan(device, labels.shape[0], {"loss": "sparse_categorical_crossentropy", "optimizer": "sgd"})
    for s in range(steps):
        plan.train_step(x, labels, {"lr": 0.05})
    return plan, {k: np.asarray(b.read()).copy() for k, b in bufs.items()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_shared_step_block_and_refills_change_no_bit(dtype):
    """Buffer-aliasing safety: a plan whose activations, gradients, backward temporaries
    and weight gradients share one block (each freed after its last reader, a padding and
    a batch norm refilled in the backward) trains to exactly the weights of the same plan
    with every buffer in memory of its own and nothing refilled (GPUCMP_PLAN_REUSE=0)."""
    rng = np.random.default_rng(21)
    g = residual_graph(rng)
    x = rng.normal(size=(7, 6, 6, 3))
    labels = rng.integers(0, 5, 7).astype(np.int32)
    with _reuse(True):
        shared, got = _train_weights(g, "cpu", x, labels, 3, dtype)
    with _reuse(False):
        alone, want = _train_weights(g, "cpu", x, labels, 3, dtype)
    mem = shared.memory()
    refilled = {e["node"] for e in mem if e["start2"] >= 0}
    assert {8, 5} <= refilled, refilled          # the padding, and the batch norm (+ add + relu) it pads
    assert shared.bytes < alone.bytes, (shared.bytes, alone.bytes)
    ops = [(e["op"], e["node"]) for e in shared.trace() if e["phase"] == "backward"]
    assert ("pad2d_fwd", 8) in ops and ("batchnorm_fwd", 5) in ops, ops
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"weight {k}")


def stem_graph(rng, C=4):
    """ResNet-50's stem in small: conv -> BN -> ReLU -> pad -> max pool -> conv, Dense."""
    g = Graph([(8, 8, 3)])
    r = lambda *s: rng.normal(size=s) * 0.5  # noqa: E731
    c1 = g.add("conv2d", [0], (8, 8, C), {"kernel": r(3, 3, 3, C), "bias": r(C)}, kernel_size=(3, 3),
               padding="same")
    b1 = g.add("batchnorm", [c1], (8, 8, C), {"gamma": 1 + r(C) * 0.2, "beta": r(C) * 0.2,
                                             "moving_mean": r(C) * 0.1, "moving_variance": 1 + np.abs(r(C))})
    a1 = g.add("activation", [b1], (8, 8, C), activation="relu")
    p = g.add("pad2d", [a1], (10, 10, C), padding=((1, 1), (1, 1)))
    m = g.add("maxpool2d", [p], (4, 4, C), pool_size=(3, 3), strides=(2, 2))
    c2 = g.add("conv2d", [m], (4, 4, 2), {"kernel": r(3, 3, C, 2), "bias": r(2)}, kernel_size=(3, 3),
               padding="same")
    f = g.add("reshape", [c2], (32,))
    g.add("dense", [f], (5,), {"kernel": r(32, 5), "bias": r(5)}, activation="softmax")
    return g


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_stem_pad_folds_into_the_max_pool(dtype):
    """ResNet-50's stem: the ZeroPadding2D after BN + ReLU folds into the max pool as
    explicit pads (no pad2d call forward or backward, no padded buffer); the batch norm,
    whose backward recomputes its mask from x, is refilled for the max pool's backward
    instead of kept through the step; the step trains to the bits of the same plan with
    every buffer its own (GPUCMP_PLAN_REUSE=0) and to the unfused plan's weights."""
    rng = np.random.default_rng(23)
    g = stem_graph(rng)
    x = rng.normal(size=(6, 8, 8, 3))
    labels = rng.integers(0, 5, 6).astype(np.int32)
    with _reuse(True):
        shared, got = _train_weights(g, "cpu", x, labels, 3, dtype)
    with _reuse(False):
        alone, want = _train_weights(g, "cpu", x, labels, 3, dtype)
    trace = shared.trace()
    assert not [e for e in trace if e["op"].startswith("pad2d")], [e["op"] for e in trace]
    pools = [e for e in trace if e["op"].startswith("maxpool2d")]
    assert pools and all(e["params"]["pads"] == ((1, 1), (1, 1)) and e["inputs"][0]["shape"] == (6, 8, 8, 4)
                         for e in pools), pools
    refilled = {e["node"] for e in shared.memory() if e["start2"] >= 0}
    assert 2 in refilled, refilled                # the batch norm (+ ReLU)
    assert 4 not in {e["node"] for e in shared.memory()}, "the padding still has a buffer"
    ops = [(e["op"], e["node"]) for e in trace if e["phase"] == "backward"]
    assert ops.index(("batchnorm_fwd", 2)) < ops.index(("maxpool2d_bwd", 5)) < ops.index(("batchnorm_bwd", 2)), ops
    bn_bwd = [e for e in trace if e["phase"] == "backward" and e["op"] == "batchnorm_bwd"]
    assert bn_bwd and all(e["params"]["mask_from_x"] for e in bn_bwd), bn_bwd
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"weight {k}")
    if dtype == "float32":  # the unfused plan: BN, ReLU, pad2d and the max pool as separate calls
        nodes = list(g.nodes)
        g2 = Graph.__new__(Graph)
        g2.__dict__.update(g.__dict__, nodes=nodes)
        plain, bufs = g2.plan("cpu", labels.shape[0], {"loss": "sparse_categorical_crossentropy",
                                                       "optimizer": "sgd"}, fuse=False)
        assert [e for e in plain.trace() if e["op"] == "pad2d_fwd"], "fuse=False still folded the padding"
        for _ in range(3):
            plain.train_step(x, labels, {"lr": 0.05})
        for k, b in bufs.items():
            np.testing.assert_allclose(np.asarray(b.read()), got[k], rtol=1e-6, atol=1e-7, err_msg=f"weight {k}")


def test_step_block_lives_never_meet_in_memory():
    """Two buffers of the step block whose lives overlap never overlap in memory."""
    g = residual_graph(np.random.default_rng(22))
    plan, _ = g.plan("cpu", 9, {"loss": "sparse_categorical_crossentropy", "optimizer": "sgd"})
    inner = [e for e in plan.memory() if e["offset"] >= 0]
    lives = lambda e: [(a, b) for a, b in ((e["start"], e["end"]), (e["start2"], e["end2"])) if a >= 0]  # noqa
    for i, a in enumerate(inner):
        for b in inner[i + 1:]:
            meet = any(s0 <= e1 and s1 <= e0 for s0, e0 in lives(a) for s1, e1 in lives(b))
            if meet:
                assert a["offset"] + a["bytes"] <= b["offset"] or b["offset"] + b["bytes"] <= a["offset"], (a, b)


@pytest.mark.parametrize("device", BACKENDS)
def test_trace_and_profile_report_the_ops_of_a_step(device):
    """Plan.trace lists a step's op calls without running them (also on the meta backend);
    Plan.profile runs them, timed, and trains exactly like train_step."""
    rng = np.random.default_rng(17)
    g = residual_graph(rng)
    x = rng.normal(size=(6, 6, 6, 3))
    labels = rng.integers(0, 5, 6).astype(np.int32)
    train = {"loss": "sparse_categorical_crossentropy", "optimizer": "sgd"}
    traced, tb = g.plan(device, 6, train)
    before = {k: np.asarray(b.read()).copy() for k, b in tb.items()}
    trace = traced.trace(6)
    assert all(np.array_equal(np.asarray(b.read()), before[k]) for k, b in tb.items())   # nothing ran
    phases = [e["phase"] for e in trace]
    assert phases == sorted(phases, key=["forward", "loss", "backward", "update"].index)
    ops = [e["op"] for e in trace]
    assert ops.count("conv2d_fwd") == 3 and ops.count("batchnorm_bwd") == 2 and ops.count("sgd") == 11
    assert "add" in ops                                       # the fan-out of the pad (max pool's gradient)
    # the fan-out of the first ReLU: the 1x1 conv adds its data gradient to the residual's
    acc = [e for e in trace if e["op"] == "conv2d_bwd_data" and e["params"]["accumulate"]]
    assert len(acc) == 1 and acc[0]["outputs"][0]["shape"] == (6, 6, 6, 4)
    conv = next(e for e in trace if e["op"] == "conv2d_fwd" and e["params"]["strides"] == (2, 2))
    assert conv["inputs"][0]["shape"] == (6, 8, 8, 4) and conv["outputs"][0]["shape"] == (6, 4, 4, 2)
    prof_plan, pb = g.plan(device, 6, train)
    step_plan, sb = g.plan(device, 6, train)
    prof = prof_plan.profile(x, labels, {"lr": 0.1})
    step_plan.train_step(x, labels, {"lr": 0.1})
    # a GPU backend updates every tensor in one fused launch, reported as 'optim_multi'
    updates = [e["op"] for e in prof if e["phase"] == "update"]
    assert updates in (["sgd"] * 11, ["optim_multi"])
    assert [e["op"] for e in prof if e["phase"] != "update"] == [e["op"] for e in trace if e["phase"] != "update"]
    assert all(e["seconds"] >= 0 for e in prof)
    for k in pb:
        np.testing.assert_array_equal(np.asarray(pb[k].read()), np.asarray(sb[k].read()), err_msg=str(k))
    meta = g.plan("meta", 6, train)[0]
    assert [e["op"] for e in meta.trace(6)] == ops
    if device == "cpu":   # a GPU plan also holds the fused optimizer's slot table
        assert meta.bytes == traced.bytes
