"""The kernels' choices under an sm_86 card's limits (RTX A4000: 48 SMs, 99 KB of shared
memory per block, 100 KB per SM), checked on whatever GPU is here.

Users run gpucmp on A4000s / A5000s; the device the project measures on is an H200 (132
SMs, 227 KB per block). Every kernel sizes itself from the running device
(gc_cuda_smem_optin, gc_cuda_sm_count): the `cuda.smem_limit_kb` knob makes the first
report an sm_86 card's limit, and GPUCMP_CUDA_SMS=48 confines the backend to 48 SMs
(green contexts), so the H200 plans every grid, tile and shared-memory layout as the
A4000 would and the op tests then check the results against the float64 oracle. The
knob's own semantics are checked here too. Each case runs pytest in a subprocess: the SM
confinement is read when the backend starts.
"""
import os
import subprocess
import sys

import pytest

from gpucmp import _core, variants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KNOB = "cuda.smem_limit_kb"


def _cuda_devices():
    try:
        return [d for d in _core.backends() if d.startswith("cuda")]
    except Exception:  # noqa: BLE001 -- no CUDA in this build
        return []


def test_the_knob_is_a_cuda_point_with_the_sm86_value_in_range():
    info = variants.points().get(KNOB)
    if info is None:
        pytest.skip("this build has no CUDA backend")
    assert info["kind"] == "knob" and info["backend"] == "cuda"
    lo, hi = info["range"]
    assert lo <= 99 <= hi, info["range"]
    with pytest.raises(ValueError, match=KNOB):
        variants.force(KNOB, str(hi + 1))
    with variants.forced(KNOB, "99"):
        assert variants.forced_name(KNOB) == "99"
    assert variants.forced_name(KNOB) == "auto"


def _pytest_under_sm86(args, timeout=420):
    if not _cuda_devices():
        pytest.skip("no CUDA device")
    env = dict(os.environ, GPUCMP_CUDA_SMS="48", GPUCMP_FORCE=f"{KNOB}=99", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-m", "cuda", *args]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    tail = (p.stdout + p.stderr)[-3000:]
    assert p.returncode == 0, f"{' '.join(cmd)} under sm_86 limits failed (rc {p.returncode}):\n{tail}"
    assert " passed" in p.stdout, tail
    return p.stdout


@pytest.mark.cuda
def test_the_limits_reach_the_kernels():
    """In a confined process the backend reports 48 SMs and the knob shows as used once a
    kernel sized its shared memory (the persistent recurrence asks at every call)."""
    if not _cuda_devices():
        pytest.skip("no CUDA device")
    code = (
        "import numpy as np\n"
        "from gpucmp import _core, variants\n"
        "info = _core.device_info('cuda:0')\n"
        "assert info['sms'] == 48, info\n"
        "B, T, u = 4, 3, 8\n"
        "f = lambda *s: np.random.default_rng(0).standard_normal(s).astype(np.float32)\n"
        "xw, U = f(B, T, 4 * u), f(u, 4 * u) * 0.3\n"
        "y = np.full((B, u), np.nan, np.float32); save = np.full((7, B, T, u), np.nan, np.float32)\n"
        "p = dict(cell='lstm', activation='tanh', recurrent_activation='sigmoid', go_backwards=False,\n"
        "         sequences=False, zero_output_for_mask=False)\n"
        "with variants.forced('cuda.rnn', 'persistent'):\n"
        "    _core.run_op('rnn_fwd', 'cuda:0', (xw, U, None, None, None, None, None), (y, save, None, None), p)\n"
        "assert np.isfinite(y).all()\n"
        f"assert variants.last('{KNOB}') == '99', variants.last('{KNOB}')\n"
        "print('ok')\n")
    env = dict(os.environ, GPUCMP_CUDA_SMS="48", GPUCMP_FORCE=f"{KNOB}=99")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]


@pytest.mark.cuda
def test_recurrence_ops_under_sm86_limits():
    """Every recurrent op case on every cuda.rnn variant, planned for an A4000 -- but the
    grid-shape cases: they are sized to exercise the H200's persistent grids (B = 1100 at
    u = 128 among them), and under sm_86's 99 KB the persistent kernel rightly refuses
    some of them (auto then runs them stepwise), which those cases do not expect."""
    _pytest_under_sm86(["tests/test_rnn_ops.py", "-k", "not grid_shapes"])


@pytest.mark.cuda
def test_gemm_conv_and_training_under_sm86_limits():
    """GEMM and convolution op cases (every forced path the tests force), the small-C data
    gradient's routing and forced cases, the recurrent weight gradients and the CUDA
    training tests, planned for an A4000."""
    _pytest_under_sm86(["tests/test_ops.py", "-k", "gemm or dense or conv or weight_grads"])
    _pytest_under_sm86(["tests/test_cuda_fast_paths.py", "-k", "small_c"])
    _pytest_under_sm86(["tests/test_cuda_training.py"])
