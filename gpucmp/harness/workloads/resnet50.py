"""ResNet-50 as a workload: Keras' applications.ResNet50 (224x224x3, 1000 classes) trained by gpucmp.

What it provides: `resnet50_workload()`, a ModelWorkload of `gpucmp.keras.applications.
ResNet50(weights=None)` compiled with SGD (momentum 0.9) and sparse categorical
cross-entropy -- the training step every published GPU comparison leads with. Its op list
and memory come from the model's execution plan like any model's (describe.py,
memory.py); it is measured on GPUs and projected onto the others.

Why not measured on the CPU: one training step at 224x224 takes seconds there, which
would make `gpucmp compare` (whose CPU column is a reference) take minutes; it is
projected for the CPU like for any absent device, and `gpucmp bench --workloads
resnet50 --devices cpu` is not offered (NotMeasurable says so).
"""
from .base import Config, NotMeasurable
from .models import ModelWorkload

DESCRIPTION = ("ResNet-50 (Keras applications.ResNet50, 224x224x3, 1000 classes): one training step, "
               "SGD with momentum")


def build_resnet50():
    from ... import keras
    model = keras.applications.ResNet50(weights=None)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
                  loss="sparse_categorical_crossentropy")
    return model


class ResNet50Workload(ModelWorkload):
    cpu_measurable = False

    def __init__(self):
        super().__init__("resnet50", DESCRIPTION, build=build_resnet50)

    def configs(self, device_kind, batch_sizes=None):
        sizes = batch_sizes or ([64, 256] if device_kind == "cuda" else [8])
        return [Config(int(b), f"batch {b}") for b in sizes]

    def prepare(self, device, config, precision):
        if str(device).startswith("cpu"):
            raise NotMeasurable("resnet50 is not measured on the CPU (a 224x224 training step takes seconds "
                                "there); it is projected from its op list")
        return super().prepare(device, config, precision)


def resnet50_workload():
    return ResNet50Workload()
