"""ResNet-50 (v1.5, 224x224x3, 1000 classes): its training step as an op list, projected only.

What it provides: `ResNet50Workload`, whose ops are ResNet-50's layers written out --
the 7x7/2 stem, 3x3/2 max-pool, the 3-4-6-3 bottleneck stages (stride 2 in the 3x3
convolution, as torchvision and NVIDIA's v1.5 do; a 1x1 projection on each stage's first
block), BatchNormalization and ReLU after each convolution, the residual adds, global
average pooling and the 2048 -> 1000 classifier -- and their backward passes, with an
SGD-momentum update over its 25.6 M weights, and a memory model of the activations a
training step keeps.

Why it is built this way: every published GPU comparison leads with ResNet-50, but the
front end cannot build it until the functional API and BatchNormalization land (issue 9);
until then it is projected from this op list (`measurable = False`), and once it can be
built it becomes a ModelWorkload like the seeds' CNN.
"""
import math

from .. import costs
from .base import Config, NotMeasurable, Workload

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))   # width, blocks, stride of the first
STORAGE = {"float32": "float32", "tf32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def conv_layers(image=224):
    """[(name, H, W, C, F, k, stride, OH, OW)] of every convolution, in forward order."""
    out = []
    h = image
    oh = math.ceil(h / 2)
    out.append(("stem", h, h, 3, 64, 7, 2, oh, oh))
    h = math.ceil(oh / 2)                                          # 3x3/2 max-pool, 'same'
    c = 64
    for si, (width, blocks, stride) in enumerate(STAGES):
        for bi in range(blocks):
            s = stride if bi == 0 else 1
            o = math.ceil(h / s)
            name = f"stage{si + 1}.{bi}"
            out.append((f"{name}.conv1", h, h, c, width, 1, 1, h, h))
            out.append((f"{name}.conv2", h, h, width, width, 3, s, o, o))
            out.append((f"{name}.conv3", o, o, width, 4 * width, 1, 1, o, o))
            if bi == 0:
                out.append((f"{name}.proj", h, h, c, 4 * width, 1, s, o, o))
            c, h = 4 * width, o
    return out


def parameters():
    """Weights of ResNet-50: convolutions, BatchNormalization scales and offsets, classifier."""
    convs = conv_layers()
    return sum(k * k * c * f + 2 * f for _, _, _, c, f, k, _, _, _ in convs) + 2048 * 1000 + 1000


class ResNet50Workload(Workload):
    name = "resnet50"
    description = "ResNet-50 v1.5 at 224x224: one training step (SGD with momentum), projected from its op list"
    unit = "samples/s"
    kind = "model"
    measurable = False
    precisions = ("float32", "float16", "bfloat16")

    def configs(self, device_kind, batch_sizes=None):
        sizes = batch_sizes or ([64, 256] if device_kind == "cuda" else [8])
        return [Config(int(b), f"batch {b}") for b in sizes]

    def ops(self, config, precision, tf32=True):
        b, dt = config.batch_size, STORAGE[precision]
        ops = [costs.elementwise("data/gather", "gather", b * 224 * 224 * 3, 1, 1, "float32", 0, "data")]
        convs = conv_layers()
        bwd = []
        for name, h, w, c, f, k, s, oh, ow in convs:
            pad = "same" if k > 1 else "valid"
            n_out = b * oh * ow * f
            ops.append(costs.conv2d(name, "fwd", b, h, w, c, f, k, k, oh, ow, (s, s), pad, dt, tf32))
            ops.append(costs.elementwise(f"{name}/bn_fwd", "batchnorm_fwd", n_out, 2, 1, dt, 8))
            if not name.endswith(("conv3", "proj")):
                ops.append(costs.elementwise(f"{name}/relu", "act", n_out, 1, 1, dt, 1))
            if name.endswith("conv3"):
                ops.append(costs.elementwise(f"{name}/add_relu", "add", n_out, 2, 1, dt, 2))
            bwd.append(costs.elementwise(f"{name}/bn_relu_bwd", "batchnorm_bwd", n_out, 3, 1, dt, 10, "backward"))
            bwd.append(costs.conv2d(name, "bwd_filter", b, h, w, c, f, k, k, oh, ow, (s, s), pad, dt, tf32))
            if name != "stem":
                bwd.append(costs.conv2d(name, "bwd_data", b, h, w, c, f, k, k, oh, ow, (s, s), pad, dt, tf32))
            if name == "stem":
                ops.append(costs.pool2d("maxpool", "fwd", b, oh, ow, f, math.ceil(oh / 2), math.ceil(ow / 2),
                                        3, 3, dt))
                bwd.append(costs.pool2d("maxpool", "bwd", b, oh, ow, f, math.ceil(oh / 2), math.ceil(ow / 2),
                                        3, 3, dt))
        ops.append(costs.elementwise("gap/fwd", "reduce", b * 7 * 7 * 2048, 1, 0, dt, 1))
        ops.append(costs.gemm("fc/fwd", b, 1000, 2048, dt, tf32, bias=True))
        ops.append(costs.softmax_cross_entropy("loss", b, 1000))
        ops.append(costs.gemm("fc/bwd_filter", 2048, 1000, b, dt, tf32, "backward", trans_a=True))
        ops.append(costs.gemm("fc/bwd_data", b, 2048, 1000, dt, tf32, "backward", trans_b=True))
        ops.append(costs.elementwise("gap/bwd", "broadcast", b * 7 * 7 * 2048, 0, 1, dt, 1, "backward"))
        ops.extend(reversed(bwd))
        n = parameters()
        if dt != "float32":
            ops.append(costs.elementwise("update/cast_weights", "cast", n, 2, 1, dt, 0, "update"))
        ops.append(costs.optimizer_update("update/sgd_momentum", n, "rmsprop"))   # w, g, one state
        return ops

    def work_per_step(self, config, precision):
        return float(config.batch_size)

    def memory(self, config, precision, dataset_rows=0, backend="cuda"):
        b, s = config.batch_size, 2 if STORAGE[precision] != "float32" else 4
        acts = 0
        for _, _, _, _, f, _, _, oh, ow in conv_layers():
            acts += oh * ow * f * 3            # conv output, normalized output, activation kept for backward
        n = parameters()
        parts = {"weights": 4 * n, "gradients": 4 * n, "optimizer_state": 4 * n,
                 "activations": b * acts * s, "activation_gradients": b * 2 * 112 * 112 * 64 * s * 2,
                 "casts": (n * s if s == 2 else 0), "io_and_scratch": b * 224 * 224 * 3 * 4,
                 "dataset": dataset_rows * 224 * 224 * 3 * 4, "backend_fixed": 20 << 20}
        parts["total"] = sum(parts.values())
        return parts

    def max_batch(self, capacity_bytes, precision):
        from ..memory import CONTEXT_RESERVE_BYTES
        from .base import Config as C
        m0 = self.memory(C(0, ""), precision)["total"]
        m1 = self.memory(C(1, ""), precision)["total"]
        room = capacity_bytes - CONTEXT_RESERVE_BYTES - m0
        return max(0, int(room // (m1 - m0)))

    def prepare(self, device, config, precision):
        raise NotMeasurable("resnet50 cannot be built by gpucmp.keras yet (it needs the functional API and "
                            "BatchNormalization: issue 9); it is projected from its op list")
