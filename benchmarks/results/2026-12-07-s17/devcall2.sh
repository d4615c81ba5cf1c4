#!/usr/bin/env bash
# session 17, call 2: tree = main with {lr, t} and the dropout seed in one device block (one
# staged copy per train_on_batch instead of two), built off the device for 90a and carried.
# The step-graph / dropout / batch-call CUDA tests, then the GAN iteration against PyTorch's
# CUDA graph twice, and the per-call profile.
source "$(dirname "$0")/../device_call.sh"
stamp "CUDA tests: batch calls, step graphs, training with dropout, the GAN seed"
timeout $(left 100) python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_keras_batch_calls.py tests/test_plan_graph.py tests/test_cuda_training.py tests/test_gan_seed.py tests/test_keras_recurrent_dropout.py > $L/raw/t_graph.txt 2>&1; tail -2 $L/raw/t_graph.txt >> $L/checks.txt
for i in 1 2; do
stamp "GAN iteration and LSTM step against PyTorch (eager, CUDA graph), round $i"
timeout $(left 60) python3 benchmarks/bench_rnn.py --devices cuda:0 --models gan --frameworks gpucmp torch-graph --steps 20 > $L/bench_gan_$i.txt 2>&1; tail -3 $L/bench_gan_$i.txt >> $L/checks.txt
done
stamp "the GAN iteration's profile"
timeout $(left 45) python3 benchmarks/profile_gan_cuda.py --device cuda:0 --batch 128 --iters 200 --trace-iters 20 > $L/gan_profile.txt 2>&1; echo "gan profile rc=$?" >> $L/checks.txt
stamp "done"
tar czf $L/raw.tgz -C $L raw && rm -rf $L/raw
