"""``keras.applications.resnet50``: ResNet50 (see resnet.py)."""
from .resnet import ResNet50

__all__ = ["ResNet50"]
