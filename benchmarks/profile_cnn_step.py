"""Per-kernel GPU time of one training step of the seeds' CNN, for finding where a step goes.

Run under Nsight Compute on the device (hardware timer only, clocks left alone):

    ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        --launch-skip 400 --launch-count 200 python3 benchmarks/profile_cnn_step.py --batch 128

The script trains a few hundred steps over resident data (CUDA graph on by default, as fit
runs it; --eager replays nothing), so the kernels ncu picks after the skip are steady-state
ones. benchmarks/ncu_summary.py folds ncu's CSV into time per kernel name per step.
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
    a = ap.parse_args()
    gpucmp.set_device(a.device)
    keras.mixed_precision.set_global_policy(a.precision)
    rng = np.random.default_rng(0)
    n = a.batch * a.steps
    x = rng.random((n, 28, 28, 1), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, n)]
    model = build_seed_cnn(keras)
    for _ in range(3):
        model.fit(x, y, batch_size=a.batch, epochs=1, verbose=0)
    print("done", model.evaluate(x[:512], y[:512], verbose=0))


if __name__ == "__main__":
    main()
