"""keras.datasets.fashion_mnist: Zalando's 28x28 clothing images, from the four gzipped
IDX files Keras fetches into ``datasets/fashion-mnist``."""
import gzip
import os

import numpy as np

from ._fetch import fetch

FILES = ["train-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
         "t10k-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz"]


def _read(path, offset):
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path} is not a valid gzip file: {exc}") from None
    if len(data) < offset:
        raise ValueError(f"{path} is too short for an IDX file")
    return np.frombuffer(data, np.uint8, offset=offset)


def _images(path, n):
    flat = _read(path, 16)
    if flat.size != n * 28 * 28:
        raise ValueError(f"{path} holds {flat.size} pixels, not {n} images of 28x28")
    return flat.reshape(n, 28, 28)


def load_data():
    """((x_train, y_train), (x_test, y_test)), as keras.datasets.fashion_mnist.load_data()."""
    paths = [fetch("fashion_mnist", f, f, cache_subdir=os.path.join("datasets", "fashion-mnist"))
             for f in FILES]
    y_train = _read(paths[0], 8)
    y_test = _read(paths[2], 8)
    return (_images(paths[1], len(y_train)), y_train), (_images(paths[3], len(y_test)), y_test)
