"""What imdb and reuters share: Keras' word-index shifting, OOV and length filtering."""
import json

import numpy as np


def remove_long_seq(maxlen, seq, label):
    kept = [(s, l) for s, l in zip(seq, label) if len(s) < maxlen]
    return [s for s, _ in kept], [l for _, l in kept]


def shift(xs, start_char, index_from):
    if start_char is not None:
        return [[start_char] + [w + index_from for w in x] for x in xs]
    if index_from:
        return [[w + index_from for w in x] for x in xs]
    return [list(x) for x in xs]


def clip_words(xs, num_words, skip_top, oov_char):
    if not num_words:
        num_words = max(max(x) for x in xs if len(x)) if xs else 0
    if oov_char is not None:
        return [[w if skip_top <= w < num_words else oov_char for w in x] for x in xs]
    return [[w for w in x if skip_top <= w < num_words] for x in xs]


def as_object_array(xs):
    out = np.empty(len(xs), dtype=object)
    out[:] = xs
    return out


def load_word_index(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
