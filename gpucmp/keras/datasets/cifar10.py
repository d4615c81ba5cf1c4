"""keras.datasets.cifar10: 50,000 + 10,000 32x32x3 uint8 images, labels uint8 (n, 1)."""
import os

import numpy as np

from ._cifar import channels_last, load_batch
from ._fetch import fetch


def load_data():
    """((x_train, y_train), (x_test, y_test)), as keras.datasets.cifar10.load_data()
    (channels_last)."""
    from . import _fetch
    path = fetch("cifar10", "cifar-10-batches-py-target", "cifar-10-python.tar.gz",
                 base=_fetch.CIFAR, extract=True)
    path = os.path.join(path, "cifar-10-batches-py")
    parts = [load_batch(os.path.join(path, f"data_batch_{i}")) for i in range(1, 6)]
    x_train = np.concatenate([p[0] for p in parts]).astype(np.uint8)
    y_train = np.concatenate([p[1] for p in parts]).astype(np.uint8).reshape(-1, 1)
    x_test, y_test = load_batch(os.path.join(path, "test_batch"))
    return (channels_last(x_train), y_train), \
        (channels_last(x_test.astype(np.uint8)), y_test.astype(np.uint8).reshape(-1, 1))
