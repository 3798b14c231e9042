#pragma once
// Single-threaded OpenBLAS sgemm, and the shape-only tiling the GEMM-based kernels share.
//
// The engine parallelizes GEMMs itself, tile by tile, with BLAS kept to one thread: a tile's result
// then depends only on the tile's shape, which depends only on the per-sample shapes, so the output
// is the same whatever the thread count, the batch size or a sample's position in the batch.
#include <cstdint>

namespace sluice::cpu {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major, leading dimensions in elements.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Makes OpenBLAS single-threaded (once per process; the engine's own pool supplies the threads).
void use_single_threaded_blas();

// Tile sizes for an [M,N] output with reduction length K: depend on (M, N, K) only.
struct GemmTiles {
  int64_t mt = 0, nt = 0;  // tile extent
  int64_t mc = 0, nc = 0;  // tile counts
};
GemmTiles choose_gemm_tiles(int64_t m, int64_t n, int64_t k);

}  // namespace sluice::cpu
