#!/usr/bin/env bash
# session 16, call 2: the same tree and .so as call 1. Step profiles, the GEMM epilogue A/B
# at 4096 / 8192, the TF32 weight-gradient block-shape sweep, ResNet-50 at batch 128, the seeds' CNN.
source "$(dirname "$0")/../device_call.sh"
stamp "step profiles b256: bf16, fp32"
timeout $(left 40) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision mixed_bfloat16 > $L/profile_bf16.txt 2>&1
timeout $(left 40) python3 benchmarks/profile_plan.py --model resnet50 --batch 256 --precision float32 > $L/profile_fp32.txt 2>&1
stamp "GEMM epilogue A/B: bf16 / fp16 4096 and 8192, registers / TMA / auto"
for e in regs tma auto; do GPUCMP_FORCE=cuda.gemm.wgmma_epi=$e timeout $(left 40) python3 benchmarks/bench_gemm.py --no-cpu --gpu-sizes 4096 8192 --dtypes bfloat16 float16 --repeats 10 > $L/raw/gemm_$e.txt 2>&1; echo "gemm $e rc=$?" >> $L/checks.txt; done
stamp "ResNet-50 side by side b128: bf16 (eager + compile), fp16, fp32 (TF32)"
timeout $(left 150) python3 benchmarks/bench_resnet50.py --batch-sizes 128 --precisions mixed_bfloat16 mixed_float16 float32 --steps 20 --compile mixed_bfloat16 --json $L/raw/r50_b128.json > $L/r50_b128.txt 2>&1; echo "rc=$?" >> $L/checks.txt; tail -8 $L/r50_b128.txt >> $L/checks.txt
stamp "TF32 weight-gradient sweep (every ResNet-50 filter pass, each block shape)"
timeout $(left 110) python3 benchmarks/sweep_wgrad.py --dtype tfloat32 > $L/sweep_tf32.txt 2>&1; echo "sweep rc=$?" >> $L/checks.txt
stamp "seeds' CNN float32, batch 128 and 32: gpucmp, PyTorch graph"
timeout $(left 90) python3 benchmarks/bench_cnn.py --devices cuda:0 --samples 60000 --repeats 3 --batch-sizes 128 32 --frameworks gpucmp torch-graph > $L/cnn.txt 2>&1; echo "cnn rc=$?" >> $L/checks.txt; tail -6 $L/cnn.txt >> $L/checks.txt
stamp "recurrent layers fwd+bwd against PyTorch eager / graph (weight_grads on CUDA: no change expected)"
timeout $(left 60) python3 benchmarks/bench_rnn_layer.py --devices cuda:0 --repeats 5 --steps 5 --rounds 2 --modes fwd+bwd > $L/rnn_layer.txt 2>&1; echo "rnn rc=$?" >> $L/checks.txt; tail -8 $L/rnn_layer.txt >> $L/checks.txt
stamp "done"
tar czf $L/raw.tgz -C $L raw && rm -rf $L/raw
