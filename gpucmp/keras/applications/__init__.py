"""gpucmp.keras.applications: Keras' reference architectures, built layer for layer and
name for name as Keras builds them, so weights saved from Keras load by name."""
from . import resnet, resnet50
from .resnet50 import ResNet50

__all__ = ["ResNet50", "resnet", "resnet50"]
