#!/usr/bin/env bash
# session 4, call 3: the final tree (GEMM tiles and resident clusters reverted), .so carried
set -uo pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-200}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $L/checks.txt; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader >> $L/checks.txt
python3 -c "import gpucmp, sys; d=gpucmp.available_devices(); print(d); sys.exit(0 if any(x.startswith('cuda') for x in d) else 1)" >> $L/checks.txt 2>&1 || { stamp "NO CUDA"; exit 1; }
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "mixed precision graphs, batch calls, cudnn"
timeout $(left 50) $P tests/test_mixed_precision.py tests/test_keras_batch_calls.py tests/test_rnn_cudnn.py -k "not trains_under_each_policy" > $L/t_mixed.txt 2>&1; tail -2 $L/t_mixed.txt >> $L/checks.txt
stamp "resident grid shapes / graph / refusals"
timeout $(left 40) $P tests/test_rnn_ops.py -k "resident and (grid_shapes or captured_graph or refuses)" > $L/t_rres.txt 2>&1; tail -2 $L/t_rres.txt >> $L/checks.txt
stamp "plan memory on cuda"
timeout $(left 40) $P tests/test_plan_graph.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_keras_batchnorm.py tests/test_gan_seed.py > $L/t_mem.txt 2>&1; tail -2 $L/t_mem.txt >> $L/checks.txt
stamp "layer bench lstm gru (auto) vs torch graph"
timeout $(left 40) python3 benchmarks/bench_rnn_layer.py --devices cuda:0 --layers lstm gru --modes fwd+bwd \
  --frameworks gpucmp torch-graph --rounds 1 --repeats 5 --json $L/bench_rnn_layer.json > $L/bench_rnn_layer.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "gan float32 / float16 (harness)"
timeout $(left 40) python3 -m gpucmp bench --workloads gan --precision float32 float16 --repeats 3 --json $L/bench_gan.json > $L/bench_gan.txt 2>&1; echo "rc=$?" >> $L/checks.txt
stamp "done"
