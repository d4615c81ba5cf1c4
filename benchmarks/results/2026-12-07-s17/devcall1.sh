#!/usr/bin/env bash
# session 17, call 1: tree = main at 132238b (or later Python-only commits), built off the device
# for 90a and carried as build/core312.so.xz. What session 16 left unverified (the small-C
# data gradient's revised cases, the TMA epilogue chosen by auto at any K, the sm_86-limit
# cases), where the GAN iteration's time goes (host vs device), then ResNet-50 b256 side
# by side and the recurrent layers against PyTorch / cuDNN -- in the order of what
# matters most, since device time was scarce: the run stops at DEADLINE_S.
source "$(dirname "$0")/../device_call.sh"
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "small-C data gradient (revised cases); the wgmma GEMM epilogues incl. auto at K = 5000; weight_grads"
timeout $(left 90) $P tests/test_cuda_fast_paths.py tests/test_ops.py -k "small_c or tma_epilogue or weight_grads" > $L/raw/t_fast.txt 2>&1; tail -3 $L/raw/t_fast.txt >> $L/checks.txt
stamp "the GAN iteration: wall per call, CUPTI kernel trace; host overhead per call"
timeout $(left 60) python3 benchmarks/profile_gan_cuda.py --device cuda:0 --batch 128 --iters 200 --trace-iters 20 > $L/gan_profile.txt 2>&1; echo "gan profile rc=$?" >> $L/checks.txt
# "before" = the tree of b475d1b (its Python package and a 90a build of it, carried as
# build/old_gpucmp.tar.xz): the Keras front end's own NaN / Inf pass per call
mkdir -p /tmp/before && tar xJf build/old_gpucmp.tar.xz -C /tmp/before
timeout $(left 90) python3 benchmarks/bench_host_overhead.py --device cuda:0 --batch 128 --calls 200 --repeats 3 --rounds 2 --gpucmp-builds before=/tmp/before > $L/gan_host.txt 2>&1; echo "host rc=$?" >> $L/checks.txt
timeout $(left 60) python3 -m pytest -q -p no:cacheprovider tests/test_keras_batch_calls.py > $L/raw/t_batch_calls.txt 2>&1; tail -2 $L/raw/t_batch_calls.txt >> $L/checks.txt
stamp "GEMM 4096 / 8192 bf16 / fp16 under auto (expect the TMA epilogue's figures of session 16)"
timeout $(left 40) python3 benchmarks/bench_gemm.py --no-cpu --gpu-sizes 4096 8192 --dtypes bfloat16 float16 --repeats 10 > $L/gemm_auto.txt 2>&1; echo "gemm rc=$?" >> $L/checks.txt
stamp "the same under an A4000's limits (99 KB per block, 48 SMs): GEMM / conv / weight_grads op cases, small-C"
timeout $(left 150) $P tests/test_cuda_sm86_limits.py -k gemm_conv > $L/raw/t_sm86.txt 2>&1; tail -3 $L/raw/t_sm86.txt >> $L/checks.txt
stamp "ResNet-50 side by side b256: bf16 (eager + compile), fp16, fp32 (TF32)"
timeout $(left 200) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 float32 --steps 20 --compile mixed_bfloat16 --json $L/raw/r50.json > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -8 $L/r50.txt >> $L/checks.txt
stamp "recurrent layers fwd and fwd+bwd: gpucmp, gpucmp through cuDNN, PyTorch eager / graph"
timeout $(left 200) python3 benchmarks/bench_rnn_layer.py --devices cuda:0 --repeats 5 --steps 5 --rounds 1 --rnn-variants auto cudnn > $L/rnn_layer.txt 2>&1; echo "rnn rc=$?" >> $L/checks.txt; tail -14 $L/rnn_layer.txt >> $L/checks.txt
stamp "done"
tar czf $L/raw.tgz -C $L raw && rm -rf $L/raw
