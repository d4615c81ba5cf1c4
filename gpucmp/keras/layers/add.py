"""Add: the elementwise sum of a list of tensors of one shape (``Add()([x, shortcut])``)."""
from .base_merge import Merge


class Add(Merge):
    _kind = "add"
