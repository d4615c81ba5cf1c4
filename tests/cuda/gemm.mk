# gemm.mk -- builds the standalone CUDA GEMM test + benchmark (tests/cuda/test_gemm.cu).
# Why a separate program: it links only the GEMM sources (and tensor_map.cu) with
# core/status.c, core/dtype.c and core/variants.c (the backend helpers are stubbed inside
# the test), so the GEMM paths are
# tested on their own; cuBLASLt is opened at run time (never linked).
# Included by tests/cuda/Makefile (ROOT, OUT, GC_NVCC, GC_CC, GC_ARCH, DEFS come from it):
#   make -C tests/cuda -j8 gemm                    # sm_80 + sm_90a -> build/tests/cuda/test_gemm
#   make -C tests/cuda -j8 gemm TAG=sm80 GC_ARCH="-gencode=arch=compute_80,code=compute_80"
#                                                  # PTX only: JIT-compiled for the device, no wgmma
#   make -C tests/cuda -j8 gemm TAG=bench GEMM_WATCHDOG=0   # as the library builds it, for timing
#   build/tests/cuda[/TAG]/test_gemm [--bench] [--quick] [--only-bench] [--seed N]
# GEMM_WATCHDOG (cycles, default ~4 s): the wgmma kernel traps instead of hanging on a
# barrier that never completes; 0 = off, as in the library.

ifeq ($(OUT),)
$(error gemm.mk is included by tests/cuda/Makefile: run `make -C tests/cuda gemm`)
endif

GEMM_ARCH_DEFAULT := -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a
GEMM_ARCH := $(or $(GC_ARCH),$(GEMM_ARCH_DEFAULT))
GEMM_LIB_ARCH := $(or $(GC_LIB_ARCH),$(GEMM_ARCH))
GEMM_WATCHDOG ?= 8000000000LL
GEMM_OBJDIR := $(OUT)/obj/gemm
GEMM_NVFLAGS := -DGC_GEMM_WATCHDOG=$(GEMM_WATCHDOG) -O3 -std=c++17 --expt-relaxed-constexpr -Xcompiler -fPIC \
                -I$(ROOT)/csrc/include -I$(ROOT)/csrc/cuda $(DEFS)
GEMM_CU := $(addprefix $(ROOT)/csrc/cuda/,gemm.cu gemm_simt.cu gemm_small.cu gemm_mma.cu gemm_wgmma.cu \
             gemm_vendor.cu tensor_map.cu) $(ROOT)/tests/cuda/test_gemm.cu
GEMM_C := $(ROOT)/csrc/core/status.c $(ROOT)/csrc/core/dtype.c $(ROOT)/csrc/core/variants.c
GEMM_OBJ := $(patsubst %,$(GEMM_OBJDIR)/%.o,$(notdir $(GEMM_CU) $(GEMM_C)))
GEMM_HDR := $(addprefix $(ROOT)/csrc/,cuda/gemm.cuh cuda/common.cuh cuda/hopper_ptx.cuh cuda/wgmma_gemm_kernel.cuh include/gpucmp.h \
              include/gpucmp_variants.h)

gemm: $(OUT)/test_gemm

$(OUT)/test_gemm: $(GEMM_OBJ)
	$(GC_NVCC) $(GEMM_ARCH) -o $@ $(GEMM_OBJ) -ldl -lpthread

$(GEMM_OBJDIR)/%.cu.o: $(ROOT)/csrc/cuda/%.cu $(GEMM_HDR) | $(GEMM_OBJDIR)
	$(GC_NVCC) $(GEMM_NVFLAGS) $(GEMM_LIB_ARCH) -c $< -o $@
$(GEMM_OBJDIR)/test_gemm.cu.o: $(ROOT)/tests/cuda/test_gemm.cu $(GEMM_HDR) | $(GEMM_OBJDIR)
	$(GC_NVCC) $(GEMM_NVFLAGS) $(GEMM_ARCH) -c $< -o $@
$(GEMM_OBJDIR)/%.c.o: $(ROOT)/csrc/core/%.c $(ROOT)/csrc/include/gpucmp.h $(ROOT)/csrc/include/gpucmp_variants.h | $(GEMM_OBJDIR)
	$(GC_CC) -O2 -std=c11 -fPIC -I$(ROOT)/csrc/include -c $< -o $@
$(GEMM_OBJDIR):
	mkdir -p $@

.PHONY: gemm
