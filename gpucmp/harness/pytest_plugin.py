"""pytest plugin (entry point pytest11 'gpucmp'): the `gpu_benchmark` fixture.

    def test_matmul(gpu_benchmark):
        c = gpu_benchmark(gpucmp.ops.matmul, a, b)     # runs and measures, returns the result
        assert c.shape == (512, 512)

`gpu_benchmark(fn, *args, **kwargs)` runs fn on the device under test (gpucmp's current
device while it runs), measures it as gpucmp.benchmark does -- median seconds per call
over repeats after a warm-up, peak device memory, energy per call and average power --
and returns fn's result; the figures are in `gpu_benchmark.stats` and in the test's
user_properties (JUnit XML). Tests using it are parametrized over the devices given by
`--gpucmp-devices` (comma-separated: 'cpu', 'cuda:0', 'all'; default: gpucmp's default
device). With pytest-benchmark installed the figures also go into its JSON, under
extra_info of the test's benchmark entry (one extra timed round by pytest-benchmark).

Why it is built this way: pytest benchmark suites are a named user; this registers on
every pytest run of the environment, so it imports nothing of gpucmp until a test asks.
"""
import pytest

_REPEATS_DEFAULT = 5


def pytest_addoption(parser):
    group = parser.getgroup("gpucmp", "gpucmp GPU benchmarks")
    group.addoption("--gpucmp-devices", default=None,
                    help="devices gpu_benchmark tests run on: comma-separated 'cpu', 'cuda:0', ... or 'all' "
                         "(default: gpucmp's default device)")
    group.addoption("--gpucmp-repeats", type=int, default=_REPEATS_DEFAULT,
                    help="timed calls per measurement (default 5)")


def _devices(config):
    import gpucmp
    wanted = config.getoption("--gpucmp-devices")
    present = gpucmp.available_devices()
    if not wanted:
        return [gpucmp.get_device()]
    names = [d.strip() for d in wanted.split(",") if d.strip()]
    if names == ["all"]:
        return present
    from gpucmp._device import canonical_device
    try:
        return [canonical_device(d, "--gpucmp-devices") for d in names]
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_generate_tests(metafunc):
    if "gpu_benchmark" not in metafunc.fixturenames:
        return
    own = any("gpucmp_device" in str(m.args[0]) for m in metafunc.definition.iter_markers("parametrize"))
    if not own:   # a test that parametrizes gpucmp_device itself keeps its own list
        devs = _devices(metafunc.config)
        metafunc.parametrize("gpucmp_device", devs, ids=devs)


@pytest.fixture
def gpucmp_device():
    """The device a gpu_benchmark test runs on (parametrized by --gpucmp-devices)."""
    import gpucmp
    return gpucmp.get_device()


class GpuBenchmark:
    """The callable behind the gpu_benchmark fixture."""

    def __init__(self, request, device):
        self.request = request
        self.device = device
        self.repeats = request.config.getoption("--gpucmp-repeats")
        self.stats = None

    def __call__(self, fn, *args, **kwargs):
        from .runner import measure_callable
        result, stats = measure_callable(fn, args, kwargs, device=self.device, repeats=self.repeats, warmup=1)
        self.stats = stats
        for k, v in stats.items():
            self.request.node.user_properties.append((f"gpucmp_{k}", v))
        self._to_pytest_benchmark(fn, args, kwargs, stats)
        return result

    def _to_pytest_benchmark(self, fn, args, kwargs, stats):
        try:
            bm = self.request.getfixturevalue("benchmark")     # pytest-benchmark's fixture, when installed
        except pytest.FixtureLookupError:
            return
        bm.extra_info.update({f"gpucmp_{k}": v for k, v in stats.items()})
        import gpucmp
        before = gpucmp.get_device()
        gpucmp.set_device(self.device)
        try:
            bm.pedantic(fn, args=args, kwargs=kwargs, rounds=1, iterations=1)
        finally:
            gpucmp.set_device(before)


@pytest.fixture
def gpu_benchmark(request, gpucmp_device):
    """gpu_benchmark(fn, *args, **kwargs): run fn on the device under test, measure it
    (time, memory, energy: .stats) and return its result."""
    return GpuBenchmark(request, gpucmp_device)
