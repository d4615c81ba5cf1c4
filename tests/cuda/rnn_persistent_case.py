"""rnn_persistent_case.py -- a small persistent-recurrence workload for compute-sanitizer
(tests/cuda/rnn_persistent_device.sh): rnn_fwd and rnn_bwd forced to cuda.rnn=persistent
for the cells given, masks on, outputs poisoned, each compared with the stepwise path.

    python tests/cuda/rnn_persistent_case.py [--cells lstm gru ...] [--B 5 --T 4 --u 33]
Exit status 0 when every output matched (to 1e-5) and was written.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from gpucmp import _core, variants  # noqa: E402

G = {"simple": 1, "lstm": 4, "gru": 3, "gru_reset_before": 3}
S = {"simple": 2, "lstm": 7, "gru": 5, "gru_reset_before": 5}


def run(cell, B, T, u, var, rng_seed):
    rng = np.random.default_rng(rng_seed)
    f = np.float32
    xw = rng.standard_normal((B, T, G[cell] * u)).astype(f)
    U = (rng.standard_normal((u, G[cell] * u)) / np.sqrt(u)).astype(f)
    h0 = rng.standard_normal((B, u)).astype(f) * 0.5
    c0 = rng.standard_normal((B, u)).astype(f) * 0.5 if cell == "lstm" else None
    bh = rng.standard_normal(G[cell] * u).astype(f) * 0.3 if cell == "gru" else None
    mask = (rng.random((B, T)) < 0.7).astype(f)
    p = dict(cell=cell, sequences=True, go_backwards=True)
    y = np.full((B, T, u), np.nan, f)
    save = np.full((S[cell], B, T, u), np.nan, f)
    hT = np.full((B, u), np.nan, f)
    cT = np.full((B, u), np.nan, f) if cell == "lstm" else None
    with variants.forced("cuda.rnn", var):
        _core.run_op("rnn_fwd", "cuda:0", (xw, U, h0, c0, mask, bh, None), (y, save, hT, cT), p)
        assert variants.last("cuda.rnn") == var
        dy = rng.standard_normal((B, T, u)).astype(f)
        dxw = np.full((B, T, G[cell] * u), np.nan, f)
        dm = np.full((B, T, G[cell] * u), np.nan, f) if cell == "gru" else None
        dh0 = np.full((B, u), np.nan, f)
        dc0 = np.full((B, u), np.nan, f) if cell == "lstm" else None
        _core.run_op("rnn_bwd", "cuda:0", (dy, hT * 0 + 0.1, cT, U, save, mask, None), (dxw, dm, dh0, dc0), p)
        assert variants.last("cuda.rnn") == var
    return [a for a in (y, save, hT, cT, dxw, dm, dh0, dc0) if a is not None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", nargs="+", default=list(G))
    ap.add_argument("--B", type=int, default=5)
    ap.add_argument("--T", type=int, default=4)
    ap.add_argument("--u", type=int, default=33)
    ap.add_argument("--variant", default="persistent", choices=("persistent", "cluster", "resident"))
    a = ap.parse_args()
    bad = 0
    for cell in a.cells:
        got = run(cell, a.B, a.T, a.u, a.variant, 7)
        want = run(cell, a.B, a.T, a.u, "stepwise", 7)
        for i, (g, w) in enumerate(zip(got, want)):
            ok = np.isfinite(g).all() and np.allclose(g, w, rtol=1e-5, atol=1e-6)
            bad += not ok
            if not ok:
                print(f"{cell}: output {i} differs (max |diff| {np.nanmax(np.abs(g - w)):.3e}, "
                      f"{int((~np.isfinite(g)).sum())} non-finite)")
        print(f"{a.variant} {cell} B={a.B} T={a.T} u={a.u}: {'ok' if not bad else 'MISMATCH'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
