"""gpucmp.keras.models: Sequential, Model (functional API over a chain), load_model."""
from .model import Model
from .saving import load_model, model_from_config, save_model
from .sequential import Sequential

__all__ = ["Model", "Sequential", "load_model", "save_model", "model_from_config"]
