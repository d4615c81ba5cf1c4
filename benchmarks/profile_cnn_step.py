"""Per-kernel GPU time of training steps of the seeds' CNN or ResNet-50, for finding where a step goes.

Run under Nsight Compute on the device (hardware timer only, clocks left alone):

    ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        --launch-skip 400 --launch-count 200 python3 benchmarks/profile_cnn_step.py --batch 128

The script trains a few hundred steps over resident data (CUDA graph on by default, as fit
runs it; --eager replays nothing), so the kernels ncu picks after the skip are steady-state
ones. benchmarks/ncu_summary.py folds ncu's CSV into time per kernel name per step.
--model resnet50 trains gpucmp.keras.applications.ResNet50 (random data, SGD momentum) instead.
"""
import argparse

import numpy as np

import gpucmp
from gpucmp import keras
from gpucmp.harness.workloads.seeds import build_seed_cnn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--model", choices=("cnn", "resnet50"), default="cnn")
    ap.add_argument("--image", type=int, default=224)
    a = ap.parse_args()
    gpucmp.set_device(a.device)
    keras.mixed_precision.set_global_policy(a.precision)
    rng = np.random.default_rng(0)
    n = a.batch * a.steps
    if a.model == "resnet50":
        x = rng.random((n, a.image, a.image, 3), dtype=np.float32)
        y = rng.integers(0, 1000, n).astype(np.int32)
        model = keras.applications.ResNet50(weights=None, input_shape=(a.image, a.image, 3))
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="sparse_categorical_crossentropy")
        model.fit(x, y, batch_size=a.batch, epochs=1, verbose=0)
        print("done")
        return
    x = rng.random((n, 28, 28, 1), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, n)]
    model = build_seed_cnn(keras)
    for _ in range(3):
        model.fit(x, y, batch_size=a.batch, epochs=1, verbose=0)
    print("done", model.evaluate(x[:512], y[:512], verbose=0))


if __name__ == "__main__":
    main()
