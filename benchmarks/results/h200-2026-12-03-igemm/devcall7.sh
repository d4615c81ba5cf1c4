#!/usr/bin/env bash
# session 12, call 7 (main @ 36f100e: igemm 128/256 tiles, strided 1x1 dgrad, cast_multi):
# ResNet-50 side by side, CUDA tests, conv table with bias, profile, memcheck
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-580}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1 || { stamp "NO CUDA"; exit 1; }
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "cuda fast paths (all) + training paths"
timeout $(left 100) $P tests/test_cuda_fast_paths.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py > $L/t_checks.txt 2>&1; tail -3 $L/t_checks.txt >> $L/checks.txt
stamp "ResNet-50 side by side: bf16 (eager + compile), fp16, fp32"
timeout $(left 300) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 float32 --steps 20 --compile mixed_bfloat16 --json $L/r50_all.json > $L/r50_all.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -9 $L/r50_all.txt >> $L/checks.txt
stamp "conv per pass with bias vs torch with bias"
timeout $(left 60) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --bias --no-vendor --repeats 5 > $L/conv_bias.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "step profile"
timeout $(left 30) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 --top 40 --json $L/profile.json > $L/profile.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "op matrix on cuda (conv, gemm, casts, optimizers)"
timeout $(left 90) $P tests/test_ops.py -k "conv or gemm or cast or adam or sgd or rmsprop" > $L/t_ops.txt 2>&1; tail -3 $L/t_ops.txt >> $L/checks.txt
stamp "memcheck: igemm tests"
timeout $(left 120) compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_fast_paths.py -k "igemm" > $L/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $L/checks.txt; grep -E "ERROR SUMMARY|passed|failed" $L/memcheck.txt | tail -3 >> $L/checks.txt
stamp "done"
