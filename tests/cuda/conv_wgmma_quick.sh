#!/usr/bin/env bash
# conv_wgmma_quick.sh -- the short device call for the Hopper wgmma forward convolution
# (csrc/cuda/conv2d_wgmma.cu), from the repo root on an H100 / H200:
#
#     bash tests/cuda/conv_wgmma_quick.sh            # logs in $OUT (default /tmp/out)
#
# Builds only tests/cuda/conv.mk's test_conv for sm_90a, twice in parallel: build/cuda
# (timing) and build/cuda_wd (GC_CONV_WATCHDOG: a barrier that never completes traps
# after ~1 s instead of hanging); then
#   1. test_conv wgtest   (watchdog build, 60 s box): every case under every schedule
#                         (pp, conc, conc-2, pp-2) vs float64 / mma.sync / pp bitwise
#   2. test_conv wgbench  (timing build, 40 s box): 3x3 64->64 56x56 b64, f16 and bf16,
#                         each schedule, mma.sync, auto, cuDNN, concurrent ring depths
# and a summary. Total well under 2.5 minutes. $OUT gets at most 3 files: quick.log
# (everything printed), wgtest.log, and logs.tar.gz (build logs, ptxas, wgbench.log).
# Exit status: nonzero on a build failure or a correctness failure / timeout of wgtest.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
W=$(mktemp -d /tmp/cwq.XXXXXX)
exec > >(tee "$OUT/quick.log") 2>&1
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
finish() {
  ( cd "$W" && tar czf "$OUT/logs.tar.gz" . ) 2>/dev/null
  [ -f "$W/wgtest.log" ] && cp "$W/wgtest.log" "$OUT/wgtest.log"
  exit "$1"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
  | tee "$W/gpu.txt"

stamp "build (sm_90a): build/cuda and build/cuda_wd (watchdog), in parallel"
( make -f tests/cuda/conv.mk -j16 > "$W/build.log" 2>&1; echo $? > "$W/build.rc" ) &
( make -f tests/cuda/conv.mk -j16 BUILD=build/cuda_wd DEFS='-DGC_CONV_WATCHDOG=2000000000LL' \
    > "$W/build_wd.log" 2>&1; echo $? > "$W/build_wd.rc" ) &
wait
if [ "$(cat "$W/build.rc")" != 0 ] || [ "$(cat "$W/build_wd.rc")" != 0 ]; then
  tail -40 "$W/build.log" "$W/build_wd.log"; echo "BUILD FAILED"; finish 1
fi
stamp "built"
cp build/cuda/conv2d_wgmma.ptxas.txt "$W/ptxas_wgmma.txt"
grep -E "registers|spill" "$W/ptxas_wgmma.txt" | sed 's/^/  ptxas: /'

rc=0
stamp "1. wgtest (watchdog build, 60 s box)"
timeout 60 build/cuda_wd/test_conv wgtest > "$W/wgtest.log" 2>&1; r=$?
[ $r != 0 ] && rc=$r
grep -E "^device|^wgmma|FAIL|note|worst|refuses|correctness:|rror|skip" "$W/wgtest.log" | head -60
[ $r = 124 ] && echo "wgtest TIMED OUT (60 s): last lines:" && tail -5 "$W/wgtest.log"
grep -q "correctness:" "$W/wgtest.log" || { echo "wgtest: no final correctness line"; [ $rc = 0 ] && rc=1; }
stamp "wgtest rc=$r"

stamp "2. wgbench (timing build, 40 s box)"
timeout 40 build/cuda/test_conv wgbench > "$W/wgbench.log" 2>&1; r=$?
grep -vE "^seed|^device" "$W/wgbench.log"
stamp "wgbench rc=$r (124 = time box)"

echo "================ summary"
cat "$W/gpu.txt"
grep -E "registers|spill" "$W/ptxas_wgmma.txt" | sort | uniq -c | head -6
grep -hE "worst rel err|correctness:" "$W/wgtest.log"
grep -hE "^  (float16|bfloat16) +fwd TFLOP/s" "$W/wgbench.log"
echo "target: best wgmma >= 238 TFLOP/s (0.70 x cuDNN ~345 on the H200)"
echo "exit status $rc"
finish $rc
