#!/usr/bin/env bash
# rnn_persistent_device.sh -- one device call for the persistent recurrence
# (csrc/cuda/rnn_persistent.cu, variant point cuda.rnn), from the repo root on an H100 / H200:
#
#     OUT=/tmp/out bash tests/cuda/rnn_persistent_device.sh      # ~6 minutes on 16 cores
#
# Through the device tool (which returns at most 8 files from its $OUT), one command line
# writes the logs elsewhere and packs them into the tool's $OUT:
#     OUT=/tmp/logs bash tests/cuda/rnn_persistent_device.sh; tar czf $OUT/logs.tgz -C /tmp logs
# (BENCH=0 skips steps 3-4.)
#
# Steps, each time-boxed; logs in $OUT (default /tmp/out):
#   0. build in place for sm_90a (build.log); ptxas figures of the persistent kernels;
#      meanwhile benchmarks/cuda/rnn_persistent_prof.cu is built and run: the kernels'
#      time per step and per phase on the seeds' LSTM shape, GRU, SimpleRNN (prof.jsonl)
#   1. pytest -m cuda tests/test_rnn_ops.py: every CUDA case forced stepwise and forced
#      persistent, the grid shapes, half storage, the too-large refusal, graph replay
#      (pytest_rnn.log); the host emulation test too (pytest_emu.log)
#   2. compute-sanitizer memcheck over a small persistent case of every cell, racecheck
#      over a smaller one (memcheck.log, racecheck.log)
#   3. the seeds' LSTM training step (B=64, T=100, u=128) with cuda.rnn=stepwise and
#      =persistent (bench_stepwise.log, bench_persistent.log), nsys-free: step medians
#   4. side by side with PyTorch (eager and CUDA graph): the seeds' LSTM and GAN steps
#      (bench_rnn.txt / .json) and the three layers fwd / fwd+bwd (bench_rnn_layer.*)
# Exit status: nonzero when a correctness step (0-2) failed.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0

stamp "0. build (sm_90a, in place)"
(
  F="-O3 -std=c++17 -arch=sm_90a -Icsrc/include -Icsrc/cuda --expt-relaxed-constexpr"
  nvcc $F -o /tmp/rnn_prof benchmarks/cuda/rnn_persistent_prof.cu &&
    nvcc $F -DGC_RNN_PROF -o /tmp/rnn_prof_phases benchmarks/cuda/rnn_persistent_prof.cu &&
    { timeout 30 /tmp/rnn_prof_phases 64 100 128 1 4 8 16
      for c in 1 2 0; do timeout 20 /tmp/rnn_prof 64 100 128 $c 8; done; } > "$OUT/prof.jsonl" 2>&1
) &
PROF=$!
GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=90a GPUCMP_NVCC_JOBS=${JOBS:-16} timeout 400 \
  "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1
r=$?
wait $PROF
if [ $r != 0 ]; then tail -40 "$OUT/build.log"; echo "BUILD FAILED ($r)"; exit 1; fi
nvcc -c csrc/cuda/rnn_persistent.cu -o /tmp/rnnp_ptxas.o -O3 -std=c++17 -Icsrc/include -Icsrc/cuda \
  --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Xptxas -v > "$OUT/ptxas.txt" 2>&1
grep -E "registers|spill" "$OUT/ptxas.txt" | sort | uniq -c | sed 's/^/  ptxas: /'
stamp "built"
cut -c1-220 "$OUT/prof.jsonl" | sed 's/^/  prof: /' 

stamp "1. pytest -m cuda tests/test_rnn_ops.py (every cuda.rnn variant)"
timeout 240 "$PY" -m pytest -m cuda -q -p no:cacheprovider tests/test_rnn_ops.py -x -rs \
  > "$OUT/pytest_rnn.log" 2>&1; r=$?
[ $r != 0 ] && rc=$r
tail -25 "$OUT/pytest_rnn.log"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_rnn_persistent_emu.py > "$OUT/pytest_emu.log" 2>&1
tail -2 "$OUT/pytest_emu.log"
stamp "pytest rc=$r"

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$SAN" ]; then
  stamp "2. compute-sanitizer memcheck (B=5 T=4 u=33, every cell) and racecheck (B=3 T=2 u=9)"
  for V in persistent cluster; do
    GPUCMP_RNN_TIMEOUT_MS=60000 timeout 150 "$SAN" --tool memcheck --error-exitcode 9 \
      "$PY" tests/cuda/rnn_persistent_case.py --variant $V --B 5 --T 4 --u 33 > "$OUT/memcheck_$V.log" 2>&1; r=$?
    [ $r != 0 ] && rc=$r
    grep -E "ERROR SUMMARY|ok$|MISMATCH|differs|Error" "$OUT/memcheck_$V.log" | head -20
    GPUCMP_RNN_TIMEOUT_MS=60000 timeout 150 "$SAN" --tool racecheck --error-exitcode 9 \
      "$PY" tests/cuda/rnn_persistent_case.py --variant $V --cells lstm gru_reset_before --B 3 --T 2 --u 9 \
      > "$OUT/racecheck_$V.log" 2>&1; r=$?
    [ $r != 0 ] && rc=$r
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|ok$|MISMATCH|hazard" "$OUT/racecheck_$V.log" | head -20
  done
  stamp "sanitizers done"
else
  echo "no compute-sanitizer found: step 2 skipped"
fi

if [ "${BENCH:-1}" = 1 ]; then
stamp "3. seeds' LSTM training step, batch 64, stepwise vs persistent vs cluster"
for v in stepwise persistent cluster; do
  GPUCMP_FORCE=cuda.rnn=$v timeout 90 "$PY" benchmarks/bench_rnn.py --models lstm --devices cuda:0 \
    --frameworks gpucmp --batch 64 --steps 20 > "$OUT/bench_$v.log" 2>&1
  echo "cuda.rnn=$v:"; tail -6 "$OUT/bench_$v.log"
done

stamp "4. beside PyTorch: the seeds' LSTM and GAN steps, the three layers"
timeout 80 "$PY" benchmarks/bench_rnn.py --devices cuda:0 --models lstm gan --frameworks gpucmp torch torch-graph \
  --steps 20 --json "$OUT/bench_rnn.json" > "$OUT/bench_rnn.txt" 2>&1
tail -8 "$OUT/bench_rnn.txt"
timeout 200 "$PY" benchmarks/bench_rnn_layer.py --devices cuda:0 --rounds 1 --repeats 5 \
  --json "$OUT/bench_rnn_layer.json" > "$OUT/bench_rnn_layer.txt" 2>&1
tail -20 "$OUT/bench_rnn_layer.txt"
fi

echo "================ summary"
cat "$OUT/gpu.txt"
grep -hE "passed|failed|error" "$OUT/pytest_rnn.log" | tail -2
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log 2>/dev/null
echo "exit status $rc"
exit $rc
