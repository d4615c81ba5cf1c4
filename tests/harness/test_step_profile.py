"""The in-step op times of a model's training step (step_profile.py) on the CPU backend:
every op of the workload's op list but the synthetic batch gather is found in the table,
with positive times; projection.find_profile turns them into in-graph times."""
import numpy as np
import pytest

from gpucmp.harness import step_profile
from gpucmp.harness.workloads import get


@pytest.mark.parametrize("precision", ["float32"])
def test_profile_covers_the_op_list(precision):
    w = get("cnn")
    c = w.configs("cpu")[0]
    run = w.prepare("cpu", c, precision)
    try:
        run.run(1)
        table = step_profile.profile_run(run, repeats=2)
    finally:
        run.close()
    ops = w.ops(c, precision)
    found = {o.name: step_profile.lookup(table, o) for o in ops}
    missing = [n for n, s in found.items() if s is None]
    assert missing == ["data/gather"], missing
    assert all(s > 0 for s in found.values() if s is not None)
    # the convolutions are the CNN's biggest ops on the CPU
    conv = max(s for n, s in found.items() if s is not None and "conv2d" in n)
    other = max(s for n, s in found.items() if s is not None and "conv2d" not in n and "gemm" not in n)
    assert conv > other


def test_find_profile_removes_the_eager_overhead():
    """find_profile subtracts the smallest excess of a profiled op over its graph-timed time
    and leaves out calls too short to be told from the host clock's scatter."""
    from gpucmp.harness import costs, projection
    rng = np.random.default_rng()
    launch = float(rng.uniform(1e-6, 3e-6))
    g = costs.gemm("3:gemm", 256, 256, 256, "float16", tf32=False)
    e = costs.elementwise("4:add", "add", 10 ** 6, 1, 1)
    floor = projection.PROFILE_MIN_LAUNCHES * launch
    t_g, over = float(rng.uniform(1.5, 4.0)) * floor, float(rng.uniform(5e-6, 2e-5))
    t_e = float(rng.uniform(1.5, 4.0)) * floor
    cal = {"peaks": {"launch_s": launch}, "ops": {g.key: {"seconds": t_g}},
           "profiles": [{"workload": "w", "precision": "float16", "batch_size": 8,
                         "ops": {step_profile.signature(g): t_g + over, step_profile.signature(e): t_e + over,
                                 step_profile.UPDATE_KEY: over + launch / 2}}]}
    table = projection.find_profile(cal, "w", "float16", 8, [g, e])
    assert table[step_profile.signature(g)] == pytest.approx(t_g)
    assert table[step_profile.signature(e)] == pytest.approx(t_e)
    assert step_profile.UPDATE_KEY not in table           # under the floor: keeps its estimate
    assert projection.find_profile(cal, "w", "float16", 16, [g, e]) is None
