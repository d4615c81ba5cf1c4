#!/usr/bin/env bash
# session 14, call 1 (conv2d_bwd_data accumulate: fan-out adds in the dgrad epilogue):
# CUDA tests of the new paths, memcheck, ResNet-50 b256 side by side, step profile
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-580}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> $L/checks.txt
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "conv2d_bwd_data op tests, every path, plain + accumulate"
timeout $(left 120) $P tests/test_ops.py -k "conv2d_bwd_data" > $L/t_ops.txt 2>&1; tail -3 $L/t_ops.txt >> $L/checks.txt
stamp "fast paths: large 16-bit + igemm (accumulate included)"
timeout $(left 100) $P tests/test_cuda_fast_paths.py -k "large_16bit or igemm" > $L/t_fast.txt 2>&1; tail -3 $L/t_fast.txt >> $L/checks.txt
stamp "plan graph + small resnet + training + mixed precision"
timeout $(left 100) $P tests/test_plan_graph.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py > $L/t_plan.txt 2>&1; tail -3 $L/t_plan.txt >> $L/checks.txt
stamp "memcheck: igemm accumulate + halo accumulate"
timeout $(left 90) compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_fast_paths.py -k "igemm_bwd_data_accumulate or (large_16bit and bfloat16 and 56x56)" > $L/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $L/checks.txt; grep -E "ERROR SUMMARY|passed|failed" $L/memcheck.txt | tail -3 >> $L/checks.txt
stamp "ResNet-50 side by side b256: bf16 (eager + compile), fp16"
timeout $(left 260) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 --steps 20 --compile mixed_bfloat16 --json $L/r50.json > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -7 $L/r50.txt >> $L/checks.txt
stamp "step profile bf16 b256"
timeout $(left 60) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 > $L/profile.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
