#!/usr/bin/env bash
# session 13, call 5 (HEAD + avgpool backward on 16-byte vectors): tests, memcheck, ResNet-50 table, conv per pass
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-585}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "op tests (pool, batchnorm, conv) on cuda"
timeout $(left 90) $P tests/test_ops.py -k "pool or batchnorm or conv" > $L/t_ops.txt 2>&1; tail -3 $L/t_ops.txt >> $L/checks.txt
stamp "fast paths + training + mixed precision"
timeout $(left 90) $P tests/test_cuda_fast_paths.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py > $L/t_checks.txt 2>&1; tail -3 $L/t_checks.txt >> $L/checks.txt
stamp "memcheck: wgrad wgmma (bf16) + avgpool"
timeout $(left 90) compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_fast_paths.py tests/test_ops.py -k "(split_db and bfloat16) or avgpool2d_bwd" > $L/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $L/checks.txt; grep -E "ERROR SUMMARY|passed|failed" $L/memcheck.txt | tail -3 >> $L/checks.txt
stamp "ResNet-50 side by side b256: bf16 (eager + compile), fp16, fp32"
timeout $(left 300) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 float32 --steps 20 --compile mixed_bfloat16 --json $L/r50_all.json > $L/r50_all.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -9 $L/r50_all.txt >> $L/checks.txt
stamp "conv per pass, no bias, vs PyTorch"
timeout $(left 80) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --no-vendor --repeats 5 > $L/conv_perpass.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
