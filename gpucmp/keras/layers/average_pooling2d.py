"""AveragePooling2D: the mean over each pool window (see pooling2d.py for the rules)."""
from .pooling2d import Pooling2D


class AveragePooling2D(Pooling2D):
    _kind = "avgpool2d"


AvgPool2D = AveragePooling2D
