#!/usr/bin/env bash
# session 12, call 4 (main @ wgrad bias from staged dy): wgrad tests, bias bench, step, profile
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1 || { stamp "NO CUDA"; exit 1; }
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "wgrad: fast paths (wgmma / mma / smallk), op matrix conv2d_bwd_filter"
timeout 150 $P tests/test_cuda_fast_paths.py -k "bwd_filter or wgrad" > $L/t_wgrad.txt 2>&1; tail -3 $L/t_wgrad.txt >> $L/checks.txt
timeout 150 $P tests/test_ops.py -k "conv2d_bwd_filter" > $L/t_ops_wgrad.txt 2>&1; tail -3 $L/t_ops_wgrad.txt >> $L/checks.txt
stamp "conv per pass with bias (no torch)"
timeout 100 python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --bias --no-vendor --no-torch --repeats 5 > $L/conv_bias.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "resnet50 step bf16 + fp16"
timeout 90 python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 --steps 10 --no-torch > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "step profile"
timeout 60 python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 --top 40 --json $L/profile.json > $L/profile.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "small resnet learns, cuda training, mixed precision (graphs)"
timeout 150 $P tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py tests/test_plan_graph.py > $L/t_train.txt 2>&1; tail -3 $L/t_train.txt >> $L/checks.txt
stamp "done"
