#!/usr/bin/env bash
# session 4, call 1: cuDNN baseline tests, sm_86 limits, layer bench with cudnn, rnn calibrate
set -uo pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader >> $L/checks.txt
stamp "import check"
if ! python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1; then
  stamp "carried .so unusable: building"
  GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=90a GPUCMP_NVCC_JOBS=16 python3 setup.py build_ext --inplace --force > $L/build.log 2>&1 || { stamp "build failed"; tail -30 $L/build.log; }
fi
stamp "cudnn baseline tests"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_rnn_cudnn.py > $L/pytest_cudnn.txt 2>&1; tail -3 $L/pytest_cudnn.txt >> $L/checks.txt
stamp "sm86 limits (all)"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_sm86_limits.py > $L/pytest_sm86.txt 2>&1; tail -3 $L/pytest_sm86.txt >> $L/checks.txt
stamp "layer bench with cudnn"
timeout 170 python3 benchmarks/bench_rnn_layer.py --devices cuda:0 --rnn-variants auto cudnn --rounds 2 --json $L/bench_rnn_layer_cudnn.json > $L/bench_rnn_layer_cudnn.txt 2>&1; tail -2 $L/bench_rnn_layer_cudnn.txt >> $L/checks.txt
stamp "rnn calibrate"
OUT=$L RNN_CAL_S=200 bash benchmarks/harness_on_device.sh rnn-calibrate > $L/rnn_calibrate.txt 2>&1; tail -3 $L/rnn_calibrate.txt >> $L/checks.txt
stamp "done"
