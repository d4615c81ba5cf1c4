#!/usr/bin/env bash
# session 12, call 5 (main @ cast_multi, 0b?): fused casts correctness, step bf16 / fp16, profile
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1 || { stamp "NO CUDA"; exit 1; }
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "training / mixed precision / graphs / batchnorm / small resnet / gan"
timeout 200 $P tests/test_cuda_training.py tests/test_mixed_precision.py tests/test_plan_graph.py tests/test_keras_batchnorm.py tests/test_keras_small_resnet.py tests/test_gan_seed.py tests/test_keras_batch_calls.py > $L/t_train.txt 2>&1; tail -3 $L/t_train.txt >> $L/checks.txt
stamp "resnet50 step bf16 + fp16"
timeout 90 python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 --steps 10 --no-torch > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -3 $L/r50.txt >> $L/checks.txt
stamp "step profile"
timeout 60 python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 --top 40 --json $L/profile.json > $L/profile.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
