#!/usr/bin/env bash
# rnn_resident_device.sh -- one device call for the register-resident recurrence
# (csrc/cuda/rnn_resident.cu, cuda.rnn=resident), from the repo root on an H100 / H200:
#
#     OUT=/tmp/out bash tests/cuda/rnn_resident_device.sh      # under 540 s on 16 cores
#
# What it checks: the resident kernels with U in one CTA (SimpleRNN u <= 128, LSTM / GRU
# u <= 64) and split over a thread-block cluster (LSTM / GRU u <= 128, SimpleRNN <= 256;
# sm_90), against the oracle and beside the persistent kernel and PyTorch. Stages, each
# time-boxed against one deadline (DEADLINE_S, default 530 s from the start: a stage gets
# at most what is left, so a slow stage shortens the later ones but never stops them; a
# failing stage does not stop the later ones either). Logs in $OUT (default /tmp/out):
#   0. build in place (GPUCMP_CUDA_ARCHS, default 90a; build.log); meanwhile the two
#      standalone profilers are compiled (prof_build.log)
#   1. benchmarks/cuda/rnn_resident_prof.cu: us per step forward / backward of every
#      resident shape (SimpleRNN 128, LSTM / GRU 64 and 128) at B = 64 and 128, T = 100
#      (prof.jsonl), next to the persistent kernel for LSTM / GRU 128 at B = 64, 8 and 16
#      CTAs per group (prof_persistent.jsonl)
#   2. pytest -m cuda tests/test_rnn_ops.py -k resident, the cases with cluster shapes
#      first: the grid shapes (u = 128 LSTM / GRU run as clusters, B = 64 and 1100, f32 /
#      f16 / bf16), the refusal test, graph capture (u = 100: a cluster launch in a graph)
#      (pytest_rnn.log); the other forced-resident cases (small U, one CTA) in stage 5
#      (pytest_rnn_rest.log)
#   3. benchmarks/bench_rnn_layer.py: the LSTM and GRU layers (B 64, T 100, in 256, u 128)
#      fwd and fwd+bwd, gpucmp auto (resident, clusters) and persistent beside PyTorch
#      eager and CUDA graph (bench_rnn_layer.txt / .json)
#   4. compute-sanitizer memcheck (B=3 T=3 u=100: clusters of 4) and racecheck (B=2 T=2
#      u=72: clusters of 4, GRU's backward 2) on LSTM / GRU / GRU reset_before
#      (memcheck.log, racecheck.log)
#   5. pytest -m cuda tests/test_rnn_ops.py -k resident, the rest (pytest_rnn_rest.log)
#   6. if time is left: ptxas figures of rnn_resident.cu for sm_90a and sm_86
#      (ptxas_90a.txt, ptxas_86.txt: registers, spills)
# Exit status: nonzero when a correctness stage (0, 2, 4, 5) failed (5 not when the
# deadline cut it).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # the in-place build, for every worker
T0=$(date +%s)
DEADLINE=$((T0 + ${DEADLINE_S:-530}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
# left CAP: seconds a stage may take (at most CAP, at most what the deadline leaves - 5)
left() { local l=$((DEADLINE - $(date +%s) - 5)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
F="-O3 -std=c++17 -Icsrc/include -Icsrc/cuda --expt-relaxed-constexpr"

stamp "0. build (in place); the profilers compile meanwhile"
rm -f /tmp/rnn_res_prof /tmp/rnn_prof
(
  timeout 240 nvcc $F -arch=sm_90a -o /tmp/rnn_res_prof benchmarks/cuda/rnn_resident_prof.cu &
  timeout 240 nvcc $F -arch=sm_90a -o /tmp/rnn_prof benchmarks/cuda/rnn_persistent_prof.cu &
  wait
) > "$OUT/prof_build.log" 2>&1 &
PROF=$!
GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=${ARCHS:-90a} GPUCMP_NVCC_JOBS=${JOBS:-16} timeout "$(left 300)" \
  "$PY" setup.py build_ext --inplace --force > "$OUT/build.log" 2>&1
r=$?
wait $PROF
if [ $r != 0 ]; then tail -30 "$OUT/build.log"; echo "BUILD FAILED ($r)"; rc=1; fi
stamp "built (rc=$r)"

stamp "1. per-step profile: resident (clusters for u=128) vs persistent"
[ -x /tmp/rnn_res_prof ] && timeout "$(left 40)" /tmp/rnn_res_prof 100 20 64 128 > "$OUT/prof.jsonl" 2>&1
[ -x /tmp/rnn_prof ] && { timeout "$(left 20)" /tmp/rnn_prof 64 100 128 1 8 16;
  timeout "$(left 20)" /tmp/rnn_prof 64 100 128 2 8 16; } > "$OUT/prof_persistent.jsonl" 2>&1
sed 's/^/  prof: /' "$OUT/prof.jsonl" 2>/dev/null | cut -c1-260
cut -c1-220 "$OUT/prof_persistent.jsonl" 2>/dev/null | sed 's/^/  persistent: /'

CLUSTERED="resident and (grid_shapes or captured_graph or refuses)"
stamp "2. pytest -m cuda tests/test_rnn_ops.py -k '$CLUSTERED'"
timeout "$(left 120)" "$PY" -m pytest -m cuda -q -p no:cacheprovider tests/test_rnn_ops.py -rs \
  -k "$CLUSTERED" > "$OUT/pytest_rnn.log" 2>&1; r=$?
[ $r != 0 ] && rc=$r
tail -25 "$OUT/pytest_rnn.log"
stamp "pytest rc=$r"

stamp "3. LSTM / GRU layers beside PyTorch (auto = resident with clusters, persistent)"
timeout "$(left 150)" "$PY" benchmarks/bench_rnn_layer.py --devices cuda:0 --layers lstm gru \
  --modes fwd fwd+bwd --rnn-variants auto persistent --rounds 1 --repeats 5 \
  --json "$OUT/bench_rnn_layer.json" > "$OUT/bench_rnn_layer.txt" 2>&1
stamp "bench rc=$?"
tail -24 "$OUT/bench_rnn_layer.txt"

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$SAN" ]; then
  stamp "4. compute-sanitizer memcheck (B=3 T=3 u=100) and racecheck (B=2 T=2 u=72), gated cells"
  timeout "$(left 80)" "$SAN" --tool memcheck --error-exitcode 9 "$PY" tests/cuda/rnn_persistent_case.py \
    --variant resident --cells lstm gru gru_reset_before --B 3 --T 3 --u 100 > "$OUT/memcheck.log" 2>&1; r=$?
  [ $r != 0 ] && rc=$r
  echo "memcheck rc=$r"; grep -E "ERROR SUMMARY|ok$|MISMATCH|differs|Error" "$OUT/memcheck.log" | head -20
  timeout "$(left 80)" "$SAN" --tool racecheck --error-exitcode 9 "$PY" tests/cuda/rnn_persistent_case.py \
    --variant resident --cells lstm gru gru_reset_before --B 2 --T 2 --u 72 > "$OUT/racecheck.log" 2>&1; r=$?
  [ $r != 0 ] && rc=$r
  echo "racecheck rc=$r"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|ok$|MISMATCH|hazard" "$OUT/racecheck.log" | head -20
else
  echo "no compute-sanitizer found: stage 4 skipped"
fi

stamp "5. pytest -m cuda tests/test_rnn_ops.py -k resident: the rest"
timeout "$(left 200)" "$PY" -m pytest -m cuda -q -p no:cacheprovider tests/test_rnn_ops.py -rs \
  -k "resident and not (grid_shapes or captured_graph or refuses)" > "$OUT/pytest_rnn_rest.log" 2>&1; r=$?
[ $r != 0 ] && [ $r != 124 ] && rc=$r
tail -4 "$OUT/pytest_rnn_rest.log"
stamp "pytest (rest) rc=$r (124: cut by the deadline)"

if [ $((DEADLINE - $(date +%s))) -gt 100 ]; then
  stamp "6. ptxas figures (sm_90a, sm_86)"
  for A in 90a 86; do
    timeout "$(left 90)" nvcc -c csrc/cuda/rnn_resident.cu -o /tmp/rnnr_$A.o $F -gencode=arch=compute_$A,code=sm_$A \
      -Xptxas -v > "$OUT/ptxas_$A.txt" 2>&1 &
  done
  wait
  for A in 90a 86; do
    echo "sm_$A: $(grep -c 'Used' "$OUT/ptxas_$A.txt") kernels, max regs" \
      "$(grep -oE 'Used [0-9]+ registers' "$OUT/ptxas_$A.txt" | awk '{if ($2>m) m=$2} END {print m+0}'), spills/stack:" \
      "$(grep -oE '[0-9]+ bytes (stack frame|spill stores|spill loads)' "$OUT/ptxas_$A.txt" | awk '{s+=$1} END {print s+0}') bytes"
  done
fi

echo "================ summary"
cat "$OUT/gpu.txt"
grep -hE "passed|failed|error" "$OUT/pytest_rnn.log" "$OUT/pytest_rnn_rest.log" 2>/dev/null | tail -4
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/memcheck.log "$OUT"/racecheck.log 2>/dev/null
stamp "exit status $rc"
exit $rc
