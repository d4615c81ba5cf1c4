"""Where each data set comes from (Keras' origins and file hashes) and ``fetch``, the
get_file call every loader makes, which turns a failed download into an error that says
what to do. Tests point ``TF_KERAS_DATASETS`` / ``CIFAR`` at a local server."""
import os

from ..utils.file_utils import DownloadError, get_file, keras_home

TF_KERAS_DATASETS = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
CIFAR = "https://www.cs.toronto.edu/~kriz/"

HASHES = {
    "mnist.npz": "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1",
    "boston_housing.npz": "f553886a1f8d56431e820c5b82552d9d95cfcb96d1e678153f8839538947dff5",
    "imdb.npz": "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f",
    "imdb_word_index.json": "bfafd718b763782e994055a2d397834f",
    "reuters.npz": "d6586e694ee56d7a4e65172e12b3e987c03096cb01eab99753921ef915959916",
    "reuters_word_index.json": "4d44cc38712099c9e383dc6e5f11a921",
    "cifar-10-python.tar.gz": "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
    "cifar-100-python.tar.gz": "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
    # Fashion-MNIST: Keras gives no hashes for its four files
}


def fetch(dataset, fname, remote, base=None, **kwargs):
    """``get_file(fname, base + remote, file_hash=HASHES.get(remote), ...)`` for
    ``keras.datasets.<dataset>``; a DownloadError says where the file is expected."""
    base = TF_KERAS_DATASETS if base is None else base
    try:
        return get_file(fname, origin=base + remote, file_hash=HASHES.get(remote), **kwargs)
    except DownloadError as exc:
        folder = os.path.join(keras_home(), kwargs.get("cache_subdir", "datasets"))
        raise DownloadError(
            f"keras.datasets.{dataset}.load_data() needs {remote!r}, which is not cached in "
            f"{folder} and could not be downloaded ({exc}). Connect to the internet and call "
            f"it again, or copy the file from {base + remote} into {folder} (a real Keras "
            "saves it there too). For real handwritten digits without any download use "
            "`from gpucmp.datasets import load_digits_mnist` (5,000 MNIST images, the same "
            "array layout as mnist.load_data()).") from None
