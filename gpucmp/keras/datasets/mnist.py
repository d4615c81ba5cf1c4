"""keras.datasets.mnist: 60,000 + 10,000 28x28 uint8 digits, labels uint8 (Keras' mnist.npz)."""
from ._fetch import fetch
from ._safe_arrays import load_npz, require


def load_data(path="mnist.npz"):
    """((x_train, y_train), (x_test, y_test)), as keras.datasets.mnist.load_data()."""
    path = fetch("mnist", path, "mnist.npz")
    x_train, y_train, x_test, y_test = require(load_npz(path),
                                               ["x_train", "y_train", "x_test", "y_test"], path)
    return (x_train, y_train), (x_test, y_test)
