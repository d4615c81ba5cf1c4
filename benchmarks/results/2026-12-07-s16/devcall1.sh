#!/usr/bin/env bash
# session 16, call 1: tree = main (3e0203c: the weight_grads op) with wip/smallc-dgrad.patch applied (the small-C data
# gradient; everything of session 15: BN mask_from_x, TF32 wgmma weight gradient, TMA
# epilogue, the stem's pad folded into the max pool). Tests (small-C dgrad, pool pads, BN, conv ops, plan), memcheck,
# ResNet-50 b256 all precisions side by side, every ResNet-50 conv pass against cuDNN.
source "$(dirname "$0")/../device_call.sh"
P="python3 -m pytest -q -p no:cacheprovider -m cuda"
stamp "small-C data gradient; conv2d_bwd_data op matrix; weight_grads (the CUDA composition of 5f999a2 / 3e0203c), recurrent training vs the CPU"
timeout $(left 100) $P tests/test_cuda_fast_paths.py -k "small_c" tests/test_ops.py -k "small_c or conv2d_bwd_data or weight_grads" > $L/raw/t_smallc.txt 2>&1; tail -3 $L/raw/t_smallc.txt >> $L/checks.txt
timeout $(left 60) $P tests/test_keras_recurrent.py -k "training_step_matches_the_cpu" > $L/raw/t_rnn_train.txt 2>&1; tail -2 $L/raw/t_rnn_train.txt >> $L/checks.txt
stamp "memcheck: small-C dgrad, maxpool pads, BN"
timeout $(left 60) compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_fast_paths.py tests/test_ops.py -k "(small_c and bfloat16) or (maxpool2d_bwd and cuda and float32) or (batchnorm_bwd and cuda and bfloat16)" > $L/raw/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $L/checks.txt; grep -E "ERROR SUMMARY|passed|failed" $L/raw/memcheck.txt | tail -3 >> $L/checks.txt
stamp "op tests: maxpool (explicit pads), batchnorm, conv fwd / wgrad; TF32 wgrad; plan + training"
timeout $(left 110) $P tests/test_ops.py -k "maxpool or batchnorm or conv2d_fwd or conv2d_bwd_filter" tests/test_cuda_wgrad_tf32.py tests/test_plan_graph.py tests/test_keras_small_resnet.py tests/test_cuda_training.py tests/test_mixed_precision.py > $L/raw/t_ops.txt 2>&1; tail -3 $L/raw/t_ops.txt >> $L/checks.txt
stamp "every ResNet-50 conv pass against cuDNN: bf16, TF32"
timeout $(left 80) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes bfloat16 --per-pass --no-torch --repeats 3 > $L/conv_bf16.txt 2>&1; echo "conv bf16 rc=$?" >> $L/checks.txt
timeout $(left 90) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes tfloat32 --per-pass --no-torch --repeats 3 > $L/conv_tf32.txt 2>&1; echo "conv tf32 rc=$?" >> $L/checks.txt
stamp "TF32 per pass, forward and data gradient forced onto the wgmma igemm kernel (the 64-channel layers auto leaves to mma.sync)"
GPUCMP_FORCE=cuda.conv2d.fwd=wgmma,cuda.conv2d.bwd_data=wgmma,cuda.conv2d.fwd_wgmma=igemm timeout $(left 60) python3 benchmarks/bench_conv.py --layers resnet50 --dtypes tfloat32 --per-pass --no-torch --no-vendor --repeats 3 > $L/conv_tf32_igemm.txt 2>&1; echo "conv tf32 igemm rc=$?" >> $L/checks.txt
stamp "ResNet-50 side by side b256: bf16 (eager + compile), fp16, fp32 (TF32)"
timeout $(left 200) python3 benchmarks/bench_resnet50.py --batch-sizes 256 --precisions mixed_bfloat16 mixed_float16 float32 --steps 20 --compile mixed_bfloat16 --json $L/raw/r50.json > $L/r50.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -8 $L/r50.txt >> $L/checks.txt
stamp "done"
tar czf $L/raw.tgz -C $L raw && rm -rf $L/raw
