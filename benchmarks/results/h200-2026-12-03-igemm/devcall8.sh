#!/usr/bin/env bash
# session 12, call 8 (main @ 36f100e .so; bench_resnet50 with the warm-up fit and median of 3): gpucmp steps
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
timeout 200 python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 float32 mixed_bfloat16 --steps 20 --no-torch > $L/r50_gpucmp.txt 2>&1; echo "rc=$?" >> $L/r50_gpucmp.txt
