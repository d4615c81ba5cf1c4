"""CUTLASS sm80 baselines next to gpucmp's mma.sync paths: GEMM and convolution, one process.

For issue 11 (Ampere kernels as fast as CUTLASS). On one GPU, in ONE process, on ONE
stream (gpucmp's own) and on the SAME device buffers, each problem is timed for:

- gpucmp mma: gpucmp's op with its path forced to mma.sync (variant points
  cuda.gemm.path / cuda.conv2d.fwd / .bwd_data / .wgrad = mma), called through the C
  core (gc_op_run over ctypes) on the buffers below -- the kernel sm_86 cards run;
- gpucmp auto: the same call with nothing forced (wgmma on Hopper); which kernel ran is
  reported (gpucmp.variants.last);
- gpucmp mma (bench_*): `_core.bench_gemm` / `bench_conv` forced to mma -- gpucmp's own
  timing loop on its own operands (no Python per call), a cross-check of the column above;
- cuBLAS / cuDNN through PyTorch: torch.matmul, F.conv2d and aten.convolution_backward on
  channels_last views of the same buffers (cudnn.benchmark on);
- every CUTLASS 2.x configuration of benchmarks/cutlass (libgpucmp_cutlass_bench.so:
  Sm80 / OpClassTensorOp device::Gemm and ImplicitGemmConvolution, each tagged with its
  shared memory and whether it fits an sm_86 block, <= 99 KB).

Every result (CUTLASS, gpucmp, torch) is checked against a float32 PyTorch reference
before it is timed, the output first filled with NaN so that an unwritten element fails
(max |out - ref| / max |ref| under 1e-2, 2e-2 for bfloat16); a failed CUTLASS config is
reported and not timed (a wrong baseline is worse than none). Reported: TFLOP/s, the best
sm_86-feasible CUTLASS config and the best of all, and the ratio gpucmp mma / best
sm_86-feasible CUTLASS (the issue's target: >= 1.0).

Layouts: gpucmp's GEMM is row-major C = op(A) op(B) (trans_a / trans_b over row-major
storage); CUTLASS gets the same buffers as RowMajor / ColumnMajor operands. Convolutions
are NHWC; gpucmp's kernel is (kh, kw, in, out) as Keras stores it, CUTLASS's filter is
KRSC (out, kh, kw, in) -- which is also PyTorch's channels_last weight -- so the filter
(and wgrad's result) is transposed once, outside any timed region: CUTLASS is timed
without that transpose. CUTLASS weight gradients use serial split-K (the slices summing
through the output in turn), tried at 1 and at a split that fills the SMs. First layers
(C = 1, 3: the seeds' conv1, ResNet-50's stem) are beyond CUTLASS's sm80 kernels, which
need C % 8 == 0 (or C == 4 for its fixed-channel forward): they get x (and w) zero-padded
to 4 channels, made outside the timed region, FLOPs counted for the real layer; their
data gradient is not timed (a first layer's input is the data).

Timing: CUDA events on gpucmp's stream around `inner` back-to-back calls (inner chosen so
a sample lasts >= --sample-ms; CUTLASS runs its `inner` launches in one C call), warm-up
first, the candidates of a problem interleaved sample by sample (so clock and temperature
drift hit them alike), the median of --repeats samples. Calls shorter than LAUNCH_BOUND_S
may be bound by the host's launch rate rather than the kernel: the table notes them. --sustained-s S
makes every sample last >= S seconds (the card at its power limit). If gpucmp's stream
cannot be found, every sample is timed on the host clock between device syncs instead.

    python benchmarks/bench_cutlass.py [--sections gemm conv] [--quick] [--json out.json]
        [--gemm-sizes 1024 2048 4096 8192] [--conv-layers main seeds resnet50]
        [--time-limit-s 240] [--list]

Needs the library: `bash benchmarks/cutlass/build.sh` (ARCH=90a by default; GPUCMP_CUTLASS_LIB
points elsewhere), a CUDA build of gpucmp and PyTorch with CUDA. CUTLASS is a benchmark-only
dependency: gpucmp never loads it.
"""
import argparse
import contextlib
import ctypes
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import header, table  # noqa: E402

DEFAULT_LIB = os.path.join(HERE, "cutlass", "build", "libgpucmp_cutlass_bench.so")
BUILD_CMD = "bash benchmarks/cutlass/build.sh   (ARCH=90a for the H200, ARCH=86 for an RTX A4000/A5000)"
SM86_SMEM = 101376          # cudaDevAttrMaxSharedMemoryPerBlockOptin of sm_86 (99 KB)
TOL = {"float16": 1e-2, "bfloat16": 2e-2, "tfloat32": 1e-2}
LAUNCH_BOUND_S = 10e-6
GCB_STATUS = {0: "ok", 1: "not supported", 2: "invalid argument", 3: "CUDA error"}

# The seeds' CNN (gpucmp/harness/workloads/seeds.py: build_seed_cnn): Conv 32 -> pool ->
# Conv 64 -> pool -> Conv 64 -> Flatten (576) -> Dense 64 -> Dense 10. Its dense GEMMs per
# training step at batch B, as gpucmp runs them (row-major, kernel (in, out)):
# (name, m, n, k, trans_a, trans_b)
def seed_dense_gemms(batch):
    return [
        (f"seeds dense1 fwd b{batch}", batch, 64, 576, False, False),
        (f"seeds dense2 fwd b{batch}", batch, 10, 64, False, False),
        (f"seeds dense1 dx b{batch}", batch, 576, 64, False, True),
        (f"seeds dense2 dx b{batch}", batch, 64, 10, False, True),
        (f"seeds dense1 dW b{batch}", 576, 64, batch, True, False),
        (f"seeds dense2 dW b{batch}", 64, 10, batch, True, False),
    ]


MAIN_LAYER = ("3x3 64->64 56x56 same", 64, 56, 56, 64, 64, 3, 3, 1, "same")


def out_extent(size, k, stride, padding):
    return (size - k) // stride + 1 if padding == "valid" else -(-size // stride)


def pad_before(size, out, k, stride, padding):
    if padding == "valid":
        return 0
    return max((out - 1) * stride + k - size, 0) // 2


# ------------------------------------------------------------------ the CUTLASS library
class GcbProblem(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("n", "h", "w", "c", "k", "r", "s", "p", "q", "pad_h", "pad_w",
                                            "stride_h", "stride_w", "dil_h", "dil_w", "split_k")]


class Cutlass:
    """ctypes face of libgpucmp_cutlass_bench.so (benchmarks/cutlass/gcb.h)."""

    def __init__(self, path):
        self.path = path
        L = self.lib = ctypes.CDLL(path)
        for f in ("gcb_build_info", "gcb_gemm_describe", "gcb_conv_describe"):
            getattr(L, f).restype = ctypes.c_char_p
        L.gcb_gemm_describe.argtypes = L.gcb_conv_describe.argtypes = [ctypes.c_int]
        L.gcb_gemm_run.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_float, ctypes.c_void_p,
                                   ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        L.gcb_gemm_workspace.argtypes = [ctypes.c_int] * 4
        L.gcb_gemm_workspace.restype = ctypes.c_size_t
        L.gcb_conv_workspace.argtypes = [ctypes.c_int, ctypes.POINTER(GcbProblem), ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.c_char_p, ctypes.c_int]
        L.gcb_conv_run.argtypes = [ctypes.c_int, ctypes.POINTER(GcbProblem), ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_float, ctypes.c_float, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        self.info = json.loads(L.gcb_build_info().decode())
        self.gemms = [json.loads(L.gcb_gemm_describe(i).decode()) for i in range(L.gcb_gemm_count())]
        self.convs = [json.loads(L.gcb_conv_describe(i).decode()) for i in range(L.gcb_conv_count())]
        self.msg = ctypes.create_string_buffer(1024)

    def gemm(self, cid, m, n, k, a, b, c, ws, ws_bytes, iters, stream):
        st = self.lib.gcb_gemm_run(cid, m, n, k, a, b, c, 1.0, 0.0, ws, ws_bytes, iters, stream, self.msg, 1024)
        return st, self.msg.value.decode(errors="replace")

    def conv_workspace(self, cid, prob):
        nbytes = ctypes.c_size_t(0)
        st = self.lib.gcb_conv_workspace(cid, ctypes.byref(prob), ctypes.byref(nbytes), self.msg, 1024)
        return st, nbytes.value, self.msg.value.decode(errors="replace")

    def conv(self, cid, prob, x, w, y, ws, ws_bytes, iters, stream):
        st = self.lib.gcb_conv_run(cid, ctypes.byref(prob), x, w, y, 1.0, 0.0, ws, ws_bytes, iters, stream,
                                   self.msg, 1024)
        return st, self.msg.value.decode(errors="replace")


def load_cutlass(path):
    if not os.path.exists(path):
        sys.exit(f"bench_cutlass: the CUTLASS baseline library {path} is missing; build it first, from the repo "
                 f"root:\n    {BUILD_CMD}\n(or point GPUCMP_CUTLASS_LIB / --lib at a built one)")
    try:
        return Cutlass(path)
    except OSError as e:
        sys.exit(f"bench_cutlass: cannot load {path}: {e}\nrebuild it: {BUILD_CMD}")


def arch_runs_on(arch, cc):
    """Whether SASS for `arch` ('sm_90a', 'sm_86', 'sm_86+sm_90a') runs on compute capability cc ('9.0')."""
    major, minor = (int(x) for x in cc.split("."))
    for a in arch.split("+"):
        digits = "".join(ch for ch in a if ch.isdigit())
        if len(digits) < 2:
            continue
        am, an = int(digits[:-1]), int(digits[-1])
        if a.endswith("a"):
            if (am, an) == (major, minor):
                return True
        elif am == major and an <= minor:
            return True
    return False


# ------------------------------------------------------------------ gpucmp through its C core
class GcTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * 6)]


class GcOpCall(ctypes.Structure):
    _fields_ = [("op", ctypes.c_int), ("inp", ctypes.POINTER(GcTensor) * 8), ("out", ctypes.POINTER(GcTensor) * 4),
                ("params", ctypes.c_void_p)]


class GcGemmParams(ctypes.Structure):
    _fields_ = [("trans_a", ctypes.c_int), ("trans_b", ctypes.c_int), ("alpha", ctypes.c_float),
                ("beta", ctypes.c_float), ("act", ctypes.c_int), ("impl", ctypes.c_int)]


class GcConvParams(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("stride_h", "stride_w", "dil_h", "dil_w", "padding", "act", "impl")]


GC_DTYPE = {"float32": 0, "tfloat32": 0, "float16": 1, "bfloat16": 2}


class Gpucmp:
    """gpucmp's ops on caller-owned device pointers: gc_backend_get + gc_op_run of the
    _core extension (its C symbols are exported), gc_cuda_stream for its stream."""

    def __init__(self, device):
        from gpucmp import _core, variants
        self.core, self.variants, self.device = _core, variants, device
        L = self.lib = ctypes.CDLL(_core.__file__)
        L.gc_backend_get.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        L.gc_op_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        L.gc_last_error.restype = ctypes.c_char_p
        L.gc_set_allow_tf32.argtypes = [ctypes.c_int]
        self.be = ctypes.c_void_p()
        st = L.gc_backend_get(device.encode(), ctypes.byref(self.be))
        if st:
            raise RuntimeError(f"gc_backend_get({device!r}): {L.gc_last_error().decode()}")
        self.ops = {name: i for i, name in enumerate(_core.op_names())}
        _core.memory_stats(device)          # initialises the backend (its stream) as a first op would
        self.stream = None
        if hasattr(L, "gc_cuda_stream"):
            L.gc_cuda_stream.argtypes = [ctypes.c_void_p]
            L.gc_cuda_stream.restype = ctypes.c_void_p
            self.stream = L.gc_cuda_stream(self.be) or None
        self._keep = []

    def make_call(self, op, inputs, outputs, params):
        """A prepared gc_op_call: inputs / outputs are (ptr or None, dtype name, shape) triples."""
        call = GcOpCall()
        call.op = self.ops[op]
        keep = [params]
        for slot, lst in (("inp", inputs), ("out", outputs)):
            arr = getattr(call, slot)
            for i, (ptr, dt, shape) in enumerate(lst):
                t = GcTensor()
                t.data = ptr
                t.dtype = GC_DTYPE[dt]
                t.ndim = len(shape)
                for d, v in enumerate(shape):
                    t.shape[d] = v
                keep.append(t)
                arr[i] = ctypes.pointer(t)
        call.params = ctypes.cast(ctypes.pointer(params), ctypes.c_void_p)
        self._keep.append(keep)
        return call, keep

    def runner(self, call, dtype):
        """fn(inner) -> None running the prepared call inner times (raises on a failure)."""
        run, be, ref, L = self.lib.gc_op_run, self.be, ctypes.byref(call), self.lib
        tf32 = 1 if dtype == "tfloat32" else None

        def fn(inner):
            if tf32 is not None:
                L.gc_set_allow_tf32(tf32)
            for _ in range(inner):
                st = run(be, ref)
                if st:
                    raise GpucmpError(st, L.gc_last_error().decode(errors="replace"))
        return fn


class GpucmpError(Exception):
    NAMES = {1: "ValueError", 2: "TypeError", 3: "MemoryError", 4: "NotImplementedError", 5: "RuntimeError",
             6: "ValueError"}

    def __init__(self, status, msg):
        super().__init__(f"{self.NAMES.get(status, status)}: {msg}")


# ------------------------------------------------------------------ timing
class Timer:
    """Samples of `inner` calls, timed with CUDA events on one stream (or, without one, on
    the host clock between device syncs)."""

    def __init__(self, torch, stream, sample_s, repeats):
        self.torch, self.stream, self.sample_s, self.repeats = torch, stream, sample_s, repeats

    def sync(self):
        if self.stream is not None:
            self.stream.synchronize()
        else:
            self.torch.cuda.synchronize()

    def once(self, fn, inner):
        """Seconds per call of one sample of `inner` calls, synchronously."""
        if self.stream is not None:
            e0, e1 = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            e0.record(self.stream)
            fn(inner)
            e1.record(self.stream)
            e1.synchronize()
            return e0.elapsed_time(e1) * 1e-3 / inner
        self.torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(inner)
        self.torch.cuda.synchronize()
        return (time.perf_counter() - t0) / inner

    def calibrate(self, fn):
        """inner for one candidate: one call, then a trial, then enough calls for sample_s."""
        self.once(fn, 1)
        t = self.once(fn, 1)
        inner = max(1, min(20000, math.ceil(self.sample_s / max(t, 1e-7))))
        if inner > 1:
            t = self.once(fn, min(inner, 64))
            inner = max(1, min(20000, math.ceil(self.sample_s / max(t, 1e-7))))
        self.once(fn, inner)            # warm-up at the sample length (clocks, caches, autotuners)
        return inner

    def interleaved(self, cands):
        """cands: list of (key, fn, inner). Returns ({key: [seconds per call]}, {key: error}) over
        repeats rounds, each round one sample per candidate in turn; a candidate that fails
        is dropped (and its error returned)."""
        out, errors = {k: [] for k, _, _ in cands}, {}
        live = list(cands)
        for _ in range(self.repeats):
            evs = []
            for k, fn, inner in list(live):
                try:
                    if self.stream is not None:
                        e0, e1 = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
                        e0.record(self.stream)
                        fn(inner)
                        e1.record(self.stream)
                        evs.append((k, e0, e1, inner))
                    else:
                        out[k].append(self.once(fn, inner))
                except Exception as e:  # noqa: BLE001 -- report it, keep timing the others
                    errors[k] = f"failed while timed: {type(e).__name__}: {str(e)[:300]}"
                    live = [c for c in live if c[0] != k]
            if evs:
                self.stream.synchronize()
                for k, e0, e1, inner in evs:
                    if k not in errors:
                        out[k].append(e0.elapsed_time(e1) * 1e-3 / inner)
        return out, errors


# ------------------------------------------------------------------ the benchmark
class Bench:
    def __init__(self, args, torch, cut, gc, timer):
        self.args, self.torch, self.cut, self.gc, self.timer = args, torch, cut, gc, timer
        self.t_end = time.monotonic() + args.time_limit_s if args.time_limit_s > 0 else None
        self.problems, self.skipped = [], []
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count

    def out_of_time(self):
        return self.t_end is not None and time.monotonic() > self.t_end

    def tdt(self, dtype):
        T = self.torch
        return {"float16": T.float16, "bfloat16": T.bfloat16, "tfloat32": T.float32}[dtype]

    def rand(self, shape, dtype):
        T = self.torch
        return (T.rand(*shape, device="cuda", dtype=T.float32) * 2 - 1).to(self.tdt(dtype))

    @staticmethod
    def rel_err(out, ref):
        o = out.float()
        if not bool(o.isfinite().all()):
            return float("inf")
        scale = float(ref.abs().max())
        return float((o - ref).abs().max()) / (scale if scale > 0 else 1.0)

    def set_tf32(self, on):
        T = self.torch
        T.backends.cuda.matmul.allow_tf32 = on
        T.backends.cudnn.allow_tf32 = on

    # ---- one problem: check each candidate, then time them interleaved
    def run_problem(self, rec, cands, flops):
        """cands: list of dicts {name, kind, fn(inner), check() -> rel_err, tol, [config], [ran()]}."""
        good = []
        for c in cands:
            entry = {k: v for k, v in c.items() if k in ("name", "kind", "config", "split_k")}
            try:
                err = c["check"]()
                entry["rel_err"] = err
                entry["ok"] = err <= rec["tol"]
                if "ran" in c:
                    entry["ran"] = c["ran"]()
                if not entry["ok"]:
                    entry["error"] = f"wrong result: max|out - ref| / max|ref| = {err:.3g} > {rec['tol']}"
            except Exception as e:  # noqa: BLE001 -- any failure of a candidate is its result
                entry["ok"] = False
                entry["error"] = str(e)[:300]
                self.timer.sync()
            rec["candidates"].append(entry)
            if entry["ok"]:
                good.append((c, entry))
        timed = []   # keyed by position: names need not be unique
        for i, (c, entry) in enumerate(good):
            try:
                inner = self.timer.calibrate(c["fn"])
                timed.append((i, c["fn"], inner))
                entry["inner"] = inner
            except Exception as e:  # noqa: BLE001 -- report it, keep the others
                entry["ok"] = False
                entry["error"] = f"failed while calibrated: {type(e).__name__}: {str(e)[:300]}"
        samples, errors = self.timer.interleaved(timed) if timed else ({}, {})
        for i, (c, entry) in enumerate(good):
            if i in errors:
                entry["ok"] = False
                entry["error"] = errors[i]
            elif samples.get(i):
                s = samples[i]
                entry["seconds"] = statistics.median(s)
                entry["spread"] = [min(s), max(s)]
                entry["tflops"] = flops / entry["seconds"] / 1e12
        self.summarise(rec)
        self.problems.append(rec)

    @staticmethod
    def summarise(rec):
        def best(pred):
            xs = [c for c in rec["candidates"] if c.get("tflops") and pred(c)]
            return max(xs, key=lambda c: c["tflops"]) if xs else None
        s = {}
        for key, pred in (("gpucmp_mma", lambda c: c["kind"] == "gpucmp-mma"),
                          ("gpucmp_auto", lambda c: c["kind"] == "gpucmp-auto"),
                          ("gpucmp_core_bench", lambda c: c["kind"] == "gpucmp-core"),
                          ("torch", lambda c: c["kind"] == "torch"),
                          ("cutlass_sm86", lambda c: c["kind"] == "cutlass" and c["config"]["sm86"]),
                          ("cutlass_any", lambda c: c["kind"] == "cutlass")):
            b = best(pred)
            if b:
                s[key] = {"name": b["name"], "tflops": b["tflops"], "seconds": b["seconds"]}
                if b.get("ran"):
                    s[key]["ran"] = b["ran"]
        if "gpucmp_mma" in s and "cutlass_sm86" in s:
            s["mma_over_cutlass_sm86"] = s["gpucmp_mma"]["tflops"] / s["cutlass_sm86"]["tflops"]
        if "gpucmp_mma" in s and "cutlass_any" in s:
            s["mma_over_cutlass_any"] = s["gpucmp_mma"]["tflops"] / s["cutlass_any"]["tflops"]
        nc = [c for c in rec["candidates"] if c["kind"] == "cutlass"]
        if nc and not any(c.get("tflops") for c in nc):
            s["cutlass_note"] = "no CUTLASS config took this problem: " + "; ".join(
                sorted({c.get("error", "")[:120] for c in nc}))[:400]
        rec["summary"] = s

    # ---- GEMM
    def gemm_problem(self, name, m, n, k, ta, tb, dtype):
        T, cut, gc = self.torch, self.cut, self.gc
        rec = {"kind": "gemm", "name": name, "m": m, "n": n, "k": k, "trans_a": ta, "trans_b": tb, "dtype": dtype,
               "tol": TOL[dtype], "candidates": []}
        A = self.rand((k, m) if ta else (m, k), dtype)
        B = self.rand((n, k) if tb else (k, n), dtype)
        C = T.empty((m, n), device="cuda", dtype=self.tdt(dtype))
        Aop, Bop = (A.t() if ta else A), (B.t() if tb else B)
        self.set_tf32(False)
        ref = Aop.float() @ Bop.float()
        self.set_tf32(dtype == "tfloat32")

        def check_c(launch):
            C.fill_(float("nan"))
            self.timer.sync()
            launch(1)
            self.timer.sync()
            return self.rel_err(C, ref)

        cands = []
        # gpucmp, forced mma and auto, through gc_op_run on A, B, C
        params = GcGemmParams(int(ta), int(tb), 1.0, 0.0, 0, 0)
        call, _ = gc.make_call("gemm", [(A.data_ptr(), dtype, tuple(A.shape)), (B.data_ptr(), dtype, tuple(B.shape)),
                                        (None, dtype, (n,))], [(C.data_ptr(), dtype, (m, n))], params)
        raw = gc.runner(call, dtype)
        for kind, forced in (("gpucmp-mma", "mma"), ("gpucmp-auto", None)):
            fn = self.forcing(raw, {"cuda.gemm.path": forced} if forced else {})
            cands.append({"name": kind, "kind": kind, "fn": fn, "check": (lambda f=fn: check_c(f)),
                          "ran": lambda: gc.variants.last("cuda.gemm.path")})
        # torch (cuBLAS)
        def torch_fn(inner):
            for _ in range(inner):
                T.matmul(Aop, Bop, out=C)
        cands.append({"name": "torch (cuBLAS)", "kind": "torch", "fn": torch_fn, "check": lambda: check_c(torch_fn)})
        # CUTLASS
        lay = ("t" if ta else "n") + ("t" if tb else "n")
        stream = self.stream_ptr()
        for cfg in cut.gemms:
            if cfg["dtype"] != dtype or cfg["layout"] != lay:
                continue
            ws_bytes = cut.lib.gcb_gemm_workspace(cfg["id"], m, n, k)
            ws = T.empty(max(ws_bytes, 1), device="cuda", dtype=T.uint8)
            fn = self.cutlass_gemm_fn(cfg["id"], m, n, k, A, B, C, ws, ws_bytes, stream)
            cands.append({"name": f"cutlass {cfg['name']}", "kind": "cutlass", "config": cfg, "fn": fn,
                          "check": (lambda f=fn: check_c(f)), "_ws": ws})
        flops = 2.0 * m * n * k
        self.run_problem(rec, cands, flops)
        rec["flops"] = flops
        # gpucmp's own timing loop (its own operands), forced to mma
        if not self.args.no_core_bench:
            self.core_bench(rec, flops, lambda inner, reps: gc.core.bench_gemm(
                gc.device, m, n, k, dtype, "own", reps, trans_a=ta, trans_b=tb, warmup=2, inner=inner),
                {"cuda.gemm.path": "mma"})
        self.set_tf32(False)

    def cutlass_gemm_fn(self, cid, m, n, k, A, B, C, ws, ws_bytes, stream):
        cut = self.cut
        a, b, c, w = A.data_ptr(), B.data_ptr(), C.data_ptr(), ws.data_ptr()

        def fn(inner):
            st, msg = cut.gemm(cid, m, n, k, a, b, c, w, ws_bytes, inner, stream)
            if st:
                raise CutlassError(st, msg)
        return fn

    # ---- convolution
    def conv_problem(self, layer, dtype, which):
        T, cut, gc = self.torch, self.cut, self.gc
        name, N, H, W, Cin, F, KH, KW, s, pad = layer
        OH, OW = out_extent(H, KH, s, pad), out_extent(W, KW, s, pad)
        ph, pw = pad_before(H, OH, KH, s, pad), pad_before(W, OW, KW, s, pad)
        rec = {"kind": "conv", "name": name, "layer": list(layer), "pass": which, "dtype": dtype, "tol": TOL[dtype],
               "candidates": []}
        x = self.rand((N, H, W, Cin), dtype)
        w_krsc = self.rand((F, KH, KW, Cin), dtype)           # CUTLASS / torch channels_last filter
        w_rsck = w_krsc.permute(1, 2, 3, 0).contiguous()      # gpucmp / Keras (kh, kw, in, out), once
        dy = self.rand((N, OH, OW, F), dtype)
        nchw = lambda t: t.permute(0, 3, 1, 2)                # noqa: E731 -- channels_last views
        padding = [ph, pw]
        # torch pads both sides alike: it is the reference only where that gives the same
        # output extents (every layer here; not a 'same' whose far side needs one more cell)
        if (H + 2 * ph - KH) // s + 1 != OH or (W + 2 * pw - KW) // s + 1 != OW:
            self.skipped.append(f"{name} {which} {dtype}: padding torch cannot express")
            return
        self.set_tf32(False)
        cbwd = T.ops.aten.convolution_backward
        xf, wf, dyf = nchw(x).float(), nchw(w_krsc).float(), nchw(dy).float()
        if which == "fwd":
            ref = T.nn.functional.conv2d(xf, wf, None, [s, s], padding).permute(0, 2, 3, 1)
        elif which == "bwd_data":
            ref = cbwd(dyf, xf, wf, None, [s, s], padding, [1, 1], False, [0, 0], 1,
                       [True, False, False])[0].permute(0, 2, 3, 1)
        else:
            ref = cbwd(dyf, xf, wf, None, [s, s], padding, [1, 1], False, [0, 0], 1,
                       [False, True, False])[1].permute(0, 2, 3, 1)      # KRSC
        del xf, wf, dyf
        self.set_tf32(dtype == "tfloat32")
        out_krsc = {"fwd": None, "bwd_data": None, "bwd_filter": T.empty_like(w_krsc)}[which]
        out = {"fwd": T.empty_like(dy), "bwd_data": T.empty_like(x), "bwd_filter": out_krsc}[which]

        def check(launch, buf, refv):
            buf.fill_(float("nan"))
            self.timer.sync()
            launch(1)
            self.timer.sync()
            return self.rel_err(buf, refv)

        cands = []
        # gpucmp (forced mma, auto) on x / w_rsck / dy
        params = GcConvParams(s, s, 1, 1, 0 if pad == "valid" else 1, 0, 0)
        sx, sw, sy = (N, H, W, Cin), (KH, KW, Cin, F), (N, OH, OW, F)
        point = {"fwd": "cuda.conv2d.fwd", "bwd_data": "cuda.conv2d.bwd_data", "bwd_filter": "cuda.conv2d.wgrad"}[which]
        if which == "fwd":
            g_out, g_ref = out, ref
            call, _ = gc.make_call("conv2d_fwd", [(x.data_ptr(), dtype, sx), (w_rsck.data_ptr(), dtype, sw),
                                                  (None, dtype, (F,))], [(out.data_ptr(), dtype, sy)], params)
        elif which == "bwd_data":
            g_out, g_ref = out, ref
            call, _ = gc.make_call("conv2d_bwd_data", [(dy.data_ptr(), dtype, sy), (w_rsck.data_ptr(), dtype, sw)],
                                   [(out.data_ptr(), dtype, sx)], params)
        else:
            g_out = T.empty_like(w_rsck)
            g_ref = ref.permute(1, 2, 3, 0)                      # KRSC -> (kh, kw, in, out)
            call, _ = gc.make_call("conv2d_bwd_filter", [(x.data_ptr(), dtype, sx), (dy.data_ptr(), dtype, sy)],
                                   [(g_out.data_ptr(), dtype, sw), (None, dtype, (F,))], params)
        raw = gc.runner(call, dtype)
        for kind, forced in (("gpucmp-mma", "mma"), ("gpucmp-auto", None)):
            fn = self.forcing(raw, {point: forced} if forced else {})
            cands.append({"name": kind, "kind": kind, "fn": fn, "check": (lambda f=fn: check(f, g_out, g_ref)),
                          "ran": lambda: gc.variants.last(point)})
        # torch (cuDNN) on channels_last views of the same buffers
        xv, wv, dyv = nchw(x), nchw(w_krsc), nchw(dy)
        holder = {}
        if which == "fwd":
            def tfn(inner):
                for _ in range(inner):
                    holder["o"] = T.nn.functional.conv2d(xv, wv, None, [s, s], padding)
            tget = lambda: holder["o"].permute(0, 2, 3, 1)      # noqa: E731
        elif which == "bwd_data":
            def tfn(inner):
                for _ in range(inner):
                    holder["o"] = cbwd(dyv, xv, wv, None, [s, s], padding, [1, 1], False, [0, 0], 1,
                                       [True, False, False])[0]
            tget = lambda: holder["o"].permute(0, 2, 3, 1)      # noqa: E731
        else:
            def tfn(inner):
                for _ in range(inner):
                    holder["o"] = cbwd(dyv, xv, wv, None, [s, s], padding, [1, 1], False, [0, 0], 1,
                                       [False, True, False])[1]
            tget = lambda: holder["o"].permute(0, 2, 3, 1)      # noqa: E731

        def tcheck():
            tfn(1)
            self.timer.sync()
            return self.rel_err(tget(), ref)
        cands.append({"name": "torch (cuDNN)", "kind": "torch", "fn": tfn, "check": tcheck})
        # CUTLASS on x / w_krsc / dy
        op = {"fwd": "fprop", "bwd_data": "dgrad", "bwd_filter": "wgrad"}[which]
        cfgs = [c for c in cut.convs if c["op"] == op and c["dtype"] == dtype and c["align"] == 8]
        if op == "dgrad":   # the unity-stride kernels at stride 1, the strided ones elsewhere
            cfgs = [c for c in cfgs if (c["stride_support"] == "unity") == (s == 1)]
        opt = [c for c in cfgs if c["iterator"] == "optimized"]
        ana = [c for c in cfgs if c["iterator"] != "optimized"]
        ptrs = {"fwd": (x, w_krsc, out), "bwd_data": (out, w_krsc, dy), "bwd_filter": (x, out_krsc, dy)}[which]
        cut_out = {"fwd": out, "bwd_data": out, "bwd_filter": out_krsc}[which]
        geo = (N, H, W, F, KH, KW, OH, OW, ph, pw, s)
        self.add_cutlass_conv(rec, cands, opt, op, geo, Cin, ptrs, (lambda f, o=cut_out: check(f, o, ref)), "")
        if ana and not self.probe_supported(cands):   # analytic only where no optimized config takes the shape
            self.add_cutlass_conv(rec, cands, ana, op, geo, Cin, ptrs, (lambda f, o=cut_out: check(f, o, ref)), "")
        if Cin % 8 and Cin < 4 and op in ("fprop", "wgrad"):
            # a first layer (C = 1, 3): CUTLASS's sm80 kernels need C % 8 (optimized) or C == 4
            # (fixed channels), so they run on x (and w) zero-padded to 4 channels, made here,
            # outside the timed region; FLOPs stay the real layer's
            xp = T.zeros((N, H, W, 4), device="cuda", dtype=x.dtype)
            xp[..., :Cin] = x
            if op == "fprop":
                wp = T.zeros((F, KH, KW, 4), device="cuda", dtype=x.dtype)
                wp[..., :Cin] = w_krsc
                pptrs, pout = (xp, wp, out), out
            else:
                wp = T.zeros((F, KH, KW, 4), device="cuda", dtype=x.dtype)
                pptrs, pout = (xp, wp, dy), wp[..., :Cin]
            pcfgs = [c for c in cut.convs if c["op"] == op and c["dtype"] == dtype and c["align"] == 4]
            self.add_cutlass_conv(rec, cands, pcfgs, op, geo, 4, pptrs, (lambda f, o=pout: check(f, o, ref)),
                                  " (C padded to 4)", keep=(xp, wp))
        flops = 2.0 * N * OH * OW * F * KH * KW * Cin
        self.run_problem(rec, cands, flops)
        rec["flops"] = flops
        if not self.args.no_core_bench:
            self.core_bench(rec, flops, lambda inner, reps: gc.core.bench_conv(
                gc.device, N, H, W, Cin, F, KH, KW, strides=(s, s), padding=pad, dtype=dtype, impl="own",
                which=which, repeats=reps, warmup=2, inner=inner), {point: "mma"})
        self.set_tf32(False)

    def add_cutlass_conv(self, rec, cands, cfgs, op, geo, cin, ptrs, check, suffix, keep=None):
        """CUTLASS candidates for each config of cfgs (and each split-K of a wgrad)."""
        T, cut, stream = self.torch, self.cut, self.stream_ptr()
        N, H, W, F, KH, KW, OH, OW, ph, pw, s = geo
        for cfg in cfgs:
            for split in self.splits(cfg, op, N, OH, OW, F, KH, KW, cin):
                prob = GcbProblem(N, H, W, cin, F, KH, KW, OH, OW, ph, pw, s, s, 1, 1, split)
                nm = f"cutlass {cfg['name']}" + (f" splitk{split}" if split > 1 else "") + suffix
                st, ws_bytes, msg = cut.conv_workspace(cfg["id"], prob)
                if st:
                    rec["candidates"].append({"name": nm, "kind": "cutlass", "config": cfg, "ok": False, "error": msg})
                    continue
                ws = T.zeros(max(ws_bytes, 1), device="cuda", dtype=T.uint8)
                fn = self.cutlass_conv_fn(cfg["id"], prob, ptrs, ws, ws_bytes, stream)
                cands.append({"name": nm, "kind": "cutlass", "config": cfg, "split_k": split, "fn": fn,
                              "check": (lambda f=fn: check(f)), "_keep": (ws, prob, keep)})

    def probe_supported(self, cands):
        """Whether some CUTLASS candidate so far passes can_implement (one launch each, unchecked)."""
        for c in cands:
            if c["kind"] != "cutlass":
                continue
            try:
                c["fn"](1)
                self.timer.sync()
                return True
            except CutlassError as e:
                if e.status != 1:
                    return True     # not a refusal: let the check report it
        return False

    def splits(self, cfg, op, N, OH, OW, F, KH, KW, Cin):
        """Split-K slices to try: 1, and for wgrad one that gives ~2 blocks per SM."""
        if op != "wgrad":
            return [1]
        tm, tn, tk = cfg["tile"]
        tiles = math.ceil(F / tm) * math.ceil(KH * KW * Cin / tn)
        kiters = math.ceil(N * OH * OW / tk)
        want = max(1, min(64, round(2 * self.sms / tiles), kiters // 8))
        return [1] if want <= 1 else [1, want]

    def cutlass_conv_fn(self, cid, prob, ptrs, ws, ws_bytes, stream):
        cut = self.cut
        xp, wp, yp = (t.data_ptr() for t in ptrs)
        w = ws.data_ptr()

        def fn(inner):
            st, msg = cut.conv(cid, prob, xp, wp, yp, w, ws_bytes, inner, stream)
            if st:
                raise CutlassError(st, msg)
        return fn

    # ---- shared helpers
    def stream_ptr(self):
        st = self.timer.stream
        return st.cuda_stream if st is not None else self.torch.cuda.current_stream().cuda_stream

    def forcing(self, raw, forced):
        """fn(inner) running raw with the variant points of `forced` set for the calls."""
        V = self.gc.variants
        if not forced:
            return raw

        def fn(inner):
            before = {p: V.forced_name(p) for p in forced}
            for p, v in forced.items():
                V.force(p, v)
            try:
                raw(inner)
            finally:
                for p, v in before.items():
                    V.force(p, v)
        return fn

    def core_bench(self, rec, flops, bench, forced):
        V = self.gc.variants
        entry = {"name": "gpucmp-mma (bench_*)", "kind": "gpucmp-core"}
        before = {p: V.forced_name(p) for p in forced}
        try:
            for p, v in forced.items():
                V.force(p, v)
            t1 = bench(1, 3)
            inner = max(1, min(20000, math.ceil(self.timer.sample_s / max(t1, 1e-7))))
            sec = bench(inner, self.timer.repeats)
            entry.update(seconds=sec, tflops=flops / sec / 1e12, inner=inner, ok=True)
        except (NotImplementedError, RuntimeError, ValueError, TypeError, MemoryError) as e:
            entry.update(ok=False, error=f"{type(e).__name__}: {str(e)[:200]}")
        finally:
            for p, v in before.items():
                V.force(p, v)
        rec["candidates"].append(entry)
        self.summarise(rec)


class CutlassError(Exception):
    def __init__(self, status, msg):
        self.status = status
        super().__init__(f"CUTLASS {GCB_STATUS.get(status, status)}: {msg}")


# ------------------------------------------------------------------ report
def cell(s, key):
    v = s.get(key)
    return v["tflops"] if v else ""


def report(problems, kind):
    rows = []
    for p in problems:
        if p["kind"] != kind:
            continue
        s = p["summary"]
        if kind == "gemm":
            row = {"problem": p["name"], "m n k": f"{p['m']} {p['n']} {p['k']}",
                   "op": ("t" if p["trans_a"] else "n") + ("t" if p["trans_b"] else "n"), "dtype": p["dtype"]}
        else:
            L = p["layer"]
            row = {"layer": L[0], "batch": L[1], "pass": p["pass"], "dtype": p["dtype"]}
        row["gpucmp mma"] = cell(s, "gpucmp_mma")
        row["mma (bench_*)"] = cell(s, "gpucmp_core_bench")
        auto = s.get("gpucmp_auto")
        row["gpucmp auto"] = f"{auto['tflops']:.1f} ({auto.get('ran', '?')})" if auto else ""
        row["cuBLAS/cuDNN"] = cell(s, "torch")
        for key, col in (("cutlass_sm86", "CUTLASS sm86"), ("cutlass_any", "CUTLASS any")):
            b = s.get(key)
            row[col] = f"{b['tflops']:.1f} ({b['name'].replace('cutlass ', '')})" if b else (
                "n/a" if key == "cutlass_sm86" and s.get("cutlass_note") else "")
        row["mma / CUTLASS sm86"] = s.get("mma_over_cutlass_sm86", "")
        mma = s.get("gpucmp_mma")
        if mma and mma["seconds"] < LAUNCH_BOUND_S:
            row["note"] = "launch-bound"
        bad = [c["name"] for c in p["candidates"] if c["kind"] == "cutlass" and c.get("rel_err") is not None
               and not c["ok"]]
        if bad:
            row["note"] = (row.get("note", "") + f" {len(bad)} CUTLASS wrong!").strip()
        gbad = [c["name"] for c in p["candidates"] if c["kind"].startswith("gpucmp") and c.get("rel_err") is not None
                and not c["ok"]]
        if gbad:
            row["note"] = (row.get("note", "") + " gpucmp wrong: " + ",".join(gbad)).strip()
        rows.append(row)
    if not rows:
        return ""
    cols = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    return table(rows, cols)


def headline(problems):
    """The issue's targets: fp16/bf16/tf32 8192^3 and the 3x3 64->64 layer's three passes."""
    lines = []
    for p in problems:
        s = p["summary"]
        target = (p["kind"] == "gemm" and p["m"] == p["n"] == p["k"] == 8192 and not p["trans_a"] and not p["trans_b"]) \
            or (p["kind"] == "conv" and p["name"] == MAIN_LAYER[0])
        if not target:
            continue
        what = f"gemm 8192^3 {p['dtype']}" if p["kind"] == "gemm" else f"conv {p['name']} {p['pass']} {p['dtype']}"
        if "mma_over_cutlass_sm86" in s:
            lines.append(f"- {what}: gpucmp mma {s['gpucmp_mma']['tflops']:.1f} TFLOP/s, best sm_86-feasible CUTLASS "
                         f"{s['cutlass_sm86']['tflops']:.1f} ({s['cutlass_sm86']['name']}) -> "
                         f"{s['mma_over_cutlass_sm86']:.2f}x (target >= 1.0)")
        else:
            lines.append(f"- {what}: no ratio ({'gpucmp mma' if 'gpucmp_mma' not in s else 'CUTLASS'} missing)")
    return "\n".join(lines)


def list_configs(cut):
    print(f"# {cut.path}\nbuild: {json.dumps(cut.info)}")
    rows = []
    for c in cut.gemms + cut.convs:
        rows.append({"id": c["id"], "kind": c["kind"] if c["kind"] == "gemm" else c["op"], "name": c["name"],
                     "dtype": c["dtype"], "tile": "x".join(map(str, c["tile"])), "warp": "x".join(map(str, c["warp"])),
                     "stages": c["stages"], "smem KB": c["smem_bytes"] / 1024, "sm86": c["sm86"],
                     "built": c.get("built", True)})
    print(table(rows, list(rows[0].keys())) if rows else "(no configs)")


# ------------------------------------------------------------------ main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.environ.get("GPUCMP_CUTLASS_LIB", DEFAULT_LIB),
                    help="the CUTLASS baseline library (default: benchmarks/cutlass/build/libgpucmp_cutlass_bench.so)")
    ap.add_argument("--list", action="store_true", help="list the library's configs and exit (no GPU needed)")
    ap.add_argument("--sections", nargs="+", choices=("gemm", "conv"), default=["gemm", "conv"])
    ap.add_argument("--gemm-sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--gemm-dtypes", nargs="+", choices=("float16", "bfloat16", "tfloat32"),
                    default=["float16", "bfloat16", "tfloat32"])
    ap.add_argument("--gemm-trans", nargs="+", choices=("nn", "nt", "tn"), default=["nn"],
                    help="transpose cases of the cubes (n: as stored, t: transposed; gpucmp's trans_a, trans_b)")
    ap.add_argument("--seed-batches", type=int, nargs="*", default=[128, 32],
                    help="batches of the seeds' CNN dense GEMMs and conv layers (none: skip the seeds)")
    ap.add_argument("--seed-dtypes", nargs="+", choices=("float16", "bfloat16", "tfloat32"),
                    default=["float16", "tfloat32"], help="the seeds' GEMM dtypes (mixed_float16, float32/TF32)")
    ap.add_argument("--conv-layers", nargs="+", choices=("main", "seeds", "resnet50"),
                    default=["main", "seeds", "resnet50"])
    ap.add_argument("--conv-dtypes", nargs="+", choices=("float16", "bfloat16"), default=["float16", "bfloat16"],
                    help="dtypes of the main layer and the seeds' layers")
    ap.add_argument("--resnet-dtypes", nargs="+", choices=("float16", "bfloat16"), default=["float16"])
    ap.add_argument("--resnet-batch", type=int, default=256, help="batch of the ResNet-50 layers (bench_conv's)")
    ap.add_argument("--passes", nargs="+", choices=("fwd", "bwd_data", "bwd_filter"),
                    default=["fwd", "bwd_data", "bwd_filter"])
    ap.add_argument("--repeats", type=int, default=5, help="timed samples per candidate (median)")
    ap.add_argument("--sample-ms", type=float, default=10.0, help="length of one sample")
    ap.add_argument("--sustained-s", type=float, default=0.0,
                    help="samples of at least this many seconds (overrides --sample-ms)")
    ap.add_argument("--no-core-bench", action="store_true", help="skip the _core.bench_* cross-check column")
    ap.add_argument("--time-limit-s", type=float, default=0.0,
                    help="stop starting new problems after this many seconds (0: no limit); the rest is listed")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1024 / 2048, the main layer, 2 repeats")
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args(argv)
    if args.quick:
        args.gemm_sizes, args.seed_batches, args.conv_layers, args.repeats = [1024, 2048], [128], ["main"], 2
    if args.repeats < 1 or args.sample_ms <= 0:
        ap.error("--repeats must be >= 1 and --sample-ms > 0")
    return args


def require_gpu():
    """(torch, gpucmp device) or a clear exit when there is no GPU to run on."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 -- any import failure: no PyTorch
        sys.exit(f"bench_cutlass: needs PyTorch with CUDA (the cuBLAS / cuDNN baselines and the buffers): {e}")
    if not torch.cuda.is_available():
        sys.exit("bench_cutlass: no CUDA GPU (torch.cuda.is_available() is False); run it on the GPU machine")
    try:
        import gpucmp
    except Exception as e:  # noqa: BLE001
        sys.exit(f"bench_cutlass: cannot import gpucmp ({e}); build it in place first: "
                 "GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=90a python setup.py build_ext --inplace")
    gpus = [d for d in gpucmp.available_devices() if d.startswith("cuda")]
    if not gpus:
        sys.exit(f"bench_cutlass: gpucmp has no CUDA device (devices: {gpucmp.available_devices()}); "
                 "build it with the CUDA backend: GPUCMP_CUDA=1 python setup.py build_ext --inplace")
    return torch, gpus[0]


def write_json(path, doc):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1, default=str)
        os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    cut = load_cutlass(args.lib)
    if args.list:
        list_configs(cut)
        return 0
    torch, device = require_gpu()
    t0 = time.monotonic()
    gc = Gpucmp(device)
    cc = "%d.%d" % torch.cuda.get_device_capability(0)
    if not arch_runs_on(cut.info["arch"], cc):
        sys.exit(f"bench_cutlass: {args.lib} holds {cut.info['arch']} code, which does not run on this device "
                 f"(compute capability {cc}); rebuild: ARCH={cc.replace('.', '')}{'a' if cc == '9.0' else ''} "
                 "bash benchmarks/cutlass/build.sh")
    stream = torch.cuda.ExternalStream(gc.stream) if gc.stream else None
    sample_s = args.sustained_s if args.sustained_s > 0 else args.sample_ms * 1e-3
    timer = Timer(torch, stream, sample_s, args.repeats)
    torch.backends.cudnn.benchmark = True
    bench = Bench(args, torch, cut, gc, timer)

    print(header("CUTLASS sm80 baselines vs gpucmp mma.sync"))
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; CUTLASS {cut.info['cutlass']} "
          f"({cut.info['arch']}, {len(cut.gemms)} GEMM + {len(cut.convs)} conv configs); gpucmp {device}, "
          f"timing: {'CUDA events on gpucmp' + chr(39) + 's stream' if stream else 'host clock between syncs'}; "
          f"median of {args.repeats} samples of >= {sample_s * 1e3:.0f} ms; TFLOP/s")
    doc = {"build": cut.info, "lib": args.lib, "device": torch.cuda.get_device_name(0), "cc": cc,
           "sms": bench.sms, "torch": torch.__version__, "args": vars(args),
           "timing": "cuda-events" if stream else "host-clock", "problems": bench.problems,
           "skipped": bench.skipped}

    # the headline problems first (the largest cubes, the main layer), then the rest
    gemm_on, conv_on = "gemm" in args.sections, "conv" in args.sections
    cubes = [(f"cube {n}", n, n, n, tr[0] == "t", tr[1] == "t", dt) for dt in args.gemm_dtypes
             for n in args.gemm_sizes for tr in args.gemm_trans] if gemm_on else []
    big = max(args.gemm_sizes)
    jobs = [("gemm", c) for c in cubes if c[1] == big]
    if conv_on and "main" in args.conv_layers:
        jobs += [("conv", (MAIN_LAYER, dt, which)) for dt in args.conv_dtypes for which in args.passes]
    jobs += [("gemm", c) for c in cubes if c[1] != big]
    if gemm_on:
        jobs += [("gemm", g + (dt,)) for b in args.seed_batches for dt in args.seed_dtypes for g in seed_dense_gemms(b)]
    if conv_on:
        from bench_conv import LAYERS, resnet50_layers
        layers = []   # (layer, dtypes)
        if "seeds" in args.conv_layers:
            layers += [((L[0].replace("seeds", f"seeds b{b}"), b) + tuple(L[2:]), args.conv_dtypes)
                       for b in args.seed_batches for L in LAYERS[:3]]
        if "resnet50" in args.conv_layers:
            layers += [(tuple(L[:10]), args.resnet_dtypes) for L in resnet50_layers(args.resnet_batch)]
        for layer, dtypes in layers:
            for dt in dtypes:
                for which in args.passes:
                    if which == "bwd_data" and layer[4] < 8:
                        continue    # a first layer (C = 1, 3): its input is the data, no data gradient in training
                    jobs.append(("conv", (layer, dt, which)))

    ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
    with ctx:   # every torch op on gpucmp's stream: one stream, ordered, for all candidates
        run_jobs(bench, jobs, doc, args, t0, torch)
    report_all(bench, doc, args, t0)
    return 0


def progress_line(p, elapsed):
    s = p["summary"]
    what = (f"gemm {p['name']} {p['m']}x{p['n']}x{p['k']} {'t' if p['trans_a'] else 'n'}{'t' if p['trans_b'] else 'n'}"
            if p["kind"] == "gemm" else f"conv {p['name']} b{p['layer'][1]} {p['pass']}")
    parts = [f"[{elapsed:.0f} s] {what} {p['dtype']}:"]
    for key, label in (("gpucmp_mma", "mma"), ("gpucmp_auto", "auto"), ("torch", "torch"),
                       ("cutlass_sm86", "CUTLASS sm86"), ("cutlass_any", "CUTLASS any")):
        if key in s:
            parts.append(f"{label} {s[key]['tflops']:.1f}")
    if "mma_over_cutlass_sm86" in s:
        parts.append(f"ratio {s['mma_over_cutlass_sm86']:.2f}")
    wrong = [c["name"] for c in p["candidates"] if c.get("rel_err") is not None and not c["ok"]]
    if wrong:
        parts.append(f"WRONG: {', '.join(wrong)}")
    return " ".join(parts)


def run_jobs(bench, jobs, doc, args, t0, torch):
    last = None
    for kind, job in jobs:
        if bench.out_of_time():
            bench.skipped.append(f"{kind} {job[0] if kind == 'gemm' else job[0][0]} ... : --time-limit-s reached")
            continue
        try:
            if kind == "gemm":
                bench.gemm_problem(*job)
            else:
                bench.conv_problem(*job)
        except torch.cuda.OutOfMemoryError as e:
            bench.skipped.append(f"{kind} {job}: out of memory ({str(e)[:120]})")
        except Exception as e:  # noqa: BLE001 -- one problem's failure must not end the run
            bench.skipped.append(f"{kind} {job}: failed: {type(e).__name__}: {str(e)[:300]}")
            print(f"bench_cutlass: {kind} {job}: {type(e).__name__}: {e}", file=sys.stderr)
            try:
                torch.cuda.synchronize()
            except Exception as e2:  # noqa: BLE001
                sys.exit(f"bench_cutlass: the CUDA context is lost ({e2}); stopping")
        doc["elapsed_s"] = time.monotonic() - t0
        write_json(args.json, doc)
        torch.cuda.empty_cache()
        if bench.problems and bench.problems[-1] is not last:
            last = bench.problems[-1]
            print(progress_line(last, doc["elapsed_s"]), flush=True)


def report_all(bench, doc, args, t0):
    for kind, title in (("gemm", "GEMM"), ("conv", "Convolution")):
        t = report(bench.problems, kind)
        if t:
            print(f"\n## {title} (TFLOP/s)\n")
            print(t)
    print("\nCUTLASS sm86: the best config whose shared memory fits an sm_86 block (<= 99 KB); CUTLASS any: the best "
          "of all (incl. 128x256x64 / 256x128x64 3-stage and 128x128x64 4-stage tiles, too big for sm_86). "
          "Conv filters: CUTLASS gets KRSC, gpucmp (kh, kw, in, out), each transposed once outside timing.")
    hl = headline(bench.problems)
    if hl:
        print("\n## Issue 11 targets (gpucmp mma.sync / best sm_86-feasible CUTLASS)\n")
        print(hl)
    if bench.skipped:
        print(f"\nskipped ({len(bench.skipped)}):")
        for s in bench.skipped[:40]:
            print(f"  {s}")
    doc["elapsed_s"] = time.monotonic() - t0
    doc["headline"] = hl
    write_json(args.json, doc)
    print(f"\n({doc['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
