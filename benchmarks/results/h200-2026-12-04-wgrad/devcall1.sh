#!/usr/bin/env bash
# session 13, call 1 (HEAD 29e1b5c .so): wgrad sweep, fp16 / fp32 step profiles, ncu of the 3x3 wgrad
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-560}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1 || { stamp "NO CUDA"; exit 1; }
stamp "wgrad sweep"
timeout $(left 150) python3 benchmarks/sweep_wgrad.py > $L/sweep_wgrad.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "profile fp16"
timeout $(left 80) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_float16 --top 30 > $L/profile_fp16.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "profile fp32"
timeout $(left 80) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision float32 --top 30 > $L/profile_fp32.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "ncu wgrad 3x3 128 and 3x3 512"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for spec in "256,28,28,128,128" "256,7,7,512,512"; do
  timeout $(left 60) $NCU --clock-control none -k regex:wgrad --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
    python3 -c "
from gpucmp import _core
n,h,w,c,f=[int(v) for v in '$spec'.split(',')]
print(_core.bench_conv('cuda:0', n,h,w,c,f,3,3, padding='same', dtype='bfloat16', which='bwd_filter', repeats=2, warmup=1))
" > $L/ncu_wgrad_${spec//,/x}.txt 2>&1; echo "ncu rc=$?" >> $L/checks.txt
done
stamp "done"
