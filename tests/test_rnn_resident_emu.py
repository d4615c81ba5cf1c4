"""The register-resident RNN kernels (csrc/cuda/rnn_resident_kernels.cuh, cuda.rnn=resident)
run on the host by tests/cuda/rnn_resident_emu.cpp (one std::thread per CUDA thread, a
barrier per block and per warp for the shuffles), against the float64 oracle -- the checks
of tests/test_rnn_persistent_emu.py: every cell, masks of every pattern (left, middle,
right padding, a fully masked row), go_backwards, sequences on / off, zero_output_for_mask,
absent h0 / c0 / bh, several row groups with an uneven last group, row tiles of 1 and 2,
several K-slice counts (shuffle depths), u not a multiple of 4 or 32, every output element
written (NaN-filled before the call, NaN shared memory), and which shapes the plan takes.
Runs wherever g++ (C++20) is found; on a GPU tests/test_rnn_ops.py runs the real kernels
(forced resident). float32 only (the storage type only changes loads and stores).
"""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import reference as ref
from test_rnn_ops import (BOUNDED, CELLS, TOL, Problem, _seed, gates, oracle_kw, rel_check, resident_refusal,
                          save_blocks)
from test_rnn_persistent_emu import ACT_ID, CELL_ID, ROOT, _f32, _p


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("no g++ to build the host emulation of the resident kernels")
    out = str(tmp_path_factory.mktemp("rnn_res_emu") / "rnn_resident_emu.so")
    cmd = [gxx, "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-I" + os.path.join(ROOT, "csrc", "include"),
           "-I" + os.path.join(ROOT, "csrc", "cuda"), os.path.join(ROOT, "tests", "cuda", "rnn_resident_emu.cpp"),
           "-o", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        if "barrier" in p.stderr or "c++20" in p.stderr:
            pytest.skip(f"g++ lacks C++20 std::barrier: {p.stderr[:300]}")
        raise AssertionError(f"building the emulator failed:\n{p.stderr}")
    lib = ctypes.CDLL(out)
    f = ctypes.POINTER(ctypes.c_float)
    ints = [ctypes.c_int] * 11
    lib.emu_res_fwd.argtypes = ints + [f] * 10 + [ctypes.POINTER(ctypes.c_int)]
    lib.emu_res_bwd.argtypes = ints + [f] * 10 + [ctypes.POINTER(ctypes.c_int)]
    lib.emu_res_fwd.restype = lib.emu_res_bwd.restype = ctypes.c_int
    lib.emu_res_plan.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.emu_res_plan.restype = ctypes.c_int
    return lib


def _ints(pr, B, T, u, ks, rows):
    p = pr.p
    return (B, T, u, CELL_ID[p["cell"]], ACT_ID[p["activation"]], ACT_ID[p["recurrent_activation"]],
            int(p["sequences"]), int(p["zero_output_for_mask"]), int(p["go_backwards"]), ks, rows)


def res_forward(lib, pr, ks, rows):
    B, T, Gu = pr.xw.shape
    u = pr.U.shape[0]
    cell = pr.p["cell"]
    y = np.full((B, T, u) if pr.p["sequences"] else (B, u), np.nan, np.float32)
    save = np.full((save_blocks(cell), B, T, u), np.nan, np.float32)
    hT = np.full((B, u), np.nan, np.float32)
    cT = np.full((B, u), np.nan, np.float32) if cell == "lstm" else None
    ins = [_f32(a) for a in (pr.xw, pr.U, pr.h0, pr.c0, pr.bh, pr.mask)]
    info = (ctypes.c_int * 5)()
    st = lib.emu_res_fwd(*_ints(pr, B, T, u, ks, rows), *[_p(a) for a in ins], _p(y), _p(save), _p(hT), _p(cT),
                         info)
    assert st == 0, f"the resident plan refused the forward ({pr.what}, ks={ks})"
    return {"y": y.astype(np.float64), "save": save.astype(np.float64), "h": hT.astype(np.float64),
            "c": None if cT is None else cT.astype(np.float64)}, tuple(info)


def res_backward(lib, pr, save, ks, rows):
    S, B, T, u = save.shape
    cell = pr.p["cell"]
    G = gates(cell)
    dxw = np.full((B, T, G * u), np.nan, np.float32)
    dm = np.full((B, T, G * u), np.nan, np.float32) if cell == "gru" else None
    dh0 = np.full((B, u), np.nan, np.float32)
    dc0 = np.full((B, u), np.nan, np.float32) if cell == "lstm" else None
    ins = [_f32(a) for a in (pr.dy, pr.dh_T, pr.dc_T, pr.U, save, pr.mask)]
    info = (ctypes.c_int * 5)()
    st = lib.emu_res_bwd(*_ints(pr, B, T, u, ks, rows), *[_p(a) for a in ins], _p(dxw), _p(dm), _p(dh0), _p(dc0),
                         info)
    assert st == 0, f"the resident plan refused the backward ({pr.what}, ks={ks})"
    return {"dxw": dxw.astype(np.float64), "dm": None if dm is None else dm.astype(np.float64),
            "dh0": dh0.astype(np.float64), "dc0": None if dc0 is None else dc0.astype(np.float64)}, tuple(info)


# (B, T, u, forward K slices, backward K slices, rows per CTA, Problem options); slices 0 =
# the plan's own choice. Several CTAs (B / rows) with a short last one, row tiles of 1
# (rows 1) and 2 (rows > 1, odd rows: a padded tile), u = 1, 9, 33 (not a multiple of 4
# or 32), slices that leave a short last slice, every mask pattern.
SHAPES = [
    (3, 4, 9, 0, 0, 2, dict(mask="mixed", sequences=True)),
    (5, 3, 33, 0, 0, 3, dict(mask="left", go_backwards=True)),
    (3, 1, 1, 0, 0, 1, dict()),
    (2, 5, 20, 4, 2, 1, dict(mask="right", sequences=True, zero_output_for_mask=True, h0=False, c0=False,
                             bh=False)),
    (7, 3, 5, 2, 8, 3, dict(mask="middle", go_backwards=True, sequences=True)),
    (4, 3, 12, 1, 1, 4, dict(mask="mixed", zero_output_for_mask=True)),
    (3, 2, 40, 0, 0, 1, dict(mask="left", sequences=True)),  # KC = 48 / 64 for the gated cells
]


def _fit_ks(cell, u, ks, bwd):
    """The requested K slices, halved until the layout holds them (0: the plan's choice)."""
    G = gates(cell)
    gp = 1 if bwd or G == 1 else 4
    K = G * u if bwd else u
    while ks > 1 and (gp * ks > 32 or u * gp * ks > 256 or -(-K // ks) > 64):
        ks //= 2
    return ks


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"B{s[0]}T{s[1]}u{s[2]}ks{s[3]}.{s[4]}r{s[5]}" for s in SHAPES])
def test_emulated_resident_kernels_match_the_oracle(emu, cell, shape):
    B, T, u, ksf, ksb, rows, kw = shape
    ksf, ksb = _fit_ks(cell, u, ksf, 0), _fit_ks(cell, u, ksb, 1)
    seed = _seed()
    rng = np.random.default_rng(seed)
    ract = BOUNDED[(B + u) % len(BOUNDED)]
    act = ("tanh", "relu", "linear", "sigmoid")[(T + u) % 4]
    if (B + T) % 3 == 0:  # Keras' defaults: the constant-folded activations
        act, ract = "tanh", "sigmoid"
    pr = Problem(rng, "float32", cell, B=B, T=T, u=u, act=act, ract=ract, **kw)
    got, info = res_forward(emu, pr, ksf, rows)
    what = f"[emu resident seed={seed} fwd grid/KS/KC/R/RT={info}] {pr.what}"
    assert info[0] == -(-B // min(rows, B)) and info[3] == min(rows, B), what
    want = ref.rnn_forward(pr.xw, pr.U, **pr.inputs(), **oracle_kw(pr.p))
    tol = TOL["float32"]
    rel_check("y", got["y"], want["y"], tol, what)
    rel_check("h_T", got["h"], want["h"], tol, what)
    if cell == "lstm":
        rel_check("c_T", got["c"], want["c"], tol, what)
    for q, blk in enumerate(want["save"]):
        rel_check(f"save[{q}]", got["save"][q], blk, tol, what)
    g, info = res_backward(emu, pr, got["save"], ksb, rows)
    what = f"[emu resident seed={seed} bwd grid/KS/KC/R/RT={info}] {pr.what}"
    wb = ref.rnn_backward(pr.xw, pr.U, **pr.inputs(), dy=pr.dy, dh_T=pr.dh_T, dc_T=pr.dc_T, **oracle_kw(pr.p))
    rel_check("dxw", g["dxw"], wb["dxw"], tol, what)
    rel_check("dh0", g["dh0"], wb["dh0"], tol, what)
    if cell == "lstm":
        rel_check("dc0", g["dc0"], wb["dc0"], tol, what)
    if cell == "gru":
        rel_check("dm", g["dm"], wb["dm"], tol, what)
    if pr.mask is not None:
        assert np.all(g["dxw"][pr.mask == 0] == 0.0), f"{what}: dxw of masked steps is not zero"


def test_emulated_resident_without_save_dy_and_optional_outputs(emu):
    """Inference (no save), no dy / dh_T / dc_T, no h_T / c_T / dh0 / dc0 outputs: the
    kernels skip what is absent and still write every element of what is there."""
    rng = np.random.default_rng(_seed())
    for cell in CELLS:
        pr = Problem(rng, "float32", cell, B=3, T=3, u=6, mask="mixed", sequences=True)
        B, T, Gu = pr.xw.shape
        u = pr.U.shape[0]
        y = np.full((B, T, u), np.nan, np.float32)
        ins = [_f32(a) for a in (pr.xw, pr.U, pr.h0, pr.c0, pr.bh, pr.mask)]
        info = (ctypes.c_int * 5)()
        assert emu.emu_res_fwd(*_ints(pr, B, T, u, 0, 2), *[_p(a) for a in ins], _p(y), None, None, None, info) == 0
        want = ref.rnn_forward(pr.xw, pr.U, **pr.inputs(), **oracle_kw(pr.p))
        rel_check("y", y, want["y"], TOL["float32"], f"{cell} no save")
        save = np.ascontiguousarray(want["save"], np.float32)
        dxw = np.full((B, T, Gu), np.nan, np.float32)
        assert emu.emu_res_bwd(*_ints(pr, B, T, u, 0, 2), None, None, None, _p(_f32(pr.U)), _p(save),
                               _p(_f32(pr.mask)), _p(dxw), None, None, None, info) == 0
        wb = ref.rnn_backward(pr.xw, pr.U, **pr.inputs(), dy=np.zeros_like(pr.dy), dh_T=None, dc_T=None,
                              **oracle_kw(pr.p))
        # no gradient flows in at all: dxw is exactly zero everywhere
        rel_check("dxw", dxw, wb["dxw"], TOL["float32"], f"{cell} no dy")
        assert np.all(dxw == 0.0), cell


@pytest.mark.parametrize("cell", CELLS)
def test_the_plan_takes_the_small_recurrences_and_refuses_the_rest(emu, cell):
    """rres_plan takes SimpleRNN u <= 128 and LSTM / GRU u <= 64 (both passes), with a
    template KC holding each lane's slice, and agrees with the Python twin the CUDA tests
    use to expect a refusal (test_rnn_ops.resident_refusal)."""
    info = (ctypes.c_int * 2)()
    limit = 128 if cell == "simple" else 64
    for u in list(range(1, 140)) + [200, 256, 1024]:
        for bwd in (0, 1):
            ok = emu.emu_res_plan(u, CELL_ID[cell], bwd, info)
            U = np.zeros((u, 1))  # the twin reads U's shape only
            twin = resident_refusal("rnn_bwd" if bwd else "rnn_fwd", (None, U, None, U), {"cell": cell}) is None
            assert ok == twin, f"rres_plan and test_rnn_ops.resident_refusal disagree: {cell} u={u} bwd={bwd}"
            assert ok == (u <= limit), (cell, u, bwd, tuple(info))
            if ok:
                ks, kc = info[0], info[1]
                assert kc in (16, 64) and kc * ks >= (u * gates(cell) if bwd else u), (cell, u, ks, kc)
    # the seeds' SimpleRNN(128): 64 of U's floats per lane, K in 2 slices, both passes
    if cell == "simple":
        assert emu.emu_res_plan(128, 0, 0, info) and tuple(info) == (2, 64)
        assert emu.emu_res_plan(128, 0, 1, info) and tuple(info) == (2, 64)
