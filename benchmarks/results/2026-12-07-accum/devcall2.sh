#!/usr/bin/env bash
# session 14, call 2 (accumulate + TF32 on the igemm kernel, tree 5573640+): CUDA tests of
# both, memcheck, ResNet-50 b256 side by side in all three precisions, step profiles
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-585}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> $L/checks.txt
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "fast paths: igemm (16-bit, TF32, accumulate) + large 16-bit"
timeout $(left 110) $P tests/test_cuda_fast_paths.py -k "igemm or large_16bit" > $L/t_fast.txt 2>&1; tail -4 $L/t_fast.txt >> $L/checks.txt
stamp "conv op tests, every path (plain + accumulate)"
timeout $(left 120) $P tests/test_ops.py -k "conv2d" > $L/t_ops.txt 2>&1; tail -3 $L/t_ops.txt >> $L/checks.txt
stamp "plan graph + small resnet + training + mixed precision"
timeout $(left 100) $P tests/test_plan_graph.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py > $L/t_plan.txt 2>&1; tail -3 $L/t_plan.txt >> $L/checks.txt
stamp "memcheck: igemm accumulate, igemm TF32, halo accumulate"
timeout $(left 60) compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_fast_paths.py -k "igemm_bwd_data_accumulate or (igemm_tf32 and 28x28) or (large_16bit and bfloat16 and 56x56)" > $L/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $L/checks.txt; grep -E "ERROR SUMMARY|passed|failed" $L/memcheck.txt | tail -3 >> $L/checks.txt
stamp "ResNet-50 side by side b256: bf16 (eager + compile), fp16, fp32 (TF32)"
timeout $(left 300) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 float32 --steps 20 --compile mixed_bfloat16 --json $L/r50.json > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -9 $L/r50.txt >> $L/checks.txt
stamp "step profiles b256: bf16, fp32"
timeout $(left 40) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 > $L/profile_bf16.txt 2>&1; echo "rc=$?" >> $L/checks.txt
timeout $(left 40) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision float32 > $L/profile_fp32.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
