#!/bin/bash
# gemm_device_run.sh -- one lease of the GPU: build the GEMM test twice (sm_80+sm_90a and
# sm_80 only), dump SASS of the wgmma kernels, run correctness, then the benchmark.
# Logs go to $OUT (or ./gemm_out). Usage: bash tests/cuda/gemm_device_run.sh [quick|full]
OUT=${OUT:-gemm_out}; mkdir -p "$OUT"
MODE=${1:-quick}
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
LT=$(ls /usr/local/cuda/lib64/libcublasLt.so* /usr/lib/x86_64-linux-gnu/libcublasLt.so* 2>/dev/null | head -1)
[ -z "$LT" ] && LT=$(find / -name 'libcublasLt.so*' -not -path '*/proc/*' 2>/dev/null | head -1)
export GPUCMP_CUBLASLT=$LT; echo "cublasLt: $LT"
( make -C tests/cuda -j8 gemm > "$OUT/build_all.log" 2>&1; echo "build all rc=$?" ) &
( make -C tests/cuda -j8 gemm TAG=bench GEMM_WATCHDOG=0 > "$OUT/build_bench.log" 2>&1; echo "build bench rc=$?" ) &
( make -C tests/cuda -j4 gemm TAG=sm80 GC_ARCH="-gencode=arch=compute_80,code=compute_80" > "$OUT/build_sm80.log" 2>&1; echo "build sm80 rc=$?" ) &
wait
grep -E "error" "$OUT"/build_*.log | head
B=build/tests/cuda/test_gemm
cuobjdump --dump-sass build/tests/cuda/obj/gemm/gemm_wgmma.cu.o > "$OUT/wgmma.sass" 2>&1
echo "SASS: HGMMA lines per kernel:"; awk '/Function :/{f=$3} /HGMMA/{c[f]++} END{for(k in c) print "  " c[k], k}' "$OUT/wgmma.sass"
grep -c "UTMALDG" "$OUT/wgmma.sass" | sed 's/^/  UTMALDG lines: /'
grep -c "MEMBAR.ALL.GPU" "$OUT/wgmma.sass" | sed 's/^/  MEMBAR.ALL.GPU lines (all kernels): /'
gzip -f "$OUT/wgmma.sass"
Q=--quick; [ "$MODE" = full ] && Q=
timeout 90 $B $Q > "$OUT/correct.log" 2>&1; echo "correctness rc=$?"
grep -E "^FAIL|^info|^ok  graph|correctness:|wgmma \(sm_90a\)|^device" "$OUT/correct.log" | head -60
timeout 120 build/tests/cuda/bench/test_gemm --only-bench > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
cat "$OUT/bench.log"
timeout 45 build/tests/cuda/sm80/test_gemm --quick > "$OUT/correct_sm80.log" 2>&1; echo "sm80 PTX-only build (JIT; no wgmma) correctness rc=$?"
grep -E "^FAIL|correctness:|wgmma \(sm" "$OUT/correct_sm80.log" | head -20
