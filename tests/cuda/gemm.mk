# gemm.mk -- builds the standalone CUDA GEMM test + benchmark (tests/cuda/test_gemm.cu).
#
#   make -f tests/cuda/gemm.mk -j8                 # sm_80 + sm_90a  -> build/gemm_test/all/test_gemm
#   make -f tests/cuda/gemm.mk -j8 TAG=sm80 ARCHS="-gencode=arch=compute_80,code=compute_80"
#                                                   # PTX only: JIT-compiled for the device, no wgmma
#   make -f tests/cuda/gemm.mk -j8 TAG=bench WATCHDOG=0   # as the library builds it, for timing
#   build/gemm_test/all/test_gemm [--bench] [--quick] [--seed N]
# WATCHDOG (cycles, default ~4 s): the wgmma kernel traps instead of hanging on a barrier
# that never completes; 0 = off, as in the library.
#
# Run from the repository root. Links only the GEMM sources with core/status.c and
# core/dtype.c; the backend helpers are stubbed inside the test. cuBLASLt is opened at
# run time (never linked).
NVCC  ?= nvcc
CC    ?= cc
TAG   ?= all
ARCHS ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a
BUILD := build/gemm_test/$(TAG)
WATCHDOG ?= 8000000000LL
NVFLAGS := -DGC_GEMM_WATCHDOG=$(WATCHDOG) -O3 -std=c++17 --expt-relaxed-constexpr -Xcompiler -fPIC -Icsrc/include -Icsrc/cuda $(ARCHS)
CU  := csrc/cuda/gemm.cu csrc/cuda/gemm_simt.cu csrc/cuda/gemm_small.cu csrc/cuda/gemm_mma.cu csrc/cuda/gemm_wgmma.cu \
       csrc/cuda/gemm_vendor.cu tests/cuda/test_gemm.cu
C   := csrc/core/status.c csrc/core/dtype.c
OBJ := $(patsubst %,$(BUILD)/%.o,$(notdir $(CU) $(C)))
HDR := csrc/cuda/gemm.cuh csrc/cuda/common.cuh csrc/include/gpucmp.h

$(BUILD)/test_gemm: $(OBJ)
	$(NVCC) $(ARCHS) -o $@ $(OBJ) -ldl -lpthread

$(BUILD)/%.cu.o: csrc/cuda/%.cu $(HDR) | $(BUILD)
	$(NVCC) $(NVFLAGS) -c $< -o $@
$(BUILD)/test_gemm.cu.o: tests/cuda/test_gemm.cu $(HDR) | $(BUILD)
	$(NVCC) $(NVFLAGS) -c $< -o $@
$(BUILD)/%.c.o: csrc/core/%.c csrc/include/gpucmp.h | $(BUILD)
	$(CC) -O2 -std=c11 -fPIC -Icsrc/include -c $< -o $@
$(BUILD):
	mkdir -p $@

clean:
	rm -rf $(BUILD)
.PHONY: clean
