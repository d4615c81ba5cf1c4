#!/usr/bin/env bash
# session 12, call 3 (main @ bench --bias): with-bias conv passes vs torch; every layer on igemm forced
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p $L
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1 || { stamp "NO CUDA"; exit 1; }
stamp "conv per pass with bias vs torch with bias"
timeout 150 python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --bias --no-vendor --repeats 5 > $L/conv_bias.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "every layer on igemm (forced), no bias"
GPUCMP_FORCE="cuda.conv2d.fwd=wgmma,cuda.conv2d.bwd_data=wgmma,cuda.conv2d.fwd_wgmma=igemm" timeout 100 python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --no-vendor --no-torch --repeats 5 > $L/conv_igemm_forced.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "weight gradient variants with bias: mma forced"
GPUCMP_FORCE="cuda.conv2d.wgrad=mma" timeout 80 python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --bias --no-vendor --no-torch --repeats 5 > $L/conv_bias_mma.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
