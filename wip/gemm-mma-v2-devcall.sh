#!/usr/bin/env bash
# The first device call for wip/gemm-mma-v2.patch (session 18 wrote it; no machine was lent):
# tree = main + the patch applied, run with carry [".whl"] (.whl/ is git-ignored) holding
# the nvidia-cutlass wheel (pip download --no-deps -d .whl nvidia-cutlass); from the repo
# root: bash wip/gemm-mma-v2-devcall.sh. The v2 mma.sync GEMM's first run on a GPU: gpucmp
# and the CUTLASS GEMM library built on the device side by side (16 jobs each), the v2 tests
# (index model, every tile / dtype / transpose / tail / epilogue / split K, the sm_86 limits,
# test_ops gemm / dense), then v1 vs v2 vs CUTLASS vs cuBLAS at 8192..1024 nn in one process.
set -uo pipefail
S=benchmarks/gemm_mma_v2_on_device.sh
export OUT=${OUT:-/tmp/gpucmp-out}
T0=$(date +%s)
( DEADLINE_S=240 bash $S cutlass-build > $OUT/stage_cutlass_build.txt 2>&1 ) &
DEADLINE_S=240 bash $S build > $OUT/stage_build.txt 2>&1
wait
echo "[$(( $(date +%s) - T0 )) s] builds done" >> $OUT/log.txt
DEADLINE_S=170 bash $S tests > $OUT/stage_tests.txt 2>&1
echo "[$(( $(date +%s) - T0 )) s] tests done" >> $OUT/log.txt
L=$(( 575 - ($(date +%s) - T0) ))
[ "$L" -gt 40 ] && DEADLINE_S=$L REPEATS=3 bash $S cutlass-bench > $OUT/stage_cutlass_bench.txt 2>&1
echo "[$(( $(date +%s) - T0 )) s] all done" >> $OUT/log.txt
