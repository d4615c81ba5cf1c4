"""MirroredStrategy: one replica of the model per device, gradients averaged every step.

What it provides: `MirroredStrategy(devices=None)` with `scope()`, `num_replicas_in_sync`
and `devices`, used as from Keras: a model made or compiled inside the scope trains with
`fit(batch_size=B)` as B rows per step split over the replicas (Keras' global batch), each
replica running its own execution plan on its shard in its own thread and the plans
averaging their float32 gradients (weighted by each shard's rows) before every update, so
the replicas' weights stay identical and a step equals one step on the whole batch up to
float rounding. `get_strategy()` / `has_strategy()` as in tf.distribute.

Devices: "cpu" (or "/cpu:0", "CPU:0") names the CPU backend; listing it several times
makes logical CPU replicas (tf.config's logical devices play that role in TensorFlow) --
what runs the strategy on a machine without GPUs, and what the tests use. "cuda:N" (or
"/gpu:N", "GPU:N") names a GPU: one GPU is a single replica (the ordinary path); several
GPUs need the NCCL all-reduce, which this build does not have yet, and are refused here
with that reason (NotImplementedError) rather than at the first step.

Why it is built this way: the reduce lives in the core (csrc/plan/replicas.c) between a
plan's backward pass and its optimizer step -- the seam a bucketed NCCL all-reduce plugs
into -- so each replica's step stays one C call, and the Python side only shards batches
and starts the replicas' steps together.
"""
import contextlib
import re
import threading

_state = threading.local()
_DEVICE = re.compile(r"^/?(?:device:)?(cpu|gpu|cuda)(?::(\d+))?$", re.IGNORECASE)


def _canonical(name):
    """'cpu' / 'cuda:N' from the spellings tf.distribute and gpucmp use."""
    from .._device import canonical_device
    if not isinstance(name, str):
        raise TypeError(f"MirroredStrategy: devices must be names such as 'cpu' or 'cuda:0', got {name!r}")
    m = _DEVICE.match(name.strip())
    if not m:
        return canonical_device(name, "MirroredStrategy")     # its ValueError lists the devices present
    kind, index = m.group(1).lower(), m.group(2)
    if kind == "cpu":
        if index not in (None, "0"):
            raise ValueError(f"MirroredStrategy: device {name!r}: there is one CPU device ('cpu'); list it "
                             "several times for several CPU replicas")
        return "cpu"
    return canonical_device(f"cuda:{index or 0}", "MirroredStrategy")


class MirroredStrategy:
    """Synchronous data parallelism over `devices` (default: every GPU here, else the CPU)."""

    def __init__(self, devices=None, cross_device_ops=None):
        from .._device import available_devices
        if cross_device_ops is not None:
            raise NotImplementedError("MirroredStrategy: cross_device_ops is not supported (the core averages the "
                                      "gradients itself)")
        if devices is None:
            gpus = [d for d in available_devices() if d.startswith("cuda")]
            devices = gpus or ["cpu"]
        if isinstance(devices, str):
            devices = [devices]
        devices = [_canonical(d) for d in devices]
        if not devices:
            raise ValueError("MirroredStrategy: devices is empty")
        gpus = [d for d in devices if d != "cpu"]
        if gpus and len(gpus) != len(devices):
            raise ValueError(f"MirroredStrategy: devices {devices} mix the CPU and GPUs; use one kind")
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"MirroredStrategy: a GPU is listed twice in {devices}")
        if len(gpus) > 1:
            raise NotImplementedError(
                f"MirroredStrategy: {len(gpus)} GPUs need the NCCL all-reduce, which this build of gpucmp does not "
                "have yet; train on one GPU, or on CPU replicas")
        if len(devices) > 64:
            raise ValueError(f"MirroredStrategy: {len(devices)} replicas; 64 at most")
        self._devices = tuple(devices)

    @property
    def num_replicas_in_sync(self):
        return len(self._devices)

    @property
    def devices(self):
        return self._devices

    @contextlib.contextmanager
    def scope(self):
        """Models compiled inside train with this strategy; weights are made on its first device."""
        from .. import _device
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        before = _device.get_device()
        stack.append(self)
        _device.set_device(self._devices[0])
        try:
            yield self
        finally:
            stack.pop()
            _device.set_device(before)

    def __repr__(self):
        return f"MirroredStrategy(devices={list(self._devices)})"


class _DefaultStrategy:
    """What get_strategy() gives outside every scope: one replica on the current device."""
    num_replicas_in_sync = 1

    @property
    def devices(self):
        from .._device import get_device
        return (get_device(),)

    @contextlib.contextmanager
    def scope(self):
        yield self

    def __repr__(self):
        return "<default strategy>"


_DEFAULT = _DefaultStrategy()


def has_strategy():
    """Whether a MirroredStrategy scope is active in this thread."""
    return bool(getattr(_state, "stack", None))


def get_strategy():
    """The strategy of the innermost active scope, else the default one-replica strategy."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else _DEFAULT
