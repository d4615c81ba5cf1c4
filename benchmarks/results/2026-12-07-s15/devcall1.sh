#!/usr/bin/env bash
# session 15, call 1: wip/tma-epilogue.patch applied to 14844d7 (the wgmma GEMM kernel's TMA-store epilogue, TF32 igemm
# for the halo kernel's layers): tests, memcheck, ResNet-50 b256 side by side, the
# epilogue A/B on every ResNet-50 conv pass, step profiles, the seeds' CNN
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L/raw
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-585}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $L/checks.txt
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "fast paths: tma epilogue, igemm (16-bit, TF32, accumulate), large 16-bit"
timeout $(left 100) $P tests/test_cuda_fast_paths.py -k "tma or igemm or large_16bit" > $L/raw/t_fast.txt 2>&1; tail -3 $L/raw/t_fast.txt >> $L/checks.txt
stamp "memcheck: tma epilogue (gemm, igemm fwd, igemm accumulate)"
timeout $(left 60) compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_fast_paths.py -k "(gemm_wgmma_tma and bfloat16) or (tma_epilogue and 28x28) or (accumulate and tma and 14x14)" > $L/raw/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $L/checks.txt; grep -E "ERROR SUMMARY|passed|failed" $L/raw/memcheck.txt | tail -3 >> $L/checks.txt
stamp "epilogue A/B: every ResNet-50 conv pass, bf16, registers then TMA"
for e in regs tma; do GPUCMP_FORCE=cuda.gemm.wgmma_epi=$e timeout $(left 55) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --no-vendor --no-torch --repeats 3 > $L/conv_$e.txt 2>&1; echo "conv $e rc=$?" >> $L/checks.txt; done
stamp "sm_86 limits + accumulate paths (14844d7: staged_bwd_data, cuDNN accumulate)"
timeout $(left 60) $P tests/test_cuda_sm86_limits.py > $L/raw/t_sm86.txt 2>&1; tail -3 $L/raw/t_sm86.txt >> $L/checks.txt
stamp "gemm + conv op tests, every path; plan + training"
timeout $(left 100) $P tests/test_ops.py -k "gemm or conv2d" tests/test_plan_graph.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py > $L/raw/t_ops.txt 2>&1; tail -3 $L/raw/t_ops.txt >> $L/checks.txt
stamp "ResNet-50 side by side b256: bf16 (eager + compile), fp32 (TF32)"
timeout $(left 200) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 float32 --steps 20 --compile mixed_bfloat16 --json $L/raw/r50.json > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -6 $L/r50.txt >> $L/checks.txt
stamp "step profile b256: bf16"
timeout $(left 40) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 > $L/profile_bf16.txt 2>&1
stamp "done"
tar czf $L/raw.tgz -C $L raw && rm -rf $L/raw
