#!/usr/bin/env bash
# session 13, call 3: db spread over the x-side tiles, BN residual gradient written in place; tests, sweep, ResNet-50 bf16/fp16, profile
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-570}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
P="python3 -m pytest -q -p no:cacheprovider -m cuda -x"
stamp "wgrad tests"
timeout $(left 120) $P tests/test_cuda_fast_paths.py -k "wgrad or bwd_filter" > $L/t_wgrad.txt 2>&1; tail -3 $L/t_wgrad.txt >> $L/checks.txt
stamp "sweep with bias"
timeout $(left 100) python3 benchmarks/sweep_wgrad.py --bias > $L/sweep_bias.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "ResNet-50 bf16 + fp16 side by side (eager)"
timeout $(left 200) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 --steps 20 > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -8 $L/r50.txt >> $L/checks.txt
stamp "profile bf16"
timeout $(left 60) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 --top 40 > $L/profile.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "training + conv op tests"
timeout $(left 150) python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_fast_paths.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py > $L/t_checks.txt 2>&1; tail -3 $L/t_checks.txt >> $L/checks.txt
stamp "done"
