"""keras.datasets.imdb: 25,000 + 25,000 movie reviews as word-index lists, labels 0/1."""
import numpy as np

from . import _sequences as seq
from ._fetch import fetch
from ._safe_arrays import load_npz, require


def load_data(path="imdb.npz", num_words=None, skip_top=0, maxlen=None, seed=113, start_char=1,
              oov_char=2, index_from=3, **kwargs):
    """((x_train, y_train), (x_test, y_test)), as keras.datasets.imdb.load_data()."""
    if kwargs:
        raise TypeError(f"Unrecognized keyword arguments: {kwargs}")
    path = fetch("imdb", path, "imdb.npz")
    x_train, y_train, x_test, y_test = require(load_npz(path),
                                               ["x_train", "y_train", "x_test", "y_test"], path)
    rng = np.random.RandomState(seed)
    idx = np.arange(len(x_train))
    rng.shuffle(idx)
    x_train, y_train = x_train[idx], y_train[idx]
    idx = np.arange(len(x_test))
    rng.shuffle(idx)
    x_test, y_test = x_test[idx], y_test[idx]
    x_train, x_test = seq.shift(x_train, start_char, index_from), seq.shift(x_test, start_char, index_from)
    if maxlen:
        x_train, y_train = seq.remove_long_seq(maxlen, x_train, y_train)
        x_test, y_test = seq.remove_long_seq(maxlen, x_test, y_test)
        if not x_train or not x_test:
            raise ValueError(f"After filtering for sequences shorter than maxlen={maxlen}, no "
                             "sequence was kept. Increase maxlen.")
    xs = seq.clip_words(x_train + x_test, num_words, skip_top, oov_char)
    labels = np.concatenate([y_train, y_test])
    n = len(x_train)
    return (seq.as_object_array(xs[:n]), labels[:n]), (seq.as_object_array(xs[n:]), labels[n:])


def get_word_index(path="imdb_word_index.json"):
    return seq.load_word_index(fetch("imdb", path, "imdb_word_index.json"))
