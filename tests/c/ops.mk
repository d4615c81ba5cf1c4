# ops.mk -- builds and runs tests/c/test_cpu_ops.c, the standalone smoke test of the CPU
# float32 kernels other than GEMM (act, conv2d, pool2d, loss, dropout, optim, metrics),
# tests/c/test_dyn.c (the optimizers' / dropout's dynamic values and the embedding
# kernels at several thread counts), tests/c/test_cpu_fast.c (the AVX-512 fast paths) and
# tests/c/test_rnn.c (the recurrent ops).
# Why a separate file: these programs link a different subset of csrc/ than the GEMM
# tests, and the tiny-tile builds need their own defines.
# Included by tests/c/Makefile, which sets ROOT, BUILD, CC, CFLAGS, INC, HDRS, T and SAN:
# call it as every other tests/c target, `make -C tests/c ops-check` (outputs under
# build/tests/c/; SAN=1 for the sanitizer build).
#   ops-check      ops-fast (below), then the test, then with 1 thread, then the tiny-tile
#                  build (many conv tiles, every parallel path taken even on small
#                  shapes); test_dyn
#   ops-quick      the tiny-tile build on reduced sizes; test_dyn on reduced sizes
#   ops-valgrind   the tiny-tile build on reduced sizes under valgrind (the GEMM's fma
#                  variant: valgrind has no AVX-512)
#   ops-fast       test_cpu_fast, normal and tiny-tile build (passes with a note on a CPU
#                  without AVX-512)
# The GEMM linked in is the library's (csrc/cpu/gemm*.c). The library sources are
# compiled as setup.py does: no -march, -O3 -fopenmp -std=c11.

ifeq ($(BUILD),)
$(error ops.mk is included by tests/c/Makefile: run `make -C tests/c ops-check`)
endif

OPS_SRC := $(addprefix $(ROOT)/csrc/cpu/,act.c conv2d.c pool2d.c loss.c dropout.c optim.c metrics.c) \
           $(ROOT)/csrc/core/status.c $(ROOT)/csrc/core/geometry.c $(ROOT)/csrc/core/variants.c \
           $(ROOT)/csrc/core/keras_constants.c
OPS_GEMM := $(wildcard $(ROOT)/csrc/cpu/gemm*.c)
OPS_DYN_SRC := $(addprefix $(ROOT)/csrc/cpu/,dropout.c optim.c embedding.c) \
               $(ROOT)/csrc/core/status.c $(ROOT)/csrc/core/dtype.c $(ROOT)/csrc/core/keras_constants.c
OPS_RNN_SRC := $(ROOT)/csrc/cpu/rnn.c $(ROOT)/csrc/cpu/rnn_fast.c $(addprefix $(ROOT)/csrc/core/,validate.c oplist.c status.c dtype.c geometry.c variants.c)
# tiles of a few hundred floats and no minimum work for threading
OPS_TINY := -DGC_CONV_TILE_BYTES=2048 -DGC_CONV_SHARED_TILE_BYTES=3000 -DGC_CONV_PAR_MIN_FLOPS=0

ops-all: $(BUILD)/test_cpu_ops $(BUILD)/test_cpu_ops_tiny $(BUILD)/test_dyn \
         $(BUILD)/test_cpu_fast $(BUILD)/test_cpu_fast_tiny $(BUILD)/test_rnn

# test_rnn: the recurrent ops (csrc/cpu/rnn.c, rnn_fast.c) through validation and the
# adapters, at every cpu.rnn.simd variant the CPU has
$(BUILD)/test_rnn: $(T)/test_rnn.c $(OPS_RNN_SRC) $(OPS_GEMM) $(HDRS) $(ROOT)/csrc/cpu/rnn_fast.h $(ROOT)/csrc/cpu/rnn_fast_kernel.inc
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -g $(INC) $(OPS_RNN_SRC) $(OPS_GEMM) $(T)/test_rnn.c -lm -o $@

$(BUILD)/test_dyn: $(T)/test_dyn.c $(OPS_DYN_SRC) $(HDRS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -g $(INC) $(OPS_DYN_SRC) $(T)/test_dyn.c -lm -o $@

$(BUILD)/test_cpu_ops: $(T)/test_cpu_ops.c $(OPS_SRC) $(OPS_GEMM) $(HDRS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(INC) $(OPS_SRC) $(OPS_GEMM) $(T)/test_cpu_ops.c -lm -o $@

$(BUILD)/test_cpu_ops_tiny: $(T)/test_cpu_ops.c $(OPS_SRC) $(OPS_GEMM) $(HDRS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -g $(OPS_TINY) $(INC) $(OPS_SRC) $(OPS_GEMM) $(T)/test_cpu_ops.c -lm -o $@

ops-check: $(BUILD)/test_cpu_ops $(BUILD)/test_cpu_ops_tiny $(BUILD)/test_dyn $(BUILD)/test_rnn ops-fast
	$(BUILD)/test_cpu_ops
	OMP_NUM_THREADS=1 $(BUILD)/test_cpu_ops
	$(BUILD)/test_cpu_ops_tiny
	$(BUILD)/test_dyn
	$(BUILD)/test_rnn

ops-quick: $(BUILD)/test_cpu_ops_tiny $(BUILD)/test_dyn $(BUILD)/test_rnn
	$(BUILD)/test_cpu_ops_tiny --small
	$(BUILD)/test_dyn --small
	$(BUILD)/test_rnn --small

ops-valgrind: $(BUILD)/test_cpu_ops_tiny $(BUILD)/test_dyn | no-valgrind-under-san
	OMP_NUM_THREADS=2 GPUCMP_CPU_SIMD=fma valgrind --error-exitcode=1 -q $(BUILD)/test_cpu_ops_tiny --small
	OMP_NUM_THREADS=2 valgrind --error-exitcode=1 -q $(BUILD)/test_dyn --small

# ops-fast: tests/c/test_cpu_fast.c, the AVX-512 fast paths of conv2d.c / pool2d.c
# against the paths they replace (bitwise where they promise it), in the normal and
# the tiny-tile build; prints a note and passes on a CPU without AVX-512.
$(BUILD)/test_cpu_fast: $(T)/test_cpu_fast.c $(OPS_SRC) $(OPS_GEMM) $(HDRS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(INC) $(OPS_SRC) $(OPS_GEMM) $(T)/test_cpu_fast.c -lm -o $@

$(BUILD)/test_cpu_fast_tiny: $(T)/test_cpu_fast.c $(OPS_SRC) $(OPS_GEMM) $(HDRS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -g $(OPS_TINY) $(INC) $(OPS_SRC) $(OPS_GEMM) $(T)/test_cpu_fast.c -lm -o $@

ops-fast: $(BUILD)/test_cpu_fast $(BUILD)/test_cpu_fast_tiny
	$(BUILD)/test_cpu_fast
	$(BUILD)/test_cpu_fast_tiny --small

.PHONY: ops-all ops-check ops-quick ops-valgrind ops-fast
