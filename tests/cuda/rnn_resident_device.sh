#!/usr/bin/env bash
# rnn_resident_device.sh -- one device call for the register-resident recurrence
# (csrc/cuda/rnn_resident.cu, cuda.rnn=resident), from the repo root on an H100 / H200:
#
#     OUT=/tmp/out bash tests/cuda/rnn_resident_device.sh      # ~6 minutes on 16 cores
#
# Steps, each time-boxed; logs in $OUT (default /tmp/out):
#   0. build in place (GPUCMP_CUDA_ARCHS, default 90a; build.log); ptxas figures of the
#      resident kernels for sm_90a and sm_86 (ptxas_90a.txt, ptxas_86.txt); meanwhile
#      benchmarks/cuda/rnn_resident_prof.cu is built and run: us per step forward and
#      backward, SimpleRNN u=128 / LSTM u=64 / GRU u=64, B = 64, 128, 256, T = 100
#      (prof.jsonl), next to the persistent kernel on the same shapes (prof_persistent.jsonl)
#   1. pytest -m cuda tests/test_rnn_ops.py -k resident: every CUDA case forced resident
#      (refusals expected and checked where U is too large or rmask is set), the refusal
#      test, graph capture; plus the variant listing and the cuda-vs-cpu cases (every
#      variant); and the host emulation (pytest_rnn.log, pytest_emu.log)
#   2. compute-sanitizer memcheck and racecheck over a small resident case of every cell
#   3. the seeds' SimpleRNN(128) training step (B=64, T=100) with cuda.rnn=resident vs
#      persistent (bench_*.log); their LSTM(128) is too large for resident
# Exit status: nonzero when a correctness step (0-2) failed.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
F="-O3 -std=c++17 -Icsrc/include -Icsrc/cuda --expt-relaxed-constexpr"

stamp "0. build (in place), ptxas, the resident profile"
(
  nvcc $F -arch=sm_90a -o /tmp/rnn_res_prof benchmarks/cuda/rnn_resident_prof.cu &&
    timeout 60 /tmp/rnn_res_prof 100 20 64 128 256 > "$OUT/prof.jsonl" 2>&1
  nvcc $F -arch=sm_90a -o /tmp/rnn_prof benchmarks/cuda/rnn_persistent_prof.cu &&
    { timeout 20 /tmp/rnn_prof 64 100 128 0 8; timeout 20 /tmp/rnn_prof 64 100 64 1 4;
      timeout 20 /tmp/rnn_prof 64 100 64 2 4; } > "$OUT/prof_persistent.jsonl" 2>&1
) &
PROF=$!
GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=${ARCHS:-90a} GPUCMP_NVCC_JOBS=${JOBS:-16} timeout 450 \
  "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1
r=$?
if [ $r != 0 ]; then wait $PROF; tail -40 "$OUT/build.log"; echo "BUILD FAILED ($r)"; exit 1; fi
for A in 90a 86; do
  nvcc -c csrc/cuda/rnn_resident.cu -o /tmp/rnnr_$A.o $F -gencode=arch=compute_$A,code=sm_$A -Xptxas -v \
    > "$OUT/ptxas_$A.txt" 2>&1
  echo "sm_$A: $(grep -c 'Used' "$OUT/ptxas_$A.txt") kernels, spills/stack:" \
    "$(grep -oE '[0-9]+ bytes (stack frame|spill stores|spill loads)' "$OUT/ptxas_$A.txt" | awk '{s+=$1} END {print s+0}') bytes"
done
wait $PROF
stamp "built"
cat "$OUT/prof.jsonl" | sed 's/^/  prof: /'
cut -c1-200 "$OUT/prof_persistent.jsonl" | sed 's/^/  persistent: /'

stamp "1. pytest -m cuda tests/test_rnn_ops.py -k resident (+ listing, cuda vs cpu)"
timeout 300 "$PY" -m pytest -m cuda -q -p no:cacheprovider tests/test_rnn_ops.py -rs \
  -k "resident or variant_point or matches_cpu" > "$OUT/pytest_rnn.log" 2>&1; r=$?
[ $r != 0 ] && rc=$r
tail -25 "$OUT/pytest_rnn.log"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_rnn_resident_emu.py > "$OUT/pytest_emu.log" 2>&1
tail -2 "$OUT/pytest_emu.log"
stamp "pytest rc=$r"

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$SAN" ]; then
  stamp "2. compute-sanitizer memcheck (B=5 T=4 u=33) and racecheck (B=3 T=2 u=9), every cell"
  timeout 150 "$SAN" --tool memcheck --error-exitcode 9 \
    "$PY" tests/cuda/rnn_persistent_case.py --variant resident --B 5 --T 4 --u 33 > "$OUT/memcheck.log" 2>&1; r=$?
  [ $r != 0 ] && rc=$r
  grep -E "ERROR SUMMARY|ok$|MISMATCH|differs|Error" "$OUT/memcheck.log" | head -20
  timeout 150 "$SAN" --tool racecheck --error-exitcode 9 \
    "$PY" tests/cuda/rnn_persistent_case.py --variant resident --B 3 --T 2 --u 9 > "$OUT/racecheck.log" 2>&1; r=$?
  [ $r != 0 ] && rc=$r
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|ok$|MISMATCH|hazard" "$OUT/racecheck.log" | head -20
else
  echo "no compute-sanitizer found: step 2 skipped"
fi

if [ "${BENCH:-1}" = 1 ]; then
stamp "3. seeds' SimpleRNN training step, batch 64: resident vs persistent"
for v in resident persistent; do
  GPUCMP_FORCE=cuda.rnn=$v timeout 90 "$PY" benchmarks/bench_rnn.py --models rnn --devices cuda:0 \
    --frameworks gpucmp --batch 64 --steps 20 > "$OUT/bench_$v.log" 2>&1
  echo "cuda.rnn=$v:"; tail -6 "$OUT/bench_$v.log"
done
fi

echo "================ summary"
cat "$OUT/gpu.txt"
grep -hE "passed|failed|error" "$OUT/pytest_rnn.log" | tail -2
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/memcheck.log "$OUT"/racecheck.log 2>/dev/null
echo "exit status $rc"
exit $rc
