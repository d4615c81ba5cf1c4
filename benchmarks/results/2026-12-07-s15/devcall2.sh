#!/usr/bin/env bash
# session 15, call 2 (the first that started): tree = main 8567d07 (BN mask_from_x, TF32 wgmma
# weight gradient) + wip/tma-epilogue.patch. Correctness first (new tests, memcheck), then
# ResNet-50 b256 side by side, step profiles, the TMA-epilogue A/B and TF32 per pass.
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L/raw
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-588}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $L/checks.txt
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "TF32 wgmma weight gradient (new kernel)"
timeout $(left 90) $P tests/test_cuda_wgrad_tf32.py -x > $L/raw/t_tf32w.txt 2>&1; tail -3 $L/raw/t_tf32w.txt >> $L/checks.txt
stamp "fast paths: tma epilogue, igemm, wgrad, large 16-bit"
timeout $(left 100) $P tests/test_cuda_fast_paths.py -k "tma or igemm or large_16bit or wgrad" > $L/raw/t_fast.txt 2>&1; tail -3 $L/raw/t_fast.txt >> $L/checks.txt
stamp "op tests: batchnorm (mask_from_x), conv2d, gemm"
timeout $(left 90) $P tests/test_ops.py -k "batchnorm or conv2d or gemm" > $L/raw/t_ops.txt 2>&1; tail -3 $L/raw/t_ops.txt >> $L/checks.txt
stamp "memcheck: tf32 wgrad, tma epilogue, BN"
timeout $(left 70) compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_wgrad_tf32.py tests/test_cuda_fast_paths.py tests/test_ops.py -k "(wgrad_tf32 and (20x20 or 28x28)) or (gemm_wgmma_tma and bfloat16) or (tma_epilogue and 28x28) or (batchnorm_bwd and cuda)" > $L/raw/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $L/checks.txt; grep -E "ERROR SUMMARY|passed|failed" $L/raw/memcheck.txt | tail -3 >> $L/checks.txt
stamp "sm_86 limits; plan + training"
timeout $(left 80) $P tests/test_cuda_sm86_limits.py tests/test_plan_graph.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py > $L/raw/t_plan.txt 2>&1; tail -3 $L/raw/t_plan.txt >> $L/checks.txt
stamp "ResNet-50 side by side b256: bf16 (eager + compile), fp32 (TF32)"
timeout $(left 190) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 float32 --steps 20 --compile mixed_bfloat16 --json $L/raw/r50.json > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -6 $L/r50.txt >> $L/checks.txt
stamp "step profiles b256: bf16, fp32"
timeout $(left 40) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 > $L/profile_bf16.txt 2>&1
timeout $(left 40) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision float32 > $L/profile_fp32.txt 2>&1
stamp "epilogue A/B: every ResNet-50 conv pass, bf16, registers then TMA"
for e in regs tma; do GPUCMP_FORCE=cuda.gemm.wgmma_epi=$e timeout $(left 50) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --no-vendor --no-torch --repeats 3 > $L/raw/conv_$e.txt 2>&1; echo "conv $e rc=$?" >> $L/checks.txt; done
stamp "TF32 per pass against cuDNN"
timeout $(left 80) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes tfloat32 --per-pass --no-torch --repeats 3 > $L/conv_tf32.txt 2>&1; echo "conv tf32 rc=$?" >> $L/checks.txt
stamp "done"
tar czf $L/raw.tgz -C $L raw && rm -rf $L/raw
