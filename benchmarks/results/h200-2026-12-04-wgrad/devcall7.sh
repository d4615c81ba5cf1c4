#!/usr/bin/env bash
# session 13, call 7: full-size predicts replayed from a captured graph; tests and the GAN iteration
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-150}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
stamp "predict graph + training + GAN + batch-call tests"
timeout $(left 70) python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_training.py tests/test_gan_seed.py tests/test_keras_batch_calls.py tests/test_mixed_precision.py > $L/t_checks.txt 2>&1; tail -4 $L/t_checks.txt >> $L/checks.txt
stamp "GAN iteration vs PyTorch CUDA graph"
timeout $(left 75) python3 benchmarks/bench_rnn.py --models gan --devices cuda:0 --frameworks gpucmp torch-graph --steps 20 > $L/bench_gan.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -6 $L/bench_gan.txt >> $L/checks.txt
stamp "done"
