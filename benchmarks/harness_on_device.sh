#!/usr/bin/env bash
# The harness on a lent GPU, in stages that each fit one call of the device tool:
#
#     bash benchmarks/harness_on_device.sh build tests calibrate        # ~9 min (rnn, lstm, gan included)
#     bash benchmarks/harness_on_device.sh rnn-calibrate                # ~5 min, built tree: only rnn/lstm/gan, merged
#     bash benchmarks/harness_on_device.sh bench standalone partitions  # ~8 min (warm: no rebuild)
#
# build       in-place build with the CUDA backend (GPUCMP_CUDA_ARCHS, default 90a)
# tests       pytest -m cuda of the core's harness API, the harness and the CUDA fast paths
# calibrate   `gpucmp calibrate --no-partitions` -> $OUT/calibration.json (the whole card;
#             the shipped gpucmp/harness/data/calibration.json is it with its partitions)
# confined    `GPUCMP_CUDA_SMS=N gpucmp calibrate --no-partitions --no-copy-curve` for N in
#             $CONFINED (default 8 24 48 96: the partitions) -> $OUT/cal_smN.json; attach
#             them here with `gpucmp calibrate --attach calibration.json cal_sm8.json ... --out F`;
#             CONFINED="16 32 64" measures the validation points (validate_projection.py
#             --measured-cal)
# bench       `gpucmp bench` of cnn, gemm, conv, bandwidth on the whole card -> $OUT/bench_full.json
# standalone  the standalone benchmarks on the same card (bench_gemm.py, bench_conv.py,
#             bench_cnn.py gpucmp-only), to check benchmark() agrees with them
# partitions  `gpucmp bench` with GPUCMP_CUDA_SMS=16, 32, 64 (green contexts) -> bench_smN.json,
#             then benchmarks/validate_projection.py against $OUT/calibration.json (or the shipped one)
# rnn-calibrate  the recurrent workloads alone (`gpucmp calibrate --workloads rnn lstm gan`,
#             whole card + the 8/24/48/96-SM partitions, the shipped file's peaks reused:
#             ~5 min on a built tree) -> $OUT/cal_rnn.json, merged into the shipped calibration
#             (`gpucmp calibrate --merge`, no GPU needed) -> $OUT/calibration.json; copy that
#             file to gpucmp/harness/data/calibration.json to ship it
# rnn-partitions  `gpucmp bench --workloads rnn lstm gan` with GPUCMP_CUDA_SMS=16, 32, 64, then
#             benchmarks/validate_projection.py against $OUT/calibration.json (~3 min)
# CAL_WORKLOADS / PART_WORKLOADS narrow the calibrated / partition-measured workloads;
# PART_R50_BATCH=64 also measures resnet50 at that batch on each partition (bench_smN_r50.json).
# Everything else goes to $OUT/log.txt (the tool returns at most 8 files).
set -uo pipefail
OUT=${OUT:-/tmp/gpucmp-out}; mkdir -p "$OUT"
LOG=$OUT/log.txt
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
run() { stamp "$*"; "$@" 2>&1 | tee -a "$LOG"; }
CAL=$OUT/calibration.json
[ -f "$CAL" ] || CAL=${CALIBRATION:-gpucmp/harness/data/calibration.json}

for stage in "$@"; do
  case $stage in
  build)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv | tee -a "$LOG"
    stamp "build (archs ${ARCHS:-90a})"
    GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=${ARCHS:-90a} python3 setup.py build_ext --inplace > "$OUT/build.txt" 2>&1 \
      || { tail -40 "$OUT/build.txt"; exit 1; }
    rm -f "$OUT/build.txt" ;;
  tests)
    run timeout "${TEST_S:-240}" python3 -m pytest -q -p no:cacheprovider -x -m cuda tests/test_core_harness_api.py \
      tests/harness ${MORE_TESTS-tests/test_cuda_fast_paths.py tests/test_plan_resident.py} ;;
  calibrate)
    run python3 -m gpucmp devices
    run timeout "${CAL_S:-420}" python3 -m gpucmp calibrate --out "$OUT/calibration.json" --no-partitions \
      --ops-budget-s "${OPS_BUDGET_S:-150}" ${CAL_WORKLOADS:+--workloads $CAL_WORKLOADS}
    CAL=$OUT/calibration.json ;;
  confined)
    for n in ${CONFINED:-8 24 48 96}; do
      GPUCMP_CUDA_SMS=$n run timeout "${CONFINED_S:-240}" python3 -m gpucmp calibrate --out "$OUT/cal_sm$n.json" \
        --no-partitions --no-copy-curve --ops-budget-s "${CONFINED_OPS_S:-60}" ${CAL_WORKLOADS:+--workloads $CAL_WORKLOADS}
    done ;;
  rnn-calibrate)
    run timeout "${RNN_CAL_S:-420}" python3 -m gpucmp calibrate --workloads ${RNN_WORKLOADS:-rnn lstm gan} \
      --precision ${RNN_PRECISIONS:-float32 float16} --peaks-from gpucmp/harness/data/calibration.json \
      --no-copy-curve --step-repeats 2 --ops-budget-s 60 --partition-ops-budget-s 30 --out "$OUT/cal_rnn.json"
    run python3 -m gpucmp calibrate --merge gpucmp/harness/data/calibration.json "$OUT/cal_rnn.json" \
      --out "$OUT/calibration.json"
    CAL=$OUT/calibration.json ;;
  rnn-partitions)
    for n in ${PARTITIONS:-16 32 64}; do
      GPUCMP_CUDA_SMS=$n run timeout 150 python3 -m gpucmp bench --workloads ${RNN_WORKLOADS:-rnn lstm gan} \
        --precision float32 float16 --repeats ${PART_REPEATS:-3} --json "$OUT/bench_rnn_sm$n.json"
    done
    run python3 benchmarks/validate_projection.py --calibration "$CAL" --measured "$OUT"/bench_rnn_sm*.json \
      --out "$OUT/validation_rnn.md" ;;
  bench)
    run timeout 240 python3 -m gpucmp bench --workloads cnn gemm conv bandwidth --precision float32 float16 \
      --json "$OUT/bench_full.json" ;;
  standalone)
    run timeout 100 python3 benchmarks/bench_gemm.py --no-cpu --gpu-sizes 8192 --repeats 10
    run timeout 100 python3 benchmarks/bench_conv.py --device cuda:0 --repeats 10 --no-torch
    run timeout 150 python3 benchmarks/bench_cnn.py --devices cuda:0 --frameworks gpucmp --samples 60000 \
      --repeats 3 --batch-sizes 32 128 --precision ${CNN_PRECISIONS:-float32 mixed_float16} ;;
  standalone-cnn)
    run timeout 100 python3 benchmarks/bench_cnn.py --devices cuda:0 --frameworks gpucmp --samples 60000 \
      --repeats 3 --batch-sizes 32 128 --precision float32 ;;
  partitions)
    for n in ${PARTITIONS:-16 32 64}; do
      GPUCMP_CUDA_SMS=$n run timeout 150 python3 -m gpucmp bench --workloads ${PART_WORKLOADS:-cnn gemm conv bandwidth} \
        --precision float32 float16 --repeats ${PART_REPEATS:-3} --json "$OUT/bench_sm$n.json"
      if [ -n "${PART_R50_BATCH:-}" ]; then
        GPUCMP_CUDA_SMS=$n run timeout 150 python3 -m gpucmp bench --workloads resnet50 --batch-size $PART_R50_BATCH \
          --precision float32 float16 --repeats ${PART_REPEATS:-3} --json "$OUT/bench_sm${n}_r50.json"
      fi
    done
    run python3 benchmarks/validate_projection.py --calibration "$CAL" --per-sm-from "$OUT/bench_sm16.json" \
      --write-calibration "$OUT/calibration_per_sm.json" --measured "$OUT"/bench_sm*.json --out "$OUT/validation.md" ;;
  *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
stamp done
