#!/usr/bin/env bash
# session 4, call 2 (the merged tree; .so built off-device and carried): GEMM tiles,
# resident clusters, loss-scaled graphs, then the benchmarks, each stage time-boxed.
set -uo pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-490}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader >> $L/checks.txt
python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1 || { stamp "NO CUDA in the carried .so"; exit 1; }
# CUTLASS GEMM baselines build on the idle CPUs while the tests run
( KINDS=gemm JOBS=13 timeout 300 bash benchmarks/cutlass/build.sh > $L/build_cutlass.log 2>&1 ) &
CUT=$!
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "gemm tiles"
timeout $(left 70) $P tests/test_gemm_mma_tiles.py -x > $L/t_gemm_tiles.txt 2>&1; tail -3 $L/t_gemm_tiles.txt >> $L/checks.txt
stamp "gemm tiles under sm86 limits"
timeout $(left 60) python3 -m pytest -q -p no:cacheprovider tests/test_cuda_sm86_limits.py -k gemm_mma > $L/t_gemm_sm86.txt 2>&1; tail -3 $L/t_gemm_sm86.txt >> $L/checks.txt
stamp "resident clusters"
timeout $(left 100) $P tests/test_rnn_ops.py -k "resident and (grid_shapes or captured_graph or refuses)" > $L/t_rres.txt 2>&1; tail -3 $L/t_rres.txt >> $L/checks.txt
stamp "mixed precision graphs + batch calls"
timeout $(left 60) $P tests/test_mixed_precision.py tests/test_keras_batch_calls.py -k "not trains_under_each_policy" > $L/t_mixed.txt 2>&1; tail -3 $L/t_mixed.txt >> $L/checks.txt
stamp "plan memory layout on cuda (graph, small resnet, training)"
timeout $(left 70) $P tests/test_plan_graph.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_keras_batchnorm.py > $L/t_mem.txt 2>&1; tail -3 $L/t_mem.txt >> $L/checks.txt
stamp "memcheck resident cluster"
timeout $(left 45) compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/cuda/rnn_persistent_case.py \
    --variant resident --cells lstm gru --B 3 --T 3 --u 100 > $L/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $L/checks.txt; grep "ERROR SUMMARY" $L/memcheck.txt >> $L/checks.txt
stamp "layer bench lstm gru: auto / persistent / cudnn vs torch graph"
timeout $(left 90) python3 benchmarks/bench_rnn_layer.py --devices cuda:0 --layers lstm gru --modes fwd+bwd \
  --frameworks gpucmp torch-graph --rnn-variants auto cudnn --rounds 1 --repeats 5 --json $L/bench_rnn_layer.json > $L/bench_rnn_layer.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "resnet50 bf16 b256: peak memory and img/s beside torch eager"
timeout $(left 90) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 --steps 10 --json $L/bench_r50.json > $L/bench_r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt
wait $CUT; echo "cutlass build rc=$?" >> $L/checks.txt; tail -2 $L/build_cutlass.log >> $L/checks.txt
stamp "gemm bench (forced tiles, cuBLAS, CUTLASS)"
LT=$(left 90)
timeout $LT python3 benchmarks/bench_cutlass.py --sections gemm --mma-tiles all --allow-no-cutlass \
  --gemm-sizes 8192 --gemm-dtypes float16 bfloat16 tfloat32 --seed-batches 128 --no-core-bench \
  --repeats 3 --json $L/bench_gemm_mma.json --time-limit-s $((LT - 10)) > $L/bench_gemm_mma.md 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "seeds' lstm step and gan"
timeout $(left 60) python3 benchmarks/bench_rnn.py --devices cuda:0 --models lstm gan --frameworks gpucmp torch-graph --steps 20 --json $L/bench_rnn.json > $L/bench_rnn.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
