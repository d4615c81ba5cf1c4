/* configs.h -- the CUTLASS 2.x configurations libgpucmp_cutlass_bench.so is built with: one
 * X-macro line per kernel, from which the registry's tables (registry.cu) and the one
 * instantiation of each object file (gemm_inst.cu / conv_inst.cu, -DGCB_ID=k) are made.
 *
 * What they are: Sm80 / OpClassTensorOp mma.sync kernels (run on the H200 through sm_90a
 * code: the same instructions), tiles and stage counts taken from CUTLASS's own sm80
 * generator lists (cutlass_library/generator.py), chosen so that most fit one sm_86 block
 * (<= 99 KB of shared memory: the RTX A4000 / A5000 gpucmp's Ampere path serves), plus a
 * few that do not, for reference (the best H200 tiles: 128x256x64 / 256x128x64 3 stages,
 * 128x128x64 4 stages). Shared memory per stage is (TM*TK + TK*TN) * element bytes; the
 * registry reports the exact figure (the kernel's SharedStorage) and the sm_86 verdict.
 *
 * GEMM:  X(ID, DT, LA, LB, TM, TN, TK, WM, WN, WK, STAGES, ALIGN)
 *        DT f16 / bf16 (fp32 accumulate, output in DT) or tf32 (fp32 in/out);
 *        LA / LB Row (as stored: gpucmp trans_* = 0) or Col (transposed: trans_* = 1),
 *        C always row-major; ALIGN elements per access of A, B and C (8 halves / 4 floats
 *        = 128 bits; 2 for the seeds' ragged dense shapes, e.g. N = 10).
 * conv:  X(ID, PASS, DT, ALGO, STRIDE, TM, TN, TK, WM, WN, WK, STAGES, ALIGN)
 *        PASS Fprop / Dgrad / Wgrad, DT f16 / bf16, ALGO kOptimized / kAnalytic /
 *        kFixedChannels (C == ALIGN exactly), STRIDE kUnity (dgrad: stride 1 only) /
 *        kStrided; NHWC, filter KRSC.
 * Ids run 0, 1, 2, ... in order (registry.cu checks it at compile time). Keep the lists
 * modest: each line is one long compile (build.sh runs them in parallel).
 */
#ifndef GPUCMP_CUTLASS_BENCH_CONFIGS_H
#define GPUCMP_CUTLASS_BENCH_CONFIGS_H

#define GCB_GEMM_CONFIGS(X) \
    X(0, f16, Row, Row, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(1, f16, Row, Row, 128, 256, 32, 64, 64, 32, 3, 8) \
    X(2, f16, Row, Row, 256, 128, 32, 64, 64, 32, 3, 8) \
    X(3, f16, Row, Row, 128, 128, 64, 64, 64, 64, 3, 8) \
    X(4, f16, Row, Row, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(5, f16, Row, Row, 64, 64, 32, 32, 32, 32, 6, 2) \
    X(6, f16, Row, Row, 128, 128, 64, 64, 64, 64, 4, 8) \
    X(7, f16, Row, Row, 128, 256, 64, 64, 64, 64, 3, 8) \
    X(8, f16, Row, Row, 256, 128, 64, 64, 64, 64, 3, 8) \
    X(9, f16, Row, Col, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(10, f16, Row, Col, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(11, f16, Row, Col, 64, 64, 32, 32, 32, 32, 6, 2) \
    X(12, f16, Col, Row, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(13, f16, Col, Row, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(14, f16, Col, Row, 64, 64, 32, 32, 32, 32, 6, 2) \
    X(15, bf16, Row, Row, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(16, bf16, Row, Row, 128, 256, 32, 64, 64, 32, 3, 8) \
    X(17, bf16, Row, Row, 256, 128, 32, 64, 64, 32, 3, 8) \
    X(18, bf16, Row, Row, 128, 128, 64, 64, 64, 64, 3, 8) \
    X(19, bf16, Row, Row, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(20, bf16, Row, Row, 64, 64, 32, 32, 32, 32, 6, 2) \
    X(21, bf16, Row, Row, 128, 128, 64, 64, 64, 64, 4, 8) \
    X(22, bf16, Row, Row, 128, 256, 64, 64, 64, 64, 3, 8) \
    X(23, bf16, Row, Row, 256, 128, 64, 64, 64, 64, 3, 8) \
    X(24, bf16, Row, Col, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(25, bf16, Row, Col, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(26, bf16, Row, Col, 64, 64, 32, 32, 32, 32, 6, 2) \
    X(27, bf16, Col, Row, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(28, bf16, Col, Row, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(29, bf16, Col, Row, 64, 64, 32, 32, 32, 32, 6, 2) \
    X(30, tf32, Row, Row, 128, 128, 16, 64, 64, 16, 4, 4) \
    X(31, tf32, Row, Row, 128, 128, 16, 64, 64, 16, 5, 4) \
    X(32, tf32, Row, Row, 128, 128, 16, 64, 64, 16, 6, 4) \
    X(33, tf32, Row, Row, 128, 128, 32, 64, 64, 32, 3, 4) \
    X(34, tf32, Row, Row, 256, 128, 16, 64, 64, 16, 3, 4) \
    X(35, tf32, Row, Row, 128, 256, 16, 64, 64, 16, 3, 4) \
    X(36, tf32, Row, Row, 64, 64, 32, 32, 32, 32, 5, 4) \
    X(37, tf32, Row, Row, 64, 64, 16, 32, 32, 16, 6, 2) \
    X(38, tf32, Row, Row, 128, 128, 32, 64, 64, 32, 4, 4) \
    X(39, tf32, Row, Row, 128, 256, 32, 64, 64, 32, 3, 4) \
    X(40, tf32, Row, Col, 128, 128, 16, 64, 64, 16, 5, 4) \
    X(41, tf32, Row, Col, 64, 64, 32, 32, 32, 32, 5, 4) \
    X(42, tf32, Row, Col, 64, 64, 16, 32, 32, 16, 6, 2) \
    X(43, tf32, Col, Row, 128, 128, 16, 64, 64, 16, 5, 4) \
    X(44, tf32, Col, Row, 64, 64, 32, 32, 32, 32, 5, 4) \
    X(45, tf32, Col, Row, 64, 64, 16, 32, 32, 16, 6, 2)

#define GCB_CONV_CONFIGS(X) \
    X(0, Fprop, f16, kOptimized, kStrided, 128, 64, 64, 64, 32, 64, 4, 8) \
    X(1, Fprop, f16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(2, Fprop, f16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(3, Fprop, f16, kOptimized, kStrided, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(4, Fprop, f16, kOptimized, kStrided, 256, 128, 32, 64, 64, 32, 3, 8) \
    X(5, Fprop, f16, kOptimized, kStrided, 128, 128, 64, 64, 64, 64, 3, 8) \
    X(6, Fprop, f16, kOptimized, kStrided, 128, 128, 64, 64, 64, 64, 4, 8) \
    X(7, Dgrad, f16, kOptimized, kUnity, 128, 64, 64, 64, 32, 64, 4, 8) \
    X(8, Dgrad, f16, kOptimized, kUnity, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(9, Dgrad, f16, kOptimized, kUnity, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(10, Dgrad, f16, kOptimized, kUnity, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(11, Dgrad, f16, kOptimized, kUnity, 128, 128, 64, 64, 64, 64, 3, 8) \
    X(12, Dgrad, f16, kOptimized, kUnity, 128, 128, 64, 64, 64, 64, 4, 8) \
    X(13, Dgrad, f16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(14, Dgrad, f16, kOptimized, kStrided, 128, 64, 64, 64, 32, 64, 4, 8) \
    X(15, Wgrad, f16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(16, Wgrad, f16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(17, Wgrad, f16, kOptimized, kStrided, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(18, Wgrad, f16, kOptimized, kStrided, 64, 128, 64, 32, 64, 64, 4, 8) \
    X(19, Wgrad, f16, kOptimized, kStrided, 128, 64, 64, 64, 32, 64, 4, 8) \
    X(20, Wgrad, f16, kOptimized, kStrided, 128, 128, 64, 64, 64, 64, 4, 8) \
    X(21, Fprop, bf16, kOptimized, kStrided, 128, 64, 64, 64, 32, 64, 4, 8) \
    X(22, Fprop, bf16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(23, Fprop, bf16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(24, Fprop, bf16, kOptimized, kStrided, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(25, Fprop, bf16, kOptimized, kStrided, 256, 128, 32, 64, 64, 32, 3, 8) \
    X(26, Fprop, bf16, kOptimized, kStrided, 128, 128, 64, 64, 64, 64, 3, 8) \
    X(27, Fprop, bf16, kOptimized, kStrided, 128, 128, 64, 64, 64, 64, 4, 8) \
    X(28, Dgrad, bf16, kOptimized, kUnity, 128, 64, 64, 64, 32, 64, 4, 8) \
    X(29, Dgrad, bf16, kOptimized, kUnity, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(30, Dgrad, bf16, kOptimized, kUnity, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(31, Dgrad, bf16, kOptimized, kUnity, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(32, Dgrad, bf16, kOptimized, kUnity, 128, 128, 64, 64, 64, 64, 3, 8) \
    X(33, Dgrad, bf16, kOptimized, kUnity, 128, 128, 64, 64, 64, 64, 4, 8) \
    X(34, Dgrad, bf16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(35, Dgrad, bf16, kOptimized, kStrided, 128, 64, 64, 64, 32, 64, 4, 8) \
    X(36, Wgrad, bf16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(37, Wgrad, bf16, kOptimized, kStrided, 128, 128, 32, 64, 64, 32, 5, 8) \
    X(38, Wgrad, bf16, kOptimized, kStrided, 64, 64, 64, 32, 32, 64, 5, 8) \
    X(39, Wgrad, bf16, kOptimized, kStrided, 64, 128, 64, 32, 64, 64, 4, 8) \
    X(40, Wgrad, bf16, kOptimized, kStrided, 128, 64, 64, 64, 32, 64, 4, 8) \
    X(41, Wgrad, bf16, kOptimized, kStrided, 128, 128, 64, 64, 64, 64, 4, 8) \
    X(42, Fprop, f16, kAnalytic, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(43, Dgrad, f16, kAnalytic, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    X(44, Wgrad, f16, kAnalytic, kStrided, 128, 128, 32, 64, 64, 32, 4, 8) \
    /* first layers (C = 1, 3), run on x zero-padded to 4 channels: fixed-channel fprop, \
       4-aligned wgrad */ \
    X(45, Fprop, f16, kFixedChannels, kStrided, 128, 64, 32, 64, 32, 32, 3, 4) \
    X(46, Wgrad, f16, kOptimized, kStrided, 64, 64, 32, 32, 32, 32, 4, 4) \
    X(47, Fprop, bf16, kFixedChannels, kStrided, 128, 64, 32, 64, 32, 32, 3, 4) \
    X(48, Wgrad, bf16, kOptimized, kStrided, 64, 64, 32, 32, 32, 32, 4, 4)

#endif /* GPUCMP_CUTLASS_BENCH_CONFIGS_H */
