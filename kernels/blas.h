// F32 matrix products through OpenBLAS (Debian's libopenblas-dev), for the
// reference executor's GEMMs whose summation order no contract fixes (those
// without an FP8 operand; sim/reference.h).
//
// Numbers. cblas_sgemm sums each element in its own order: fused
// multiply-adds, several partial sums, k in blocks, chosen by the kernel
// OpenBLAS picks for the host's CPU and by its version. The result is the
// exact product to F32 summation error, |error| <= gamma_k * sum_p |a_ip
// b_pj| with gamma_k = k u / (1 - k u), u = 2^-24, like the tile kernels'
// k-order sum (kernels.h, Gemm), but not bit for bit the same as it, nor
// as another CPU's OpenBLAS. On a host with AMX, products whose operands
// the matrix units can take (FP8, BF16 and F16 values) go to them instead
// (kernels/amx.h): the same kind of bound, with 2k or 4k products summed
// where an operand is split in two.
//
// Determinism on one host. OpenBLAS's own threads can change the bytes
// (its threaded driver blocks differently from its one-thread driver; seen
// on [729,4304] x [4304,1152]), so it runs on one thread per call here, and
// BlasMultiplyParallel cuts a product into blocks by its shape alone, one
// call each, that the threads share: the same calls on the same data
// whatever the thread count, so the same bytes.

#ifndef TILEC_KERNELS_BLAS_H_
#define TILEC_KERNELS_BLAS_H_

#include <cstdint>

#include "kernels/status.h"

namespace tilec::kernels {

// C = A * B, or A * B^T with transpose_b; all row-major F32, each with its
// row stride (>= its row length).
struct BlasProduct {
  int64_t m = 0, k = 0, n = 0;
  const float* a = nullptr;  // [m, k]
  int64_t lda = 0;
  const float* b = nullptr;  // [k, n], or [n, k] with transpose_b
  int64_t ldb = 0;
  bool transpose_b = false;
  float* c = nullptr;  // [m, n], overwritten (k = 0: zeros)
  int64_t ldc = 0;
};

// One OpenBLAS call on the calling thread. BadInput when a dimension or
// stride is negative, a stride is shorter than its row, or a number does not
// fit OpenBLAS's 32-bit integers.
Status BlasMultiply(const BlasProduct& p);

// The same product in blocks of rows or columns of C (whichever C has more
// of) whose sizes depend on m and n only, taken by up to `threads` threads:
// the result does not depend on `threads`.
Status BlasMultiplyParallel(const BlasProduct& p, int threads);

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_BLAS_H_
