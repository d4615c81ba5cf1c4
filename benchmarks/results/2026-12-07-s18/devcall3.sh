#!/usr/bin/env bash
# session 18, call 3: tree = main + both wip patches (branch device-try), the split-sums
# tests' "none" fixed. Build on the device (no CUTLASS), the split-sums tests, the v2
# tests' failure lines, then the GAN iteration against PyTorch's graph, split sums in the
# kernel / in a launch, alternating, four rounds, and both forms' launch profiles.
set -uo pipefail
export PYTHONUNBUFFERED=1
L=${OUT:-/tmp/gpucmp-out}; mkdir -p "$L"
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-430}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$L/checks.txt"; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$L/checks.txt"
export PYTHONPATH=$PWD
OUT=$L DEADLINE_S=220 bash benchmarks/gemm_mma_v2_on_device.sh build > $L/stage_build.txt 2>&1
stamp "build rc=$?"
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
timeout $(left 60) $P tests/test_cuda_fast_paths.py -k "split_sums or gemm_small" > $L/t_split.txt 2>&1; tail -3 $L/t_split.txt | tee -a $L/checks.txt
timeout $(left 40) $P tests/test_gemm_mma_v2.py --tb=line > $L/t_v2.txt 2>&1; grep -E "^/|^E |FAILED|passed|failed" $L/t_v2.txt | head -30 | tee -a $L/checks.txt
for i in 1 2 3 4; do
  for how in kernel launch; do
    F=""; [ $how = launch ] && F="cuda.split_sums=launch"
    GPUCMP_FORCE=$F timeout $(left 30) python3 benchmarks/bench_rnn.py --devices cuda:0 --models gan --frameworks gpucmp torch-graph --steps 20 > $L/bench_gan_${how}_$i.txt 2>&1
    stamp "GAN $how $i: $(grep -E '\| gan' $L/bench_gan_${how}_$i.txt | awk -F'|' '{printf "%s=%s ", $5, $6}')"
  done
done
for how in kernel launch; do
  F=""; [ $how = launch ] && F="cuda.split_sums=launch"
  GPUCMP_FORCE=$F timeout $(left 40) python3 benchmarks/profile_gan_cuda.py --device cuda:0 --batch 128 --iters 200 --trace-iters 20 > $L/gan_profile_$how.txt 2>&1
  stamp "profile $how rc=$?"; grep -E "iteration|kernels:|copies" $L/gan_profile_$how.txt | head -4 | tee -a $L/checks.txt
done
stamp "done"
