"""MaxPooling2D: the maximum over each pool window (see pooling2d.py for the rules)."""
from .pooling2d import Pooling2D


class MaxPooling2D(Pooling2D):
    _kind = "maxpool2d"


MaxPool2D = MaxPooling2D
