"""gpucmp.distribute: data-parallel training, as tf.distribute is used from Keras.

    strategy = gpucmp.distribute.MirroredStrategy(["cpu", "cpu"])
    with strategy.scope():
        model = keras.Sequential([...])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=128)      # 128 = the global batch, 64 per replica

See mirrored.py (the strategy) and replicas.py (the replicas' plans in fit).
"""
from .mirrored import MirroredStrategy, get_strategy, has_strategy

__all__ = ["MirroredStrategy", "get_strategy", "has_strategy"]
