"""The functional API as graphs: building (layer order, shapes, counts) against Keras 3
itself, the errors of bad graphs, the plan node lists the lowering produces (the
contract with the C plan, csrc/python/CORE_API.md), the multi-input data path, summary
and config/saving round trips, and -- through the graph plan -- predictions and a
training step against Keras.

Keras 3 (JAX backend) is the reference; the file is skipped without it.
"""
import numpy as np
import pytest

from keras_reference import fresh_sessions  # noqa: F401 (an autouse fixture)
from keras_reference import keras3, randomize_bn_statistics, rel_err, weights_close

keras = keras3()

import gpucmp.keras as gk  # noqa: E402
from gpucmp.keras.models import lowering  # noqa: E402
from gpucmp.keras.models import data_adapter  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def branching(K, bn_trainable=True):
    """Two inputs, BN, Add, Concatenate, Multiply, pads and pools, a Dense head."""
    L = K.layers
    a = K.Input((8, 8, 3), name="a")
    b = K.Input((8, 8, 3), name="b")
    x = L.Conv2D(4, 3, padding="same", name="c1")(a)
    x = L.BatchNormalization(name="bn", trainable=bn_trainable)(x)
    x = L.Activation("relu", name="relu")(x)
    y = L.Conv2D(4, 1, name="c2")(L.ZeroPadding2D(((1, 0), (0, 1)), name="pad")(b))
    y = L.MaxPooling2D(2, strides=1, padding="same", name="mp")(y)
    y = L.Conv2D(4, 2, name="c3")(y)
    s = L.Add(name="add")([x, y])
    m = L.Multiply(name="mul")([s, x, y])
    c = L.Concatenate(name="cat")([s, m, y])
    g = L.GlobalAveragePooling2D(name="gap")(c)
    o = L.Dense(5, activation="softmax", name="out")(g)
    return K.Model([b, a], o, name="branchy")


def small_resnet_block(K):
    """One input, a ResNet-like block with a projection shortcut and a BN head."""
    L = K.layers
    inp = K.Input((12, 12, 3), name="img")
    x = L.Conv2D(8, 3, strides=2, padding="same", name="stem")(inp)
    x = L.BatchNormalization(epsilon=1.001e-5, name="stem_bn")(x)
    x = L.Activation("relu", name="stem_relu")(x)
    sc = L.Conv2D(16, 1, strides=2, name="proj")(x)
    sc = L.BatchNormalization(name="proj_bn")(sc)
    h = L.Conv2D(16, 3, strides=2, padding="same", name="body")(x)
    h = L.BatchNormalization(name="body_bn", momentum=0.9)(h)
    h = L.Add(name="sum")([sc, h])
    h = L.Activation("relu", name="sum_relu")(h)
    h = L.Concatenate(name="cat")([h, sc])
    h = L.GlobalMaxPooling2D(name="gmp")(h)
    return K.Model(inp, L.Dense(4, activation="softmax", name="head")(h))


def describe_layers(model):
    return [(l.name, type(l).__name__, tuple(l.output.shape) if hasattr(l.output, "shape")
             else None, l.count_params()) for l in model.layers]


def pair(build):
    km, gm = build(keras), build(gk)
    gm.set_weights(km.get_weights())
    return km, gm


# ------------------------------------------------------------------ graph building vs Keras
@pytest.mark.parametrize("build", [branching, small_resnet_block])
def test_layers_order_shapes_counts_and_weights_match_keras(build):
    km, gm = build(keras), build(gk)
    k_rows = [(l.name, type(l).__name__, tuple(l.output.shape), l.count_params()) for l in km.layers]
    g_rows = [(l.name, type(l).__name__, tuple(l.output_shape), l.count_params()) for l in gm.layers]
    assert g_rows == k_rows
    assert [w.shape for w in gm.weights] == [tuple(w.shape) for w in km.weights]
    assert [w.path for w in gm.weights] == [w.path for w in km.weights]
    assert gm.count_params() == km.count_params()
    assert sum(w.size for w in gm.non_trainable_weights) == \
        sum(int(np.prod(w.shape)) for w in km.non_trainable_weights)
    assert [t.name for t in gm.inputs] == [t.name for t in km.inputs]
    assert gm.input_shape == km.input_shape and gm.output_shape == tuple(km.output_shape)
    gm.set_weights(km.get_weights())                 # one order: Keras' arrays fit as they are
    for a, b in zip(gm.get_weights(), km.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_get_layer_and_model_properties():
    gm = branching(gk)
    assert gm.get_layer("cat") is gm.layers[[l.name for l in gm.layers].index("cat")]
    assert gm.get_layer(index=0).name == "b"      # Keras' depth order: b is further from the output
    assert isinstance(gm, gk.Model) and type(gm).__name__ == "Functional"
    with pytest.raises(ValueError, match="No such layer: nope"):
        gm.get_layer("nope")
    with pytest.raises(ValueError, match="only has"):
        gm.get_layer(index=99)
    assert gm.input_shape == [(None, 8, 8, 3), (None, 8, 8, 3)]
    assert [t.name for t in gm.inputs] == ["b", "a"]


def test_nested_models_as_layers_and_model_called_on_a_tensor():
    L = gk.layers
    i = gk.Input((4,), name="i")
    inner = gk.Model(i, L.Dense(3, name="d1")(i), name="inner")
    seq = gk.Sequential([gk.Input((3,)), L.Dense(2, name="d2")], name="seq")
    x = gk.Input((4,), name="x")
    s = L.Add(name="add")([inner(x), L.Dense(3, name="d3")(x)])
    outer = gk.Model(x, seq(s), name="outer")
    assert [l.name for l in outer.layers] == ["x", "inner", "d3", "add", "seq"]
    assert outer.count_params() == 15 + 15 + 8
    assert [w.path for w in outer.weights] == ["d1/kernel", "d1/bias", "d3/kernel", "d3/bias",
                                               "d2/kernel", "d2/bias"]
    nodes = lowering.model_nodes(outer, lambda layer: True)
    assert [n["kind"] for n in nodes] == ["input", "dense", "dense", "add", "dense"]
    assert [n.get("inputs") for n in nodes] == [None, [0], [0], [1, 2], [3]]
    # the same graph again, one level up: a functional model called on a KerasTensor
    z = gk.Input((4,), name="z")
    again = gk.Model(z, outer(z))
    assert [n["kind"] for n in lowering.model_nodes(again, lambda l: True)] == \
        [n["kind"] for n in nodes]
    assert again.output_shape == (None, 2)


def test_functional_gan_keeps_nested_sequential_chains():
    L = gk.layers
    gen = gk.Sequential([L.Dense(8, input_dim=4, activation="relu"), L.Dense(6), L.Reshape((3, 2))])
    disc = gk.Sequential([L.Flatten(input_shape=(3, 2)), L.Dense(1, activation="sigmoid")])
    z = gk.Input((4,))
    gan = gk.Model(z, disc(gen(z)))
    plan = lowering.model_nodes(gan, lambda l: True)
    assert all("inputs" not in d for d in plan)                    # a chain: today's form
    assert [d["kind"] for d in plan] == ["dense", "dense", "reshape", "reshape", "dense"]


# ------------------------------------------------------------------ bad graphs
def test_disconnected_unused_duplicate_and_non_input_tensors_raise():
    L = gk.layers
    a, b = gk.Input((4,), name="in_a"), gk.Input((4,), name="in_b")
    h = L.Dense(3, name="h")(a)
    out = L.Add(name="plus")([h, L.Dense(3, name="hb")(b)])
    with pytest.raises(ValueError, match="Graph disconnected.*'in_b'.*hb"):
        gk.Model(a, out)
    with pytest.raises(ValueError, match="model input 'in_b' is not used"):
        gk.Model([a, b], h)
    with pytest.raises(ValueError, match="given twice"):
        gk.Model([a, a, b], out)
    with pytest.raises(ValueError, match="output of layer 'h'.*not a model input"):
        gk.Model(h, L.Dense(2)(h))
    with pytest.raises(ValueError, match="must be KerasTensors"):
        gk.Model(a, np.zeros(3))
    with pytest.raises(ValueError, match="cannot be empty"):
        gk.Model([], h)
    with pytest.raises(NotImplementedError, match="several outputs"):
        gk.Model(a, [h, L.Dense(2)(h)])


def test_shared_layers_with_weights_are_not_implemented_weightless_ones_work():
    L = gk.layers
    a = gk.Input((4,))
    d = L.Dense(4, name="shared")
    with pytest.raises(NotImplementedError, match="'shared' is called 2 times"):
        gk.Model(a, d(d(a)))
    act = L.Activation("tanh", name="twice")
    m = gk.Model(a, act(L.Dense(4)(act(a))))
    kinds = [n["kind"] for n in lowering.model_nodes(m, lambda l: True)]
    assert kinds == ["activation", "dense", "activation"]


def test_merge_shape_errors_match_keras():
    for K, err in ((keras, ValueError), (gk, ValueError)):
        x, y = K.Input((4, 3)), K.Input((5, 3))
        with pytest.raises(err, match="incompatible shapes"):
            K.layers.Add()([x, y])
        with pytest.raises(err, match="incompatible shapes"):
            K.layers.Multiply()([x, y])
        with pytest.raises(err, match="matching shapes except for the concatenation axis"):
            K.layers.Concatenate()([K.Input((4, 3)), K.Input((5, 2))])
        assert K.layers.Concatenate(axis=1)([x, y]).shape == (None, 9, 3)
    with pytest.raises(ValueError, match="should be called on a list of inputs"):
        gk.layers.Add()(gk.Input((4,)))
    with pytest.raises(NotImplementedError, match="broadcast"):
        gk.layers.Add()([gk.Input((4, 3)), gk.Input((1, 3))])    # Keras broadcasts; the plan not
    with pytest.raises(ValueError, match="mixing KerasTensors"):
        gk.layers.Add()([gk.Input((4,)), np.zeros((1, 4))])
    with pytest.raises(NotImplementedError, match="batch axis"):
        gk.layers.Concatenate(axis=0)([gk.Input((4,)), gk.Input((4,))])


def test_training_argument_in_a_functional_call_is_refused_not_ignored():
    x = gk.Input((4,))
    with pytest.raises(NotImplementedError, match="training=False"):
        gk.layers.BatchNormalization()(x, training=False)
    with pytest.raises(NotImplementedError, match="training=True"):
        gk.layers.Dropout(0.5)(x, training=True)


# ------------------------------------------------------------------ the plan node list
def test_lowering_emits_the_explicit_graph_form():
    gm = branching(gk)
    nodes = lowering.model_nodes(gm, gm._trainable_of)
    names = {id(n): n for n in nodes}
    assert len(names) == len(nodes)
    assert nodes[0] == {"kind": "input", "out_shape": (8, 8, 3)}     # b, then a (model.inputs)
    assert nodes[1] == {"kind": "input", "out_shape": (8, 8, 3)}
    kinds = [n["kind"] for n in nodes]
    # model.layers order (b, a, pad, c1, c2, bn, mp, relu, c3, ...), a topological order
    assert kinds == ["input", "input", "pad2d", "conv2d", "conv2d", "batchnorm", "maxpool2d",
                     "activation", "conv2d", "add", "multiply", "multiply", "concat",
                     "avgpool2d", "reshape", "dense"]
    for i, n in enumerate(nodes[2:], start=2):
        assert all(0 <= j < i for j in n["inputs"]), (i, n["inputs"])
        first = nodes[n["inputs"][0]]["out_shape"]
        assert n["in_shape"] == first
        assert n["dtype"] == "float32" and n["trainable"] is True
    by_kind = {}
    for i, n in enumerate(nodes):
        by_kind.setdefault(n["kind"], []).append(i)
    c1 = by_kind["conv2d"][0]
    assert nodes[c1]["inputs"] == [1]                     # c1 is fed by input a (node 1)
    assert nodes[by_kind["conv2d"][1]]["inputs"] == [by_kind["pad2d"][0]]
    pad = by_kind["pad2d"][0]
    assert nodes[pad]["inputs"] == [0] and nodes[pad]["padding"] == ((1, 0), (0, 1))
    assert nodes[pad]["out_shape"] == (9, 9, 3)
    bn = nodes[by_kind["batchnorm"][0]]
    assert bn["epsilon"] == pytest.approx(1e-3) and bn["momentum"] == pytest.approx(0.99)
    for key in ("gamma", "beta", "moving_mean", "moving_variance"):
        assert bn[key] is getattr(gm.get_layer("bn"), key).buffer
    add, mul1, mul2, cat = by_kind["add"][0], *by_kind["multiply"], by_kind["concat"][0]
    relu, c3 = by_kind["activation"][0], by_kind["conv2d"][2]
    assert nodes[add]["inputs"] == [relu, c3]
    assert nodes[mul1]["inputs"] == [add, relu] and nodes[mul2]["inputs"] == [mul1, c3]
    assert nodes[cat]["inputs"] == [add, mul2, c3]
    assert nodes[cat]["axis"] == 2 and nodes[cat]["out_shape"] == (8, 8, 12)
    gap = nodes[by_kind["avgpool2d"][0]]
    assert gap["pool_size"] == (8, 8) and gap["strides"] == (1, 1) and gap["padding"] == "valid"
    assert nodes[-1]["kind"] == "dense" and nodes[-1]["out_shape"] == (5,)
    # the plan's trainable weights: node by node, kernel/bias and gamma/beta, no statistics
    plan_vars = gm._plan_trainable_variables()
    assert [v.path for v in plan_vars] == ["c1/kernel", "c1/bias", "c2/kernel", "c2/bias",
                                           "bn/gamma", "bn/beta", "c3/kernel", "c3/bias",
                                           "out/kernel", "out/bias"]
    in_nodes = [n[k] for n in nodes if n.get("trainable")
                for k in ("kernel", "bias", "gamma", "beta") if n.get(k) is not None]
    assert all(a is v.buffer for a, v in zip(in_nodes, plan_vars)) and len(in_nodes) == len(plan_vars)


def test_frozen_batchnorm_is_an_inference_node_without_trainable_weights():
    gm = branching(gk, bn_trainable=False)
    bn = gm.get_layer("bn")
    assert [w.name for w in bn.non_trainable_weights] == ["gamma", "beta", "moving_mean",
                                                          "moving_variance"]
    gm.compile("sgd", "categorical_crossentropy")
    nodes = lowering.model_nodes(gm, gm._trainable_of)
    assert [n["trainable"] for n in nodes if n["kind"] == "batchnorm"] == [False]
    assert "bn/gamma" not in [v.path for v in gm._plan_trainable_variables()]
    bn.trainable = True           # the statistics never become trainable
    assert [w.name for w in bn.trainable_weights] == ["gamma", "beta"]


def test_sequential_lowers_through_the_same_graph_path():
    L = gk.layers
    chain = gk.Sequential([gk.Input((6, 6, 2)), L.Conv2D(3, 3), L.Flatten(), L.Dense(2)])
    nodes = lowering.model_nodes(chain, lambda l: True)
    assert [n["kind"] for n in nodes] == ["conv2d", "reshape", "dense"]   # the chain form
    with_bn = gk.Sequential([gk.Input((6, 6, 2)), L.Conv2D(3, 3), L.BatchNormalization(),
                             L.GlobalAveragePooling2D(), L.Dense(2)])
    nodes = lowering.model_nodes(with_bn, lambda l: True)
    assert [n["kind"] for n in nodes] == ["input", "conv2d", "batchnorm", "avgpool2d",
                                          "reshape", "dense"]
    assert [n.get("inputs") for n in nodes] == [None, [0], [1], [2], [3], [4]]


def test_from_logits_losses_reach_the_plans_train_flag(monkeypatch):
    made = []

    class FakePlan:
        def __init__(self, nodes, max_batch, train):
            made.append(train)

        def train_step(self, x, y, hp, seed=0):
            return {"loss": 0.0, "steps_applied": 1}

    monkeypatch.setattr(lowering, "make_plan", lambda n, mb, train=None: FakePlan(n, mb, train))
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    for loss, y, kind in ((gk.losses.CategoricalCrossentropy(from_logits=True), np.eye(2)[[0, 1, 1, 0]],
                           "categorical_crossentropy"),
                          (gk.losses.SparseCategoricalCrossentropy(from_logits=True), [0, 1, 1, 0],
                           "sparse_categorical_crossentropy"),
                          (gk.losses.BinaryCrossentropy(from_logits=True), [[0], [1], [1], [0]],
                           "binary_crossentropy")):
        inp = gk.Input((3,))
        units = 1 if kind == "binary_crossentropy" else 2
        m = gk.Model(inp, gk.layers.Dense(units)(inp))
        m.compile("sgd", loss)
        m.train_on_batch(x, np.asarray(y))
        assert made[-1]["loss"] == kind and made[-1]["from_logits"] is True
    m.compile("sgd", "binary_crossentropy")
    m.train_on_batch(x, np.asarray(y))
    assert made[-1]["from_logits"] is False


# ------------------------------------------------------------------ several inputs: data
def test_split_inputs_accepts_lists_tuples_and_dicts_and_names_errors():
    a, b = np.zeros((3, 2)), np.ones((3, 2))
    assert data_adapter.split_inputs([a, b], ["a", "b"])[1] is b
    assert data_adapter.split_inputs({"b": b, "a": a}, ["a", "b"])[0] is a
    assert data_adapter.split_inputs([a], ["a"])[0] is a
    assert data_adapter.split_inputs(a, ["a"])[0] is a
    with pytest.raises(ValueError, match="2 inputs"):
        data_adapter.split_inputs(a, ["a", "b"])
    with pytest.raises(ValueError, match="holds 3 arrays"):
        data_adapter.split_inputs([a, b, a], ["a", "b"])
    with pytest.raises(ValueError, match=r"without the model input\(s\) \['b'\]"):
        data_adapter.split_inputs({"a": a}, ["a", "b"])
    with pytest.warns(UserWarning, match="not inputs of the model"):
        data_adapter.split_inputs({"a": a, "b": b, "c": a}, ["a", "b"])


class RecordingPlan:
    """Stands in for the C plan: records what the trainer hands it."""

    def __init__(self, nodes, max_batch, train):
        self.nodes, self.max_batch, self.train = nodes, max_batch, train
        self.steps, self.data = [], None

    def _check(self, x, y):
        assert isinstance(x, list) and len(x) == 2 and len(x[0]) == len(x[1]) == len(y)
        assert all(a.dtype == np.float32 and a.flags.c_contiguous for a in x)
        np.testing.assert_array_equal(x[1][:, 0], 2 * x[0][:, 0, 0, 0])    # rows stay paired

    def train_step(self, x, y, hp, seed=0):
        self._check(x, y)
        np.testing.assert_array_equal(x[0][:, 0, 0, 0], y[:, 1])           # row id travels
        assert y[:, 1].max() < 8           # validation_split kept the last 2 rows out
        self.steps.append(len(y))
        return {"loss": float(len(y)), "steps_applied": 1}

    def eval_step(self, x, y):
        self._check(x, y)
        return {"loss": float(len(y))}

    resident = False

    def set_data(self, x, y):
        if x is not None and not self.resident:
            raise MemoryError("not resident")        # the one-call-per-step path
        self.data = None if x is None else (x, y)

    def train_steps(self, indices, batch_size, hp, lrs=None, seeds=None):
        x, y = self.data
        rows = [a[indices] for a in x]
        self._check(rows, y[indices])
        np.testing.assert_array_equal(rows[0][:, 0, 0, 0], y[indices][:, 1])
        steps = -(-len(indices) // batch_size)
        self.steps.extend([batch_size] * steps)
        return {"loss": float(len(indices)), "steps_applied": steps}

    def predict(self, x):
        assert isinstance(x, list) and len(x) == 2
        return np.tile(x[0][:, :1, 0, 0], (1, 2)).astype(np.float32)


@pytest.mark.parametrize("resident", [False, True])
def test_fit_evaluate_predict_carry_one_array_per_input(monkeypatch, resident):
    plans = []

    def make(nodes, mb, train=None):
        plans.append(RecordingPlan(nodes, mb, train))
        plans[-1].resident = resident
        return plans[-1]
    monkeypatch.setattr(lowering, "make_plan", make)
    L = gk.layers
    img, vec = gk.Input((4, 4, 1), name="img"), gk.Input((3,), name="vec")
    h = L.Concatenate()([L.Flatten()(img), vec])
    model = gk.Model([img, vec], L.Dense(2)(h))
    model.compile("sgd", "mse")
    n = 10
    ids = np.arange(n, dtype=np.float32)
    x_img = np.broadcast_to(ids[:, None, None, None], (n, 4, 4, 1)).copy()
    x_vec = np.broadcast_to(2 * ids[:, None], (n, 3)).copy()
    y = np.stack([np.zeros(n), ids], 1).astype(np.float32)
    model.fit({"vec": x_vec, "img": x_img}, y, batch_size=4, epochs=2, validation_split=0.2,
              verbose=0)
    train_plan = plans[0]
    assert [d["kind"] for d in train_plan.nodes][:2] == ["input", "input"]
    assert train_plan.steps == [4, 4, 4, 4]            # 8 training rows, 2 epochs
    assert model.evaluate([x_img, x_vec], y, batch_size=3, verbose=0) == pytest.approx(1.0)
    out = model.predict((x_img, x_vec), batch_size=4, verbose=0)
    np.testing.assert_array_equal(out[:, 0], ids)
    model.train_on_batch([x_img[:3], x_vec[:3]], y[:3])
    with pytest.raises(ValueError, match="2 inputs"):
        model.predict(x_img, verbose=0)
    with pytest.raises(ValueError, match=r"x\[1\] has shape \(10, 4\)"):
        model.predict([x_img, np.zeros((n, 4))], verbose=0)
    with pytest.raises(ValueError, match="cardinality"):
        model.predict([x_img, x_vec[:5]], verbose=0)


# ------------------------------------------------------------------ summary
@pytest.mark.parametrize("build", [branching, small_resnet_block])
def test_functional_summary_is_keras_text(build, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    texts = []
    for K in (keras, gk):
        captured = []
        build(K).summary(print_fn=lambda s, **kw: captured.append(s))
        texts.append("".join(captured))
    assert "Connected to" in texts[0] and "InputLayer" in texts[0]
    assert texts[1] == texts[0]


def test_linear_and_nested_functional_summaries_are_keras_text(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")

    def linear(K):
        a = K.Input((4,), name="a")
        return K.Model(a, K.layers.Dense(2, name="dd")(K.layers.Dense(3, name="d0")(a)))

    def nested(K):
        i = K.Input((4,), name="i")
        inner = K.Model(i, K.layers.Dense(3, name="d1")(i), name="inner")
        x = K.Input((4,), name="x")
        s = K.layers.Add(name="add")([inner(x), K.layers.Dense(3, name="d3")(x)])
        return K.Model(x, s, name="outer")

    for build in (linear, nested):
        texts = []
        for K in (keras, gk):
            captured = []
            build(K).summary(print_fn=lambda s, **kw: captured.append(s))
            texts.append("".join(captured))
        assert texts[1] == texts[0]


# ------------------------------------------------------------------ config and saving
def test_get_config_has_keras_graph_structure():
    kc, gc = branching(keras).get_config(), branching(gk).get_config()
    assert gc["input_layers"] == kc["input_layers"] and gc["output_layers"] == kc["output_layers"]
    assert [l["name"] for l in gc["layers"]] == [l["name"] for l in kc["layers"]]
    assert [l["class_name"] for l in gc["layers"]] == [l["class_name"] for l in kc["layers"]]

    def histories(layer_cfg):
        out = []
        for node in layer_cfg["inbound_nodes"]:
            args = node["args"][0]
            args = args if isinstance(args, list) else [args]
            out.append([a["config"]["keras_history"] for a in args])
        return out
    assert [histories(l) for l in gc["layers"]] == [histories(l) for l in kc["layers"]]


@pytest.mark.parametrize("build", [branching, small_resnet_block])
def test_config_round_trip_rebuilds_the_same_graph(build):
    gm = build(gk)
    for w in gm.weights:            # non-default values everywhere, statistics included
        w.assign(np.random.default_rng(len(w.path)).normal(size=w.shape).astype(np.float32) ** 2)
    gk.backend.clear_session()
    again = gk.Model.from_config(gm.get_config())
    assert describe_layers(again) == describe_layers(gm)
    again.set_weights(gm.get_weights())
    assert lowering.model_nodes(again, lambda l: True).__len__() == \
        len(lowering.model_nodes(gm, lambda l: True))
    again_cfg = again.get_config()
    assert again_cfg == gm.get_config()


def test_save_load_round_trip_keeps_graph_weights_and_bn_statistics(tmp_path):
    gm = small_resnet_block(gk)
    for w in gm.weights:
        w.assign(np.random.default_rng(w.size).uniform(0.5, 1.5, size=w.shape).astype(np.float32))
    gm.compile(gk.optimizers.SGD(0.1, momentum=0.9), "categorical_crossentropy")
    gm.save(tmp_path / "block.keras")
    back = gk.models.load_model(tmp_path / "block.keras")
    assert type(back).__name__ == "Functional"
    assert describe_layers(back) == describe_layers(gm)
    for a, b in zip(back.get_weights(), gm.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.get_layer("body_bn").moving_variance.numpy(),
                                  gm.get_layer("body_bn").moving_variance.numpy())
    gm.save_weights(tmp_path / "block.weights.h5")
    fresh = small_resnet_block(gk)
    fresh.load_weights(tmp_path / "block.weights.h5")
    for a, b in zip(fresh.get_weights(), gm.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("suffix", [".weights.h5", ".h5"])
def test_keras_hdf5_weight_files_load_by_name(tmp_path, suffix):
    km, gm = small_resnet_block(keras), small_resnet_block(gk)
    for w in km.weights:
        w.assign(np.random.default_rng(int(np.prod(w.shape))).normal(size=w.shape).astype("float32") ** 2)
    path = tmp_path / f"k{suffix}"
    if suffix == ".h5":
        km.save(path)                  # legacy HDF5 model file: model_weights/<layer>/...
    else:
        km.save_weights(path)          # Keras 3 weights: layers/<class>/vars, named by attribute
    gm.load_weights(path)
    for a, b in zip(gm.get_weights(), km.get_weights()):
        np.testing.assert_array_equal(a, b)
    other = gk.Model(gm.input, gk.layers.Dense(3, name="not_in_file")(gm.layers[-2].output))
    before = other.get_weights()
    with pytest.raises(ValueError, match="not_in_file"):
        other.load_weights(path)
    for a, b in zip(before, other.get_weights()):    # nothing written
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ numerics (graph plan)
@pytest.mark.parametrize("build", [branching, small_resnet_block])
def test_predictions_match_keras(build):
    km, gm = pair(build)
    rng = np.random.default_rng(3)
    for w in km.layers:   # non-trivial BN statistics
        if isinstance(w, keras.layers.BatchNormalization):
            w.moving_mean.assign(rng.normal(size=w.moving_mean.shape).astype("float32"))
            w.moving_variance.assign(rng.uniform(0.5, 2, size=w.moving_variance.shape).astype("float32"))
    gm.set_weights(km.get_weights())
    xs = [rng.normal(size=(7,) + tuple(t.shape[1:])).astype(np.float32) for t in km.inputs]
    x = xs if len(xs) > 1 else xs[0]
    assert rel_err(gm.predict(x, verbose=0), km.predict(x, verbose=0)) < 1e-5


@pytest.mark.parametrize("bn_trainable", [True, False])
def test_one_sgd_step_with_batchnorm_matches_keras(bn_trainable):
    km, gm = pair(lambda K: branching(K, bn_trainable))
    rng = np.random.default_rng(4)
    xs = [rng.normal(size=(6, 8, 8, 3)).astype(np.float32) for _ in range(2)]
    y = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 6)]
    km.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy")
    gm.compile(optimizer=gk.optimizers.SGD(0.1), loss="categorical_crossentropy")
    kl = km.train_on_batch(xs, y)
    gl = gm.train_on_batch(xs, y)
    assert float(gl) == pytest.approx(float(kl), rel=1e-5)
    for kw, gw, path in zip(km.get_weights(), gm.get_weights(), [w.path for w in gm.weights]):
        assert weights_close(gw, kw), path
    assert rel_err(gm.predict(xs, verbose=0), km.predict(xs, verbose=0)) < 1e-5


def test_explicit_form_of_a_chain_computes_what_the_chain_form_does():
    """The same chain handed to the plan in both forms (input node + 'inputs' keys, or
    today's list) predicts and trains alike -- the explicit form as the lowering writes it."""
    L = gk.layers
    model = gk.Sequential([gk.Input((6, 6, 2)), L.Conv2D(3, 3, activation="relu"),
                           L.MaxPooling2D(), L.Flatten(), L.Dense(4, activation="softmax")])
    flat = lowering.flatten(model)
    explicit = lowering.describe(flat, lambda l: True)
    chain = lowering.as_plan_list(lowering.describe(flat, lambda l: True))
    assert explicit[0]["kind"] == "input" and "inputs" not in chain[0]
    rng = np.random.default_rng(5)
    x = rng.normal(size=(5, 6, 6, 2)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 5)]
    preds = [np.asarray(lowering.make_plan(nodes, 5).predict(x)) for nodes in (explicit, chain)]
    np.testing.assert_array_equal(preds[0], preds[1])
    w0 = model.get_weights()
    after = []
    for nodes in (explicit, chain):
        model.set_weights(w0)
        opt = gk.optimizers.SGD(0.1)
        train = {"loss": "categorical_crossentropy", "optimizer": "sgd", "metrics": [],
                 "opt_state": opt.state_for(lowering.trainable_variables_in_plan_order(
                     flat, lambda l: True))}
        stats = lowering.make_plan(nodes, 5, train).train_step(x, y, opt.hparams())
        after.append((stats["loss"], model.get_weights()))
    assert after[0][0] == after[1][0]
    for a, b in zip(after[0][1], after[1][1]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(after[0][1][0], w0[0])


# ------------------------------------------------------------------ the node list, executed in NumPy
def run_nodes(nodes, xs):
    """Inference over a plan node list (explicit form) in float64 with tests/reference.py:
    what the C plan must compute from the dicts the lowering writes."""
    import reference as ref

    def buf(b, shape):
        return np.frombuffer(b, np.float32)[: int(np.prod(shape))].reshape(shape).astype(np.float64)
    vals = []
    it = iter(xs)
    for n in nodes:
        args = [vals[i] for i in n.get("inputs", [])]
        kind = n["kind"]
        if kind == "input":
            v = np.asarray(next(it), np.float64)
        elif kind == "conv2d":
            c, f = n["in_shape"][-1], n["out_shape"][-1]
            k = buf(n["kernel"], tuple(n["kernel_size"]) + (c, f))
            b = buf(n["bias"], (f,)) if n["bias"] is not None else None
            v = ref.activation(ref.conv2d(args[0], k, b, strides=n["strides"], padding=n["padding"],
                                          dilation_rate=n["dilation"]), n["activation"])
        elif kind == "dense":
            k = buf(n["kernel"], (n["in_shape"][-1], n["out_shape"][-1]))
            v = ref.activation(args[0] @ k + buf(n["bias"], (k.shape[1],)), n["activation"])
        elif kind in ("maxpool2d", "avgpool2d"):
            pool = ref.max_pool2d if kind == "maxpool2d" else ref.avg_pool2d
            v = pool(args[0], n["pool_size"], n["strides"], n["padding"])
        elif kind == "reshape":
            v = args[0].reshape((len(args[0]),) + tuple(n["out_shape"]))
        elif kind == "activation":
            v = ref.activation(args[0], n["activation"])
        elif kind == "add":
            v = sum(args)
        elif kind == "multiply":
            assert len(args) == 2
            v = args[0] * args[1]
        elif kind == "concat":
            v = np.concatenate(args, axis=n["axis"] + 1)
        elif kind == "pad2d":
            (t, b), (l, r) = n["padding"]
            v = np.pad(args[0], ((0, 0), (t, b), (l, r), (0, 0)))
        elif kind == "batchnorm":
            c = n["in_shape"][-1]
            g = buf(n["gamma"], (c,)) if n["gamma"] is not None else 1.0
            be = buf(n["beta"], (c,)) if n["beta"] is not None else 0.0
            mean, var = buf(n["moving_mean"], (c,)), buf(n["moving_variance"], (c,))
            v = (args[0] - mean) / np.sqrt(var + n["epsilon"]) * g + be
        else:
            raise AssertionError(f"no reference for {kind}")
        assert v.shape[1:] == tuple(n["out_shape"]), (kind, v.shape, n["out_shape"])
        if n.get("inputs"):
            assert tuple(args[0].shape[1:]) == tuple(n["in_shape"]), kind
        vals.append(v)
    return vals[-1]


@pytest.mark.parametrize("build", [branching, small_resnet_block])
def test_node_list_run_in_numpy_predicts_what_keras_predicts(build):
    """The lowering's node list, executed by a NumPy interpreter of the contract, gives
    Keras' predictions: the dicts carry everything the plan needs (runs without the plan)."""
    km, gm = pair(build)
    rng = np.random.default_rng(6)
    for layer in km.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(rng.normal(size=layer.moving_mean.shape).astype("float32"))
            layer.moving_variance.assign(
                rng.uniform(0.5, 2, size=layer.moving_variance.shape).astype("float32"))
    gm.set_weights(km.get_weights())
    xs = [rng.normal(size=(4,) + tuple(t.shape[1:])).astype(np.float32) for t in km.inputs]
    nodes = lowering.describe(lowering.flatten(gm), lambda l: False)
    got = run_nodes(nodes, xs)
    assert rel_err(got, km.predict(xs if len(xs) > 1 else xs[0], verbose=0)) < 1e-5


def test_resnet50_node_list_run_in_numpy_predicts_what_keras_predicts():
    km = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=7,
                                     classifier_activation=None)
    gm = gk.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=7,
                                  classifier_activation=None)
    rng = np.random.default_rng(8)
    randomize_bn_statistics(km, rng)
    gm.set_weights(km.get_weights())
    x = rng.uniform(0, 1, size=(2, 32, 32, 3)).astype(np.float32)
    nodes = lowering.describe(lowering.flatten(gm), lambda l: False)
    assert sum(n["kind"] == "batchnorm" for n in nodes) == 53
    assert sum(n["kind"] == "add" for n in nodes) == 16
    assert rel_err(run_nodes(nodes, [x]), km.predict(x, verbose=0)) < 1e-5
