# conv.mk -- builds the standalone conv2d test + benchmark of the CUDA backend
# (tests/cuda/test_conv.cu).
# Why a separate program: it links csrc/cuda/conv2d*.cu, the core files it needs (status,
# dtype, geometry, op_run + validate + oplist so calls go through core validation, and
# variants, the registry the test forces kernels through),
# the GEMM sources (conv2d_gemm.cu routes stride-1 1x1 layers to gc_cuda_gemm) and a fake backend inside the test, so conv2d is tested without the rest of the
# backend; cuDNN is dlopen'ed at run time, never linked.
# Included by tests/cuda/Makefile (ROOT, OUT, GC_NVCC, GC_CC, GC_ARCH, DEFS come from it):
#   make -C tests/cuda conv                        # sm_90a -> build/tests/cuda/test_conv
#   build/tests/cuda/test_conv [test|bench|all|wgtest|wgbench]
#   make -C tests/cuda conv GC_ARCH='-gencode=arch=compute_86,code=sm_86'
#   make -C tests/cuda conv TAG=kb128 DEFS='-DIG_KB=128 -DIG_KB_BUILD=128'
#                                                  # -> build/tests/cuda/kb128/test_conv
# ptxas' register / spill report of each conv2d*.cu goes to obj/conv/<name>.ptxas.txt.

ifeq ($(OUT),)
$(error conv.mk is included by tests/cuda/Makefile: run `make -C tests/cuda conv`)
endif

CONV_ARCH_DEFAULT := -gencode=arch=compute_90a,code=sm_90a
CONV_ARCH := $(or $(GC_ARCH),$(CONV_ARCH_DEFAULT))
CONV_LIB_ARCH := $(or $(GC_LIB_ARCH),$(CONV_ARCH))
CONV_OBJDIR := $(OUT)/obj/conv
CONV_NVFLAGS := -std=c++17 -O3 -lineinfo --expt-relaxed-constexpr -I$(ROOT)/csrc/include -I$(ROOT)/csrc/cuda $(DEFS)
CONV_CFLAGS := -std=c11 -O2 -I$(ROOT)/csrc/include

CONV_CORE := status dtype geometry op_run validate oplist variants
CONV_CORE_OBJ := $(addprefix $(CONV_OBJDIR)/core_,$(addsuffix .o,$(CONV_CORE)))
CONV_CU := $(addprefix $(ROOT)/csrc/cuda/,conv2d.cu conv2d_simt.cu conv2d_vendor.cu conv2d_wgmma.cu conv2d_wgmma_wgrad.cu conv2d_wgmma_igemm.cu conv2d_smallc.cu conv2d_smallc_dgrad.cu \
           conv2d_gemm.cu gemm.cu gemm_simt.cu gemm_small.cu gemm_mma.cu gemm_wgmma.cu gemm_vendor.cu tensor_map.cu \
           cudnn_lib.cu)
CONV_CU_OBJ := $(patsubst $(ROOT)/csrc/cuda/%.cu,$(CONV_OBJDIR)/%.o,$(CONV_CU))
CONV_HDR := $(addprefix $(ROOT)/csrc/,include/gpucmp.h include/gpucmp_variants.h cuda/common.cuh \
            cuda/conv2d_internal.cuh cuda/conv2d_ptx.cuh cuda/gemm.cuh cuda/hopper_ptx.cuh cuda/wgmma_gemm_kernel.cuh)

conv: $(OUT)/test_conv

$(OUT)/test_conv: $(CONV_OBJDIR)/test_conv.o $(CONV_CU_OBJ) $(CONV_CORE_OBJ)
	$(GC_NVCC) $(CONV_ARCH) -o $@ $^ -ldl -lpthread -lm

$(CONV_OBJDIR)/test_conv.o: $(ROOT)/tests/cuda/test_conv.cu $(CONV_HDR)
	@mkdir -p $(CONV_OBJDIR)
	$(GC_NVCC) $(CONV_NVFLAGS) $(CONV_ARCH) -c $< -o $@

$(CONV_OBJDIR)/%.o: $(ROOT)/csrc/cuda/%.cu $(CONV_HDR)
	@mkdir -p $(CONV_OBJDIR)
	$(GC_NVCC) $(CONV_NVFLAGS) $(CONV_LIB_ARCH) -Xptxas -v -c $< -o $@ 2> $(CONV_OBJDIR)/$*.ptxas.txt || (cat $(CONV_OBJDIR)/$*.ptxas.txt; false)

$(CONV_OBJDIR)/core_%.o: $(ROOT)/csrc/core/%.c $(ROOT)/csrc/include/gpucmp.h $(ROOT)/csrc/include/gpucmp_variants.h
	@mkdir -p $(CONV_OBJDIR)
	$(GC_CC) $(CONV_CFLAGS) -c $< -o $@

.PHONY: conv
