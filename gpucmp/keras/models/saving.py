"""Where saving used to live: kept so ``gpucmp.keras.models.saving`` imports still work.
The code is in ``gpucmp.keras.saving`` (Keras' formats, and gpucmp's own in gpucmp_zip.py)."""
from ..saving import (_compile_config, load_model, load_weights, model_from_config,  # noqa: F401
                      save_model, save_weights)
