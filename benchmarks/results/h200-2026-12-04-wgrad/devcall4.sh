#!/usr/bin/env bash
# session 13, call 4: BN elementwise passes walk rows from the end (L2 reuse), db column sums with 4 loads in flight
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-570}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "BN + wgrad tests"
timeout $(left 120) $P tests/test_ops.py tests/test_keras_batchnorm.py tests/test_cuda_fast_paths.py -k "batchnorm or wgrad or bwd_filter" > $L/t_bn.txt 2>&1; tail -3 $L/t_bn.txt >> $L/checks.txt
stamp "ResNet-50 bf16 + fp16 side by side (eager)"
timeout $(left 200) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 --steps 20 > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -8 $L/r50.txt >> $L/checks.txt
stamp "profile bf16"
timeout $(left 60) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 --top 40 > $L/profile.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "sweep with bias (56x56 layers)"
timeout $(left 40) python3 benchmarks/sweep_wgrad.py --bias --layers 1 2 4 > $L/sweep_bias.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
