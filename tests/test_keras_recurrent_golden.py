"""Keras' own golden values for constant-initialised recurrent layers, ported as-is.

What it provides: every numeric case of Keras 3.15.1's recurrent-layer tests that uses
kernel Constant(0.01), recurrent kernel Constant(0.02), bias Constant(0.03) -- plain,
go_backwards, unroll, unit_forget_bias=False, use_bias=False, GRU reset_after=False,
LSTM implementation 1 and 2, stateful carry-over and reset_state, initial_state,
return_state, masking and zero_output_for_mask -- run on gpucmp.keras and compared with
the numbers Keras' tests expect (RECURRENT_SPEC.md section 1.0). Each case names the
file and lines of keras-team/keras v3.15.1 (`keras/src/layers/rnn/...`) its expected
values come from; the numbers are copied, not recomputed. Inputs are the tests' own:
A = arange(24).reshape(2, 3, 4), B = arange(72).reshape(3, 6, 4),
C = arange(24).reshape(2, 4, 3).

Keras' tests pass masks, initial states and stateful calls to the layer called on
arrays; gpucmp carries those in models (an explicit `mask=` or `initial_state=` on arrays
is refused with a clear error), so those cases run through a functional model that
computes the same thing (`_run`). rnn_test.py:360-386 (go_backwards / stateful with custom RNN
cells) is not ported: gpucmp.keras has no generic `RNN(cell)` layer.
"""
import numpy as np
import pytest

from gpucmp import keras
from gpucmp.keras import initializers

SRC = "keras/src/layers/rnn/"

INPUTS = {"A": np.arange(24).reshape((2, 3, 4)).astype("float32"),
          "B": np.arange(72).reshape((3, 6, 4)).astype("float32"),
          "C": np.arange(24).reshape((2, 4, 3)).astype("float32")}
MASK = np.array([[True, True, False, True], [True, False, False, True]])        # simple_rnn / gru tests
LSTM_MASK = np.array([[True, True, True, False], [True, True, False, False]])  # lstm_test.py:257
LSTM_BACK_MASK = np.array([[False, True, True, True], [False, False, True, True]])  # lstm_test.py:354

# masked steps' inputs become this value, which a Masking layer turns back into the mask
# (the cases' inputs are aranges, never negative; a masked step's input is never read)
SENTINEL = -1.0

# (id, layer class, constructor kwargs, input, call: {"mask", "initial_state", "stateful",
#  "return_state"}, expected (rows of values, or full arrays), source lines of the expectation)
CASES = [
    # ---- SimpleRNN: simple_rnn_test.py
    ("simple_rnn", "SimpleRNN", {"units": 4}, "A", {}, [0.405432, 0.73605347], "simple_rnn_test.py:38-56"),
    ("simple_rnn_unroll", "SimpleRNN", {"units": 4, "unroll": True}, "A", {}, [0.405432, 0.73605347],
     "simple_rnn_test.py:57-75"),
    ("simple_rnn_backwards", "SimpleRNN", {"units": 4, "go_backwards": True}, "A", {}, [0.11144729, 0.5528889],
     "simple_rnn_test.py:77-95"),
    ("simple_rnn_backwards_unroll", "SimpleRNN", {"units": 4, "go_backwards": True, "unroll": True}, "A", {},
     [0.11144729, 0.5528889], "simple_rnn_test.py:96-115"),
    ("simple_rnn_stateful", "SimpleRNN", {"units": 4, "stateful": True}, "A", {"stateful": True},
     [0.40559256, 0.7361247], "simple_rnn_test.py:118-153"),
    ("simple_rnn_initial_state", "SimpleRNN", {"units": 4}, "C",
     {"initial_state": np.arange(8).reshape((2, 4)).astype("float32")}, [0.33621645, 0.6262637],
     "simple_rnn_test.py:155-174"),
    ("simple_rnn_initial_state_backwards", "SimpleRNN", {"units": 4, "go_backwards": True}, "C",
     {"initial_state": np.arange(8).reshape((2, 4)).astype("float32")}, [0.07344437, 0.43043602],
     "simple_rnn_test.py:176-195"),
    ("simple_rnn_mask_unroll", "SimpleRNN", {"units": 4, "unroll": True}, "C", {"mask": MASK},
     [0.32951632, 0.61799484], "simple_rnn_test.py:197-218"),
    ("simple_rnn_mask_sequences", "SimpleRNN", {"units": 2, "return_sequences": True}, "C", {"mask": MASK},
     np.array([[[0.0599281] * 2, [0.15122814] * 2, [0.15122814] * 2, [0.32394567] * 2],
               [[0.3969304] * 2, [0.3969304] * 2, [0.3969304] * 2, [0.608085] * 2]]),
     "simple_rnn_test.py:220-252"),
    ("simple_rnn_mask_zero_output", "SimpleRNN", {"units": 2, "return_sequences": True,
                                                   "zero_output_for_mask": True}, "C", {"mask": MASK},
     np.array([[[0.0599281] * 2, [0.15122814] * 2, [0.0] * 2, [0.32394567] * 2],
               [[0.3969304] * 2, [0.0] * 2, [0.0] * 2, [0.608085] * 2]]),
     "simple_rnn_test.py:254-288"),
    ("simple_rnn_mask_backwards", "SimpleRNN", {"units": 4, "go_backwards": True}, "C", {"mask": MASK},
     [0.07376196, 0.43645123], "simple_rnn_test.py:290-308"),

    # ---- LSTM: lstm_test.py (test_correctness runs implementation 1 and 2)
    *[(f"lstm_impl{i}", "LSTM", {"units": 3, "implementation": i}, "B", {},
       [0.6288687, 0.86899155, 0.9460773], "lstm_test.py:49-72") for i in (1, 2)],
    *[(f"lstm_backwards_impl{i}", "LSTM", {"units": 3, "go_backwards": True, "implementation": i}, "B", {},
       [0.35622165, 0.74789524, 0.8872726], "lstm_test.py:74-96") for i in (1, 2)],
    *[(f"lstm_unroll_impl{i}", "LSTM", {"units": 3, "unroll": True, "implementation": i}, "B", {},
       [0.6288687, 0.86899155, 0.9460773], "lstm_test.py:98-120") for i in (1, 2)],
    *[(f"lstm_no_forget_bias_impl{i}", "LSTM", {"units": 3, "unit_forget_bias": False, "implementation": i},
       "B", {}, [0.57019705, 0.8661914, 0.9459622], "lstm_test.py:122-144") for i in (1, 2)],
    *[(f"lstm_no_bias_impl{i}", "LSTM", {"units": 3, "use_bias": False, "implementation": i}, "B", {},
       [0.54986924, 0.86226785, 0.9443936], "lstm_test.py:146-169") for i in (1, 2)],
    ("lstm_stateful", "LSTM", {"units": 4, "stateful": True}, "A", {"stateful": True},
     [0.3124785, 0.6863672], "lstm_test.py:171-210"),
    ("lstm_initial_state", "LSTM", {"units": 2}, "C",
     {"initial_state": [np.arange(4).reshape((2, 2)).astype("float32")] * 2},
     np.array([[0.20574439, 0.3558822], [0.64930826, 0.66276]]), "lstm_test.py:212-232"),
    ("lstm_initial_state_backwards", "LSTM", {"units": 2, "go_backwards": True}, "C",
     {"initial_state": [np.arange(4).reshape((2, 2)).astype("float32")] * 2},
     np.array([[0.13281618, 0.2790356], [0.5839337, 0.5992567]]), "lstm_test.py:234-249"),
    ("lstm_mask_unroll", "LSTM", {"units": 2, "unroll": True}, "C", {"mask": LSTM_MASK},
     [0.11755939, 0.28556206], "lstm_test.py:255-273"),
    ("lstm_mask_sequences", "LSTM", {"units": 2, "return_sequences": True}, "C", {"mask": LSTM_MASK},
     np.array([[[0.01588910] * 2, [0.05552048] * 2, [0.11755939] * 2, [0.11755939] * 2],
               [[0.14185596] * 2, [0.28556206] * 2, [0.28556206] * 2, [0.28556206] * 2]]),
     "lstm_test.py:275-312"),
    ("lstm_mask_zero_output", "LSTM", {"units": 2, "return_sequences": True, "zero_output_for_mask": True},
     "C", {"mask": LSTM_MASK},
     np.array([[[0.01588910] * 2, [0.05552048] * 2, [0.11755939] * 2, [0.0] * 2],
               [[0.14185596] * 2, [0.28556206] * 2, [0.0] * 2, [0.0] * 2]]),
     "lstm_test.py:314-352"),
    ("lstm_mask_backwards", "LSTM", {"units": 2, "go_backwards": True}, "C", {"mask": LSTM_BACK_MASK},
     [0.15341201, 0.3844719], "lstm_test.py:354-372"),

    # ---- GRU: gru_test.py (test_correctness is parameterized over implementation but never
    # passes it to the layer; the legacy implementation=0 case of :389-417 gives the same numbers)
    *[(f"gru_impl{i}", "GRU", {"units": 3, "implementation": i}, "B", {},
       np.array([[0.5217289] * 3, [0.6371659] * 3, [0.39384964, 0.39384964, 0.3938496]]),
       "gru_test.py:50-73" if i else "gru_test.py:389-417") for i in (0, 2)],
    ("gru_backwards", "GRU", {"units": 3, "go_backwards": True}, "B", {},
     [0.24406259, 0.611516, 0.3928808], "gru_test.py:75-96"),
    ("gru_unroll", "GRU", {"units": 3, "unroll": True}, "B", {},
     np.array([[0.5217289] * 3, [0.6371659] * 3, [0.39384964, 0.39384964, 0.3938496]]), "gru_test.py:98-119"),
    ("gru_reset_before", "GRU", {"units": 3, "reset_after": False}, "B", {},
     [0.51447755, 0.6426879, 0.40208298], "gru_test.py:121-142"),
    ("gru_no_bias", "GRU", {"units": 3, "use_bias": False}, "B", {},
     [0.49988455, 0.64701194, 0.4103359], "gru_test.py:144-165"),
    ("gru_stateful", "GRU", {"units": 4, "stateful": True}, "A", {"stateful": True},
     [0.29542392, 0.5885018], "gru_test.py:167-202"),
    ("gru_initial_state", "GRU", {"units": 2}, "C",
     {"initial_state": np.arange(4).reshape((2, 2)).astype("float32")},
     np.array([[0.23774096, 0.33508456], [0.83659905, 1.0227708]]), "gru_test.py:204-219"),
    ("gru_initial_state_backwards", "GRU", {"units": 2, "go_backwards": True}, "C",
     {"initial_state": np.arange(4).reshape((2, 2)).astype("float32")},
     np.array([[0.13486053, 0.23261218], [0.78257304, 0.9691353]]), "gru_test.py:221-234"),
    *[(f"gru_return_state{'_backwards' if b else ''}", "GRU",
       {"units": 2, "return_state": True, "go_backwards": b}, "C",
       {"initial_state": np.arange(4).reshape((2, 2)).astype("float32"), "return_state": True},
       np.array([[0.13486053, 0.23261218], [0.78257304, 0.9691353]]) if b else
       np.array([[0.23774096, 0.33508456], [0.83659905, 1.0227708]]),
       "gru_test.py:261-283" if b else "gru_test.py:236-260") for b in (False, True)],
    ("gru_mask_unroll", "GRU", {"units": 2, "unroll": True}, "C", {"mask": MASK},
     [0.19393763, 0.30818558], "gru_test.py:285-302"),
    ("gru_mask_sequences", "GRU", {"units": 2, "return_sequences": True}, "C", {"mask": MASK},
     np.array([[[0.03606692] * 2, [0.09497581] * 2, [0.09497581] * 2, [0.19393763] * 2],
               [[0.16051409] * 2, [0.16051409] * 2, [0.16051409] * 2, [0.30818558] * 2]]),
     "gru_test.py:304-336"),
    ("gru_mask_zero_output", "GRU", {"units": 2, "return_sequences": True, "zero_output_for_mask": True},
     "C", {"mask": MASK},
     np.array([[[0.03606692] * 2, [0.09497581] * 2, [0.0] * 2, [0.19393763] * 2],
               [[0.16051409] * 2, [0.0] * 2, [0.0] * 2, [0.30818558] * 2]]),
     "gru_test.py:338-371"),
    ("gru_mask_backwards", "GRU", {"units": 2, "go_backwards": True}, "C", {"mask": MASK},
     [0.11669192, 0.28380975], "gru_test.py:373-387"),
]


def _expected(want, units):
    want = np.asarray(want, np.float64)
    return np.repeat(want[:, None], units, axis=1) if want.ndim == 1 else want


def _build(cls, kwargs):
    return getattr(keras.layers, cls)(kernel_initializer=initializers.Constant(0.01),
                                      recurrent_initializer=initializers.Constant(0.02),
                                      bias_initializer=initializers.Constant(0.03), **kwargs)


def _run(layer, x, call):
    """The layer's outputs as each case's Keras test takes them. A plain case calls the layer
    on the array; a case with a mask, initial states, carried states or returned states goes
    through a functional model, where gpucmp carries them: the mask as a Masking layer over
    an input whose masked steps hold SENTINEL, the states as keras.Input tensors, a stateful
    layer with the batch size declared."""
    if not call:
        return [layer(x)]
    inp = keras.Input(shape=x.shape[1:], batch_size=x.shape[0] if call.get("stateful") else None)
    inputs, feeds, seq = [inp], [x], inp
    if "mask" in call:
        m = np.asarray(call["mask"], bool)
        feeds = [np.where(m[..., None], x, np.float32(SENTINEL)).astype("float32")]
        seq = keras.layers.Masking(mask_value=SENTINEL)(inp)
    if "initial_state" in call:
        states = call["initial_state"]
        states = [np.asarray(v, np.float32) for v in (states if isinstance(states, list) else [states])]
        state_inputs = [keras.Input(shape=v.shape[1:]) for v in states]
        out = layer(seq, initial_state=state_inputs)
        inputs += state_inputs
        feeds += states
    else:
        out = layer(seq)
    # a model has one output in gpucmp: one model per returned tensor, sharing the layer
    models = [keras.Model(inputs, t) for t in (out if isinstance(out, tuple) else [out])]

    def predict():
        got = [m.predict(feeds if len(feeds) > 1 else feeds[0], verbose=0) for m in models]
        return got if len(got) > 1 else got[0]
    if call.get("stateful"):
        predict()                                 # the first call leaves its final state
        outs = [predict()]
        layer.reset_state()                       # ... which reset_state() zeroes
        predict()
        outs.append(predict())
        return outs
    out = predict()
    if call.get("return_state"):
        out, state = out
        np.testing.assert_allclose(np.asarray(state), np.asarray(out), rtol=1e-6, atol=1e-7)
    return [out]


@pytest.mark.parametrize("cls,kwargs,inp,call,want", [
    pytest.param(cls, kwargs, inp, call, want, id=f"{cid} [{src}]")
    for cid, cls, kwargs, inp, call, want, src in CASES])
def test_keras_golden_values(cls, kwargs, inp, call, want):
    layer = _build(cls, kwargs)
    want = _expected(want, kwargs["units"])
    for out in _run(layer, INPUTS[inp], call):
        out = np.asarray(out)
        assert out.shape == want.shape
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_the_ported_cases_are_all_there():
    """A guard on the table itself: unique ids, and every numeric case of the three Keras
    test files (11 SimpleRNN, 17 LSTM with both implementations, 15 GRU) still listed."""
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    for prefix, n in (("simple_rnn", 11), ("lstm_", 17), ("gru_", 15)):
        assert sum(i.startswith(prefix) for i in ids) == n, prefix
