#!/usr/bin/env bash
# conv_wgmma_device.sh -- one device call for the Hopper wgmma forward convolution
# (csrc/cuda/conv2d_wgmma.cu), from the repo root on an H100 / H200:
#
#     bash tests/cuda/conv_wgmma_device.sh
#
# Builds test_conv twice in parallel (sm_90a): build/tests/cuda (for timing) and
# build/tests/cuda/wd with GC_CONV_WATCHDOG (a barrier that never completes traps after ~1 s
# instead of hanging: used for the correctness runs); resource usage and SASS counts of
# the new kernel; then, each step time-boxed so that the whole stays under ~4 minutes:
#   1. test_conv wgtest   forced wgmma path vs float64 / mma.sync / 3-stage ring / graph
#   2. test_conv wgbench  3x3 64->64 56x56 b64 forward: wgmma, mma.sync, auto, cuDNN,
#                         ring depths 3..8; f16 and bf16
#   3. test_conv test     the whole correctness suite (includes step 1 again)
#   4. test_conv bench    the whole benchmark (whatever time is left)
# Logs go to $OUT (default /tmp/out): gpu.txt, build*.log, ptxas_wgmma.txt, resource.txt,
# sass_counts.txt, wgtest.log, wgbench.log, test.log, bench.log. The last lines printed
# are the summary. Exit status: nonzero when a correctness step failed (or the build).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( ${1} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
  | tee "$OUT/gpu.txt"

stamp "build (sm_90a): build/tests/cuda and build/tests/cuda/wd (watchdog)"
( make -C tests/cuda -j16 conv > "$OUT/build.log" 2>&1; echo $? > "$OUT/build.rc" ) &
( make -C tests/cuda -j16 conv TAG=wd DEFS='-DGC_CONV_WATCHDOG=2000000000LL' \
    > "$OUT/build_wd.log" 2>&1; echo $? > "$OUT/build_wd.rc" ) &
wait
if [ "$(cat "$OUT/build.rc")" != 0 ] || [ "$(cat "$OUT/build_wd.rc")" != 0 ]; then
  tail -40 "$OUT/build.log" "$OUT/build_wd.log"; echo "BUILD FAILED"; exit 1
fi
stamp "built"
cp build/tests/cuda/obj/conv/conv2d_wgmma.ptxas.txt "$OUT/ptxas_wgmma.txt"
grep -E "registers|stack|spill|smem" "$OUT/ptxas_wgmma.txt" | sed 's/^/  ptxas: /'
if command -v cuobjdump >/dev/null 2>&1; then
  cuobjdump --dump-resource-usage build/tests/cuda/obj/conv/conv2d_wgmma.o > "$OUT/resource.txt" 2>&1
  grep -E "Function|REG" "$OUT/resource.txt" | sed 's/^/  /' | head -12
  cuobjdump --dump-sass build/tests/cuda/obj/conv/conv2d_wgmma.o > "$OUT/wgmma.sass" 2>&1
  {
    echo "SASS instruction counts per kernel (HGMMA UTMALDG UTMASTG LDL/STL BAR MEMBAR):"
    awk '/Function :/{f=$3} /HGMMA/{h[f]++} /UTMALDG/{l[f]++} /UTMASTG/{s[f]++} /(LDL|STL)/{lm[f]++}
         /BAR\./{b[f]++} /MEMBAR/{m[f]++}
         END{for (k in h) printf "  %s: HGMMA %d UTMALDG %d UTMASTG %d LDL/STL %d BAR %d MEMBAR %d\n", k, h[k], l[k], s[k], lm[k], b[k], m[k]}' \
      "$OUT/wgmma.sass"
  } | tee "$OUT/sass_counts.txt"
  gzip -f "$OUT/wgmma.sass"
else
  echo "  cuobjdump not found: resource usage from ptxas only"
fi

rc=0
stamp "1. wgtest (watchdog build)"
VERBOSE=1 timeout 75 build/tests/cuda/wd/test_conv wgtest > "$OUT/wgtest.log" 2>&1; r=$?
[ $r != 0 ] && rc=$r
grep -E "^device|^seed|^wgmma|FAIL|worst|refuses|correctness:|rror|skip" "$OUT/wgtest.log" | head -60
stamp "wgtest rc=$r"

stamp "2. wgbench"
timeout 75 build/tests/cuda/test_conv wgbench > "$OUT/wgbench.log" 2>&1; r=$?
cat "$OUT/wgbench.log" | grep -vE "^seed|^device"
stamp "wgbench rc=$r"

T=$(left 200); [ "$T" -gt 100 ] && T=100
if [ "$T" -gt 10 ]; then
  stamp "3. test (whole suite, watchdog build, ${T} s box)"
  timeout "$T" build/tests/cuda/wd/test_conv test > "$OUT/test.log" 2>&1; r=$?
  [ $r != 0 ] && rc=$r
  grep -E "FAIL|correctness:|worst rel err|graph capture|refuses" "$OUT/test.log" | tail -40
  stamp "test rc=$r"
else
  echo "3. test: skipped (no time left)"
fi

T=$(left 230)
if [ "$T" -gt 15 ]; then
  stamp "4. bench (whole benchmark, ${T} s box)"
  timeout "$T" build/tests/cuda/test_conv bench > "$OUT/bench.log" 2>&1; r=$?
  grep -E "^layer|56x56|summary|fwd TFLOP" "$OUT/bench.log" | tail -30
  stamp "bench rc=$r (124 = time box)"
else
  echo "4. bench: skipped (no time left)"
fi

echo "================ summary"
cat "$OUT/gpu.txt"
grep -E "registers|stack" "$OUT/ptxas_wgmma.txt" | head -4
grep -hE "correctness:" "$OUT/wgtest.log" "$OUT/test.log" 2>/dev/null
grep -hE "^  (float16|bfloat16) +fwd TFLOP/s" "$OUT/wgbench.log" 2>/dev/null
echo "target: wgmma >= 238 TFLOP/s (0.70 x the ~340 of cuDNN through PyTorch on the H200)"
echo "exit status $rc"
exit $rc
