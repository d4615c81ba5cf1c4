#!/usr/bin/env bash
# gemm_mma_on_device.sh -- issue 11's mma.sync GEMM tiles on the GPU, in one call of the device
# tool, under 9 minutes (DEADLINE_S=530). From the repo root, with the wheels in .whl/ (the
# nvidia-cutlass headers; installed into /tmp/site when missing):
#
#     OUT=/some/dir bash benchmarks/gemm_mma_on_device.sh
#
# 1. build, side by side: gpucmp in place with the CUDA backend (GPUCMP_CUDA=1,
#    GPUCMP_CUDA_ARCHS=$ARCHS default 90a, GPUCMP_NVCC_JOBS=16) and the CUTLASS baseline library
#    with its GEMM configs only (benchmarks/cutlass/build.sh KINDS=gemm; conv configs refuse);
#    SKIP_BUILD=1 reuses both;
# 2. tests, each under a timeout: tests/test_gemm_mma_tiles.py (every tile x dtype x transpose
#    x tail shape against the oracle), its run under sm_86 limits (test_cuda_sm86_limits.py:
#    the 144 KB tile refused, the rest passing), and test_ops.py's CUDA gemm / dense cases;
# 3. bench_cutlass.py --sections gemm with every tile forced (--mma-tiles all) and the sm_86
#    plan, next to the auto mma.sync choice, cuBLAS and every CUTLASS sm80 GEMM config:
#    8192^3 first (fp16, bf16, tf32), then 4096 / 2048 / 1024, then the seeds' dense GEMMs;
#    cut off at the deadline (the rest listed as skipped).
# A failing stage does not stop the later ones (each one's rc is in the log). Output in $OUT:
# log.txt (everything, stage times), tests_*.txt, bench_gemm_mma.md (the tables),
# bench_gemm_mma.json (every candidate), build_gpucmp.log / build_cutlass.log.
set -uo pipefail
OUT=${OUT:-/tmp/gpucmp-out}; mkdir -p "$OUT"
LOG=$OUT/log.txt
export PYTHONUNBUFFERED=1
T0=$(date +%s)
DEADLINE=$(( T0 + ${DEADLINE_S:-530} ))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
# timeout for a stage: at most $1 s, and never past the deadline minus $2 s kept for later stages
budget() { local l=$(( $(left) - $2 )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
  --format=csv 2>&1 | tee -a "$LOG"
SITE=${SITE:-/tmp/site}
if [ ! -f "$SITE/cutlass_library/source/include/cutlass/cutlass.h" ] && ls .whl/*.whl >/dev/null 2>&1; then
  stamp "installing .whl/*.whl into $SITE"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    2>&1 | tail -5 | tee -a "$LOG"
fi
export PYTHONPATH=$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${CUTLASS_INCLUDE:-}" ] && [ -f "$SITE/cutlass_library/source/include/cutlass/cutlass.h" ]; then
  export CUTLASS_INCLUDE=$SITE/cutlass_library/source/include
fi

# ---- 1. build
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  stamp "build: gpucmp (archs ${ARCHS:-90a}) and the CUTLASS GEMM library, side by side"
  ( ARCH=${CUTLASS_ARCH:-90a} JOBS=${CUTLASS_JOBS:-12} KINDS=gemm timeout 420 bash benchmarks/cutlass/build.sh \
      > "$OUT/build_cutlass.log" 2>&1; echo $? > "$OUT/.cutlass_rc" ) &
  CPID=$!
  GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=${ARCHS:-90a} GPUCMP_NVCC_JOBS=${NVCC_JOBS:-16} timeout 420 \
    python3 setup.py build_ext --inplace --force > "$OUT/build_gpucmp.log" 2>&1
  GRC=$?
  stamp "gpucmp build rc=$GRC"
  [ "$GRC" != 0 ] && tail -40 "$OUT/build_gpucmp.log" | tee -a "$LOG"
  wait "$CPID"
  CRC=$(cat "$OUT/.cutlass_rc" 2>/dev/null || echo 1); rm -f "$OUT/.cutlass_rc"
  grep -E "^build.sh:" "$OUT/build_cutlass.log" | tee -a "$LOG"
  stamp "CUTLASS build rc=$CRC"
  [ "$CRC" != 0 ] && tail -40 "$OUT/build_cutlass.log" | tee -a "$LOG"
fi
python3 -c "import gpucmp; from gpucmp import variants; print('gpucmp devices', gpucmp.available_devices());
print('cuda.gemm.mma_tile', variants.available('cuda.gemm.mma_tile'))" 2>&1 | tee -a "$LOG"

# ---- 2. tests (about 20 + 40 + 60 s)
run_tests() {  # name, seconds at most, pytest args...
  local name=$1 t; t=$(budget "$2" 200); shift 2
  stamp "tests $name (timeout $t s): pytest $*"
  timeout "$t" python3 -m pytest -q -p no:cacheprovider "$@" > "$OUT/tests_$name.txt" 2>&1
  local rc=$?
  tail -25 "$OUT/tests_$name.txt" | tee -a "$LOG"
  stamp "tests $name rc=$rc"
}
run_tests tiles 90 -m cuda -rs tests/test_gemm_mma_tiles.py
run_tests sm86 120 -m cuda tests/test_cuda_sm86_limits.py -k "gemm_mma_tiles or knob"
run_tests ops_gemm 90 -m cuda tests/test_ops.py -k "gemm or dense"

# ---- 3. the benchmark
LEFT=$(left)
if [ "$LEFT" -lt 40 ]; then stamp "only $LEFT s left: no benchmark"; exit 1; fi
stamp "bench_cutlass.py --sections gemm --mma-tiles all (time limit $(( LEFT - 30 )) s)"
# shellcheck disable=SC2086
timeout "$(( LEFT - 5 ))" python3 benchmarks/bench_cutlass.py --sections gemm --mma-tiles all --allow-no-cutlass \
  --gemm-sizes 8192 4096 2048 1024 --gemm-dtypes float16 bfloat16 tfloat32 --seed-batches 128 \
  --repeats ${REPEATS:-4} --json "$OUT/bench_gemm_mma.json" --time-limit-s "$(( LEFT - 30 ))" ${BENCH_ARGS:-} \
  2>&1 | tee "$OUT/bench_gemm_mma.md"
RC=${PIPESTATUS[0]}
cat "$OUT/bench_gemm_mma.md" >> "$LOG"
stamp "done (bench rc=$RC)"
exit "$RC"
