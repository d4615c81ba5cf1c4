#!/usr/bin/env bash
# session 13, call 6 (the tree of dc18265, call 5's .so): ResNet-50 at batch 128; the seeds' CNN re-measured
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-400}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
stamp "ResNet-50 side by side b128: bf16 (eager + compile), fp16, fp32"
timeout $(left 240) python3 benchmarks/bench_resnet50.py --batch-sizes 128 --precisions mixed_bfloat16 mixed_float16 float32 --steps 20 --compile mixed_bfloat16 --json $L/r50_b128.json > $L/r50_b128.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -9 $L/r50_b128.txt >> $L/checks.txt
stamp "seeds' CNN on the GPU vs PyTorch"
timeout $(left 140) python3 benchmarks/bench_cnn.py --devices cuda:0 --samples 60000 --repeats 3 --batch-sizes 32 128 --precision float32 mixed_float16 > $L/cnn.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -12 $L/cnn.txt >> $L/checks.txt
stamp "done"
