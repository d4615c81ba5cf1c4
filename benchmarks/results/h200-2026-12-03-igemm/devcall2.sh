#!/usr/bin/env bash
# session 12, call 2: igemm (9a8a7d7) .so + HEAD (7e75760) .so carried: correctness, per-pass conv, step
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-560}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
use() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" "$1" || exit 1; }
export PYTHONPATH=$PWD
use build/core312.so.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader >> $L/checks.txt
python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1 || { stamp "NO CUDA"; exit 1; }
P="python3 -m pytest -q -p no:cacheprovider -m cuda -x"
stamp "igemm + large 16-bit conv + gemm fast paths"
timeout $(left 120) $P tests/test_cuda_fast_paths.py -k "igemm or large_16bit or gemm" > $L/t_igemm.txt 2>&1; tail -4 $L/t_igemm.txt >> $L/checks.txt
stamp "optimizer constants, cuda training, mixed precision, keras parity"
timeout $(left 120) $P tests/test_ops.py -k "adam or rmsprop" tests/test_cuda_training.py tests/test_mixed_precision.py tests/test_keras_parity.py tests/test_keras_small_resnet.py > $L/t_optim.txt 2>&1; tail -4 $L/t_optim.txt >> $L/checks.txt
stamp "conv per pass, resnet50 bf16, igemm tree vs torch"
timeout $(left 130) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --no-vendor --repeats 5 > $L/conv_perpass_new.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "resnet50 step, igemm tree"
timeout $(left 50) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 --steps 10 --no-torch > $L/r50_new.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "step profile, igemm tree"
timeout $(left 50) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 --top 80 --json $L/profile_new.json > $L/profile_new.txt 2>&1; echo "rc=$?" >> $L/checks.txt
use build/core_head.so.xz
stamp "resnet50 step, HEAD"
timeout $(left 50) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 --steps 10 --no-torch > $L/r50_head.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "conv per pass, HEAD, no torch"
timeout $(left 90) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --no-vendor --no-torch --repeats 5 > $L/conv_perpass_head.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
