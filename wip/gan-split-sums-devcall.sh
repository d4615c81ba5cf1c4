#!/usr/bin/env bash
# The first device call for wip/gan-split-sums.patch (written in session 18, when no machine
# was lent): tree = main + the patch applied; from the repo root, `bash
# wip/gan-split-sums-devcall.sh` (about 8 minutes; nothing to carry). Builds gpucmp on the
# device (90a, 16 jobs), runs the new cuda.split_sums tests (small-GEMM split K and
# bias_grad: oracle, kernel == launch bit for bit, repeatable) with the small-GEMM and
# bias_grad op tests, the standalone GEMM program (the small path on every shape and dtype,
# sums now in the kernel), then the GAN iteration against PyTorch's CUDA graph with the sums
# in the kernel and (GPUCMP_FORCE=cuda.split_sums=launch) in a second launch, alternating,
# three rounds each, and the CUPTI profile of the kernel form. Outputs in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
L=${OUT:-/tmp/gpucmp-out}; mkdir -p "$L"
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-570}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$L/checks.txt"; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$L/checks.txt"
export PYTHONPATH=$PWD
stamp "build (90a, 16 jobs)"
GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=90a GPUCMP_NVCC_JOBS=16 timeout $(left 240) python3 setup.py build_ext --inplace > $L/build.log 2>&1
rc=$?; stamp "build rc=$rc"; [ $rc != 0 ] && { tail -30 $L/build.log >> $L/checks.txt; exit 1; }
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "tests: split sums, small GEMMs, bias_grad, the GAN seed, step graphs"
timeout $(left 120) $P tests/test_cuda_fast_paths.py -k "split_sums or gemm_small" > $L/t_split.txt 2>&1; tail -2 $L/t_split.txt >> $L/checks.txt
timeout $(left 90) $P tests/test_ops.py -k "bias_grad or gemm or dense" tests/test_gan_seed.py tests/test_plan_graph.py > $L/t_ops.txt 2>&1; tail -2 $L/t_ops.txt >> $L/checks.txt
stamp "standalone GEMM program (small path, sums in the kernel)"
timeout $(left 150) make -C tests/cuda -j16 GC_ARCH="-gencode=arch=compute_90a,code=sm_90a" gemm > $L/t_gemm_build.txt 2>&1 \
  && timeout $(left 60) build/tests/cuda/test_gemm --quick > $L/t_gemm.txt 2>&1; echo "test_gemm rc=$?" >> $L/checks.txt; tail -3 $L/t_gemm.txt >> $L/checks.txt
for i in 1 2 3; do
  for how in kernel launch; do
    stamp "GAN iteration, split sums: $how, round $i"
    F=""; [ $how = launch ] && F="cuda.split_sums=launch"
    GPUCMP_FORCE=$F timeout $(left 45) python3 benchmarks/bench_rnn.py --devices cuda:0 --models gan --frameworks gpucmp torch-graph --steps 20 > $L/bench_gan_${how}_$i.txt 2>&1; tail -3 $L/bench_gan_${how}_$i.txt >> $L/checks.txt
  done
done
stamp "the GAN iteration's profile (sums in the kernel)"
timeout $(left 45) python3 benchmarks/profile_gan_cuda.py --device cuda:0 --batch 128 --iters 200 --trace-iters 20 > $L/gan_profile.txt 2>&1; echo "gan profile rc=$?" >> $L/checks.txt
stamp "done"
