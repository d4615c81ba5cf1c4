# conv.mk -- builds the standalone conv2d test + benchmark of the CUDA backend.
#
#   make -f tests/cuda/conv.mk                 # -> build/cuda/test_conv
#   build/cuda/test_conv [test|bench|all]
#   make -f tests/cuda/conv.mk ARCH='-gencode=arch=compute_86,code=sm_86'
#   make -f tests/cuda/conv.mk BUILD=build/cuda128 DEFS='-DIG_KB=128 -DIG_KB_BUILD=128'
#
# Links csrc/cuda/conv2d*.cu, the GEMM sources (conv2d_gemm.cu routes stride-1 1x1
# layers to gc_cuda_gemm), the core files it needs (status, dtype, geometry, and
# op_run + validate + oplist so calls go through core validation) and a fake backend
# inside the test; cuDNN and cuBLASLt are dlopen'ed at run time, never linked.
NVCC ?= nvcc
CC ?= cc
ARCH ?= -gencode=arch=compute_90a,code=sm_90a
BUILD ?= build/cuda
DEFS ?=
NVFLAGS ?= -std=c++17 -O3 -lineinfo --expt-relaxed-constexpr -Icsrc/include -Icsrc/cuda $(ARCH) $(DEFS)
CFLAGS_CORE ?= -std=c11 -O2 -Icsrc/include

CORE := status dtype geometry op_run validate oplist
CORE_OBJ := $(addprefix $(BUILD)/core_,$(addsuffix .o,$(CORE)))
CU := csrc/cuda/conv2d.cu csrc/cuda/conv2d_simt.cu csrc/cuda/conv2d_vendor.cu csrc/cuda/conv2d_wgmma.cu \
      csrc/cuda/conv2d_smallc.cu csrc/cuda/conv2d_gemm.cu \
      csrc/cuda/gemm.cu csrc/cuda/gemm_simt.cu csrc/cuda/gemm_small.cu csrc/cuda/gemm_mma.cu \
      csrc/cuda/gemm_wgmma.cu csrc/cuda/gemm_vendor.cu
CU_OBJ := $(patsubst csrc/cuda/%.cu,$(BUILD)/%.o,$(CU))
HDR := csrc/include/gpucmp.h csrc/cuda/common.cuh csrc/cuda/conv2d_internal.cuh csrc/cuda/conv2d_ptx.cuh \
       csrc/cuda/gemm.cuh csrc/cuda/hopper_ptx.cuh

$(BUILD)/test_conv: $(BUILD)/test_conv.o $(CU_OBJ) $(CORE_OBJ)
	$(NVCC) $(ARCH) -o $@ $^ -ldl -lpthread -lm

$(BUILD)/test_conv.o: tests/cuda/test_conv.cu $(HDR)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/%.o: csrc/cuda/%.cu $(HDR)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVFLAGS) -Xptxas -v -c $< -o $@ 2> $(BUILD)/$*.ptxas.txt || (cat $(BUILD)/$*.ptxas.txt; false)

$(BUILD)/core_%.o: csrc/core/%.c csrc/include/gpucmp.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS_CORE) -c $< -o $@

clean:
	rm -rf $(BUILD)

.PHONY: clean
