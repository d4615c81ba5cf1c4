"""keras.datasets.boston_housing: 506 houses x 13 features, prices; Keras' shuffled split."""
import numpy as np

from ._fetch import fetch
from ._safe_arrays import load_npz, require


def load_data(path="boston_housing.npz", test_split=0.2, seed=113):
    if not 0 <= test_split < 1:
        raise ValueError("`test_split` must be between 0 and 1 (exclusive of 1). Received: "
                         f"test_split={test_split}")
    path = fetch("boston_housing", path, "boston_housing.npz")
    x, y = require(load_npz(path), ["x", "y"], path)
    indices = np.arange(len(x))
    np.random.RandomState(seed).shuffle(indices)
    x, y = x[indices], y[indices]
    cut = int(len(x) * (1 - test_split))
    return (np.array(x[:cut]), np.array(y[:cut])), (np.array(x[cut:]), np.array(y[cut:]))
