"""gpucmp.keras.models: Sequential, Model / Functional (graphs of layer calls), load_model."""
from .model import Functional, Model
from .saving import load_model, model_from_config, save_model
from .sequential import Sequential

__all__ = ["Functional", "Model", "Sequential", "load_model", "save_model", "model_from_config"]
