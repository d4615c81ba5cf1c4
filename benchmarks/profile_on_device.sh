#!/usr/bin/env bash
# Per-kernel GPU time of the seeds' CNN training step under Nsight Compute (hardware timer
# only, --clock-control none), batch 128 and 32; needs a build of gpucmp in place (run after
# tests/cuda/run_on_device.sh or benchmarks/run_on_device.sh in the same call).
# Output: $OUT/ncu_b128.txt, $OUT/ncu_b32.txt (benchmarks/ncu_summary.py tables).
set -uo pipefail
OUT=${OUT:-/tmp/gpucmp-out}; mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
for b in ${BATCHES:-128 32}; do
  timeout ${NCU_TIMEOUT:-90} "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip ${SKIP:-3000} --launch-count ${COUNT:-150} \
    python3 benchmarks/profile_cnn_step.py --batch $b --precision ${PRECISION:-float32} > /tmp/ncu_b$b.csv 2>&1
  echo "ncu batch $b rc=$?"
  python3 benchmarks/ncu_summary.py /tmp/ncu_b$b.csv --steps ${STEPS:-2} > "$OUT/ncu_b$b.txt"; head -30 "$OUT/ncu_b$b.txt"; tail -1 "$OUT/ncu_b$b.txt"
done
