#!/usr/bin/env bash
# wgrad_device.sh -- one device call for the Hopper wgmma weight gradient
# (csrc/cuda/conv2d_wgmma_wgrad.cu), from the repo root on an H100 / H200:
#
#     bash tests/cuda/wgrad_device.sh            # about 5 minutes on 16 cores
#
# Builds test_conv twice in parallel (sm_90a): build/tests/cuda (timing) and
# build/tests/cuda/wd with GC_CONV_WATCHDOG (an mbarrier wait that never completes traps
# after ~1 s instead of hanging: the correctness runs); then, each step time-boxed:
#   1. test_conv wgradtest   forced wgmma wgrad vs float64 / mma.sync, determinism, all 16
#                            block variants, split / ring overrides, graph replay, refusals
#   2. test_conv wgradbench  ResNet-50's weight gradients at batch 256 (f16, bf16):
#                            wgmma / mma.sync / auto / cuDNN ms and the plan per layer
#   3. test_conv test        the whole conv suite (auto paths now take the new kernel)
# Logs go to $OUT (default /tmp/out): build*.log, ptxas_wgrad.txt, wgradtest.log,
# wgradbench.log, test.log. Exit status: nonzero when a correctness step failed.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

stamp "build (sm_90a): build/tests/cuda and build/tests/cuda/wd (watchdog)"
( make -C tests/cuda -j16 conv > "$OUT/build.log" 2>&1; echo $? > "$OUT/build.rc" ) &
( make -C tests/cuda -j16 conv TAG=wd DEFS='-DGC_CONV_WATCHDOG=2000000000LL' \
    > "$OUT/build_wd.log" 2>&1; echo $? > "$OUT/build_wd.rc" ) &
wait
if [ "$(cat "$OUT/build.rc")" != 0 ] || [ "$(cat "$OUT/build_wd.rc")" != 0 ]; then
  tail -40 "$OUT/build.log" "$OUT/build_wd.log"; echo "BUILD FAILED"; exit 1
fi
stamp "built"
cp build/tests/cuda/obj/conv/conv2d_wgmma_wgrad.ptxas.txt "$OUT/ptxas_wgrad.txt"
grep -E "registers|spill" "$OUT/ptxas_wgrad.txt" | sort | uniq -c | sed 's/^/  ptxas: /'

rc=0
stamp "1. wgradtest (watchdog build)"
VERBOSE=1 timeout 150 build/tests/cuda/wd/test_conv wgradtest > "$OUT/wgradtest.log" 2>&1; r=$?
[ $r != 0 ] && rc=$r
grep -E "^device|^seed|^wgrad|FAIL|worst|refuses|correctness:|rror|skip" "$OUT/wgradtest.log" | head -80
stamp "wgradtest rc=$r"

stamp "2. wgradbench (batch ${BATCH:-256})"
timeout 150 build/tests/cuda/test_conv wgradbench > "$OUT/wgradbench.log" 2>&1; r=$?
grep -vE "^seed" "$OUT/wgradbench.log"
stamp "wgradbench rc=$r (124 = time box)"

stamp "3. test (whole conv suite, watchdog build, 120 s box)"
timeout 120 build/tests/cuda/wd/test_conv test > "$OUT/test.log" 2>&1; r=$?
[ $r != 0 ] && rc=$r
grep -E "FAIL|correctness:|worst rel err|graph capture|refuses" "$OUT/test.log" | tail -40
stamp "test rc=$r"

echo "================ summary"
cat "$OUT/gpu.txt"
grep -hE "correctness:" "$OUT/wgradtest.log" "$OUT/test.log" 2>/dev/null
grep -hE "per ResNet-50 step" "$OUT/wgradbench.log" 2>/dev/null
echo "exit status $rc"
exit $rc
