/* conv2d_ptx.cuh -- the PTX wrappers and small device helpers the Tensor Core conv2d
 * kernels share (conv2d.cu and conv2d_smallc.cu): cp.async copies, ldmatrix, mma.sync per
 * storage type, TF32 rounding, a multiply-shift division. Private to the conv2d sources;
 * everything is static inline, so each including file gets its own copy. */
#ifndef GPUCMP_CUDA_CONV2D_PTX_CUH
#define GPUCMP_CUDA_CONV2D_PTX_CUH

#include "conv2d_internal.cuh"

#include <stdint.h>

/* ------------------------------------------------------------------ PTX helpers */
static __device__ __forceinline__ uint32_t cv_smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte global -> shared copy; src_bytes == 0 writes 16 zero bytes (padding).
 * .ca (L1-allocating) for the weights, which every block re-reads; .cg (L2 only) for the
 * gathered activations (measured ~4% faster than .ca on an H200). */
static __device__ __forceinline__ void cv_cp16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
static __device__ __forceinline__ void cv_cp16_cg(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
static __device__ __forceinline__ void cv_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cv_cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

static __device__ __forceinline__ void cv_ldsm4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
static __device__ __forceinline__ void cv_ldsm4_t(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
static __device__ __forceinline__ uint32_t cv_lds32(uint32_t addr)
{
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
}

/* One Tensor Core step per storage type: c += a * b over one K-step of 32 bytes
 * (16 halves or 8 floats); A 16 x K row fragment, B K x 8 column fragment. */
static __device__ __forceinline__ void cv_mma(float c[4], const uint32_t a[4], const uint32_t b[2], __half)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ void cv_mma(float c[4], const uint32_t a[4], const uint32_t b[2],
                                       __nv_bfloat16)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ void cv_mma(float c[4], const uint32_t a[4], const uint32_t b[2], float)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* f32 operands are rounded to TF32 (nearest, ties away) before the MMA; 16-bit
 * operands pass unchanged. */
template <typename T> static __device__ __forceinline__ uint32_t cv_prep(uint32_t v)
{
    if (sizeof(T) == 4) {
        uint32_t r;
        asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(v)));
        return r;
    }
    return v;
}

/* Storage type -> float for 16-byte groups (VEC elements). */
template <typename T> static __device__ __forceinline__ void cv_unpack(const uint4 &u, float *out)
{
    const T *e = (const T *)&u;
#pragma unroll
    for (int j = 0; j < (int)(16 / sizeof(T)); j++) out[j] = gc_to_f(e[j]);
}

static __device__ __forceinline__ void cv_cp_wait_dyn(int n)
{
    switch (n) {
    case 0: cv_cp_wait<0>(); break;
    case 1: cv_cp_wait<1>(); break;
    case 2: cv_cp_wait<2>(); break;
    case 3: cv_cp_wait<3>(); break;
    case 4: cv_cp_wait<4>(); break;
    default: cv_cp_wait<5>(); break;
    }
}

/* n / d for 0 <= n < 2^31 with a precomputed multiplier (d == 1: mul == 0). */
struct cv_fastdiv {
    int d;
    unsigned mul, shr;
};
static inline cv_fastdiv cv_make_fastdiv(int d)
{
    cv_fastdiv f;
    f.d = d;
    f.mul = 0;
    f.shr = 0;
    if (d > 1) {
        unsigned l = 0;
        while ((1u << l) < (unsigned)d) l++;
        unsigned p = 31 + l;
        f.mul = (unsigned)(((1ull << p) + (unsigned)d - 1) / (unsigned)d);
        f.shr = p - 32;
    }
    return f;
}
static __device__ __forceinline__ int cv_div(int n, const cv_fastdiv &f)
{
    return f.mul ? (int)(__umulhi((unsigned)n, f.mul) >> f.shr) : n;
}

#endif /* GPUCMP_CUDA_CONV2D_PTX_CUH */
