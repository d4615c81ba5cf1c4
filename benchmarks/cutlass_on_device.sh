#!/usr/bin/env bash
# cutlass_on_device.sh -- issue 11's CUTLASS sm80 baselines on the GPU, in one call of the
# device tool. From the repo root, with the wheels installed under /tmp/site
# (pip install --no-index --no-deps --target /tmp/site .whl/*.whl; done here when missing):
#
#     OUT=/some/dir bash benchmarks/cutlass_on_device.sh        # < 8 minutes (DEADLINE_S=450)
#
# 1. builds gpucmp in place with the CUDA backend (GPUCMP_CUDA=1, GPUCMP_CUDA_ARCHS=$ARCHS,
#    default 90a: harness_on_device.sh's build stage) and, at the same time, the CUTLASS
#    baseline library (benchmarks/cutlass/build.sh, ARCH=$CUTLASS_ARCH, default 90a; the
#    headers from /tmp/site/cutlass_library); SKIP_BUILD=1 reuses both from an earlier call;
# 2. bench_cutlass.py --list (every config with its shared memory and sm_86 verdict);
# 3. bench_cutlass.py: gpucmp's mma.sync / auto paths, cuBLAS / cuDNN (torch) and every
#    CUTLASS config, checked then timed in one process: the 8192^3 GEMMs and the 3x3
#    64->64 56x56 layer first, then the other cubes, the seeds' dense and conv layers,
#    the ResNet-50 layers -- cut off at the deadline (the rest is listed as skipped).
# Output in $OUT: log.txt (everything), bench_cutlass.md (the tables), bench_cutlass.json
# (every candidate's check and timing), build_gpucmp.log / build_cutlass.log on failure.
# BENCH_ARGS adds arguments to bench_cutlass.py (e.g. "--sections gemm" or "--quick").
set -uo pipefail
OUT=${OUT:-/tmp/gpucmp-out}; mkdir -p "$OUT"
LOG=$OUT/log.txt
export PYTHONUNBUFFERED=1
T0=$(date +%s)
DEADLINE=$(( T0 + ${DEADLINE_S:-450} ))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
left() { echo $(( DEADLINE - $(date +%s) )); }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
  --format=csv 2>&1 | tee -a "$LOG"
SITE=${SITE:-/tmp/site}
if [ ! -f "$SITE/cutlass_library/source/include/cutlass/cutlass.h" ] && ls .whl/nvidia_cutlass-*.whl >/dev/null 2>&1; then
  stamp "installing .whl/*.whl into $SITE"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    2>&1 | tail -5 | tee -a "$LOG"
fi
export PYTHONPATH=$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${CUTLASS_INCLUDE:-}" ] && [ -f "$SITE/cutlass_library/source/include/cutlass/cutlass.h" ]; then
  export CUTLASS_INCLUDE=$SITE/cutlass_library/source/include   # else build.sh looks on PYTHONPATH
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  stamp "build: gpucmp (archs ${ARCHS:-90a}) and the CUTLASS library (arch ${CUTLASS_ARCH:-90a}), side by side"
  ( ARCH=${CUTLASS_ARCH:-90a} JOBS=${CUTLASS_JOBS:-$(nproc)} bash benchmarks/cutlass/build.sh \
      > "$OUT/build_cutlass.log" 2>&1; echo $? > "$OUT/.cutlass_rc" ) &
  CPID=$!
  GPUCMP_CUDA=1 GPUCMP_CUDA_ARCHS=${ARCHS:-90a} python3 setup.py build_ext --inplace -j "$(nproc)" \
    > "$OUT/build_gpucmp.log" 2>&1
  GRC=$?
  stamp "gpucmp build rc=$GRC"
  wait "$CPID"
  CRC=$(cat "$OUT/.cutlass_rc" 2>/dev/null || echo 1); rm -f "$OUT/.cutlass_rc"
  grep -E "^build.sh:" "$OUT/build_cutlass.log" | tee -a "$LOG"
  stamp "CUTLASS build rc=$CRC"
  if [ "$GRC" != 0 ]; then tail -40 "$OUT/build_gpucmp.log" | tee -a "$LOG"; exit 1; fi
  rm -f "$OUT/build_gpucmp.log"
  if [ "$CRC" != 0 ]; then tail -60 "$OUT/build_cutlass.log" | tee -a "$LOG"; exit 1; fi
  cat "$OUT/build_cutlass.log" >> "$LOG"; rm -f "$OUT/build_cutlass.log"
fi
python3 -c "import gpucmp, torch; print('gpucmp devices', gpucmp.available_devices(), '| torch', torch.__version__,
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')" 2>&1 | tee -a "$LOG"
python3 benchmarks/bench_cutlass.py --list 2>&1 | tee -a "$LOG"

LEFT=$(left)
if [ "$LEFT" -lt 60 ]; then stamp "only $LEFT s left: no benchmark"; exit 1; fi
stamp "bench_cutlass.py (time limit $(( LEFT - 45 )) s)"
# shellcheck disable=SC2086
timeout "$(( LEFT - 10 ))" python3 benchmarks/bench_cutlass.py --json "$OUT/bench_cutlass.json" \
  --time-limit-s "$(( LEFT - 45 ))" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_cutlass.md"
RC=${PIPESTATUS[0]}
cat "$OUT/bench_cutlass.md" >> "$LOG"
stamp "done (bench rc=$RC)"
exit "$RC"
