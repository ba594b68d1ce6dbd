// The blocked F32 product loop behind Gemm (gemm.cc): its blocking, its
// micro-kernels and the packing of B. A header so that two files compile
// the same loop: gemm.cc without fused multiply-adds, gemm_fma.cc with
// them for products that are exact in F32 (Product::exact_products).

#ifndef TILEC_KERNELS_GEMM_BODY_H_
#define TILEC_KERNELS_GEMM_BODY_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tilec::kernels::gemm_body {

// The product's operands: A [m, k] and B [k, n] read, C [m, n] summed
// into, each row-major with its own row stride.
struct Product {
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int64_t m, k, n;
  // Every product of an A and a B element is exact in F32 (both are FP8
  // or F16 values: at most 11 significant bits each): a fused
  // multiply-add then rounds exactly where the product and the sum round
  // (ProductsExactInF32).
  bool exact_products = false;
};

// The AVX-512 loop with fused multiply-adds (gemm_fma.cc), for products
// with exact_products set, on hosts with AVX-512F; defined where gemm.cc
// has its AVX-512 path (GCC on x86-64).
void MultiplyBodyAvx512Fma(const Product& p, float* bp);

// Each file that includes this compiles its own copy of the loop, under
// its own -ffp-contract: internal linkage, so that the linker never takes
// one file's copy for the other's.
namespace {

// The product runs in blocks that keep every operand in cache:
//  - column blocks of kColumnBlock columns of B and C, one after the other
//    (bounding the packed copy of B below);
//  - depth blocks of kDepthBlock k values; within one, B is packed into
//    panels of kPanel columns (zero-padded), each panel [kc][kPanel]
//    contiguous, so the inner loop reads B sequentially;
//  - row blocks of kRowBlock rows of A, which stay in L2 while every panel
//    of the depth block passes over them;
//  - a kRows x kPanel block of C accumulates in registers over one depth
//    block, then goes back to C (an exact F32 store), so across depth
//    blocks every element keeps one running F32 sum.
// Each C element is therefore still c, then c + a[0]*b[0], then ... in
// ascending k, every product rounded to F32 and then added, exactly what a
// plain i-j-k triple loop computes. gemm.cc compiles this loop with
// -ffp-contract=off: no fused multiply-add, not even on the AVX-512 path,
// whose instruction set has it. gemm_fma.cc compiles the same loop with
// contraction, for products that are exact in F32: a fused multiply-add
// rounds them the same, in one instruction instead of two.
//
// C goes to memory and back once per depth block, which on the reference's
// whole-matrix GEMMs (so400m's 729 x 1152 x 4304) stalled the loop more
// than its multiplies: 768 deep, three times fewer round trips than 256,
// with A's row block (221 KB) still in L2 and B's packed column block
// (3 MB) in L3.
constexpr int64_t kRows = 6;
constexpr int64_t kPanel = 16;
constexpr int64_t kDepthBlock = 768;
constexpr int64_t kRowBlock = 72;       // a multiple of kRows
constexpr int64_t kColumnBlock = 1024;  // a multiple of kPanel

// Eight floats; on the default target GCC splits it into two SSE halves,
// under target("avx2") it is one YMM register.
typedef float Vec8 __attribute__((vector_size(32)));

// C[r][0..kPanel) += sum over k in [0, kc) of a[r][k] * bp[k][0..kPanel),
// for r < kRows; c has row stride ldc.
[[gnu::always_inline]] inline void MicroKernel(const float* const* a,
                                               const float* bp, int64_t kc,
                                               float* c, int64_t ldc) {
  Vec8 acc[kRows][2];
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(&acc[r][0], c + r * ldc, sizeof(Vec8));
    std::memcpy(&acc[r][1], c + r * ldc + 8, sizeof(Vec8));
  }
  const float* a0 = a[0];
  const float* a1 = a[1];
  const float* a2 = a[2];
  const float* a3 = a[3];
  const float* a4 = a[4];
  const float* a5 = a[5];
  for (int64_t k = 0; k < kc; ++k) {
    Vec8 b0, b1;
    std::memcpy(&b0, bp + k * kPanel, sizeof(Vec8));
    std::memcpy(&b1, bp + k * kPanel + 8, sizeof(Vec8));
    // acc + (a * b): the product rounds, then the sum rounds.
    acc[0][0] += b0 * a0[k];
    acc[0][1] += b1 * a0[k];
    acc[1][0] += b0 * a1[k];
    acc[1][1] += b1 * a1[k];
    acc[2][0] += b0 * a2[k];
    acc[2][1] += b1 * a2[k];
    acc[3][0] += b0 * a3[k];
    acc[3][1] += b1 * a3[k];
    acc[4][0] += b0 * a4[k];
    acc[4][1] += b1 * a4[k];
    acc[5][0] += b0 * a5[k];
    acc[5][1] += b1 * a5[k];
  }
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(c + r * ldc, &acc[r][0], sizeof(Vec8));
    std::memcpy(c + r * ldc + 8, &acc[r][1], sizeof(Vec8));
  }
}
static_assert(kRows == 6, "MicroKernel is written out for six rows");
static_assert(kPanel == 16, "MicroKernel is written out for two Vec8");

// Sixteen floats: one ZMM register under target("avx512f").
typedef float Vec16 __attribute__((vector_size(64)));

// MicroKernel with each row's panel in one Vec16: the same product and sum
// for every element, in half the instructions where AVX-512 holds a panel
// row in one register. Written out like MicroKernel: one template over the
// vector type ran the AVX2 path at a fifth of its speed.
[[gnu::always_inline]] inline void MicroKernelWide(const float* const* a,
                                                   const float* bp, int64_t kc,
                                                   float* c, int64_t ldc) {
  Vec16 acc[kRows];
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(&acc[r], c + r * ldc, sizeof(Vec16));
  }
  const float* a0 = a[0];
  const float* a1 = a[1];
  const float* a2 = a[2];
  const float* a3 = a[3];
  const float* a4 = a[4];
  const float* a5 = a[5];
  for (int64_t k = 0; k < kc; ++k) {
    Vec16 b;
    std::memcpy(&b, bp + k * kPanel, sizeof(Vec16));
    // acc + (a * b): the product rounds, then the sum rounds.
    acc[0] += b * a0[k];
    acc[1] += b * a1[k];
    acc[2] += b * a2[k];
    acc[3] += b * a3[k];
    acc[4] += b * a4[k];
    acc[5] += b * a5[k];
  }
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(c + r * ldc, &acc[r], sizeof(Vec16));
  }
}
static_assert(kPanel == 16, "MicroKernelWide holds a panel row in one Vec16");

// B[k0 .. k0+kc) x [j_begin, j_end) (row stride ldb) into panels: panel p
// holds columns [j_begin + p*kPanel, + kPanel) as bp[(p*kc + k)*kPanel +
// j], zero past j_end.
[[gnu::always_inline]] inline void PackB(const float* b, int64_t ldb,
                                         int64_t j_begin, int64_t j_end,
                                         int64_t k0, int64_t kc, float* bp) {
  const int64_t panels = (j_end - j_begin + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t j0 = j_begin + p * kPanel;
    const int64_t width = std::min(kPanel, j_end - j0);
    float* dst = bp + p * kc * kPanel;
    if (width == kPanel) {  // a constant-size copy, inlined
      for (int64_t k = 0; k < kc; ++k) {
        std::memcpy(dst + k * kPanel, b + (k0 + k) * ldb + j0,
                    kPanel * sizeof(float));
      }
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = b + (k0 + k) * ldb + j0;
      float* d = dst + k * kPanel;
      for (int64_t j = 0; j < width; ++j) d[j] = src[j];
      for (int64_t j = width; j < kPanel; ++j) d[j] = 0.0f;
    }
  }
}

// MicroKernelWide (AVX-512 hosts) or MicroKernel. A function, not a
// lambda: a lambda is not inlined into the target("avx2") caller, and its
// default-target code ran the AVX2 path at 1.7 GMAC/s instead of 53.
template <bool kWide>
[[gnu::always_inline]] inline void Micro(const float* const* a, const float* bp,
                                         int64_t kc, float* c, int64_t ldc) {
  if constexpr (kWide) {
    MicroKernelWide(a, bp, kc, c, ldc);
  } else {
    MicroKernel(a, bp, kc, c, ldc);
  }
}

// kWide: MicroKernelWide for the full blocks (AVX-512 hosts).
template <bool kWide>
[[gnu::always_inline]] inline void MultiplyBody(const Product& p, float* bp) {
  const float* a = p.a;
  float* c = p.c;
  const int64_t m = p.m, k_depth = p.k, n = p.n;
  for (int64_t jb = 0; jb < n; jb += kColumnBlock) {
    const int64_t j_end = std::min(n, jb + kColumnBlock);
    const int64_t panels = (j_end - jb + kPanel - 1) / kPanel;
    for (int64_t k0 = 0; k0 < k_depth; k0 += kDepthBlock) {
      const int64_t kc = std::min(kDepthBlock, k_depth - k0);
      PackB(p.b, p.ldb, jb, j_end, k0, kc, bp);
      for (int64_t ib = 0; ib < m; ib += kRowBlock) {
        const int64_t i_end = std::min(m, ib + kRowBlock);
        for (int64_t q = 0; q < panels; ++q) {
          const int64_t j0 = jb + q * kPanel;
          const int64_t width = std::min(kPanel, j_end - j0);
          const float* panel = bp + q * kc * kPanel;
          for (int64_t i = ib; i < i_end; i += kRows) {
            const int64_t rows = std::min(kRows, i_end - i);
            // Missing rows repeat the last real one; their sums are dropped.
            const float* arows[kRows];
            for (int64_t r = 0; r < kRows; ++r) {
              arows[r] = a + (i + std::min(r, rows - 1)) * p.lda + k0;
            }
            if (rows == kRows && width == kPanel) {
              Micro<kWide>(arows, panel, kc, c + i * p.ldc + j0, p.ldc);
              continue;
            }
            // An edge block: through a full-size copy of the C block.
            float tile[kRows * kPanel] = {};
            for (int64_t r = 0; r < rows; ++r) {
              std::memcpy(tile + r * kPanel, c + (i + r) * p.ldc + j0,
                          static_cast<size_t>(width) * sizeof(float));
            }
            Micro<kWide>(arows, panel, kc, tile, kPanel);
            for (int64_t r = 0; r < rows; ++r) {
              std::memcpy(c + (i + r) * p.ldc + j0, tile + r * kPanel,
                          static_cast<size_t>(width) * sizeof(float));
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tilec::kernels::gemm_body

#endif  // TILEC_KERNELS_GEMM_BODY_H_
