"""keras.datasets.reuters: 11,228 newswires as word-index lists over 46 topics."""
import numpy as np

from . import _sequences as seq
from ._fetch import fetch
from ._safe_arrays import load_npz, require


def load_data(path="reuters.npz", num_words=None, skip_top=0, maxlen=None, test_split=0.2,
              seed=113, start_char=1, oov_char=2, index_from=3):
    """((x_train, y_train), (x_test, y_test)), as keras.datasets.reuters.load_data()."""
    path = fetch("reuters", path, "reuters.npz")
    xs, labels = require(load_npz(path), ["x", "y"], path)
    idx = np.arange(len(xs))
    np.random.RandomState(seed).shuffle(idx)
    xs, labels = xs[idx], labels[idx]
    xs = seq.shift(xs, start_char, index_from)
    if maxlen:
        xs, labels = seq.remove_long_seq(maxlen, xs, labels)
    xs = seq.clip_words(xs, num_words, skip_top, oov_char)
    cut = int(len(xs) * (1 - test_split))
    return (seq.as_object_array(xs[:cut]), np.array(labels[:cut])), \
        (seq.as_object_array(xs[cut:]), np.array(labels[cut:]))


def get_word_index(path="reuters_word_index.json"):
    return seq.load_word_index(fetch("reuters", path, "reuters_word_index.json"))
