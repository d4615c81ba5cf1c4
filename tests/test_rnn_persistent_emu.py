"""The persistent RNN kernels (csrc/cuda/rnn_persistent_kernels.cuh) run on the host by
tests/cuda/rnn_persistent_emu.cpp (one std::thread per CUDA thread, a barrier per block),
against the float64 oracle -- the same checks as tests/test_rnn_ops.py, on grids chosen to
exercise several groups of rows and several CTAs per group (uneven last group / last CTA),
every cell, masks of every pattern, go_backwards, sequences, absent h0 / c0 / bh; and that a
block that never runs makes the others time out and leave instead of hanging. This
runs wherever g++ (C++20) is found, GPU or not; on a GPU tests/test_rnn_ops.py runs the real
kernels. float32 only (the storage type only changes loads and stores).
"""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import reference as ref
from test_rnn_ops import (BOUNDED, CELLS, TOL, Problem, _seed, gates, oracle_kw, rel_check, save_blocks)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELL_ID = {"simple": 0, "lstm": 1, "gru": 2, "gru_reset_before": 3}
ACT_ID = {"tanh": 0, "sigmoid": 1, "relu": 2, "linear": 3, "hard_sigmoid": 4}


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("no g++ to build the host emulation of the persistent kernels")
    out = str(tmp_path_factory.mktemp("rnn_emu") / "rnn_persistent_emu.so")
    cmd = [gxx, "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-I" + os.path.join(ROOT, "csrc", "include"),
           "-I" + os.path.join(ROOT, "csrc", "cuda"), os.path.join(ROOT, "tests", "cuda", "rnn_persistent_emu.cpp"),
           "-o", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        if "barrier" in p.stderr or "c++20" in p.stderr:
            pytest.skip(f"g++ lacks C++20 std::barrier: {p.stderr[:300]}")
        raise AssertionError(f"building the emulator failed:\n{p.stderr}")
    lib = ctypes.CDLL(out)
    f = ctypes.POINTER(ctypes.c_float)
    ints = [ctypes.c_int] * 11
    lib.emu_rnn_fwd.argtypes = ints + [f] * 10 + [ctypes.POINTER(ctypes.c_int)]
    lib.emu_rnn_bwd.argtypes = ints + [f] * 10 + [ctypes.POINTER(ctypes.c_int)]
    lib.emu_rnn_fwd.restype = lib.emu_rnn_bwd.restype = ctypes.c_int
    lib.emu_set_cluster.argtypes = [ctypes.c_int]
    lib.emu_set_timeout_ms.argtypes = [ctypes.c_int]
    lib.emu_set_absent.argtypes = [ctypes.c_int]
    return lib


def _p(a):
    if a is None:
        return None
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def _f32(a):
    return None if a is None else np.ascontiguousarray(a, np.float32)


def _ints(pr, B, T, u, max_nc, rows):
    p = pr.p
    return (B, T, u, CELL_ID[p["cell"]], ACT_ID[p["activation"]], ACT_ID[p["recurrent_activation"]],
            int(p["sequences"]), int(p["zero_output_for_mask"]), int(p["go_backwards"]), max_nc, rows)


def emu_forward(lib, pr, max_nc, rows, status=0):
    B, T, Gu = pr.xw.shape
    u = pr.U.shape[0]
    cell = pr.p["cell"]
    y = np.full((B, T, u) if pr.p["sequences"] else (B, u), np.nan, np.float32)
    save = np.full((save_blocks(cell), B, T, u), np.nan, np.float32)
    hT = np.full((B, u), np.nan, np.float32)
    cT = np.full((B, u), np.nan, np.float32) if cell == "lstm" else None
    ins = [_f32(a) for a in (pr.xw, pr.U, pr.h0, pr.c0, pr.bh, pr.mask)]
    grid = (ctypes.c_int * 3)()
    st = lib.emu_rnn_fwd(*_ints(pr, B, T, u, max_nc, rows), *[_p(a) for a in ins], _p(y), _p(save), _p(hT), _p(cT),
                         grid)
    assert st == status, f"emulated forward: status {st}, expected {status} (1: a wait timed out)"
    return {"y": y.astype(np.float64), "save": save.astype(np.float64), "h": hT.astype(np.float64),
            "c": None if cT is None else cT.astype(np.float64)}, tuple(grid)


def emu_backward(lib, pr, save, max_nc, rows, status=0):
    S, B, T, u = save.shape
    cell = pr.p["cell"]
    G = gates(cell)
    dxw = np.full((B, T, G * u), np.nan, np.float32)
    dm = np.full((B, T, G * u), np.nan, np.float32) if cell == "gru" else None
    dh0 = np.full((B, u), np.nan, np.float32)
    dc0 = np.full((B, u), np.nan, np.float32) if cell == "lstm" else None
    ins = [_f32(a) for a in (pr.dy, pr.dh_T, pr.dc_T, pr.U, save, pr.mask)]
    grid = (ctypes.c_int * 3)()
    st = lib.emu_rnn_bwd(*_ints(pr, B, T, u, max_nc, rows), *[_p(a) for a in ins], _p(dxw), _p(dm), _p(dh0), _p(dc0),
                         grid)
    assert st == status, f"emulated backward: status {st}, expected {status} (1: a wait timed out)"
    return {"dxw": dxw.astype(np.float64), "dm": None if dm is None else dm.astype(np.float64),
            "dh0": dh0.astype(np.float64), "dc0": None if dc0 is None else dc0.astype(np.float64)}, tuple(grid)


# (B, T, u, max_nc, rows, extra Problem options): several groups (B / rows), several CTAs
# per group (u / max_nc units each, the last one short), row tiles of 4 and of 8 rows
SHAPES = [
    (3, 4, 7, 4, 2, dict(mask="mixed", sequences=True)),
    (5, 3, 33, 4, 2, dict(mask="left", go_backwards=True)),
    (3, 1, 1, 16, 1, dict()),
    (2, 5, 70, 8, 1, dict(mask="right", sequences=True, zero_output_for_mask=True, h0=False, c0=False, bh=False)),
    (11, 3, 5, 2, 10, dict(mask="middle", go_backwards=True, sequences=True)),
    (4, 2, 16, 16, 4, dict(mask="mixed", zero_output_for_mask=True)),
    (8, 3, 12, 2, 8, dict(mask="left", sequences=True)),  # rows a multiple of 8: the 8-row tiles
    (18, 2, 120, 4, 9, dict(mask="mixed")),  # more h words per CTA than one batch of the gather
]


@pytest.mark.parametrize("exchange", ("flags", "cluster"))
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"B{s[0]}T{s[1]}u{s[2]}nc{s[3]}r{s[4]}" for s in SHAPES])
def test_emulated_persistent_kernels_match_the_oracle(emu, cell, shape, exchange):
    """exchange: the kernels' exchange policy, global flags (cuda.rnn=persistent) or the
    cluster's distributed shared memory (cuda.rnn=cluster; a std::barrier per cluster)."""
    emu.emu_set_cluster(int(exchange == "cluster"))
    B, T, u, max_nc, rows, kw = shape
    seed = _seed()
    rng = np.random.default_rng(seed)
    ract = BOUNDED[(B + u) % len(BOUNDED)]
    act = ("tanh", "relu", "linear", "sigmoid")[(T + u) % 4]
    pr = Problem(rng, "float32", cell, B=B, T=T, u=u, act=act, ract=ract, **kw)
    got, grid = emu_forward(emu, pr, max_nc, rows)
    what = f"[emu {exchange} seed={seed} grid={grid}] {pr.what}"
    n = min(max_nc, u)
    uc = -(-u // n)
    assert grid == (-(-B // min(rows, B)) * -(-u // uc), -(-u // uc), min(rows, B)), what
    want = ref.rnn_forward(pr.xw, pr.U, **pr.inputs(), **oracle_kw(pr.p))
    tol = TOL["float32"]
    rel_check("y", got["y"], want["y"], tol, what)
    rel_check("h_T", got["h"], want["h"], tol, what)
    if cell == "lstm":
        rel_check("c_T", got["c"], want["c"], tol, what)
    for q, blk in enumerate(want["save"]):
        rel_check(f"save[{q}]", got["save"][q], blk, tol, what)
    g, _ = emu_backward(emu, pr, got["save"], max_nc, rows)
    wb = ref.rnn_backward(pr.xw, pr.U, **pr.inputs(), dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T, **oracle_kw(pr.p))
    rel_check("dxw", g["dxw"], wb["dxw"], tol, what)
    rel_check("dh0", g["dh0"], wb["dh0"], tol, what)
    if cell == "lstm":
        rel_check("dc0", g["dc0"], wb["dc0"], tol, what)
    if cell == "gru":
        rel_check("dm", g["dm"], wb["dm"], tol, what)
    if pr.mask is not None:
        assert np.all(g["dxw"][pr.mask == 0] == 0.0), f"{what}: dxw of masked steps is not zero"


@pytest.mark.parametrize("cell", CELLS)
def test_a_block_that_never_runs_makes_the_others_time_out_and_leave(emu, cell):
    """The flags exchange's only failure mode: a block of the grid is not running (the
    cooperative launch should rule it out). Its peers must not hang: each wait gives up
    after the time limit, the abort word sends every other block home (through the
    CTA-uniform __syncthreads_and), and the status word says "timed out" (1), which the
    host turns into an error. Block 1 is left out here; the call returns."""
    emu.emu_set_cluster(0)
    rng = np.random.default_rng(_seed())
    pr = Problem(rng, "float32", cell, B=6, T=4, u=24, act="tanh", ract="sigmoid", mask="mixed")
    emu.emu_set_timeout_ms(50)
    emu.emu_set_absent(1)
    try:
        got, grid = emu_forward(emu, pr, 4, 3, status=1)
        assert grid[0] >= 2, grid
        emu_backward(emu, pr, np.zeros_like(got["save"], dtype=np.float32), 4, 3, status=1)
    finally:
        emu.emu_set_absent(-1)
        emu.emu_set_timeout_ms(120000)
