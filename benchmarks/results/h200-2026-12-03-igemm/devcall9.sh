#!/usr/bin/env bash
# session 12, call 9 (36f100e .so = HEAD's code): fp16 and bf16 side by side with PyTorch eager, fixed timing
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
timeout 240 python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_float16 mixed_bfloat16 --steps 20 --compile > $L/r50_eager.txt 2>&1; echo "rc=$?" >> $L/r50_eager.txt
