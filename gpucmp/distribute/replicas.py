"""The replicas of one distributed fit: a training plan per replica, stepped together.

What it provides: `ReplicatedPlan(nodes, train, n, rows, device)` -- replica 0's plan
trains the model's own weights and optimizer state (the buffers in `nodes` / `train`),
replicas 1..n-1 train copies of them -- with `train_step(x, y, hparams, seed)` (the
batch split into n contiguous shards, each replica's step in its own thread, the loss
and metric sums added up), `check_in_sync()` (every replica's trainable weights and
optimizer state bit-identical to replica 0's, else RuntimeError) and `finish()`
(BatchNormalization's moving statistics, which each replica keeps from its own shards,
averaged into the model's -- Keras' ON_READ / MEAN aggregation of them -- and the
threads stopped).

Why it is built this way: the plans meet in the core (a ReplicaGroup) between their
backward passes and their updates, so each replica's step is still one C call that
releases the GIL; the threads only start those calls together. The plans are made for
one fit call and dropped after it: the model keeps one copy of its weights between
calls, and its own cached plans never join a group.
"""
from concurrent.futures import ThreadPoolExecutor

import numpy as np

STAT_SKIP = ("steps_applied", "loss_scale", "loss_scale_good")   # per step, not sums over rows
MOVING_KEYS = ("moving_mean", "moving_variance")


def _core():
    from .. import _core
    return _core


def _copy(buf):
    out = _core().Buffer(buf.backend, buf.size)
    out.write(buf.read())
    return out


def _clone(nodes, train):
    """nodes / train with every Buffer replaced by a copy (a replica's own weights and state)."""
    Buffer = _core().Buffer
    new_nodes = [{k: (_copy(v) if isinstance(v, Buffer) else v) for k, v in d.items()} for d in nodes]
    new_train = dict(train, opt_state=[_copy(b) for b in train.get("opt_state") or []])
    return new_nodes, new_train


def shard_sizes(rows, n):
    """Rows of each replica's contiguous shard: as equal as they can be, the first ones larger."""
    return [rows // n + (1 if r < rows % n else 0) for r in range(n)]


class ReplicatedPlan:
    def __init__(self, nodes, train, n, rows, device):
        core = _core()
        self.n = n
        self.group = core.ReplicaGroup(n)
        per = max(1, -(-rows // n))
        self.nodes, self.trains, self.plans = [], [], []
        for r in range(n):
            nd, tr = (nodes, train) if r == 0 else _clone(nodes, train)
            plan = core.Plan(device, nd, per, tr)
            plan.join_group(self.group, r)
            self.nodes.append(nd)
            self.trains.append(tr)
            self.plans.append(plan)
        self.pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="gpucmp-replica")

    def train_step(self, x, y, hparams, seed):
        """One step of the global batch (x: an array, or a list of arrays for several inputs)."""
        xs = x if isinstance(x, (list, tuple)) else [x]
        rows = len(y)
        bounds = np.cumsum([0] + shard_sizes(rows, self.n))
        jobs = []
        for r, plan in enumerate(self.plans):
            lo, hi = int(bounds[r]), int(bounds[r + 1])
            xr = [np.ascontiguousarray(a[lo:hi]) for a in xs]
            # each replica its own dropout masks (its own rows); replica 0 keeps the seed
            sr = seed if not seed or r == 0 else (seed * 0x9E3779B97F4A7C15 + r) & (2 ** 63 - 1)
            jobs.append(self.pool.submit(plan.train_step, xr[0] if len(xr) == 1 else xr,
                                         np.ascontiguousarray(y[lo:hi]), dict(hparams), sr))
        results, errors = [], []
        for job in jobs:
            try:
                results.append(job.result())
            except Exception as e:   # noqa: BLE001 -- the first real cause is re-raised below
                errors.append(e)
        if errors:
            # the replicas a failing one aborted say so; the failing one's error is the cause
            cause = next((e for e in errors if "another replica failed" not in str(e)), errors[0])
            raise cause
        out = dict(results[0])
        for st in results[1:]:
            for k, v in st.items():
                if k not in STAT_SKIP:
                    out[k] += v
        return out

    def _trainable_arrays(self, r):
        arrays = [b.read() for b in self.trains[r].get("opt_state") or []]
        for d in self.nodes[r]:
            if d.get("trainable", True):
                for k in ("kernel", "bias", "gamma", "beta", "embeddings", "recurrent_kernel"):
                    if d.get(k) is not None:
                        arrays.append(d[k].read())
        return arrays

    def check_in_sync(self):
        """RuntimeError unless every replica's trained weights and optimizer state equal replica 0's bit for bit."""
        ref = self._trainable_arrays(0)
        for r in range(1, self.n):
            for k, (a, b) in enumerate(zip(ref, self._trainable_arrays(r))):
                if not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
                    raise RuntimeError(f"MirroredStrategy: replica {r} diverged from replica 0 (tensor {k}); "
                                       "this is a bug in gpucmp's gradient reduce")

    def finish(self):
        """The moving statistics' mean over the replicas into the model's buffers; threads stopped."""
        try:
            for i, d in enumerate(self.nodes[0]):
                for k in MOVING_KEYS:
                    if d.get(k) is not None:
                        mean = np.mean([self.nodes[r][i][k].read().astype(np.float64) for r in range(self.n)],
                                       axis=0)
                        d[k].write(mean.astype(np.float32))
        finally:
            self.pool.shutdown(wait=True)
