"""Workloads: op lists counted from shapes (checked against FLOPs worked out by hand here),
the describe pass over a user's plan, the memory model, names and bad names."""
import math

import numpy as np
import pytest

from gpucmp import keras
from gpucmp.harness import costs, describe, memory, workloads
from gpucmp.harness.workloads import Config, resnet50

# forward FLOPs of one sample of the seeds' CNN, layer by layer (2 x MACs)
CNN_FWD = [26 * 26 * 32 * 9 * 1 * 2, 11 * 11 * 64 * 9 * 32 * 2, 3 * 3 * 64 * 9 * 64 * 2, 576 * 64 * 2, 64 * 10 * 2]


@pytest.fixture(scope="module")
def cnn():
    return workloads.get("cnn")


def test_seed_cnn_op_list_counts_the_training_flops(cnn):
    b = int(np.random.default_rng().integers(1, 300))
    ops = cnn.ops(Config(b, ""), "float32")
    fwd = sum(o.flops for o in ops if o.phase == "forward" and o.unit != "memory")
    bwd = sum(o.flops for o in ops if o.phase == "backward" and o.unit != "memory")
    assert fwd == b * sum(CNN_FWD)
    # every weight layer has a weight gradient; every layer above the first an input gradient
    assert bwd == b * (2 * sum(CNN_FWD) - CNN_FWD[0])
    kinds = [o.kind for o in ops]
    assert kinds.count("conv2d_fwd") == 3 and kinds.count("conv2d_bwd_filter") == 3
    assert kinds.count("conv2d_bwd_data") == 2 and kinds.count("optimizer") == 1
    assert all(o.unit == "tf32" for o in ops if o.kind.startswith(("conv2d", "gemm")))
    half = cnn.ops(Config(b, ""), "float16")
    assert all(o.unit == "fp16" for o in half if o.kind.startswith(("conv2d", "gemm")))
    assert any(o.kind == "cast" for o in half)


def test_describe_pass_reads_the_users_plan():
    rng = np.random.default_rng()
    units = int(rng.integers(3, 40))
    m = keras.models.Sequential([keras.layers.Dense(units, activation="tanh", input_shape=(17,)),
                                 keras.layers.Dense(5, activation="softmax")])
    m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    w = workloads.get(m)
    assert w.name == m.name and w.kind == "model"
    ops = w.ops(Config(8, ""), "float32")
    gemms = [o for o in ops if o.kind == "gemm"]
    assert [o.flops for o in gemms] == [2 * 8 * units * 17, 2 * 8 * 5 * units,
                                        2 * units * 5 * 8, 2 * 8 * units * 5, 2 * 17 * units * 8]
    assert any(o.kind == "act_bwd" for o in ops)         # tanh' is not folded into a pool
    trainable, total = describe.layer_params(describe.model_descs(m))
    assert trainable == total == m.count_params()


def test_workloads_need_a_compiled_built_model():
    m = keras.models.Sequential([keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="not built"):
        workloads.get(m)
    m2 = keras.models.Sequential([keras.layers.Dense(3, input_shape=(4,))])
    with pytest.raises(ValueError, match="compiled"):
        workloads.get(m2)


def test_unknown_and_bad_workloads():
    with pytest.raises(ValueError, match="did you mean 'cnn'"):
        workloads.get("cnnn")
    with pytest.raises(ValueError, match="positive integer"):
        workloads.get("gemm:-3")
    with pytest.raises(TypeError):
        workloads.get(3.5)
    with pytest.raises(ValueError, match="empty"):
        workloads.resolve_list([])
    assert workloads.get("gemm:512").configs("cuda")[0].params["n"] == 512


def resnet50_forward_macs(image=224):
    """Multiply-adds of Keras' ResNet50 forward pass, counted from its architecture: the
    7x7/2 stem, then per stage bottlenecks 1x1 -> 3x3 -> 1x1 (stride on the first 1x1 of
    stages 3-5, as keras/src/applications/resnet.py places it) and a 1x1 projection on
    each stage's first block, then the 2048 -> 1000 classifier."""
    h = image // 2
    macs = h * h * 64 * 7 * 7 * 3
    h //= 2                                        # 3x3/2 max pool
    cin = 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for b in range(blocks):
            s = 2 if (stage > 0 and b == 0) else 1
            o = h // s
            macs += o * o * cin * width + o * o * width * width * 9 + o * o * width * 4 * width
            if b == 0:
                macs += o * o * cin * 4 * width
            cin, h = 4 * width, o
    return macs + 2048 * 1000


def test_resnet50_workload_is_keras_resnet50():
    r = workloads.get("resnet50")
    assert r.measurable and not r.cpu_measurable
    m = r.template()
    assert m.count_params() == 25_636_712                  # keras.applications.ResNet50
    ops = r.ops(Config(2, ""), "float16")
    fwd = sum(o.flops for o in ops if o.phase == "forward" and o.kind in ("conv2d_fwd", "gemm"))
    assert fwd == pytest.approx(2 * 2 * resnet50_forward_macs(), rel=1e-9)
    assert sum(o.kind == "conv2d_bwd_filter" for o in ops) == 53   # every conv's weight gradient
    assert sum(o.kind == "conv2d_bwd_data" for o in ops) == 52     # all but the stem's
    with pytest.raises(workloads.NotMeasurable, match="not measured on the CPU"):
        r.prepare("cpu", Config(1, ""), "float32")


def test_memory_model_is_linear_and_max_batch_fits(cnn):
    descs = cnn.descs("float32")
    m1 = memory.plan_memory(descs, 100)["total"]
    m2 = memory.plan_memory(descs, 200)["total"]
    m3 = memory.plan_memory(descs, 300)["total"]
    # linear in the batch up to the plan's 256-byte rounding of each buffer
    assert m2 - m1 > 0 and abs((m3 - m2) - (m2 - m1)) <= 256 * 64
    cap = 16e9
    b = memory.max_batch(descs, cap)
    assert memory.plan_memory(descs, b)["total"] + memory.CONTEXT_RESERVE_BYTES <= cap
    assert memory.plan_memory(descs, b + 1)["total"] + memory.CONTEXT_RESERVE_BYTES > cap
    # weights + gradients + Adam's two moments: 4 float32 copies of the 93,322 parameters
    parts = memory.plan_memory(descs, 1)
    assert parts["weights"] + parts["gradients"] + parts["optimizer_state"] == 4 * 4 * 93_322


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_max_batch_is_the_plans_own_limit_for_resnet50(precision):
    # at small batches a half-precision ResNet-50 plan grows by far less per row than at
    # large ones (shared buffers sized by batch-independent users): the largest batch must
    # still be exactly the plan's, on the cards users compare
    descs = workloads.get("resnet50").descs(precision)
    for cap in (16e9, 24e9):
        b = memory.max_batch(descs, cap)
        assert b > 8
        assert memory.plan_memory(descs, b)["total"] + memory.CONTEXT_RESERVE_BYTES <= cap
        assert memory.plan_memory(descs, b + 1)["total"] + memory.CONTEXT_RESERVE_BYTES > cap
    assert memory.max_batch(descs, memory.CONTEXT_RESERVE_BYTES + 1) == 0


def test_costs_of_an_op():
    op = costs.conv2d("c", "fwd", 2, 8, 8, 3, 4, 3, 3, 6, 6, dtype="float16", tf32=False)
    assert op.flops == 2 * 2 * 6 * 6 * 4 * 3 * 3 * 3
    assert op.bytes == 2 * (2 * 8 * 8 * 3 + 3 * 3 * 3 * 4 + 2 * 6 * 6 * 4)
    assert op.unit == "fp16" and math.isfinite(op.intensity)
    assert costs.copy("x", 1000).bytes == 2000


def test_gan_workload_counts_the_loops_four_calls_and_runs():
    """One GAN iteration: generator inference, two discriminator training steps (its first
    Dense has no data gradient), and the combined step, where the frozen discriminator
    passes data gradients only and the generator learns -- counted here layer by layer."""
    import gpucmp
    w = workloads.get("gan")
    assert w.kind == "model" and "gan" in workloads.names()
    b = int(np.random.default_rng().integers(8, 96))
    gemm = sum(o.flops for o in w.ops(Config(b, ""), "float32") if o.kind == "gemm")
    mm = lambda k, n, passes: 2 * b * k * n * passes          # noqa: E731
    generator_fwd = mm(100, 128, 1) + mm(128, 784, 1)
    discriminator_step = mm(784, 128, 2) + mm(128, 1, 3)
    combined = mm(100, 128, 2) + mm(128, 784, 3) + mm(784, 128, 2) + mm(128, 1, 2)
    assert gemm == generator_fwd + 2 * discriminator_step + combined
    cap = 2e9
    mb = w.max_batch(cap, "float32")
    fits = lambda n: w.memory(Config(n, ""), "float32")["total"] + memory.CONTEXT_RESERVE_BYTES <= cap  # noqa
    assert mb > 0 and fits(mb) and not fits(mb + 1)
    df = gpucmp.benchmark(workloads=["gan"], devices=["cpu"], precisions=["float32"], batch_sizes=[b], repeats=1)
    row = df.iloc[0]
    assert row["workload"] == "gan" and row["step_time_s"] > 0 and row["throughput"] == pytest.approx(
        b / row["step_time_s"])
    assert abs(row["peak_memory_bytes"] / row["modeled_memory_bytes"] - 1) < 0.15
