"""Per-signature facts of the single-batch calls (train_on_batch, test_on_batch, predict,
predict_on_batch), so that a repeated call only does the work that depends on the values.

What it provides: `CallCache`, one per model, and `signature(x)`. The first call with a
signature -- the call kind and, per argument array, its full shape (batch axis included)
and dtype -- goes the full way (split_inputs, the shape checks, lowering facts, training
config, plan lookup) and stores what it resolved in an `Entry`: the plan, the training
config, how each input part and the labels are reshaped, the dropout seeder. A later call
of that signature runs `Entry.inputs` / `Entry.labels`: the float32 conversion where the
dtype needs one and the class-id range check of sparse labels -- the checks on VALUES,
every call, with the same messages as the full path. The NaN/Inf check of such a call is
the plan's, made while it copies the batch in (`Entry.run` turns its refusal into the full
path's message), which saves a pass over the batch per call.

Why it is built this way: the GAN loop calls predict and train_on_batch thousands of times
with one signature on tiny models, where the structural checks cost more than the step.
The full shapes are in the key, so the lengths checked once per signature stay checked,
and only plain NumPy arrays (one, or a list/tuple of one per model input) are cached:
dicts, DataFrames and nested lists take the full path every call. The model clears its
cache wherever it clears its plans (compile, add, pop) and when its `trainable` is set,
so an entry never outlives the plan or configuration it holds.
"""
import numpy as np

from ... import _core
from . import data_adapter as data

MAX_ENTRIES = 64      # signatures per model; a model called with ever new shapes stops caching


def _sig(a):
    return (a.shape, a.dtype)


def signature(x):
    """Hashable structure of x (an array, or a list/tuple of arrays), None when x is
    anything else (then the call is never cached)."""
    if type(x) is np.ndarray:
        return _sig(x)
    if type(x) in (list, tuple) and x and all(type(a) is np.ndarray for a in x):
        return (type(x), tuple(_sig(a) for a in x))
    return None


class Entry:
    """What the full path resolved for one signature.

    parts: per model input, (name in messages, reshape the part to (-1, 1) first);
    y_shape: the shape the labels are reshaped to (None: as they come); sparse: the labels
    are class ids (checked and converted by data.prepare_y every call)."""

    def __init__(self, plan, parts, cfg=None, out_shape=None, y_shape=None, sparse=False,
                 loss=None, seeder=None):
        self.plan, self.parts, self.cfg, self.out_shape = plan, parts, cfg, out_shape
        self.y_shape, self.sparse, self.loss, self.seeder = y_shape, sparse, loss, seeder

    def inputs(self, x, check=True):
        """The float32 C-contiguous input arrays of this call, checked finite (check=False:
        by the plan, see run)."""
        arrays = [x] if type(x) is np.ndarray else x
        return [data.as_float32(a.reshape(-1, 1) if flat else a, what, check)
                for a, (what, flat) in zip(arrays, self.parts)]

    def labels(self, y, check=True):
        if self.sparse:
            return data.prepare_y(y, self.loss, self.out_shape, "y")
        return data.as_float32(y.reshape(self.y_shape) if self.y_shape is not None else y, "y", check)

    def run(self, call, x, y=None):
        """call() (a Plan call on arrays from inputs / labels with check=False): a NaN / Inf
        the plan found while copying the batch in is reported as the full check reports it,
        naming the element (the plan refuses the batch before any of its work runs)."""
        try:
            return call()
        except _core.NonFiniteError:
            self.inputs(x)
            if y is not None:
                self.labels(y)
            raise


def input_parts(x, xs, n_inputs):
    """The Entry.parts of a call whose full path turned x into xs; None when the mapping is
    not the plain one (one array per input, in order) that Entry.inputs replays."""
    arrays = [x] if type(x) is np.ndarray else list(x)
    if len(arrays) != n_inputs or len(xs) != n_inputs:
        return None
    names = ["x"] if n_inputs == 1 else [f"x[{i}]" for i in range(n_inputs)]
    parts = []
    for a, out, what in zip(arrays, xs, names):
        if out.shape[1:] == a.shape[1:]:
            parts.append((what, False))
        elif a.ndim == 1 and out.shape == (a.shape[0], 1):
            parts.append((what, True))
        else:
            return None
    return parts


def label_shape(y, y_arr):
    """The reshape Entry.labels replays to turn y into y_arr (None: none)."""
    return None if y.shape == y_arr.shape else y_arr.shape


class CallCache:
    def __init__(self):
        self._entries = {}

    def clear(self):
        self._entries.clear()

    def get(self, key):
        return self._entries.get(key) if key is not None else None

    def put(self, key, entry):
        if key is not None and entry is not None and len(self._entries) < MAX_ENTRIES:
            self._entries[key] = entry

    def __len__(self):
        return len(self._entries)
