# ops.mk -- builds and runs tests/c/test_cpu_ops.c, the standalone smoke test of the CPU
# float32 kernels other than GEMM (act, conv2d, pool2d, loss, dropout, optim, metrics),
# and tests/c/test_dyn.c (the optimizers' / dropout's dynamic values and the embedding
# kernels at several thread counts).
# Meant to be included by tests/c/Makefile (`include $(ROOT)/tests/c/ops.mk`); also
# usable alone: `make -f tests/c/ops.mk ops-check`. Paths are taken relative to this file.
#   ops-check      ops-fast (below), then the test, then with 1 thread, then the tiny-tile
#                  build (many conv tiles, every parallel path taken even on small
#                  shapes); test_dyn
#   ops-quick      the tiny-tile build on reduced sizes; test_dyn on reduced sizes
#   ops-valgrind   the tiny-tile build on reduced sizes under valgrind (the GEMM's fma
#                  variant: valgrind has no AVX-512)
# The GEMM linked in is the library's (csrc/cpu/gemm*.c) when present, else the file
# named by OPS_SGEMM (a naive reference kept outside the repo). The library sources
# are compiled as setup.py does: no -march, -O3 -fopenmp -std=c11.

OPS_SAVED_GOAL := $(.DEFAULT_GOAL)
OPS_STANDALONE := $(if $(filter 1,$(words $(MAKEFILE_LIST))),1,)
OPS_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/../..)
OPS_CFLAGS ?= -std=c11 -O3 -fopenmp -Wall -Wextra
OPS_INC := -I$(OPS_ROOT)/csrc/include -I$(OPS_ROOT)/csrc/cpu
OPS_OUT ?= $(OPS_ROOT)/tests/c
OPS_SRC := $(addprefix $(OPS_ROOT)/csrc/cpu/,act.c conv2d.c pool2d.c loss.c dropout.c optim.c metrics.c) \
           $(OPS_ROOT)/csrc/core/status.c $(OPS_ROOT)/csrc/core/geometry.c
OPS_SGEMM ?= /tmp/naive_sgemm.c
OPS_GEMM := $(if $(wildcard $(OPS_ROOT)/csrc/cpu/gemm.c),$(wildcard $(OPS_ROOT)/csrc/cpu/gemm*.c),$(OPS_SGEMM))
OPS_HDRS := $(OPS_ROOT)/csrc/include/gpucmp.h $(OPS_ROOT)/csrc/cpu/cpu_kernels.h
OPS_DYN_SRC := $(addprefix $(OPS_ROOT)/csrc/cpu/,dropout.c optim.c embedding.c) \
               $(OPS_ROOT)/csrc/core/status.c $(OPS_ROOT)/csrc/core/dtype.c
# tiles of a few hundred floats and no minimum work for threading
OPS_TINY := -DGC_CONV_TILE_BYTES=2048 -DGC_CONV_SHARED_TILE_BYTES=3000 -DGC_CONV_PAR_MIN_FLOPS=0

ops-all: $(OPS_OUT)/test_cpu_ops $(OPS_OUT)/test_cpu_ops_tiny $(OPS_OUT)/test_dyn

$(OPS_OUT)/test_dyn: $(OPS_ROOT)/tests/c/test_dyn.c $(OPS_DYN_SRC) $(OPS_HDRS)
	@mkdir -p $(OPS_OUT)
	$(CC) $(OPS_CFLAGS) -g $(OPS_INC) $(OPS_DYN_SRC) $(OPS_ROOT)/tests/c/test_dyn.c -lm -o $@

$(OPS_OUT)/test_cpu_ops: $(OPS_ROOT)/tests/c/test_cpu_ops.c $(OPS_SRC) $(OPS_GEMM) $(OPS_HDRS)
	@mkdir -p $(OPS_OUT)
	$(CC) $(OPS_CFLAGS) $(OPS_INC) $(OPS_SRC) $(OPS_GEMM) $(OPS_ROOT)/tests/c/test_cpu_ops.c -lm -o $@

$(OPS_OUT)/test_cpu_ops_tiny: $(OPS_ROOT)/tests/c/test_cpu_ops.c $(OPS_SRC) $(OPS_GEMM) $(OPS_HDRS)
	@mkdir -p $(OPS_OUT)
	$(CC) $(OPS_CFLAGS) -g $(OPS_TINY) $(OPS_INC) $(OPS_SRC) $(OPS_GEMM) $(OPS_ROOT)/tests/c/test_cpu_ops.c -lm -o $@

ops-check: ops-all ops-fast
	$(OPS_OUT)/test_cpu_ops
	OMP_NUM_THREADS=1 $(OPS_OUT)/test_cpu_ops
	$(OPS_OUT)/test_cpu_ops_tiny
	$(OPS_OUT)/test_dyn

ops-quick: $(OPS_OUT)/test_cpu_ops_tiny $(OPS_OUT)/test_dyn
	$(OPS_OUT)/test_cpu_ops_tiny --small
	$(OPS_OUT)/test_dyn --small

ops-valgrind: $(OPS_OUT)/test_cpu_ops_tiny $(OPS_OUT)/test_dyn
	OMP_NUM_THREADS=2 GPUCMP_CPU_SIMD=fma valgrind --error-exitcode=1 -q $(OPS_OUT)/test_cpu_ops_tiny --small
	OMP_NUM_THREADS=2 valgrind --error-exitcode=1 -q $(OPS_OUT)/test_dyn --small

# ops-fast: tests/c/test_cpu_fast.c, the AVX-512 fast paths of conv2d.c / pool2d.c
# against the paths they replace (bitwise where they promise it), in the normal and
# the tiny-tile build; prints a note and passes on a CPU without AVX-512.
$(OPS_OUT)/test_cpu_fast: $(OPS_ROOT)/tests/c/test_cpu_fast.c $(OPS_SRC) $(OPS_GEMM) $(OPS_HDRS)
	@mkdir -p $(OPS_OUT)
	$(CC) $(OPS_CFLAGS) $(OPS_INC) $(OPS_SRC) $(OPS_GEMM) $(OPS_ROOT)/tests/c/test_cpu_fast.c -lm -o $@

$(OPS_OUT)/test_cpu_fast_tiny: $(OPS_ROOT)/tests/c/test_cpu_fast.c $(OPS_SRC) $(OPS_GEMM) $(OPS_HDRS)
	@mkdir -p $(OPS_OUT)
	$(CC) $(OPS_CFLAGS) -g $(OPS_TINY) $(OPS_INC) $(OPS_SRC) $(OPS_GEMM) $(OPS_ROOT)/tests/c/test_cpu_fast.c -lm -o $@

ops-fast: $(OPS_OUT)/test_cpu_fast $(OPS_OUT)/test_cpu_fast_tiny
	$(OPS_OUT)/test_cpu_fast
	$(OPS_OUT)/test_cpu_fast_tiny --small

ops-clean:
	rm -f $(OPS_OUT)/test_cpu_ops $(OPS_OUT)/test_cpu_ops_tiny $(OPS_OUT)/test_dyn \
	      $(OPS_OUT)/test_cpu_fast $(OPS_OUT)/test_cpu_fast_tiny

.PHONY: ops-all ops-check ops-quick ops-valgrind ops-fast ops-clean

# Do not take over the including Makefile's default goal.
ifeq ($(OPS_STANDALONE),)
.DEFAULT_GOAL := $(OPS_SAVED_GOAL)
endif
