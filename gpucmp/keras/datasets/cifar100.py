"""keras.datasets.cifar100: 50,000 + 10,000 32x32x3 images, fine (100) or coarse (20) labels."""
import os

from ._cifar import channels_last, load_batch
from ._fetch import fetch


def load_data(label_mode="fine"):
    """((x_train, y_train), (x_test, y_test)), as keras.datasets.cifar100.load_data()."""
    from . import _fetch
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f'`label_mode` must be one of `"fine"`, `"coarse"`. Received: '
                         f"label_mode={label_mode}.")
    path = fetch("cifar100", "cifar-100-python-target", "cifar-100-python.tar.gz",
                 base=_fetch.CIFAR, extract=True)
    path = os.path.join(path, "cifar-100-python")
    x_train, y_train = load_batch(os.path.join(path, "train"), f"{label_mode}_labels")
    x_test, y_test = load_batch(os.path.join(path, "test"), f"{label_mode}_labels")
    return (channels_last(x_train), y_train.reshape(-1, 1)), \
        (channels_last(x_test), y_test.reshape(-1, 1))
