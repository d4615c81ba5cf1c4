"""GEMM throughput: gpucmp's own kernels side by side with what users would otherwise use.

CPU (always): float32 GFLOP/s of gpucmp (each SIMD micro-kernel this CPU runs), NumPy
(OpenBLAS or whatever BLAS it links) and PyTorch CPU when importable, at 256..2048, on the
same threads. GPU (when gpucmp has a CUDA device): TFLOP/s of gpucmp and cuBLAS (impl=
'vendor', and PyTorch when importable) for fp32 (exact), tf32, fp16 and bf16 at 4096 and
8192. With --sustained-s S, gpucmp and cuBLAS are also timed in samples of at least S
seconds of back-to-back calls (the "sustained" columns): long enough for the card to reach
its power limit and the clock it holds there, as gpucmp.benchmark() and a training run
see it; the default columns time bursts of `--repeats` samples of one call.

    python benchmarks/bench_gemm.py [--sizes 1024 2048] [--gpu-sizes 4096 8192] [--quick]
        [--sustained-s 1.0] [--gpu-shapes 6400x512x256 256x512x6400:tn] [--dtypes float32]

--gpu-shapes MxNxK[:ab] times given shapes instead of the squares (a, b = n or t: whether
op(A) / op(B) is transposed; the recurrent layers' GEMMs are not square): gpucmp, cuBLAS
and torch.matmul on the same operands' layout; --dtypes limits the dtypes of either table.

To compare against a current NumPy fairly, run with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE
unset (some machines set them for old OpenBLAS builds; they slow a current one down).
PyTorch CPU is timed in a separate process: it carries its own OpenMP runtime, and two
spin-waiting runtimes in one process on few cores would slow both.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header, table, timeit, try_import_torch  # noqa: E402

import gpucmp  # noqa: E402
from gpucmp import _core  # noqa: E402


def blas_info():
    try:
        from threadpoolctl import threadpool_info
        infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if infos:
            i = infos[0]
            return f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, {i.get('num_threads')} threads)"
    except Exception:  # noqa: BLE001
        pass
    return "unknown BLAS"


def torch_cpu_gflops(n, reps):
    """GFLOP/s of torch.matmul on the CPU at n, measured in a child process."""
    code = ("import json, os, sys, time, torch; n, r = int(sys.argv[1]), int(sys.argv[2]);"
            "torch.set_num_threads(int(os.environ.get('OMP_NUM_THREADS', os.cpu_count())));"
            "a = torch.randn(n, n); b = torch.randn(n, n); torch.matmul(a, b); ts = []\n"
            "for _ in range(r):\n t0 = time.perf_counter(); torch.matmul(a, b); ts.append(time.perf_counter() - t0)\n"
            "ts.sort(); print(json.dumps(2.0 * n ** 3 / ts[len(ts) // 2] / 1e9))")
    out = subprocess.run([sys.executable, "-c", code, str(n), str(reps)], capture_output=True, text=True)
    try:
        return float(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return None


DTYPES = ("float32", "tfloat32", "float16", "bfloat16")


def cpu_rows(sizes, repeats):
    has_torch = try_import_torch() is not None
    rng = np.random.default_rng()
    rows = []
    variants = _core.cpu_simd_variants()
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), np.float32)
        flops = 2.0 * n ** 3
        reps = max(3, min(repeats, int(2e10 / flops) + 1))
        row = {"n": n}
        t_np, _, _ = timeit(lambda: np.matmul(a, b, out=c), repeats=reps)
        row["numpy GFLOP/s"] = flops / t_np / 1e9
        for v in variants:
            _core.cpu_force_simd(v)
            t, _, _ = timeit(lambda: _core.run_op("gemm", "cpu", (a, b, None), (c,), {}), repeats=reps)
            row[f"gpucmp {v}"] = flops / t / 1e9
        _core.cpu_force_simd("auto")
        best = max(row[f"gpucmp {v}"] for v in variants)
        row["gpucmp best / numpy"] = best / row["numpy GFLOP/s"]
        if has_torch:
            g = torch_cpu_gflops(n, reps)
            if g:
                row["torch GFLOP/s"] = g
                row["gpucmp best / torch"] = best / g
        rows.append(row)
    cols = ["n", "numpy GFLOP/s"] + [f"gpucmp {v}" for v in variants] + ["gpucmp best / numpy"]
    if has_torch:
        cols += ["torch GFLOP/s", "gpucmp best / torch"]
    return rows, cols


def parse_shape(text):
    """'6400x512x256:nt' -> (6400, 512, 256, False, True); ValueError naming the text."""
    dims, _, trans = text.partition(":")
    try:
        m, n, k = (int(v) for v in dims.split("x"))
    except ValueError:
        raise ValueError(f"--gpu-shapes: {text!r} is not MxNxK[:ab]") from None
    trans = trans or "nn"
    if len(trans) != 2 or set(trans) - {"n", "t"} or min(m, n, k) < 1:
        raise ValueError(f"--gpu-shapes: {text!r} is not MxNxK[:ab] with positive sizes, a and b in n/t")
    return m, n, k, trans[0] == "t", trans[1] == "t"


def gpu_rows(device, sizes, repeats, sustained_s=0.0, shapes=None, dtypes=DTYPES):
    """Times whole run_op calls on device-resident data is not possible through run_op (it
    stages host arrays), so the GPU benchmark uses the plan-free timing helper in _core
    when present; otherwise it reports that it cannot measure."""
    bench = getattr(_core, "bench_gemm", None)
    if bench is None:
        print("(this build has no _core.bench_gemm: GPU GEMM timing needs the CUDA backend)")
        return [], []
    torch = try_import_torch()
    rows = []
    cases = shapes or [(n, n, n, False, False) for n in sizes]
    for m, n, k, ta, tb in cases:
        flops = 2.0 * m * n * k
        for dtype in dtypes:
            row = {"n": f"{m}x{n}x{k}:{'tn'[not ta]}{'tn'[not tb]}" if shapes else n, "dtype": dtype}
            for impl in ("own", "vendor"):
                try:
                    sec = bench(device, m, n, k, dtype, impl, repeats, trans_a=ta, trans_b=tb)
                    row[f"{impl} TFLOP/s"] = flops / sec / 1e12
                    if sustained_s > 0:
                        inner = max(1, int(sustained_s / sec))
                        sec = bench(device, m, n, k, dtype, impl, 3, trans_a=ta, trans_b=tb, warmup=inner,
                                    inner=inner)
                        row[f"{impl} sustained"] = flops / sec / 1e12
                except (NotImplementedError, RuntimeError, ValueError) as e:
                    row[f"{impl} TFLOP/s"] = f"n/a ({e})"
            if isinstance(row.get("own TFLOP/s"), float) and isinstance(row.get("vendor TFLOP/s"), float):
                row["own / cuBLAS"] = row["own TFLOP/s"] / row["vendor TFLOP/s"]
            if torch is not None and torch.cuda.is_available():
                tdt = {"float32": torch.float32, "tfloat32": torch.float32, "float16": torch.float16,
                       "bfloat16": torch.bfloat16}[dtype]
                torch.backends.cuda.matmul.allow_tf32 = dtype == "tfloat32"
                a = torch.randn(*((k, m) if ta else (m, k)), device="cuda", dtype=tdt)
                b = torch.randn(*((n, k) if tb else (k, n)), device="cuda", dtype=tdt)
                opa, opb = (a.t() if ta else a), (b.t() if tb else b)
                t, _, _ = timeit(lambda: torch.matmul(opa, opb), repeats=repeats, warmup=3,
                                 sync=torch.cuda.synchronize)
                row["torch TFLOP/s"] = flops / t / 1e12
            rows.append(row)
    cols = ["n", "dtype", "own TFLOP/s", "vendor TFLOP/s", "own / cuBLAS", "torch TFLOP/s"]
    if sustained_s > 0:
        cols += ["own sustained", "vendor sustained"]
    return rows, cols


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 1536, 2048])
    ap.add_argument("--gpu-sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats (smoke run)")
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--sustained-s", type=float, default=0.0,
                    help="also time samples of at least this many seconds (the card at its power limit)")
    ap.add_argument("--gpu-shapes", nargs="+", metavar="MxNxK[:ab]",
                    help="GPU shapes instead of --gpu-sizes' squares (a, b: n or t)")
    ap.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES),
                    help="GPU dtypes to time (tfloat32: float32 with TF32 allowed)")
    args = ap.parse_args()
    try:
        shapes = [parse_shape(s) for s in args.gpu_shapes] if args.gpu_shapes else None
    except ValueError as e:
        ap.error(str(e))
    if args.quick:
        args.sizes, args.gpu_sizes, args.repeats = [128, 256], [512], 3
    print(header("GEMM benchmark"))
    print(f"numpy {np.__version__} with {blas_info()}; gpucmp CPU micro-kernel {_core.cpu_simd_variant()}")
    if not args.no_cpu:
        rows, cols = cpu_rows(args.sizes, args.repeats)
        print("\n## CPU float32 (GFLOP/s)\n")
        print(table(rows, cols))
    gpus = [d for d in gpucmp.available_devices() if d.startswith("cuda")]
    if gpus:
        rows, cols = gpu_rows(gpus[0], args.gpu_sizes, args.repeats, args.sustained_s, shapes, args.dtypes)
        if rows:
            print(f"\n## GPU {gpus[0]} (TFLOP/s)\n")
            print(table(rows, cols))


if __name__ == "__main__":
    main()
