#!/usr/bin/env bash
# session 18, one call for both patches (device time was scarce): tree = main +
# wip/gemm-mma-v2.patch + wip/gan-split-sums.patch (branch device-try), carry .whl.
# gpucmp and the CUTLASS GEMM library built side by side on the device; the v2 GEMM tests
# and the split-sums tests; v2 (auto) / v1 / CUTLASS sm80 / cuBLAS at 8192 and 4096 nn, f16,
# bf16, TF32; then the GAN iteration against PyTorch's graph with the split sums in the
# kernel and in a second launch, two rounds. Stops at DEADLINE_S.
set -uo pipefail
export PYTHONUNBUFFERED=1
L=${OUT:-/tmp/gpucmp-out}; mkdir -p "$L"
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-585}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$L/checks.txt"; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$L/checks.txt"
export PYTHONPATH=$PWD:/tmp/site
S=benchmarks/gemm_mma_v2_on_device.sh
( OUT=$L DEADLINE_S=230 bash $S cutlass-build > $L/stage_cutlass_build.txt 2>&1 ) &
OUT=$L DEADLINE_S=230 bash $S build > $L/stage_build.txt 2>&1
wait
stamp "builds done"; grep -E "rc=|build.sh:" $L/log.txt | tail -4 >> $L/checks.txt
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
timeout $(left 90) $P tests/test_gemm_mma_v2.py > $L/t_v2.txt 2>&1; echo "v2 tests:" >> $L/checks.txt; tail -3 $L/t_v2.txt >> $L/checks.txt
stamp "v2 tests done"
timeout $(left 50) $P tests/test_cuda_fast_paths.py -k "split_sums" > $L/t_split.txt 2>&1; echo "split tests:" >> $L/checks.txt; tail -3 $L/t_split.txt >> $L/checks.txt
stamp "split tests done"
B=$(left 130)
timeout $B python3 benchmarks/bench_cutlass.py --sections gemm --seed-batches --no-core-bench --allow-no-cutlass \
  --repeats 3 --sample-ms 10 --gemm-dtypes float16 bfloat16 tfloat32 --gemm-sizes 8192 4096 --gemm-trans nn \
  --json $L/bench_cutlass.json --time-limit-s $((B - 10)) > $L/bench_cutlass.md 2>&1
stamp "cutlass bench rc=$?"; tail -20 $L/bench_cutlass.md >> $L/checks.txt
for i in 1 2; do
  for how in kernel launch; do
    F=""; [ $how = launch ] && F="cuda.split_sums=launch"
    GPUCMP_FORCE=$F timeout $(left 40) python3 benchmarks/bench_rnn.py --devices cuda:0 --models gan --frameworks gpucmp torch-graph --steps 20 > $L/bench_gan_${how}_$i.txt 2>&1
    stamp "GAN split sums $how round $i"; tail -2 $L/bench_gan_${how}_$i.txt >> $L/checks.txt
  done
done
stamp "done"
